"""SQL → PlanModel: the inverse of the generator, for the `sql` planner format.

A model writes one SELECT in the datasource's dialect; `plan_from_sql` parses it with sqlglot and
reads the tree into a PlanModel, which is then validated and rendered by the generator like any
plan, so every statement that runs still comes from a validated plan. Names stay as written (a
column's table qualifier, alias or table name, or none): the validator resolves them. What the plan
language cannot say raises `PlanUnsupported`, whose message names the construct and how to write
the question instead. Date parts and truncation are read back from the generator's own per-dialect
forms (rendered once per dialect), plus the usual spellings (`EXTRACT`, `DATE_TRUNC`, `YEAR(x)`).

>>> plan = plan_from_sql("SELECT g.Name, COUNT(*) AS n FROM Genre g GROUP BY g.Name ORDER BY n DESC", "sqlite")
>>> plan.from_.alias, plan.select[1].expr.func, plan.order_by[0].direction
('g', 'count', 'desc')
>>> plan_from_sql("SELECT a FROM t WHERE a GLOB 'x*'", "sqlite")
Traceback (most recent call last):
...
nl2sql.errors.PlanUnsupported: A GLOB pattern is not supported (in `a GLOB 'x*'`). Use LIKE with % and _ wildcards.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from functools import cache
from typing import get_args

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, SqlglotError
from sqlglot.time import format_time

from nl2sql.errors import PlanUnsupported, UnknownNameError
from nl2sql.plan import model as m
from nl2sql.plan.generate import (
    BACKSLASH_ESCAPES_LIKE,
    DIALECTS,
    OFFSET_NEEDS_LIMIT,
    PLACEHOLDER,
    SECOND_PLACEHOLDER,
    SQLGenerator,
    dialect_name,
)

#: The plan's scalar functions, as a model would write them (for messages).
FUNCTIONS = "ROUND, COALESCE, NULLIF, ABS, LOWER, UPPER, LENGTH, CONCAT (or ||) and CASE"
#: Date parts the plan knows, by the names EXTRACT takes.
#: a date formatted to one part (the format as sqlglot normalises it, strftime's) and to one period
FORMAT_PARTS = {"%Y": "year", "%m": "month", "%d": "day", "%H": "hour", "%M": "minute", "%w": "day_of_week"}
FORMAT_PERIODS = {"%Y-%m-%d": "day", "%Y-%m-01": "month", "%Y-%m": "month", "%Y-01-01": "year"}
#: A month written as text, as '%Y-%m' formats a date ('2010-03'): compared with such a date, it is read as the month's
#: first day, as the date is (the plan's month is its start), so `STRFTIME('%Y-%m', d) = '2010-03'` still matches.
MONTH_TEXT = re.compile(r"\d{4}-\d{2}")
EXTRACT_PARTS = {"YEAR": "year", "QUARTER": "quarter", "MONTH": "month", "DAY": "day", "HOUR": "hour",
                 "MINUTE": "minute", "DOW": "day_of_week"}
#: Dialects where EXTRACT(DAYOFWEEK …) and DAYOFWEEK(…) count from 0 = Sunday, as the plan does.
DAYOFWEEK_FROM_SUNDAY_ZERO = ("duckdb",)
PART_FUNCTIONS: dict[type[exp.Expression], str] = {
    exp.Year: "year", exp.Quarter: "quarter", exp.Month: "month", exp.Day: "day", exp.Hour: "hour",
    exp.Minute: "minute"}
TRUNC_UNITS = set(get_args(m.TruncUnit))
AGGREGATES: dict[type[exp.Expression], m.AggregateFunction] = {
    exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}
RANKING: dict[type[exp.Expression], m.WindowFunction] = {
    exp.RowNumber: "row_number", exp.Rank: "rank", exp.DenseRank: "dense_rank"}
COMPARISONS: dict[type[exp.Expression], m.ComparisonOp] = {
    exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
ARITHMETIC: dict[type[exp.Expression], m.ArithmeticOp] = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/"}
UNARY: dict[type[exp.Expression], m.ScalarFunction] = {
    exp.Abs: "abs", exp.Lower: "lower", exp.Upper: "upper", exp.Length: "length"}
DATE_TYPES = {exp.DataType.Type.DATE, exp.DataType.Type.DATETIME, exp.DataType.Type.TIMESTAMP,
              exp.DataType.Type.TIMESTAMPTZ, exp.DataType.Type.TIMESTAMPLTZ, exp.DataType.Type.TIMESTAMPNTZ}
#: Casts the generator writes around a value (true division, PostgreSQL's ROUND) that the plan leaves out.
NUMERIC_TYPES = {exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT, exp.DataType.Type.DECIMAL}
#: Clauses of a SELECT the plan has no place for: the arg name, what to call it, how to write without it.
CLAUSES = {
    "into": ("SELECT … INTO", "Only read: drop INTO."),
    "laterals": ("LATERAL", "Join the table directly, or use a scalar sub-query."),
    "pivots": ("PIVOT / UNPIVOT", "Group by the column instead: one row per value."),
    "prewhere": ("PREWHERE", "Use WHERE."),
    "qualify": ("QUALIFY", "Filter with WHERE or HAVING; for the top rows per group, select the window's rank "
                "and order by it."),
    "windows": ("A named WINDOW clause", "Write the window in full after OVER (PARTITION BY … ORDER BY …)."),
    "distribute": ("DISTRIBUTE BY", "Use ORDER BY."), "sort": ("SORT BY", "Use ORDER BY."),
    "cluster": ("CLUSTER BY", "Use ORDER BY."),
    "locks": ("A locking clause (FOR UPDATE / FOR SHARE)", "Drop it: queries only read."),
    "sample": ("TABLESAMPLE", "Use ORDER BY and LIMIT."),
    "connect": ("CONNECT BY", "Join the table to itself (a self-join with aliases) instead."),
    "match": ("MATCH_RECOGNIZE", "Use WHERE and GROUP BY."),
    "exclude": ("SELECT * EXCLUDE", "List the columns you need."),
    "settings": ("SETTINGS", "Drop it."), "format": ("FORMAT", "Drop it."), "options": ("OPTION", "Drop it."),
    "for_": ("FOR XML / FOR JSON", "Drop it."), "hint": ("An optimizer hint", "Drop it."),
    "operation_modifiers": ("A SELECT modifier", "Drop it."),
}
#: Hints for functions a model often reaches for, by sqlglot's name for them without underscores.
FUNCTION_HINTS = {
    "SUBSTRING": "To test a prefix or a part of a text, use LIKE 'abc%' or LIKE '%abc%'.",
    "STRPOSITION": "To test whether a text contains another, use LIKE '%abc%'.",
    "TRIM": "Compare with LIKE ('% abc%') or the exact text instead.",
    "REPLACE": "Compare with LIKE patterns instead.",
    "DATEDIFF": "Date arithmetic is not in the plan: compare dates with text literals such as '2011-06-30'.",
    "DATEADD": "Date arithmetic is not in the plan: compare dates with text literals such as '2011-06-30'.",
    "JULIANDAY": "Date arithmetic is not in the plan: compare dates with text literals such as '2011-06-30'.",
    "GROUPCONCAT": "Return one row per value instead of a list (GROUP BY the key, select the value).",
    "STRINGAGG": "Return one row per value instead of a list (GROUP BY the key, select the value).",
    "LEAST": "Use CASE WHEN a < b THEN a ELSE b END.", "GREATEST": "Use CASE WHEN a > b THEN a ELSE b END.",
    "LAG": "The plan's windows are ROW_NUMBER, RANK, DENSE_RANK, SUM, AVG, COUNT, MIN and MAX.",
    "LEAD": "The plan's windows are ROW_NUMBER, RANK, DENSE_RANK, SUM, AVG, COUNT, MIN and MAX.",
}


def plan_from_sql(sql: str, dialect: str, columns: Collection[str] | None = None) -> m.PlanModel:
    """The PlanModel of one SELECT written in `dialect`; PlanUnsupported for what a plan cannot say. `columns`: the
    datasource's column names, for SQLite's reading of a double-quoted name that is no column as a string.

    >>> plan = plan_from_sql("SELECT Name FROM Track WHERE Milliseconds > 300000 LIMIT 5", "duckdb")
    >>> plan.where.op, plan.where.left.column, plan.limit
    ('>', 'Milliseconds', 5)
    >>> plan_from_sql('SELECT Name FROM Artist WHERE Name = "AC/DC"', "sqlite", ["Name", "ArtistId"]).where.right.value
    'AC/DC'
    """
    return SQLReader(dialect, columns).read(sql)


def _snippet(node: exp.Expression, dialect: str, width: int = 90) -> str:
    text = " ".join(node.sql(dialect=dialect).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _unsupported(construct: str, fix: str, node: exp.Expression | None = None, dialect: str = "") -> PlanUnsupported:
    where = f" (in `{_snippet(node, dialect)}`)" if node is not None else ""
    return PlanUnsupported(f"{construct} is not supported{where}.", construct=construct, fix=fix)


def _unparen(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _month_text(node: exp.Expression) -> bool:
    """Whether `node` formats a date as its month's text ('%Y-%m': '2010-03')."""
    node = _unparen(node)
    fmt = node.args.get("format") if isinstance(node, exp.TimeToStr) else None
    return isinstance(fmt, exp.Literal) and fmt.this == "%Y-%m"


