"""PlanModel → sqlglot expression → SQL, for sqlite, duckdb, postgres, mysql, snowflake and bigquery.

SQL is built as a tree, never by string formatting: literals are sqlglot literals, identifiers
are quoted where the dialect needs it (special characters, reserved words, or a case the dialect
would fold), and portable date operations come from per-dialect templates parsed once into trees.

>>> from nl2sql.plan.model import PlanModel
>>> plan = PlanModel.model_validate({"select": [{"expr": {"kind": "column", "table": "g", "column": "Name"}}],
...                                  "from": {"table": "Genre", "alias": "g"}, "limit": 3})
>>> generate_sql(plan, "postgres")
'SELECT g."Name" FROM "Genre" AS g LIMIT 3'
>>> generate_sql(plan, "sqlite")
'SELECT g.Name FROM Genre AS g LIMIT 3'
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect, NormalizationStrategy
from sqlglot.tokens import TokenType

from nl2sql.datasources.guard import sqlglot_dialect
from nl2sql.plan import model as m
from nl2sql.plan.keywords import is_reserved

DIALECTS = ("sqlite", "duckdb", "postgres", "mysql", "snowflake", "bigquery")

PLAIN_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: Date parts: one template per dialect ({x} is the argument); the default is EXTRACT.
DATE_PART_TEMPLATES: dict[str, dict[str, str]] = {
    "sqlite": {
        "year": "CAST(STRFTIME('%Y', {x}) AS INTEGER)",
        "quarter": "(CAST(STRFTIME('%m', {x}) AS INTEGER) + 2) / 3",
        "month": "CAST(STRFTIME('%m', {x}) AS INTEGER)",
        "day": "CAST(STRFTIME('%d', {x}) AS INTEGER)",
        "hour": "CAST(STRFTIME('%H', {x}) AS INTEGER)",
        "minute": "CAST(STRFTIME('%M', {x}) AS INTEGER)",
        "day_of_week": "CAST(STRFTIME('%w', {x}) AS INTEGER)",
    },
    "postgres": {part: f"CAST(EXTRACT({unit} FROM {{x}}) AS INTEGER)" for part, unit in (
        ("year", "YEAR"), ("quarter", "QUARTER"), ("month", "MONTH"), ("day", "DAY"), ("hour", "HOUR"),
        ("minute", "MINUTE"), ("day_of_week", "DOW"))},
    "duckdb": {"day_of_week": "EXTRACT(DOW FROM {x})"},
    "mysql": {"day_of_week": "DAYOFWEEK({x}) - 1"},
    "snowflake": {"day_of_week": "DAYOFWEEK({x})"},
    "bigquery": {"day_of_week": "EXTRACT(DAYOFWEEK FROM {x}) - 1"},
}
#: Truncation: dialects without DATE_TRUNC, and units that need help; the default is DATE_TRUNC.
DATE_TRUNC_TEMPLATES: dict[str, dict[str, str]] = {
    "sqlite": {
        "year": "STRFTIME('%Y-01-01', {x})",
        "quarter": "STRFTIME('%Y-', {x}) || PRINTF('%02d', (CAST(STRFTIME('%m', {x}) AS INTEGER) - 1) / 3 * 3 + 1) || '-01'",
        "month": "STRFTIME('%Y-%m-01', {x})",
        "week": "DATE({x}, '-6 days', 'weekday 1')",
        "day": "DATE({x})",
    },
    "mysql": {
        "year": "DATE(DATE_FORMAT({x}, '%Y-01-01'))",
        "quarter": "MAKEDATE(YEAR({x}), 1) + INTERVAL (QUARTER({x}) - 1) QUARTER",
        "month": "DATE(DATE_FORMAT({x}, '%Y-%m-01'))",
        "week": "DATE(DATE_SUB({x}, INTERVAL WEEKDAY({x}) DAY))",
        "day": "DATE({x})",
    },
    "bigquery": {"week": "DATE_TRUNC({x}, WEEK(MONDAY))"},
}
PLACEHOLDER = "nl2sql_arg"
#: Dialects that refuse OFFSET without LIMIT, and the largest LIMIT they take.
OFFSET_NEEDS_LIMIT = {"mysql": 18446744073709551615, "bigquery": 9223372036854775807}
#: Dialects whose LIKE treats a backslash as an escape character by default.
BACKSLASH_ESCAPES_LIKE = ("postgres", "mysql", "bigquery")


def dialect_name(dialect: str) -> str:
    """The sqlglot dialect for an adapter or sqlglot name (`postgresql` → `postgres`)."""
    return sqlglot_dialect(dialect)


def needs_quotes(name: str, dialect: str) -> bool:
    """Whether an identifier must be quoted to mean exactly `name` in `dialect`."""
    if not PLAIN_IDENTIFIER.match(name) or is_reserved(name, dialect):
        return True
    d = Dialect.get_or_raise(dialect)
    if name.upper() in getattr(d.generator_class, "RESERVED_KEYWORDS", ()):
        return True
    if d.NORMALIZATION_STRATEGY in (NormalizationStrategy.CASE_INSENSITIVE, NormalizationStrategy.CASE_SENSITIVE):
        return False
    return d.normalize_identifier(exp.to_identifier(name)).name != name


def ident(name: str, dialect: str) -> exp.Identifier:
    """An identifier, quoted only where `dialect` needs it."""
    return exp.to_identifier(name, quoted=needs_quotes(name, dialect))


@cache
def _template(sql: str, dialect: str) -> exp.Expression:
    return sqlglot.parse_one(sql.replace("{x}", PLACEHOLDER), read=dialect)


def _fill(template: str, dialect: str, arg: exp.Expression, second: exp.Expression | None = None) -> exp.Expression:
    def swap(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.name == PLACEHOLDER and not node.table:
            return arg.copy()
        if isinstance(node, exp.Column) and node.name == SECOND_PLACEHOLDER and not node.table and second is not None:
            return second.copy()
        return node

    return _template(template, dialect).copy().transform(swap)


def _explicit_nulls(key: exp.Ordered) -> list[exp.Ordered]:
    """An ORDER BY key as two: `x IS NULL` first, so NULL placement holds where the dialect drops NULLS."""
    desc = bool(key.args.get("nulls_first"))
    nulls_key = exp.Ordered(this=exp.Is(this=key.this.copy(), expression=exp.Null()), desc=desc, nulls_first=not desc)
    key.set("nulls_first", not key.args.get("desc"))  # the dialect's own default: nothing left to translate
    return [nulls_key, key]


#: The standard types a plan casts to, as sqlglot builds them (each dialect then writes its own name).
CAST_TYPES = {"integer": "INT", "real": "DOUBLE", "numeric": "DECIMAL", "text": "TEXT", "date": "DATE",
              "timestamp": "TIMESTAMP", "boolean": "BOOLEAN"}
#: Date functions whose spelling differs by dialect ({x}, {y}: the arguments); the default is in the generator.
DATE_FUNCTION_TEMPLATES: dict[str, dict[str, str]] = {
    "days_between": {
        "sqlite": "JULIANDAY({y}) - JULIANDAY({x})",
        "duckdb": "EPOCH(CAST({y} AS TIMESTAMP) - CAST({x} AS TIMESTAMP)) / 86400.0",
        "postgres": "EXTRACT(EPOCH FROM CAST({y} AS TIMESTAMP) - CAST({x} AS TIMESTAMP)) / 86400.0",
        "mysql": "TIMESTAMPDIFF(SECOND, {x}, {y}) / 86400.0",
        "snowflake": "DATEDIFF(SECOND, {x}, {y}) / 86400.0",
        "bigquery": "TIMESTAMP_DIFF(CAST({y} AS TIMESTAMP), CAST({x} AS TIMESTAMP), SECOND) / 86400.0",
    },
    "date": {"sqlite": "DATE({x})"},
    "datetime": {"sqlite": "DATETIME({x})"},
}
SECOND_PLACEHOLDER = "nl2sql_arg_2"


class SQLGenerator:
    """Turns one plan (and its sub-plans) into a sqlglot tree for one dialect."""

    def __init__(self, dialect: str, schemas: Mapping[str, str] | None = None) -> None:
        self.dialect = dialect_name(dialect)
        if self.dialect not in DIALECTS:
            from nl2sql.errors import UnknownNameError

            raise UnknownNameError("dialect", dialect, DIALECTS)
        self.schemas = {k.lower(): v for k, v in (schemas or {}).items()}
        #: the names of the common tables of the plans being written (never schema-qualified: they are not tables)
        self._common: list[set[str]] = []

    def ident(self, name: str) -> exp.Identifier:
        """An identifier for this dialect."""
        return ident(name, self.dialect)

    # --- plan ----------------------------------------------------------------------------------

    def statement(self, plan: m.PlanModel) -> exp.Query:
        """The query tree of a plan: its WITH, its SELECT, and the set operations that combine it with others."""
        self._common.append({c.name.lower() for c in plan.with_})
        try:
            common = [exp.CTE(this=self._with_names_before(plan, i), alias=exp.TableAlias(this=self.ident(c.name)))
                      for i, c in enumerate(plan.with_)]
            if not plan.set_operations:
                query: exp.Query = self.select(plan)
            else:
                query = self.select(plan, whole=False)
                for operation in plan.set_operations:
                    right = self.statement(operation.plan)
                    kind = {"union": exp.Union, "union_all": exp.Union, "intersect": exp.Intersect,
                            "except": exp.Except}[operation.op]
                    if isinstance(query, exp.SetOperation) and type(query) is not kind and self.dialect != "sqlite":
                        # the plan combines left to right, as SQLite does; elsewhere INTERSECT binds first unless
                        # the rows before it are in parentheses (which SQLite does not take)
                        query = exp.Subquery(this=query)
                    query = kind(this=query, expression=right, distinct=operation.op != "union_all")
                self._order_and_limit(query, plan, compound=True)
            if common:
                query.set("with_", exp.With(expressions=common))
            return query
        finally:
            self._common.pop()

    def _with_names_before(self, plan: m.PlanModel, index: int) -> exp.Query:
        """A common table's query, seeing only the common tables written before it (none is recursive)."""
        self._common.append({c.name.lower() for c in plan.with_[:index]})
        saved, self._common[-2] = self._common[-2], set()
        try:
            return self.statement(plan.with_[index].plan)
        finally:
            self._common.pop()
            self._common[-1] = saved

    def select(self, plan: m.PlanModel, *, whole: bool = True) -> exp.Select:
        """The SELECT tree of a plan (with `whole` false, without the ORDER BY and LIMIT that belong to a set
        operation's combined rows)."""
        query = exp.select(*(self.select_item(item) for item in plan.select)).from_(self.table(plan.from_))
        for join in plan.joins:
            parts = [exp.EQ(this=self.expr(k.left), expression=self.expr(k.right)) for k in join.on]
            if join.condition is not None:
                parts.append(self.condition(join.condition))
            if join.type == "cross" and not parts:
                query = query.join(self.table(join.table), join_type="cross")
                continue
            kind = "left" if join.type == "left" else "inner"
            query = query.join(self.table(join.table), on=exp.and_(*parts) if parts else exp.true(), join_type=kind)
        if plan.where is not None:
            query = query.where(self.condition(plan.where))
        if plan.group_by:
            query = query.group_by(*(self.expr(e) for e in plan.group_by))
        outputs = {item.alias.lower(): item.expr for item in plan.select if item.alias}
        if plan.having is not None:
            query = query.having(self.inline_aliases(self.condition(plan.having), outputs))
        if whole:
            self._order_and_limit(query, plan)
        if plan.distinct:
            query = query.distinct()
        return query

    def _order_and_limit(self, query: exp.Query, plan: m.PlanModel, *, compound: bool = False) -> None:
        """ORDER BY, LIMIT and OFFSET on a SELECT, or on a set operation's combined rows (whose keys must be its
        output columns: a key that is a selected expression is written as its position, portable everywhere)."""
        outputs = {item.alias.lower(): item.expr for item in plan.select if item.alias}
        if plan.order_by:
            ordered = [self.ordered(o) for o in plan.order_by]
            if compound:
                for item, key in zip(ordered, plan.order_by, strict=True):
                    position = next((i + 1 for i, selected in enumerate(plan.select) if selected.expr == key.expr), None)
                    if position is not None:
                        item.set("this", exp.Literal.number(position))
            else:
                for item in ordered:  # a bare alias is portable; inside an expression PostgreSQL cannot see it
                    if not (isinstance(item.this, exp.Column) and not item.this.table):
                        item.set("this", self.inline_aliases(item.this, outputs))
            query.set("order", exp.Order(expressions=ordered))
        limit = plan.limit
        if plan.offset and limit is None and self.dialect in OFFSET_NEEDS_LIMIT:
            limit = OFFSET_NEEDS_LIMIT[self.dialect]
        if limit is not None:
            query.set("limit", exp.Limit(expression=exp.Literal.number(limit)))
        if plan.offset:
            query.set("offset", exp.Offset(expression=exp.Literal.number(plan.offset)))

    def inline_aliases(self, tree: exp.Expression, outputs: Mapping[str, m.ExprNode]) -> exp.Expression:
        """`tree` with this plan's output aliases replaced by their expressions (not inside sub-plans).

        PostgreSQL (and the standard) resolve no output alias in HAVING, nor in an ORDER BY expression.
        """

        def swap(node: exp.Expression) -> exp.Expression:
            if (isinstance(node, exp.Column) and not node.table and node.name.lower() in outputs
                    and node.find_ancestor(exp.Select) is None):
                value = self.expr(outputs[node.name.lower()])
                return exp.Paren(this=value) if isinstance(value, exp.Binary) else value
            return node

        return tree.transform(swap) if outputs else tree

    def select_item(self, item: m.SelectItem) -> exp.Expression:
        """One output column, aliased when the plan names it."""
        value = self.expr(item.expr)
        return exp.alias_(value, self.ident(item.alias)) if item.alias else value

    def table(self, ref: m.TableRef) -> exp.Expression:
        """A table reference with its schema (when not the default) and alias; a derived table as its sub-query
        under its alias; a common table by its name alone."""
        if ref.query is not None:
            return exp.Subquery(this=self.statement(ref.query),
                                alias=exp.TableAlias(this=self.ident(ref.alias or ref.table)))
        common = any(ref.table.lower() in names for names in self._common)
        schema = None if common else self.schemas.get(ref.table.lower())
        table = exp.Table(this=self.ident(ref.table), db=self.ident(schema) if schema else None)
        if ref.alias:
            table.set("alias", exp.TableAlias(this=self.ident(ref.alias)))
        return table

    def ordered(self, item: m.OrderItem) -> exp.Ordered:
        """An ORDER BY key; NULLs sort last unless the plan asks otherwise, in every dialect."""
        return exp.Ordered(this=self.expr(item.expr), desc=item.direction == "desc", nulls_first=item.nulls == "first")

    # --- expressions ---------------------------------------------------------------------------

    def expr(self, node: m.ExprNode) -> exp.Expression:
        """An expression tree."""
        method = getattr(self, f"_expr_{node.kind}")
        return method(node)

    def _expr_column(self, node: m.ColumnRef) -> exp.Expression:
        return exp.Column(this=self.ident(node.column), table=self.ident(node.table) if node.table else None)

    def _expr_literal(self, node: m.Value) -> exp.Expression:
        value = node.value
        if value is None:
            return exp.Null()
        if isinstance(value, bool):
            return exp.Boolean(this=value)
        if isinstance(value, int | float):
            return exp.Literal.number(repr(value)) if value >= 0 else exp.Neg(this=exp.Literal.number(repr(-value)))
        return exp.Literal.string(value)

    def _expr_aggregate(self, node: m.Aggregate) -> exp.Expression:
        arg: exp.Expression = exp.Star() if node.arg is None else self.expr(node.arg)
        if node.distinct and node.arg is not None:
            arg = exp.Distinct(expressions=[arg])
        functions = {"count": exp.Count, "sum": exp.Sum, "avg": exp.Avg, "min": exp.Min, "max": exp.Max}
        return functions[node.func](this=arg)

    def _expr_arithmetic(self, node: m.Arithmetic) -> exp.Expression:
        ops = {"+": exp.Add, "-": exp.Sub, "*": exp.Mul, "/": exp.Div}
        left, right = self.expr(node.left), self.expr(node.right)
        wrap = (exp.Add, exp.Sub, exp.Mul, exp.Div)
        left = exp.Paren(this=left) if isinstance(left, wrap) else left
        right = exp.Paren(this=right) if isinstance(right, wrap) else right
        return ops[node.op](this=left, expression=right)

    def _expr_function(self, node: m.Function) -> exp.Expression:
        args = [self.expr(a) for a in node.args]
        if node.name == "round":
            value = args[0]
            if self.dialect == "postgres":  # ROUND(x, n) exists for NUMERIC only
                value = exp.Cast(this=value, to=exp.DataType.build("NUMERIC"))
            return exp.Round(this=value, decimals=args[1] if len(args) > 1 else None)
        if node.name == "coalesce":
            return exp.Coalesce(this=args[0], expressions=args[1:])
        if node.name == "nullif":
            return exp.Nullif(this=args[0], expression=args[1])
        if node.name == "concat":
            return exp.DPipe(this=args[0], expression=args[1]) if len(args) == 2 else exp.Concat(expressions=args)
        built = self._text_or_number_function(node.name, args)
        if built is not None:
            return built
        return self._date_function(node, args)

    def _text_or_number_function(self, name: str, args: list[exp.Expression]) -> exp.Expression | None:
        unary = {"abs": exp.Abs, "lower": exp.Lower, "upper": exp.Upper, "length": exp.Length, "ceil": exp.Ceil,
                 "floor": exp.Floor, "sqrt": exp.Sqrt, "sign": exp.Sign}
        if name in unary:
            return unary[name](this=args[0])
        if name == "substr":
            return exp.Substring(this=args[0], start=args[1], length=args[2] if len(args) > 2 else None)
        if name == "replace":
            return exp.Replace(this=args[0], expression=args[1], replacement=args[2])
        if name in ("trim", "ltrim", "rtrim"):
            position = {"ltrim": "LEADING", "rtrim": "TRAILING"}.get(name)
            return exp.Trim(this=args[0], position=position) if position else exp.Trim(this=args[0])
        if name == "instr":
            return exp.StrPosition(this=args[0], substr=args[1])
        if name == "power":
            return exp.Pow(this=args[0], expression=args[1])
        if name == "mod":
            return exp.Mod(this=_wrapped(args[0]), expression=_wrapped(args[1]))
        return None

    def _date_function(self, node: m.Function, args: list[exp.Expression]) -> exp.Expression:
        name = node.name
        if name == "current_date":
            return exp.CurrentDate()
        if name == "current_timestamp":
            return exp.CurrentTimestamp()
        if name == "format_date":
            fmt = node.args[1]
            if not (isinstance(fmt, m.Value) and isinstance(fmt.value, str)):
                raise ValueError("format_date's format must be a text literal")
            return exp.TimeToStr(this=self._date_arg(node.args[0]), format=exp.Literal.string(fmt.value))
        template = DATE_FUNCTION_TEMPLATES.get(name, {}).get(self.dialect)
        # a template that casts its arguments itself takes them as they are
        dated = args if template is not None and "CAST(" in template else [self._date_arg(a) for a in node.args]
        if template is not None:
            filled = _fill(template.replace("{y}", SECOND_PLACEHOLDER), self.dialect, dated[0],
                           second=dated[1] if len(dated) > 1 else None)
            return exp.Paren(this=filled) if isinstance(filled, exp.Binary) else filled
        if name in ("date", "datetime"):
            return exp.Cast(this=dated[0], to=exp.DataType.build("DATE" if name == "date" else "TIMESTAMP"))
        raise ValueError(f"no function {name}")  # pragma: no cover (the model's Literal lists every name)

    def _expr_cast(self, node: m.Cast) -> exp.Expression:
        arg = self.expr(node.arg)
        if self.dialect == "sqlite" and node.to in ("date", "timestamp"):
            # SQLite's CAST(… AS DATE) is a number (2010 for '2010-05-01'): its date functions keep the text
            return exp.Anonymous(this="DATE" if node.to == "date" else "DATETIME", expressions=[arg])
        if self.dialect == "sqlite" and node.to == "boolean":
            return exp.Cast(this=arg, to=exp.DataType.build("INT"))
        return exp.Cast(this=arg, to=exp.DataType.build(CAST_TYPES[node.to]))

    def _expr_star(self, node: m.Star) -> exp.Expression:
        return exp.Column(this=exp.Star(), table=self.ident(node.table)) if node.table else exp.Star()

    def _expr_case(self, node: m.Case) -> exp.Expression:
        return exp.Case(
            ifs=[exp.If(this=self.condition(w.condition), true=self.expr(w.then)) for w in node.whens],
            default=self.expr(node.otherwise) if node.otherwise is not None else None,
        )

    def _date_arg(self, node: m.ExprNode) -> exp.Expression:
        """A date operation's argument; a text literal is cast to a timestamp outside SQLite (which takes text)."""
        arg = self.expr(node)
        if isinstance(node, m.Value) and isinstance(node.value, str) and self.dialect != "sqlite":
            return exp.Cast(this=arg, to=exp.DataType.build("TIMESTAMP"))
        return arg

    def _expr_date_part(self, node: m.DatePartOf) -> exp.Expression:
        arg = self._date_arg(node.arg)
        template = DATE_PART_TEMPLATES.get(self.dialect, {}).get(node.part)
        if not template:
            return exp.Extract(this=exp.var(node.part.upper()), expression=arg)
        filled = _fill(template, self.dialect, arg)
        return exp.Paren(this=filled) if isinstance(filled, exp.Binary) else filled

    def _expr_date_trunc(self, node: m.DateTrunc) -> exp.Expression:
        arg = self._date_arg(node.arg)
        template = DATE_TRUNC_TEMPLATES.get(self.dialect, {}).get(node.unit)
        if template:
            return _fill(template, self.dialect, arg)
        return exp.DateTrunc(unit=exp.var(node.unit.upper()), this=arg)

    def _expr_window(self, node: m.Window) -> exp.Expression:
        ranking = {"row_number": exp.RowNumber, "rank": exp.Rank, "dense_rank": exp.DenseRank}
        if node.func in ranking:
            func = ranking[node.func]()
        else:
            func = self._expr_aggregate(m.Aggregate(func=node.func, arg=node.arg))
        window = exp.Window(this=func, partition_by=[self.expr(e) for e in node.partition_by] or None)
        if node.order_by:
            keys = [self.ordered(o) for o in node.order_by]
            if self.dialect == "bigquery" and not isinstance(func, exp.RowNumber | exp.Rank | exp.DenseRank):
                keys = [k for key in keys for k in _explicit_nulls(key)]  # BigQuery ignores NULLS in aggregate windows
            window.set("order", exp.Order(expressions=keys))
        return window

    def _expr_subquery(self, node: m.ScalarSubquery) -> exp.Expression:
        return exp.Subquery(this=self.statement(node.plan))

    # --- conditions ----------------------------------------------------------------------------

    def condition(self, node: m.ConditionNode) -> exp.Expression:
        """A boolean tree."""
        built = getattr(self, f"_cond_{node.kind}")(node)
        return exp.Not(this=built) if getattr(node, "negated", False) else built

    def _cond_compare(self, node: m.Comparison) -> exp.Expression:
        ops = {"=": exp.EQ, "<>": exp.NEQ, "<": exp.LT, "<=": exp.LTE, ">": exp.GT, ">=": exp.GTE}
        return ops[node.op](this=self.expr(node.left), expression=self.expr(node.right))

    def _cond_in(self, node: m.InList) -> exp.Expression:
        return exp.In(this=self.expr(node.expr), expressions=[self.expr(v) for v in node.values])

    def _cond_between(self, node: m.Between) -> exp.Expression:
        return exp.Between(this=self.expr(node.expr), low=self.expr(node.low), high=self.expr(node.high))

    def _cond_like(self, node: m.Like) -> exp.Expression:
        # SQLite's own LIKE ignores the case of ASCII letters (what its LOWER folds too)
        kind = exp.ILike if node.case_insensitive and self.dialect != "sqlite" else exp.Like
        pattern = node.pattern
        if not isinstance(pattern, str):
            return kind(this=self.expr(node.expr), expression=self.expr(pattern))
        if self.dialect in BACKSLASH_ESCAPES_LIKE:  # a backslash is a plain character in every plan
            pattern = pattern.replace("\\", "\\\\")
        return kind(this=self.expr(node.expr), expression=exp.Literal.string(pattern))

    def _cond_is_null(self, node: m.IsNull) -> exp.Expression:
        return exp.Is(this=self.expr(node.expr), expression=exp.Null())

    def _cond_and(self, node: m.And) -> exp.Expression:
        return exp.and_(*(self.condition(c) for c in node.conditions))

    def _cond_or(self, node: m.Or) -> exp.Expression:
        return exp.or_(*(self.condition(c) for c in node.conditions))

    def _cond_not(self, node: m.Not) -> exp.Expression:
        return exp.Not(this=exp.Paren(this=self.condition(node.condition)))

    def _cond_in_subquery(self, node: m.InSubquery) -> exp.Expression:
        return exp.In(this=self.expr(node.expr), query=exp.Subquery(this=self.statement(node.plan)))

    def _cond_exists(self, node: m.Exists) -> exp.Expression:
        return exp.Exists(this=self.statement(node.plan))

    def _cond_truth(self, node: m.Truth) -> exp.Expression:
        value = self.expr(node.expr)
        if self.dialect in ("sqlite", "mysql"):
            return value  # a number is a truth value there
        # elsewhere a condition must be boolean: a number or a column read as one (true rows pass, as in SQLite)
        return value if isinstance(value, exp.Boolean) else exp.Cast(this=value, to=exp.DataType.build("BOOLEAN"))