def _empty(value: object) -> bool:
    return value is None or value is False or value == [] or value == ""


def _match(template: exp.Expression, node: exp.Expression, bound: dict[str, exp.Expression], dialect: str) -> bool:
    """Whether `node` has the shape of `template`, binding the placeholder column to the argument."""
    if isinstance(template, exp.Column) and template.name in (PLACEHOLDER, SECOND_PLACEHOLDER) and not template.table:
        if template.name in bound:
            return bound[template.name].sql(dialect=dialect) == node.sql(dialect=dialect)
        bound[template.name] = node
        return True
    if type(template) is not type(node):
        return False
    for key in set(template.args) | set(node.args):
        if key.startswith("_"):
            continue
        want, got = template.args.get(key), node.args.get(key)
        if _empty(want) and _empty(got):
            continue
        if isinstance(want, list) and isinstance(got, list):
            if len(want) != len(got) or not all(_match(w, g, bound, dialect) for w, g in zip(want, got, strict=True)):
                return False
        elif isinstance(want, exp.Expression) and isinstance(got, exp.Expression):
            if not _match(want, got, bound, dialect):
                return False
        elif isinstance(template, exp.Literal) and key == "this":
            if want != got:
                return False
        elif str(want).lower() != str(got).lower():
            return False
    return True


def _null_indicator(key: exp.Ordered) -> tuple[exp.Expression, bool] | None:
    """(x, whether NULLs sort first) for a key that sorts by x's being NULL: `x IS [NOT] NULL` or
    `CASE WHEN x IS NULL THEN 1 ELSE 0 END`, ascending or descending."""
    node, desc = _unparen(key.this), bool(key.args.get("desc"))
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return _unparen(node.this), desc
    if isinstance(node, exp.Not) and isinstance(inner := _unparen(node.this), exp.Is) \
            and isinstance(inner.expression, exp.Null):
        return _unparen(inner.this), not desc
    ifs = node.args.get("ifs") if isinstance(node, exp.Case) and node.this is None else None
    if ifs and len(ifs) == 1 and isinstance(test := _unparen(ifs[0].this), exp.Is) \
            and isinstance(test.expression, exp.Null):
        then, default = ifs[0].args.get("true"), node.args.get("default")
        values = tuple(v.this if isinstance(v, exp.Literal) and not v.is_string else None for v in (then, default))
        if values in (("1", "0"), ("0", "1")):
            return _unparen(test.this), desc == (values == ("1", "0"))
    return None


@cache
def _date_forms(dialect: str) -> tuple[tuple[m.DatePartOf | m.DateTrunc, exp.Expression], ...]:
    """The generator's date part and truncation of a placeholder column, as parsed back in `dialect`."""
    generator = SQLGenerator(dialect)
    arg = m.ColumnRef(table=None, column=PLACEHOLDER)
    nodes: list[m.DatePartOf | m.DateTrunc] = [m.DatePartOf(part=p, arg=arg) for p in get_args(m.DatePart)]
    nodes += [m.DateTrunc(unit=u, arg=arg) for u in get_args(m.TruncUnit)]
    forms = []
    for node in nodes:
        text = generator.expr(node).sql(dialect=dialect)
        forms.append((node, _unparen(sqlglot.parse_one(text, read=dialect))))
    return tuple(forms)


@cache
def _two_argument_forms(dialect: str) -> tuple[tuple[str, exp.Expression], ...]:
    """The generator's days_between of two placeholder columns, as parsed back in `dialect`."""
    node = m.Function(name="days_between", args=[m.ColumnRef(table=None, column=PLACEHOLDER),
                                                 m.ColumnRef(table=None, column=SECOND_PLACEHOLDER)])
    text = SQLGenerator(dialect).expr(node).sql(dialect=dialect)
    return (("days_between", _unparen(sqlglot.parse_one(text, read=dialect))),)


def date_hint(dialect: str) -> str:
    """How the date parts and truncation are written in `dialect`, for messages."""
    examples = {}
    for node, tree in _date_forms(dialect):
        name = f"{node.part}" if isinstance(node, m.DatePartOf) else f"{node.unit} start"
        if name in ("year", "month", "day_of_week", "month start", "day start"):
            examples[name] = tree.sql(dialect=dialect).replace(PLACEHOLDER, "x")
    listed = "; ".join(f"{name}: {sql}" for name, sql in examples.items())
    return f"In {dialect} write date parts and truncation as the plan does ({listed}), or EXTRACT(YEAR FROM x)."


class SQLReader:
    """Reads one dialect's SELECT trees into plans."""

    def __init__(self, dialect: str, columns: Collection[str] | None = None) -> None:
        self.dialect = dialect_name(dialect)
        if self.dialect not in DIALECTS:
            raise UnknownNameError("dialect", dialect, DIALECTS)
        #: names a double-quoted token may mean in SQLite (columns, and the statement's own aliases); None: all
        self.names = None if columns is None else {c.lower() for c in columns}
        self._derived = 0
        self.forms: dict[type[exp.Expression], list[tuple[m.DatePartOf | m.DateTrunc, exp.Expression]]] = {}
        for node, tree in _date_forms(self.dialect):
            self.forms.setdefault(type(tree), []).append((node, tree))

    def unsupported(self, construct: str, fix: str, node: exp.Expression | None = None) -> PlanUnsupported:
        """The error for a construct the plan cannot say, quoting where it is."""
        return _unsupported(construct, fix, node, self.dialect)

    # --- statements ----------------------------------------------------------------------------

    def read(self, sql: str) -> m.PlanModel:
        """The plan of a statement's text."""
        try:
            trees = [t for t in sqlglot.parse(sql, read=self.dialect) if t is not None]
        except ParseError as exc:
            first = exc.errors[0] if exc.errors else {}
            where = f" at line {first.get('line')}, column {first.get('col')}" if first.get("line") else ""
            near = f" near '{first['highlight']}'" if first.get("highlight") else ""
            detail = first.get("description") or str(exc).splitlines()[0]
            raise PlanUnsupported(f"The SQL does not parse as {self.dialect}: {detail}{where}{near}.",
                                  construct="SQL that does not parse",
                                  fix=f"Write one SELECT statement in {self.dialect} SQL.") from None
        except SqlglotError as exc:
            raise PlanUnsupported(f"The SQL does not parse as {self.dialect}: {str(exc).splitlines()[0]}.",
                                  construct="SQL that does not parse",
                                  fix=f"Write one SELECT statement in {self.dialect} SQL.") from None
        if not trees:
            raise self.unsupported("An empty statement", "Write one SELECT statement.")
        if len(trees) > 1:
            raise self.unsupported(f"Several statements ({len(trees)})",
                                   "Write exactly one SELECT statement, with no semicolon between statements.")
        if self.names is not None:  # the statement's own aliases are names too
            self.names |= {a.alias.lower() for a in trees[0].find_all(exp.Alias) if a.alias}
            self.names |= {t.alias.lower() for t in trees[0].find_all(exp.TableAlias) if t.name}
        return self.plan(trees[0])

    def plan(self, tree: exp.Expression) -> m.PlanModel:
        """The plan of one query tree (top level or sub-query): its WITH, then a SELECT or a set operation."""
        while isinstance(tree, exp.Subquery) and all(_empty(v) for k, v in tree.args.items() if k != "this"):
            tree = tree.this
        common = self.common_tables(tree)
        plan = self.set_operation(tree) if isinstance(tree, exp.SetOperation) else self.select(tree)
        plan.with_ = common
        return plan

    def common_tables(self, tree: exp.Expression) -> list[m.CommonTable]:
        """WITH's named sub-plans (not recursive ones)."""
        with_ = tree.args.get("with_")
        if not with_:
            return []
        if with_.args.get("recursive"):
            raise self.unsupported("WITH RECURSIVE", "Recursive queries are not run (their depth has no bound): "
                                   "join the table to itself a fixed number of times instead.")
        common = []
        for cte in with_.expressions:
            alias = cte.args.get("alias")
            if alias is not None and alias.columns:
                raise self.unsupported("Column names after a WITH name (WITH t(a, b) AS …)",
                                       "Name the columns with AS inside the query instead.", cte)
            if cte.args.get("materialized") is not None:
                raise self.unsupported("[NOT] MATERIALIZED", "Drop it.", cte)
            common.append(m.CommonTable(name=cte.alias, plan=self.plan(cte.this)))
        return common

    def set_operation(self, tree: exp.SetOperation) -> m.PlanModel:
        """UNION [ALL] / INTERSECT / EXCEPT, left to right: the first plan, the others as its set operations, the
        ORDER BY and LIMIT of the whole on the first plan."""
        branches: list[tuple[str | None, exp.Expression]] = []
        node: exp.Expression = tree
        outer = tree
        while isinstance(node, exp.SetOperation):
            if node is not tree and not all(_empty(node.args.get(k)) for k in ("order", "limit", "offset", "with_")):
                break  # a branch of its own (parenthesised, ordered): read as one plan
            op = {exp.Union: "union", exp.Intersect: "intersect", exp.Except: "except"}[type(node)]
            if op == "union" and not node.args.get("distinct"):
                op = "union_all"
            elif not node.args.get("distinct"):
                raise self.unsupported(f"{op.upper()} ALL", f"Use {op.upper()} (distinct rows).", node)
            branches.append((op, node.expression))
            node = node.this
            if isinstance(node, exp.Subquery) and isinstance(node.this, exp.SetOperation) \
                    and all(_empty(v) for k, v in node.args.items() if k != "this"):
                node = node.this  # sqlglot's parentheses for SQLite's left-to-right reading, not the writer's
        first = self.branch(node)
        for op, branch in reversed(branches):
            first.set_operations.append(m.SetOperation(op=op, plan=self.branch(branch)))  # type: ignore[arg-type]
        order = outer.args.get("order")
        if order is not None:
            first.order_by = self.order_items(order.expressions, first.select)
        self.limits(outer, first)
        return first

    def branch(self, tree: exp.Expression) -> m.PlanModel:
        """One branch of a set operation: a plan with no set operations of its own at its top."""
        plan = self.plan(tree)
        if plan.set_operations:  # (a UNION b) INTERSECT c: a nested operation is a derived table
            self._derived += 1
            name = f"branch_{self._derived}"
            return m.PlanModel(select=[m.SelectItem(expr=m.Star())], from_=m.TableRef(table=name, alias=name,
                                                                                        query=plan))
        return plan

    def select(self, tree: exp.Expression) -> m.PlanModel:
        """The plan of one SELECT."""
        if not isinstance(tree, exp.Select):
            raise self.unsupported(f"A {tree.key.upper()} statement",
                                   "Only a single SELECT can be answered: write one SELECT … FROM … query.")
        for key, (construct, fix) in CLAUSES.items():
            if not _empty(tree.args.get(key)):
                raise self.unsupported(construct, fix)
        if tree.args.get("kind"):
            raise self.unsupported(f"SELECT AS {str(tree.args['kind']).upper()}", "Write a plain SELECT.")
        distinct = tree.args.get("distinct")
        if distinct is not None and distinct.args.get("on"):
            raise self.unsupported("DISTINCT ON", "Use SELECT DISTINCT, or GROUP BY the key with aggregates.")
        select = [self.select_item(e) for e in tree.expressions]
        from_ = tree.args.get("from_")
        if from_ is None:
            raise self.unsupported("A SELECT without FROM", "Select from a table of the datasource.")
        plan = m.PlanModel(select=select, from_=self.table(from_.this),
                           joins=[self.join(j) for j in tree.args.get("joins") or []])
        where = tree.args.get("where")
        if where is not None:
            plan.where = self.condition(where.this)
        group = tree.args.get("group")
        if group is not None:
            plan.group_by = self.group_by(group, select)
        having = tree.args.get("having")
        if having is not None:
            plan.having = self.condition(having.this)
        order = tree.args.get("order")
        if order is not None:
            plan.order_by = self.order_items(order.expressions, select)
        self.limits(tree, plan)
        plan.distinct = distinct is not None
        return plan

    def select_item(self, node: exp.Expression) -> m.SelectItem:
        """One output column."""
        if isinstance(node, exp.Alias):
            return m.SelectItem(expr=self.expr(node.this), alias=node.alias)
        if isinstance(node, exp.Star):
            return m.SelectItem(expr=m.Star())
        if isinstance(node, exp.Column) and isinstance(node.this, exp.Star):
            return m.SelectItem(expr=m.Star(table=node.table))
        return m.SelectItem(expr=self.expr(node))

    def table(self, node: exp.Expression) -> m.TableRef:
        """A FROM or JOIN table (a schema qualifier is dropped: the datasource's configuration has it), or a derived
        table (a sub-query under its alias)."""
        if isinstance(node, exp.Subquery):
            alias = node.args.get("alias")
            if alias is not None and alias.columns:
                raise self.unsupported("Column aliases on a derived table (AS t(a, b))",
                                       "Name the columns with AS inside the sub-query.", node)
            for key in ("pivots", "laterals", "sample", "order", "limit", "offset"):
                if not _empty(node.args.get(key)):
                    raise self.unsupported(f"{key.upper()} on a derived table", "Put it inside the sub-query.", node)
            name = node.alias
            if not name:
                self._derived += 1
                name = f"derived_{self._derived}"
            return m.TableRef(table=name, alias=name, query=self.plan(node.this))
        if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
            raise self.unsupported("A table function or expression in FROM", "Select from a table by name.", node)
        for key in ("joins", "pivots", "laterals", "sample", "hints", "version", "when", "only"):
            if not _empty(node.args.get(key)):
                raise self.unsupported(f"{key.upper()} on a table", "Name the table alone, with an alias.", node)
        alias = node.args.get("alias")
        if alias is not None and alias.columns:
            raise self.unsupported("Column aliases on a table (AS t(a, b))",
                                   "Alias the table only (AS t) and use its column names.", node)
        return m.TableRef(table=node.name, alias=node.alias or None)

    def join(self, node: exp.Join) -> m.Join:
        """An INNER or LEFT join ON column-equality pairs and any other condition; a CROSS join (or a comma)."""
        side, kind = (node.side or "").upper(), (node.kind or "").upper()
        if node.method or kind in ("SEMI", "ANTI", "ASOF", "POSITIONAL") or side in ("RIGHT", "FULL"):
            name = " ".join(x for x in (node.method, side, kind) if x).upper() or "This"
            raise self.unsupported(f"{name} JOIN", "Use JOIN (inner) or LEFT JOIN with ON a.key = b.key; for a "
                                   "RIGHT JOIN, swap the tables and use LEFT JOIN.", node)
        table = self.table(node.this)
        if node.args.get("using"):
            raise self.unsupported("JOIN … USING", "Write the key pairs: JOIN b ON b.key = a.key.", node)
        on = node.args.get("on")
        if on is None:  # CROSS JOIN, a comma between tables, or a bare JOIN (SQLite reads it as a cross join)
            if side == "LEFT":
                raise self.unsupported("LEFT JOIN without ON", "Write LEFT JOIN b ON b.key = a.key.", node)
            return m.Join(type="cross", table=table)
        keys, others = [], []
        for part in self._conjuncts(on):
            left = _unparen(part.this) if isinstance(part, exp.EQ) else None
            right = _unparen(part.expression) if isinstance(part, exp.EQ) else None
            if isinstance(left, exp.Column) and isinstance(right, exp.Column) and left.table and right.table \
                    and left.table.lower() != right.table.lower():
                keys.append(m.JoinKey(left=self.column(left), right=self.column(right)))
            else:
                others.append(self.condition(part))
        condition: m.ConditionNode | None = None
        if len(others) == 1:
            condition = others[0]
        elif others:
            condition = m.And(conditions=others)
        return m.Join(type="left" if side == "LEFT" else "inner", table=table, on=keys, condition=condition)

    def _conjuncts(self, node: exp.Expression) -> list[exp.Expression]:
        node = _unparen(node)
        if isinstance(node, exp.And):
            return self._conjuncts(node.this) + self._conjuncts(node.expression)
        return [node]

    def group_by(self, group: exp.Group, select: list[m.SelectItem]) -> list[m.ExprNode]:
        """GROUP BY keys; a position or an output alias becomes the select item's expression."""
        for key in ("grouping_sets", "cube", "rollup", "totals", "all"):
            if not _empty(group.args.get(key)):
                raise self.unsupported(f"GROUP BY {key.upper().replace('_', ' ')}",
                                       "List the group keys: GROUP BY a, b.", group)
        aliases = {item.alias.lower(): item for item in select if item.alias}
        keys: list[m.ExprNode] = []
        for node in group.expressions:
            if isinstance(node, exp.Rollup | exp.Cube | exp.GroupingSets):
                raise self.unsupported(f"GROUP BY {node.key.upper().replace('GROUPINGSETS', 'GROUPING SETS')}",
                                       "List the group keys: GROUP BY a, b.", group)
            position = self._position(node, select)
            if position is not None:
                keys.append(select[position].expr.model_copy(deep=True))
                continue
            key = self.expr(node)
            item = aliases.get(key.column.lower()) if isinstance(key, m.ColumnRef) and key.table is None else None
            same_column = item is not None and isinstance(item.expr, m.ColumnRef) and \
                item.expr.column.lower() == key.column.lower()
            keys.append(item.expr.model_copy(deep=True) if item is not None and not same_column else key)
        return keys

    def _position(self, node: exp.Expression, select: list[m.SelectItem]) -> int | None:
        """The 0-based select item a positional GROUP BY / ORDER BY key (1, 2, …) names, if it is one."""
        if not (isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit()):
            return None
        position = int(node.this)
        if not 1 <= position <= len(select):
            raise self.unsupported(f"Position {position} in GROUP BY / ORDER BY",
                                   f"The query selects {len(select)} columns: use 1 to {len(select)}, or the "
                                   "expression or its alias.", node)
        return position - 1

    def order_items(self, keys: list[exp.Ordered], select: list[m.SelectItem] | None = None) -> list[m.OrderItem]:
        """ORDER BY keys; `x IS NULL, x` (how MySQL and BigQuery place NULLs, and a common idiom) is one key."""
        items: list[m.OrderItem] = []
        i = 0
        while i < len(keys):
            indicator = _null_indicator(keys[i])
            if indicator is not None and i + 1 < len(keys):
                subject, nulls_first = indicator
                if _unparen(keys[i + 1].this).sql(dialect=self.dialect) == subject.sql(dialect=self.dialect):
                    item = self.order_item(keys[i + 1], select)
                    item.nulls = "first" if nulls_first else None
                    items.append(item)
                    i += 2
                    continue
            items.append(self.order_item(keys[i], select))
            i += 1
        return items

    def order_item(self, node: exp.Ordered, select: list[m.SelectItem] | None = None) -> m.OrderItem:
        """An ORDER BY key; NULLS placement as the dialect reads it (sqlglot fills in the dialect's default)."""
        key = _unparen(node.this)
        position = self._position(key, select) if select is not None else None
        if position is not None:
            item = select[position]  # type: ignore[index]
            expr: m.ExprNode = (m.ColumnRef(table=None, column=item.alias) if item.alias
                                else item.expr.model_copy(deep=True))
        elif isinstance(key, exp.Is) or (isinstance(key, exp.Not) and isinstance(_unparen(key.this), exp.Is)):
            raise self.unsupported("Sorting by x IS [NOT] NULL",
                                   "Write ORDER BY x NULLS FIRST (or NULLS LAST) instead.", node)
        else:
            expr = self.expr(key)
        return m.OrderItem(expr=expr, direction="desc" if node.args.get("desc") else "asc",
                           nulls="first" if node.args.get("nulls_first") else None)

    def limits(self, tree: exp.Select, plan: m.PlanModel) -> None:
        """LIMIT (or FETCH FIRST) and OFFSET; the generator's stand-ins for "no limit" read as none."""
        limit, offset = tree.args.get("limit"), tree.args.get("offset")
        if isinstance(limit, exp.Fetch):
            options = limit.args.get("limit_options")
            if options is not None and (options.args.get("percent") or options.args.get("with_ties")):
                raise self.unsupported("FETCH … PERCENT / WITH TIES", "Use LIMIT n.", limit)
            count = limit.args.get("count")
            plan.limit = 1 if count is None else self._count(count, "FETCH")
        elif isinstance(limit, exp.Limit):
            if limit.args.get("offset") is not None and offset is None:
                plan.offset = self._count(limit.args["offset"], "OFFSET")
            value = _unparen(limit.expression)
            if isinstance(value, exp.Null):
                plan.limit = None
            elif isinstance(value, exp.Neg) and self.dialect == "sqlite":
                plan.limit = None  # SQLite's LIMIT -1: no limit
            else:
                plan.limit = self._count(value, "LIMIT")
            if plan.limit is not None and plan.limit == OFFSET_NEEDS_LIMIT.get(self.dialect):
                plan.limit = None
        if offset is not None:
            plan.offset = self._count(offset.expression, "OFFSET")
        if plan.offset == 0:
            plan.offset = None

    def _count(self, node: exp.Expression, clause: str) -> int:
        node = _unparen(node)
        if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
            return int(node.this)
        raise self.unsupported(f"{clause} with something other than a whole number", f"Write {clause} 10.", node)

    # --- expressions ---------------------------------------------------------------------------

    def column(self, node: exp.Column) -> m.ColumnRef:
        """A column, its table qualifier kept as written (a schema before it dropped)."""
        if isinstance(node.this, exp.Star):
            raise self.unsupported("t.*", "Select t.* only as a whole select item, or list the columns you need.",
                                   node)
        return m.ColumnRef(table=node.table or None, column=node.name)

    def _column_or_text(self, node: exp.Column) -> m.ExprNode:
        """A column; in SQLite, a double-quoted name that no column or alias has is a string, as SQLite reads it
        (`WHERE Country = "USA"`)."""
        identifier = node.this
        if (self.dialect == "sqlite" and self.names is not None and not node.table
                and isinstance(identifier, exp.Identifier) and identifier.quoted
                and identifier.name.lower() not in self.names):
            return m.Value(value=identifier.name)
        return self.column(node)

    def expr(self, node: exp.Expression) -> m.ExprNode:
        """An expression tree."""
        node = _unparen(node)
        date = self._date_form(node)
        if date is not None:
            return date
        handler = EXPR_HANDLERS.get(type(node))  # the exact class: CONCAT_WS is no CONCAT
        if handler is not None:
            return handler(self, node)
        if isinstance(node, exp.Predicate | exp.Connector | exp.Not | exp.Exists):
            raise self.unsupported("A condition used as a value",
                                   "Use CASE WHEN <condition> THEN 1 ELSE 0 END, or move it to WHERE / HAVING.", node)
        if isinstance(node, exp.AggFunc):
            hint = FUNCTION_HINTS.get(node.sql_name().replace("_", ""), "")
            raise self.unsupported(f"The aggregate {node.sql_name()}", "The plan's aggregates are COUNT, SUM, AVG, "
                                   f"MIN and MAX (with DISTINCT). {hint}".rstrip(), node)
        if isinstance(node, exp.Func):
            raise self._no_function(node)
        raise self.unsupported(f"The expression {type(node).__name__}", f"Use columns, literals, + - * /, {FUNCTIONS}, "
                               "aggregates and window functions.", node)

    def _date_form(self, node: exp.Expression) -> m.ExprNode | None:
        """A date part, truncation or difference written as the generator writes it in this dialect."""
        for plan_node, tree in self.forms.get(type(node), ()):
            bound: dict[str, exp.Expression] = {}
            if _match(tree, node, bound, self.dialect) and PLACEHOLDER in bound:
                return plan_node.model_copy(update={"arg": self.expr(bound[PLACEHOLDER])})
        for name, tree in _two_argument_forms(self.dialect):
            bound = {}
            if type(tree) is type(node) and _match(tree, node, bound, self.dialect) and len(bound) == 2:
                return m.Function(name=name, args=[self.expr(self._uncast_date(bound[PLACEHOLDER])),  # type: ignore[arg-type]
                                                   self.expr(self._uncast_date(bound[SECOND_PLACEHOLDER]))])
        return None

    @staticmethod
    def _uncast_date(node: exp.Expression) -> exp.Expression:
        """A text date's cast, as the generator writes one around a literal, read as the literal."""
        while isinstance(node, exp.Cast) and node.to.this in DATE_TYPES and isinstance(
                _unparen(node.this), exp.Literal | exp.Cast):
            node = _unparen(node.this)
        return node

    def _literal(self, node: exp.Literal) -> m.Value:
        if node.is_string:
            return m.Value(value=node.this)
        text = node.this
        try:
            return m.Value(value=int(text))
        except ValueError:
            return m.Value(value=float(text))

    def _neg(self, node: exp.Neg) -> m.ExprNode:
        inner = self.expr(node.this)
        if isinstance(inner, m.Value) and isinstance(inner.value, int | float) and not isinstance(inner.value, bool):
            return m.Value(value=-inner.value)
        return m.Arithmetic(op="-", left=m.Value(value=0), right=inner)

    def _strip_numeric_cast(self, node: exp.Expression) -> exp.Expression:
        """`x` for CAST(x AS REAL / DOUBLE / NUMERIC): the casts the generator adds for true division and ROUND."""
        node = _unparen(node)
        if isinstance(node, exp.Cast) and node.to.this in NUMERIC_TYPES and not node.to.expressions:
            return node.this
        return node

    def _arithmetic(self, node: exp.Binary) -> m.ExprNode:
        if isinstance(node, exp.Sub) and (days := self._days_between(node)) is not None:
            return days
        op = ARITHMETIC[type(node)]
        left, right = node.this, node.expression
        if op == "/":  # the plan's division is true division in every dialect
            left, right = self._strip_numeric_cast(left), self._strip_numeric_cast(right)
        return m.Arithmetic(op=op, left=self.expr(left), right=self.expr(right))

    def _aggregate(self, node: exp.AggFunc) -> m.Aggregate:
        func = AGGREGATES[type(node)]
        if node.args.get("expressions"):
            raise self.unsupported(f"{func.upper()} of several values",
                                   "Use CASE WHEN a < b THEN a ELSE b END for the smaller or larger of two values.", node)
        arg = node.this
        distinct = isinstance(arg, exp.Distinct)
        if distinct:
            if len(arg.expressions) != 1:
                raise self.unsupported(f"{func.upper()}(DISTINCT of several columns)",
                                       f"Use {func.upper()}(DISTINCT one_column).", node)
            arg = arg.expressions[0]
        if arg is None or isinstance(arg, exp.Star):
            if func != "count":
                raise self.unsupported(f"{func.upper()}(*)", f"Write {func.upper()}(column).", node)
            return m.Aggregate(func=func, arg=None, distinct=False)
        return m.Aggregate(func=func, arg=self.expr(arg), distinct=distinct)

    def _window(self, node: exp.Window) -> m.Window:
        if node.args.get("spec") is not None:
            raise self.unsupported("A window frame (ROWS / RANGE BETWEEN …)",
                                   "Leave the frame out: OVER (PARTITION BY … ORDER BY …) is a running total.", node)
        if isinstance(node.this, exp.Identifier) or node.alias or node.args.get("alias"):
            raise self.unsupported("A named window", "Write the window in full: OVER (PARTITION BY … ORDER BY …).", node)
        func_node = node.this
        if isinstance(func_node, exp.Filter | exp.IgnoreNulls | exp.RespectNulls):
            raise self.unsupported("FILTER / IGNORE NULLS in a window", "Use CASE inside the aggregate instead.", node)
        window = m.Window(func="row_number")
        if type(func_node) in RANKING:
            window.func = RANKING[type(func_node)]
        elif type(func_node) in AGGREGATES:
            agg = self._aggregate(func_node)
            if agg.distinct:
                raise self.unsupported("DISTINCT in a window function", "Use a plain aggregate with GROUP BY.", node)
            window.func, window.arg = agg.func, agg.arg
        else:
            name = func_node.sql_name() if isinstance(func_node, exp.Func) else type(func_node).__name__
            raise self.unsupported(f"The window function {name}", "The plan's window functions are ROW_NUMBER, "
                                   "RANK, DENSE_RANK, SUM, AVG, COUNT, MIN and MAX.", node)
        window.partition_by = [self.expr(e) for e in node.args.get("partition_by") or []]
        order = node.args.get("order")
        if order is not None:
            window.order_by = self.order_items(order.expressions)
        return window

    def _round(self, node: exp.Round) -> m.Function:
        args = [self.expr(self._strip_numeric_cast(node.this))]
        if node.args.get("decimals") is not None:
            args.append(self.expr(node.args["decimals"]))
        return m.Function(name="round", args=args)

    def _unary(self, node: exp.Func) -> m.Function:
        return m.Function(name=UNARY[type(node)], args=[self.expr(node.this)])

    def _concat(self, node: exp.Expression) -> m.Function:
        parts = [node.this, node.expression] if isinstance(node, exp.DPipe) else node.expressions
        args: list[m.ExprNode] = []
        for part in parts:  # a || b || c is one concat of three
            value = self.expr(part)
            args.extend(value.args if isinstance(value, m.Function) and value.name == "concat" else [value])
        return m.Function(name="concat", args=args)

    def _case(self, node: exp.Case) -> m.Case:
        subject = node.this
        whens = []
        for branch in node.args.get("ifs") or []:
            if subject is not None:  # CASE x WHEN v THEN … is CASE WHEN x = v THEN …
                condition: m.ConditionNode = m.Comparison(op="=", left=self.expr(subject), right=self.expr(branch.this))
            else:
                condition = self.condition(branch.this)
            whens.append(m.When(condition=condition, then=self.expr(branch.args["true"])))
        default = node.args.get("default")
        return m.Case(whens=whens, otherwise=self.expr(default) if default is not None else None)

    def _if(self, node: exp.If) -> m.Case:
        false = node.args.get("false")
        return m.Case(whens=[m.When(condition=self.condition(node.this), then=self.expr(node.args["true"]))],
                      otherwise=self.expr(false) if false is not None else None)

    def _cast(self, node: exp.Cast) -> m.ExprNode:
        inner = _unparen(node.this)
        if isinstance(inner, exp.Literal) and inner.is_string and node.to.this in DATE_TYPES:
            return m.Value(value=inner.this)  # dates are text literals in a plan
        value = self.expr(inner)
        if node.to.is_type(*exp.DataType.INTEGER_TYPES) and isinstance(value, m.DatePartOf):
            return value
        to = _cast_type(node.to)
        if to is None:
            raise self.unsupported(f"CAST to {node.to.sql(dialect=self.dialect)}", "Cast to INTEGER, REAL, NUMERIC, "
                                   "TEXT, DATE, TIMESTAMP or BOOLEAN.", node)
        return m.Cast(arg=value, to=to)

    def _extract(self, node: exp.Extract) -> m.DatePartOf:
        unit = node.this.name.upper()
        part = EXTRACT_PARTS.get(unit)
        if unit == "DAYOFWEEK" and self.dialect in DAYOFWEEK_FROM_SUNDAY_ZERO:
            part = "day_of_week"
        if part is None:
            raise self.unsupported(f"EXTRACT({unit} …)", "The plan's date parts are YEAR, QUARTER, MONTH, DAY, HOUR, "
                                   "MINUTE and DOW (0 = Sunday).", node)
        return m.DatePartOf(part=part, arg=self.expr(node.expression))  # type: ignore[arg-type]

    def _part_function(self, node: exp.Func) -> m.DatePartOf:
        if isinstance(node, exp.DayOfWeek):
            if self.dialect not in DAYOFWEEK_FROM_SUNDAY_ZERO:
                raise self.unsupported("DAYOFWEEK", date_hint(self.dialect), node)
            return m.DatePartOf(part="day_of_week", arg=self.expr(node.this))
        return m.DatePartOf(part=PART_FUNCTIONS[type(node)], arg=self.expr(node.this))  # type: ignore[arg-type]

    def _time_to_str(self, node: exp.TimeToStr) -> m.DatePartOf | m.DateTrunc:
        """A date formatted to one part or one period (SQLite's and DuckDB's STRFTIME, PostgreSQL's TO_CHAR):
        the plan's date part (a number, where the text was '2010' or '03') or truncation (a date); the same year,
        month or day either way, and what small models write most."""
        fmt = node.args.get("format")
        text = fmt.this if isinstance(fmt, exp.Literal) and fmt.is_string else None
        arg = node.this
        while isinstance(arg, exp.TsOrDsToTimestamp | exp.TsOrDsToDate | exp.TimeStrToTime):
            arg = arg.this  # sqlglot's reading of a text date, not anything written
        if text in FORMAT_PARTS:
            return m.DatePartOf(part=FORMAT_PARTS[text], arg=self.expr(arg))  # type: ignore[arg-type]
        if text in FORMAT_PERIODS:
            return m.DateTrunc(unit=FORMAT_PERIODS[text], arg=self.expr(arg))  # type: ignore[arg-type]
        if text is not None:
            return m.Function(name="format_date", args=[self.expr(arg), m.Value(value=text)])
        raise self._no_function(node)

    def _trunc(self, node: exp.Func) -> m.DateTrunc:
        unit_node = node.args.get("unit")
        unit = (unit_node.name if unit_node is not None else "").lower()
        if unit not in TRUNC_UNITS or (unit == "week" and self.dialect == "bigquery") or node.args.get("zone"):
            raise self.unsupported(f"DATE_TRUNC to '{unit}'", "The plan truncates to year, quarter, month, week "
                                   "(Monday) or day.", node)
        return m.DateTrunc(unit=unit, arg=self.expr(node.this))  # type: ignore[arg-type]

    def _anonymous(self, node: exp.Anonymous) -> m.ExprNode:
        args = node.expressions
        name = node.name.upper()
        if name == "DATE_PART" and len(args) == 2 and isinstance(args[0], exp.Literal):
            return self._extract(exp.Extract(this=exp.var(args[0].this), expression=args[1]))
        if name in ("DATETIME", "DATE") and len(args) == 1:
            return m.Function(name=name.lower(), args=[self.expr(args[0])])  # type: ignore[arg-type]
        if name in ("LTRIM", "RTRIM", "TRIM") and len(args) == 1:
            return m.Function(name=name.lower(), args=[self.expr(args[0])])  # type: ignore[arg-type]
        if name in ("INSTR", "STRPOS") and len(args) == 2:
            return m.Function(name="instr", args=[self.expr(args[0]), self.expr(args[1])])
        raise self._no_function(node)

    def _trim(self, node: exp.Trim) -> m.Function:
        if node.args.get("expression") is not None or node.args.get("collation") is not None:
            raise self.unsupported("TRIM of given characters", "TRIM(x) removes spaces; use REPLACE for others.", node)
        position = (node.args.get("position") or "").upper()
        name = {"LEADING": "ltrim", "TRAILING": "rtrim"}.get(position, "trim")
        return m.Function(name=name, args=[self.expr(node.this)])  # type: ignore[arg-type]

    def _str_position(self, node: exp.StrPosition) -> m.Function:
        if node.args.get("position") is not None or node.args.get("occurrence") is not None:
            raise self.unsupported("A text position from a start or an occurrence", "Use INSTR(text, part).", node)
        return m.Function(name="instr", args=[self.expr(node.this), self.expr(node.args["substr"])])

    def _days_between(self, node: exp.Sub) -> m.ExprNode | None:
        """JULIANDAY(b) - JULIANDAY(a): the days from a to b."""
        left, right = _unparen(node.this), _unparen(node.expression)
        if all(isinstance(n, exp.Anonymous) and n.name.upper() == "JULIANDAY" and len(n.expressions) == 1
               for n in (left, right)):
            return m.Function(name="days_between", args=[self.expr(right.expressions[0]),  # type: ignore[union-attr]
                                                         self.expr(left.expressions[0])])  # type: ignore[union-attr]
        return None

    def _to_char(self, node: exp.ToChar) -> m.ExprNode:
        """TO_CHAR(x, format) in the dialect's own format codes (Snowflake's), read as a date formatted."""
        fmt = node.args.get("format")
        if not (isinstance(fmt, exp.Literal) and fmt.is_string) or node.args.get("nlsparam") is not None:
            raise self._no_function(node)
        dialect = Dialect.get_or_raise(self.dialect)
        text = format_time(fmt.this, dialect.TIME_MAPPING, dialect.TIME_TRIE)
        return self._time_to_str(exp.TimeToStr(this=node.this, format=exp.Literal.string(text)))

    def _date(self, node: exp.Expression) -> m.Function:
        if node.args.get("zone") is not None or node.expressions:
            raise self.unsupported("DATE with modifiers", "Use DATE(x) alone; compare dates with text literals such "
                                   "as '2011-06-30'.", node)
        return m.Function(name="date", args=[self.expr(node.this)])

    def _no_function(self, node: exp.Func) -> PlanUnsupported:
        """The error for a function the plan lacks, with the nearest way to say it."""
        name = node.name.upper() if isinstance(node, exp.Anonymous) else node.sql_name()
        listed = f"The plan's functions are {FUNCTIONS}, date parts (EXTRACT) and DATE_TRUNC."
        if name.replace("_", "") in FUNCTION_HINTS:
            return self.unsupported(f"The function {name}", f"{FUNCTION_HINTS[name.replace('_', '')]} {listed}", node)
        if "DATE" in name or "TIME" in name or name in ("STRFTIME", "TO_CHAR", "JULIANDAY"):
            return self.unsupported(f"The function {name}", date_hint(self.dialect), node)
        return self.unsupported(f"The function {name}", listed, node)

    def _subquery(self, node: exp.Subquery) -> m.ScalarSubquery:
        return m.ScalarSubquery(plan=self.plan(node))

    def _star(self, node: exp.Expression) -> m.ExprNode:
        raise self.unsupported("*", "List the columns you need.", node)

    # --- conditions ----------------------------------------------------------------------------

    def condition(self, node: exp.Expression) -> m.ConditionNode:
        """A boolean tree."""
        node = _unparen(node)
        if isinstance(node, exp.And | exp.Or):
            kind = type(node)
            parts: list[m.ConditionNode] = []
            for side in (node.this, node.expression):  # a AND b AND c is one AND of three
                parts.extend(self.condition(side).conditions if type(side) is kind else [self.condition(side)])
            return m.And(conditions=parts) if kind is exp.And else m.Or(conditions=parts)
        if isinstance(node, exp.Not):
            if isinstance(node.this, exp.Paren):  # NOT (…): the plan's Not
                return m.Not(condition=self.condition(node.this))
            inner = self.condition(node.this)
            if hasattr(inner, "negated") and not inner.negated:  # x NOT IN, NOT EXISTS, IS NOT NULL, …
                inner.negated = True  # type: ignore[union-attr]
                return inner
            return m.Not(condition=inner)
        if type(node) in COMPARISONS:
            if isinstance(_unparen(node.expression), exp.Any | exp.All):
                raise self.unsupported("ANY / ALL", "Use IN (SELECT …), or compare with MIN / MAX in a scalar "
                                       "sub-query.", node)
            left, right = self._compared([node.this, node.expression])
            return m.Comparison(op=COMPARISONS[type(node)], left=left, right=right)
        if isinstance(node, exp.In):
            return self._in(node)
        if isinstance(node, exp.Between):
            subject, low, high = self._compared([node.this, node.args["low"], node.args["high"]])
            return m.Between(expr=subject, low=low, high=high)
        if isinstance(node, exp.Like | exp.ILike):
            return self._like(node)
        if isinstance(node, exp.Escape):
            raise self.unsupported("LIKE … ESCAPE", "Use the % and _ wildcards without escapes; compare with = for "
                                   "an exact text.", node)
        if isinstance(node, exp.Is):
            if isinstance(node.expression, exp.Null):
                return m.IsNull(expr=self.expr(node.this))
            raise self.unsupported("IS TRUE / IS FALSE / IS DISTINCT FROM", "Compare with = TRUE, or use IS NULL.", node)
        if isinstance(node, exp.Exists):
            return m.Exists(plan=self.plan(node.this))
        if isinstance(node, exp.Glob | exp.RegexpLike | exp.SimilarTo):
            raise self.unsupported(f"A {node.key.upper()} pattern", "Use LIKE with % and _ wildcards.", node)
        if isinstance(node, exp.NullSafeEQ | exp.NullSafeNEQ):
            raise self.unsupported("IS [NOT] DISTINCT FROM / <=>", "Compare with = and handle NULL with IS NULL.", node)
        if isinstance(node, exp.Column | exp.Boolean | exp.Func | exp.Cast | exp.Case | exp.Subquery):
            if isinstance(node, exp.Cast) and node.to.this == exp.DataType.Type.BOOLEAN:
                node = _unparen(node.this)  # read as a truth value: the cast the generator writes outside SQLite
            return m.Truth(expr=self.expr(node))  # a boolean column or expression: true rows pass
        raise self.unsupported(f"`{_snippet(node, self.dialect, 40)}` as a condition",
                               "Write a comparison (x = TRUE, x > 0), IN, BETWEEN, LIKE, IS NULL or EXISTS, "
                               "joined by AND / OR / NOT.")

    def _in(self, node: exp.In) -> m.ConditionNode:
        if node.args.get("unnest") or node.args.get("field"):
            raise self.unsupported("IN UNNEST / IN a field", "Use IN (value, …) or IN (SELECT …).", node)
        if isinstance(_unparen(node.this), exp.Tuple):
            raise self.unsupported("A tuple on the left of IN", "Compare one expression: x IN (…), joined by AND.", node)
        query = node.args.get("query")
        if query is not None:
            return m.InSubquery(expr=self.expr(node.this), plan=self.plan(query))
        subject, *values = self._compared([node.this, *node.expressions])
        return m.InList(expr=subject, values=values)

    def _compared(self, nodes: list[exp.Expression]) -> list[m.ExprNode]:
        """Operands compared with one another; beside a date formatted as '%Y-%m', a month written as text
        ('2010-03') is read as the month's first day, as the date is."""
        months = any(_month_text(node) for node in nodes)
        read: list[m.ExprNode] = []
        for node in nodes:
            bare = _unparen(node)
            if months and isinstance(bare, exp.Literal) and bare.is_string and MONTH_TEXT.fullmatch(bare.this):
                read.append(m.Value(value=f"{bare.this}-01"))
            else:
                read.append(self.expr(node))
        return read

    def _like(self, node: exp.Like | exp.ILike) -> m.Like:
        if node.args.get("escape") is not None:
            raise self.unsupported("LIKE … ESCAPE", "Use the % and _ wildcards without escapes.", node)
        subject, pattern = _unparen(node.this), _unparen(node.expression)
        # SQLite's LIKE ignores the case of ASCII letters: so does the plan that says what it means
        case_insensitive = isinstance(node, exp.ILike) or self.dialect == "sqlite"
        if isinstance(node, exp.Like) and isinstance(subject, exp.Lower) and isinstance(pattern, exp.Lower):
            subject, pattern, case_insensitive = subject.this, _unparen(pattern.this), True  # ILIKE where there is none
        if not (isinstance(pattern, exp.Literal) and pattern.is_string):
            read = self._column_or_text(pattern) if isinstance(pattern, exp.Column) else self.expr(pattern)
            if isinstance(read, m.Value) and isinstance(read.value, str):  # SQLite's LIKE "%x%"
                return m.Like(expr=self.expr(subject), pattern=read.value, case_insensitive=case_insensitive)
            return m.Like(expr=self.expr(subject), pattern=read, case_insensitive=case_insensitive)
        text = pattern.this
        if self.dialect in BACKSLASH_ESCAPES_LIKE and "\\" in text:
            if "\\" in text.replace("\\\\", ""):
                raise self.unsupported("A backslash escape in a LIKE pattern",
                                       "Use the % and _ wildcards without escapes (a backslash is a plain character "
                                       "in a plan); compare with = for an exact text.", node)
            text = text.replace("\\\\", "\\")  # the generator doubles a plain backslash here
        return m.Like(expr=self.expr(subject), pattern=text, case_insensitive=case_insensitive)