def _wrapped(node: exp.Expression) -> exp.Expression:
    return exp.Paren(this=node) if isinstance(node, exp.Binary) else node


def plan_to_expression(plan: m.PlanModel, dialect: str, *, schemas: Mapping[str, str] | None = None) -> exp.Query:
    """The sqlglot tree of a plan in `dialect` (`schemas` maps table → schema for non-default schemas)."""
    return SQLGenerator(dialect, schemas).statement(plan)


def generate_sql(plan: m.PlanModel, dialect: str, *, schemas: Mapping[str, str] | None = None,
                 pretty: bool = False) -> str:
    """The SQL text of a plan in `dialect`."""
    name = dialect_name(dialect)
    return plan_to_expression(plan, name, schemas=schemas).sql(dialect=name, pretty=pretty)


#: Tokens a clause starts with: a line of its own in `readable_sql`.
_CLAUSE_STARTS = frozenset({
    TokenType.SELECT, TokenType.FROM, TokenType.WHERE, TokenType.GROUP_BY, TokenType.HAVING, TokenType.ORDER_BY,
    TokenType.LIMIT, TokenType.OFFSET, TokenType.UNION, TokenType.EXCEPT, TokenType.INTERSECT, TokenType.WITH,
    TokenType.JOIN, TokenType.LEFT, TokenType.RIGHT, TokenType.INNER, TokenType.FULL, TokenType.CROSS,
    TokenType.WINDOW, TokenType.QUALIFY,
})  # fmt: skip