def _reads_function(name: m.ScalarFunction, *keys: str) -> Callable[[SQLReader, exp.Expression], m.Function]:
    """A reader of a sqlglot function whose arguments are `keys` (those present, in order)."""

    def read(reader: SQLReader, node: exp.Expression) -> m.Function:
        return m.Function(name=name, args=[reader.expr(node.args[k]) for k in keys if node.args.get(k) is not None])

    return read


def _cast_type(to: exp.DataType) -> m.CastType | None:
    """The plan's name for a type cast to, or None for one it lacks."""
    types = exp.DataType.Type
    if to.is_type(*exp.DataType.INTEGER_TYPES):
        return "integer"
    if to.this in (types.DOUBLE, types.FLOAT):
        return "real"
    if to.this in (types.DECIMAL, types.BIGDECIMAL):
        return "numeric"
    if to.is_type(*exp.DataType.TEXT_TYPES):
        return "text"
    if to.this == types.DATE:
        return "date"
    if to.this in DATE_TYPES:
        return "timestamp"
    if to.this == types.BOOLEAN:
        return "boolean"
    return None


EXPR_HANDLERS: dict[type[exp.Expression], Callable[..., m.ExprNode]] = {
    exp.Column: SQLReader._column_or_text,
    exp.Star: SQLReader._star,
    exp.Literal: SQLReader._literal,
    exp.Boolean: lambda self, node: m.Value(value=node.this),
    exp.Null: lambda self, node: m.Value(value=None),
    exp.Neg: SQLReader._neg,
    **dict.fromkeys(ARITHMETIC, SQLReader._arithmetic),
    **dict.fromkeys(AGGREGATES, SQLReader._aggregate),
    exp.Window: SQLReader._window,
    exp.Round: SQLReader._round,
    exp.Coalesce: lambda self, node: m.Function(
        name="coalesce", args=[self.expr(a) for a in [node.this, *node.expressions]]),
    exp.Nullif: lambda self, node: m.Function(name="nullif", args=[self.expr(node.this), self.expr(node.expression)]),
    exp.DPipe: SQLReader._concat,
    exp.Concat: SQLReader._concat,
    **dict.fromkeys(UNARY, SQLReader._unary),
    exp.Case: SQLReader._case,
    exp.If: SQLReader._if,
    exp.Cast: SQLReader._cast,
    exp.Extract: SQLReader._extract,
    **dict.fromkeys((*PART_FUNCTIONS, exp.DayOfWeek), SQLReader._part_function),
    exp.DateTrunc: SQLReader._trunc,
    exp.TimeToStr: SQLReader._time_to_str,
    exp.TimestampTrunc: SQLReader._trunc,
    exp.Anonymous: SQLReader._anonymous,
    exp.Subquery: SQLReader._subquery,
    exp.Substring: _reads_function("substr", "this", "start", "length"),
    exp.Replace: _reads_function("replace", "this", "expression", "replacement"),
    exp.Trim: SQLReader._trim,
    exp.StrPosition: SQLReader._str_position,
    exp.Ceil: _reads_function("ceil", "this"),
    exp.Floor: _reads_function("floor", "this"),
    exp.Sqrt: _reads_function("sqrt", "this"),
    exp.Sign: _reads_function("sign", "this"),
    exp.Pow: _reads_function("power", "this", "expression"),
    exp.Mod: _reads_function("mod", "this", "expression"),
    exp.Date: SQLReader._date,
    exp.ToChar: SQLReader._to_char,
    exp.CurrentDate: lambda self, node: m.Function(name="current_date", args=[]),
    exp.CurrentTimestamp: lambda self, node: m.Function(name="current_timestamp", args=[]),
}