def readable_sql(sql: str, dialect: str | None = None, width: int = 72) -> str:
    """The very statement laid out for a person (an approver, the Prefect UI, which shows code unwrapped): only the
    spaces between tokens change — a clause starts a line, and a long line breaks after its commas outside
    parentheses — so what is read is what runs. Text that does not tokenize is returned as it is.

    >>> print(readable_sql("SELECT a, b FROM t JOIN u ON t.k = u.k WHERE c = 'x FROM y' ORDER BY a", width=20))
    SELECT a, b
    FROM t
    JOIN u ON t.k = u.k
    WHERE c = 'x FROM y'
    ORDER BY a
    """
    try:
        tokens = Dialect.get_or_raise(dialect).tokenize(sql)
    except Exception:  # display only: the statement still shows as written
        return sql
    breaks: dict[int, str] = {}  # a position in `sql` where the whitespace before it becomes a line break
    depth, previous = 0, None
    for token in tokens:
        if token.token_type == TokenType.L_PAREN:
            depth += 1
        elif token.token_type == TokenType.R_PAREN:
            depth = max(0, depth - 1)
        joined = previous is not None and previous.token_type in (TokenType.LEFT, TokenType.RIGHT, TokenType.INNER,
                                                                   TokenType.FULL, TokenType.CROSS)
        if token.token_type in _CLAUSE_STARTS and token.start > 0 and not joined:
            breaks[token.start] = "\n" + "  " * depth
        previous = token
    lines, start = [], 0
    for position in sorted(breaks):
        lines.append(sql[start:position].rstrip())
        start = position
    lines.append(sql[start:])
    out = [lines[0].strip()] + [line.strip() for line in lines[1:]]
    indents = [""] + [breaks[p][1:] for p in sorted(breaks)]
    laid = []
    for indent, line in zip(indents, out, strict=True):
        laid.extend(indent + part for part in _wrap_commas(line, width))
    return "\n".join(laid)


def _wrap_commas(line: str, width: int) -> list[str]:
    """A long line broken after its commas outside parentheses and quotes (the continuation indented)."""
    if len(line) <= width:
        return [line]
    parts, depth, quote, start = [], 0, None, 0
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"`":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth = max(0, depth - 1)
        elif char == "," and depth == 0:
            parts.append(line[start:i + 1])
            start = i + 1
    parts.append(line[start:])
    return [parts[0].rstrip()] + ["  " + p.strip() for p in parts[1:]] if len(parts) > 1 else [line]
