"""Hypothesis strategies for random, valid PlanModels over a reflected database (built for Chinook).

`World.from_adapter(adapter)` reflects the database once and samples real values (a few text
values per column, the range of each numeric column); `plans(world)` then draws plans that a
correct validator accepts and a correct generator turns into SQL every engine runs:

- FROM one table under an alias (now and then none, or a keyword that must be quoted), and 0–3
  joins that follow declared foreign keys in either direction (inner or left, the reflected key
  pairs, unique aliases; a table appears once, except through a self-referencing key such as
  Employee.ReportsTo);
- either a projection (1–5 items: columns, literals, arithmetic on numbers, ROUND / COALESCE /
  CASE / ABS / NULLIF / lower / upper / length / concat, date_part and date_trunc of datetimes,
  window functions, scalar sub-plans; optional DISTINCT) or an aggregate query (1–2 group keys,
  columns or date parts, also selected; 1–3 aggregates; now and then a window over an aggregate;
  optional HAVING on aggregates or their output aliases);
- an optional WHERE tree (depth ≤ 3) of comparisons, IN, BETWEEN, LIKE / ILIKE, IS NULL, NOT, AND,
  OR with literals of the operand's type; IN sub-plans that follow a foreign key (sometimes
  grouped with HAVING COUNT(*)), [NOT] EXISTS sub-plans correlated on a foreign key, comparisons
  with scalar sub-plans (aggregates or a top-1 row, correlated about half the time); sub-plans may
  join one more table and nest two levels (the inner level uncorrelated, to bound SQLite's work);
- ORDER BY on selected items (by output alias when it has one) with optional NULLS placement,
  optional LIMIT (0–50) and OFFSET (with or without LIMIT);
- names written loosely, as a model might: table and column names in another case, and columns
  without their table where only one table of the plan has them (the validator resolves both).

Every choice shrinks towards the simplest option (no join, a plain column, no WHERE, …), so a
failing example shrinks to a small plan. Types are tracked per expression so that literals,
comparisons, CASE branches and COALESCE arguments agree, and arithmetic cannot overflow a 32-bit
integer or divide by zero: failures are about the validator or the generator, not the data.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Literal

from hypothesis import strategies as st

from nl2sql.datasources.base import Adapter
from nl2sql.datasources.models import SchemaSnapshot
from nl2sql.plan import model as m
from nl2sql.plan.join_keys import dtype_of

Kind = Literal["int", "num", "text", "datetime"]
KIND_OF_DTYPE: dict[str, Kind] = {"integer": "int", "decimal": "num", "float": "num", "text": "text",
                                  "date": "datetime", "datetime": "datetime"}
NUMBER: tuple[Kind, ...] = ("int", "num")
FIRST_DATE, LAST_DATE = date(2007, 1, 1), date(2011, 12, 31)
DATE_PART_RANGES: dict[str, tuple[int, int]] = {
    "year": (2006, 2012), "quarter": (1, 4), "month": (1, 12), "day": (1, 31), "hour": (0, 23),
    "minute": (0, 59), "day_of_week": (0, 6),
}  # fmt: skip
#: Text literals that test escaping and wildcards, besides the sampled values.
ODD_TEXT = ("O'Brien", "", "100%", "a_b", "Ünïcødé", 'say "hi"')
#: Keywords of SQLite, DuckDB or sqlglot that an identifier may spell: reserved ones, ones that only some
#: engines refuse bare (ADD, NOTHING, COMMIT, …) and ones sqlglot cannot read back bare (ALTER, XOR, …).
KEYWORD_NAMES = ("order", "Group", "select", "from", "add", "Commit", "nothing", "escape", "glob", "isnull",
                 "raise", "regexp", "transaction", "alter", "xor", "rlike", "returning", "tablesample", "force",
                 "install", "window", "filter", "qualify", "year", "date", "user", "key", "value", "count")
#: Output aliases that need quoting somewhere (keywords, spaces, mixed case) or are function names.
ODD_OUTPUT_ALIASES = (*KEYWORD_NAMES, "from x", "Total Sales", "rank", "Month", "ünï")
#: Table aliases that need quoting (keywords, a space).
ODD_TABLE_ALIASES = (*KEYWORD_NAMES, "t x")
INT32_MAX = 2**31 - 1
SAMPLES_PER_COLUMN = 6
MAX_SUB_DEPTH = 2
#: Most (outer rows × scanned rows) a correlated sub-plan may cost: SQLite has no index on Chinook's
#: foreign keys, so a sub-plan correlated on one scans its table once per outer row.
CORRELATION_BUDGET = 5_000_000


@dataclass(frozen=True)
class Col:
    """A column of the world: its table, name, kind and nullability."""

    table: str
    name: str
    kind: Kind
    nullable: bool


@dataclass(frozen=True)
class Link:
    """A declared foreign key: `child`'s columns reference `parent`'s, pair by pair."""

    child: str
    parent: str
    pairs: tuple[tuple[str, str], ...]


@dataclass
class World:
    """What the strategies know of the database: tables, typed columns, foreign keys, real values."""

    snapshot: SchemaSnapshot
    columns: dict[str, tuple[Col, ...]]
    links: tuple[Link, ...]
    text_values: dict[tuple[str, str], tuple[str, ...]]
    ranges: dict[tuple[str, str], tuple[float, float]]
    rows: dict[str, int] = field(default_factory=dict)

    @property
    def tables(self) -> list[str]:
        """Table names, sorted (the first shrinks best)."""
        return sorted(self.columns)

    @classmethod
    def from_adapter(cls, adapter: Adapter, snapshot: SchemaSnapshot | None = None) -> World:
        """Reflect (unless given a snapshot) and sample values through an adapter."""
        snapshot = snapshot or adapter.reflect()
        columns: dict[str, tuple[Col, ...]] = {}
        links: list[Link] = []
        text_values: dict[tuple[str, str], tuple[str, ...]] = {}
        ranges: dict[tuple[str, str], tuple[float, float]] = {}
        dialect = adapter.dialect
        for table in snapshot.tables:
            if table.kind != "table":
                continue
            cols = []
            for c in table.columns:
                kind = KIND_OF_DTYPE.get(dtype_of(c.type, dialect))
                if kind is not None:
                    cols.append(Col(table.name, c.name, kind, c.nullable))
            columns[table.name] = tuple(cols)
            for fk in table.foreign_keys:
                links.append(Link(table.name, fk.ref_table, tuple(zip(fk.columns, fk.ref_columns, strict=True))))
        for table_name, cols in columns.items():
            for col in cols:
                name, source = f'"{col.name}"', f'FROM "{table_name}"'
                if col.kind == "text":
                    sql = f"SELECT DISTINCT {name} {source} WHERE {name} IS NOT NULL ORDER BY 1"
                    values = [str(v) for v in adapter.execute(sql, row_limit=100_000, timeout_s=60).frame.iloc[:, 0]]
                    step = max(1, len(values) // SAMPLES_PER_COLUMN)
                    text_values[(table_name, col.name)] = tuple(values[::step][:SAMPLES_PER_COLUMN])
                elif col.kind in NUMBER:
                    sql = f"SELECT MIN({name}), MAX({name}) {source}"
                    low, high = adapter.execute(sql, row_limit=1, timeout_s=60).frame.iloc[0].tolist()
                    ranges[(table_name, col.name)] = (float(low or 0), float(high or 0))
        rows = {t.name: t.row_count or 0 for t in snapshot.tables}
        return cls(snapshot, columns, tuple(links), text_values, ranges, rows)


@dataclass
class Operand:
    """An expression with its kind and a strategy for literals it is sensibly compared with."""

    expr: m.ExprNode
    kind: Kind
    literals: st.SearchStrategy[m.Value]
    text_column: Col | None = None  # set when LIKE patterns can be drawn from its values
    case: Callable[[str], str] = str


@dataclass
class Builder:
    """Draws one plan; holds the aliases used so far so that every alias in the plan is unique."""

    world: World
    draw: Callable[[st.SearchStrategy[Any]], Any]
    used_aliases: set[str] = field(default_factory=set)
    counter: itertools.count = field(default_factory=itertools.count)

    # --- helpers -------------------------------------------------------------------------------

    def chance(self, percent: int) -> bool:
        """True about `percent`% of the time; shrinks to False."""
        return self.draw(st.integers(0, 99)) >= 100 - percent

    def pick(self, options: Sequence[Any]) -> Any:
        """One of `options`; shrinks to the first."""
        return self.draw(st.sampled_from(list(options)))

    def table_alias(self, table: str) -> str:
        """A fresh alias: the table's initials and a number, or now and then a name that needs quoting."""
        if self.chance(8):
            free = [a for a in ODD_TABLE_ALIASES if a.lower() not in self.used_aliases]
            if free:
                alias = self.pick(free)
                self.used_aliases.add(alias.lower())
                return alias
        initials = "".join(ch for ch in table if ch.isupper()).lower() or table[:1].lower()
        while True:
            alias = f"{initials}{next(self.counter)}"
            if alias not in self.used_aliases:
                self.used_aliases.add(alias)
                return alias

    def columns(self, scope: Sequence[tuple[str, str]], kinds: Sequence[Kind] | None = None) -> list[tuple[str, Col]]:
        """(alias, column) pairs of the tables in scope, optionally of some kinds only."""
        return [(alias, col) for alias, table in scope for col in self.world.columns[table]
                if kinds is None or col.kind in kinds]

    def literals(self, col: Col) -> st.SearchStrategy[m.Value]:
        """Literals of a column's kind, from its real values where sensible."""
        if col.kind == "text":
            samples = self.world.text_values.get((col.table, col.name), ()) or ("x",)
            return st.sampled_from(samples + ODD_TEXT).map(lambda v: m.Value(value=v))
        if col.kind == "datetime":
            return dates()
        low, high = self.world.ranges.get((col.table, col.name), (0.0, 100.0))
        if col.kind == "int":
            return st.integers(int(low) - 2, int(high) + 2).map(lambda v: m.Value(value=v))
        cents = st.integers(int(low * 100) - 100, int(high * 100) + 100).map(lambda v: m.Value(value=v / 100))
        return cents | st.integers(int(low), int(high) + 1).map(lambda v: m.Value(value=v))

    def ref(self, alias: str, col: Col) -> m.ColumnRef:
        return m.ColumnRef(table=alias, column=col.name)

    def column_operand(self, alias: str, col: Col) -> Operand:
        return Operand(self.ref(alias, col), col.kind, self.literals(col),
                       text_column=col if col.kind == "text" else None)

    # --- tables and joins ----------------------------------------------------------------------

    def tables(self, first: str | None = None, max_joins: int = 3, *, to_parent_only: bool = False) -> tuple[
            m.TableRef, list[m.Join], list[tuple[str, str]]]:
        """FROM (`first`, or any table), 0–`max_joins` foreign-key joins, and the scope they make:
        (alias, table) pairs, FROM first. `to_parent_only` keeps to many-to-one joins (key lookups)."""
        if first is None and self.chance(10):  # a top-level FROM without alias: columns name the table
            first = self.pick(self.world.tables)
            self.used_aliases.add(first.lower())
            scope = [(first, first)]
            from_ = m.TableRef(table=first)
        else:
            first = first or self.pick(self.world.tables)
            scope = [(self.table_alias(first), first)]
            from_ = m.TableRef(table=first, alias=scope[0][0])
        joins: list[m.Join] = []
        for _ in range(self.draw(st.integers(0, max_joins))):
            used = {table for _, table in scope}
            options = []
            for alias, table in scope:
                for link in self.world.links:
                    if link.child == table and (link.parent not in used or link.parent == link.child):
                        options.append((alias, link, "to_parent"))
                    if link.parent == table and link.parent != link.child and link.child not in used \
                            and not to_parent_only:
                        options.append((alias, link, "to_child"))
            if not options:
                break
            alias, link, direction = self.pick(options)
            new_table = link.parent if direction == "to_parent" else link.child
            new_alias = self.table_alias(new_table)
            keys = []
            for child_col, parent_col in link.pairs:
                new_col, old_col = (parent_col, child_col) if direction == "to_parent" else (child_col, parent_col)
                new_ref = m.ColumnRef(table=new_alias, column=new_col)
                old_ref = m.ColumnRef(table=alias, column=old_col)
                left, right = (old_ref, new_ref) if self.chance(50) else (new_ref, old_ref)
                keys.append(m.JoinKey(left=left, right=right))
            joins.append(m.Join(type=self.pick(["inner", "left"]), table=m.TableRef(table=new_table, alias=new_alias),
                                on=keys))
            scope.append((new_alias, new_table))
        return from_, joins, scope

    def linked(self, scope: Sequence[tuple[str, str]], *, single: bool = False,
               correlated: bool = False) -> list[tuple[str, Link, str]]:
        """(outer alias, link, direction) for every foreign key touching a table in scope; when
        `correlated`, only those whose scan per outer row stays within CORRELATION_BUDGET."""
        outer_rows = max(self.world.rows.get(table, 0) for _, table in scope)
        out = []
        for alias, table in scope:
            for link in self.world.links:
                if single and len(link.pairs) != 1:
                    continue
                if link.child == table:
                    out.append((alias, link, "to_parent"))  # the parent's key: a lookup
                if link.parent == table and (
                        not correlated or outer_rows * self.world.rows.get(link.child, 0) <= CORRELATION_BUDGET):
                    out.append((alias, link, "to_child"))
        return out

    # --- expressions ---------------------------------------------------------------------------

    def operand(self, scope: Sequence[tuple[str, str]], kinds: Sequence[Kind] | None = None) -> Operand:
        """Something to compare: a column (mostly), or a function, date part or arithmetic of one."""
        cols = self.columns(scope, kinds)
        alias, col = self.pick(cols)
        base = self.column_operand(alias, col)
        if not self.chance(35):
            return base
        ref = base.expr
        if col.kind == "text":
            how = self.pick(["lower", "upper", "length", "coalesce"])
            if how == "length":
                if kinds is not None and "int" not in kinds:
                    return base
                return Operand(m.Function(name="length", args=[ref]), "int", ints(0, 80))
            if how == "coalesce":
                return Operand(m.Function(name="coalesce", args=[ref, self.draw(base.literals)]), "text",
                               base.literals, text_column=col)
            change = str.lower if how == "lower" else str.upper
            return Operand(m.Function(name=how, args=[ref]), "text", base.literals.map(
                lambda v: m.Value(value=change(v.value))), text_column=col, case=change)
        if col.kind == "datetime":
            if self.chance(50) and (kinds is None or "int" in kinds):
                part = self.pick(list(DATE_PART_RANGES))
                return Operand(m.DatePartOf(part=part, arg=ref), "int", ints(*DATE_PART_RANGES[part]))
            return Operand(m.DateTrunc(unit=self.pick(["year", "quarter", "month", "week", "day"]), arg=ref),
                           "datetime", dates())
        return Operand(self.arithmetic(alias, col), "num" if col.kind == "num" else col.kind, base.literals)

    def arithmetic(self, alias: str, col: Col) -> m.Arithmetic:
        """col op literal (no overflow, no division by zero), now and then nested or col op col."""
        low, high = self.world.ranges.get((col.table, col.name), (0.0, 100.0))
        ref = self.ref(alias, col)
        op = self.pick(["+", "-", "*", "/"])
        if op == "*" and max(abs(low), abs(high)) * 10 > INT32_MAX:
            op = "+"
        if op == "/":
            right: m.ExprNode = m.Value(value=self.pick([2, 10, 3, 0.5, -4, 100]))
        elif op == "*":
            right = m.Value(value=self.pick([2, 10, 1.5, -1, 0]))
        else:
            right = m.Value(value=self.pick([1, 100, 0.25, -7, 1000]))
        node = m.Arithmetic(op=op, left=ref, right=right)
        if self.chance(25):  # nest: (col op lit) op lit, or lit op (col op lit)
            outer_op = self.pick(["-", "+", "*"])
            lit = m.Value(value=self.pick([1, 2, -3]))
            node = m.Arithmetic(op=outer_op, left=node, right=lit) if self.chance(50) else \
                m.Arithmetic(op=outer_op, left=lit, right=node)
        return node

    def select_expr(self, scope: Sequence[tuple[str, str]], *, windows: bool, sub_depth: int) -> m.ExprNode:
        """One projection item."""
        has = {kind: bool(self.columns(scope, [kind])) for kind in ("int", "num", "text", "datetime")}
        options = ["column", "column", "column", "arithmetic", "round", "coalesce", "case", "abs", "nullif",
                   "literal"]
        if has["text"]:
            options += ["text_function", "concat"]
        if has["datetime"]:
            options += ["date_part", "date_trunc"]
        if windows:
            options += ["window", "window"]
        if sub_depth < MAX_SUB_DEPTH:
            options += ["scalar_subquery"]
        choice = self.pick(options)
        if choice == "column":
            return self.ref(*self.pick(self.columns(scope)))
        if choice == "arithmetic":
            return self.arithmetic(*self.pick(self.columns(scope, NUMBER)))
        if choice == "round":
            alias, col = self.pick(self.columns(scope, NUMBER))
            arg: m.ExprNode = self.arithmetic(alias, col) if self.chance(50) else self.ref(alias, col)
            digits = [] if self.chance(30) else [m.Value(value=self.draw(st.integers(0, 3)))]
            return m.Function(name="round", args=[arg, *digits])
        if choice == "coalesce":
            alias, col = self.pick(self.columns(scope, ["int", "num", "text"]))
            fallback = [self.draw(self.literals(col)) for _ in range(self.draw(st.integers(1, 2)))]
            return m.Function(name="coalesce", args=[self.ref(alias, col), *fallback])
        if choice == "case":
            return self.case(scope)
        if choice == "literal":
            return m.Value(value=self.pick(["label", 7, 2.5, None, True, -1, "it's"]))
        if choice == "abs":
            alias, col = self.pick(self.columns(scope, NUMBER))
            return m.Function(name="abs", args=[self.arithmetic(alias, col)])
        if choice == "nullif":
            alias, col = self.pick(self.columns(scope, ["int", "num", "text"]))
            return m.Function(name="nullif", args=[self.ref(alias, col), self.draw(self.literals(col))])
        if choice == "text_function":
            name = self.pick(["lower", "upper", "length"])
            return m.Function(name=name, args=[self.ref(*self.pick(self.columns(scope, ["text"])))])
        if choice == "concat":
            texts = self.columns(scope, ["text"])
            args: list[m.ExprNode] = [self.ref(*self.pick(texts))]
            if self.chance(50):
                args.append(m.Value(value=self.pick([" ", ", ", "'", "-"])))
            args.append(self.ref(*self.pick(texts)))
            return m.Function(name="concat", args=args)
        if choice == "date_part":
            ref = self.ref(*self.pick(self.columns(scope, ["datetime"])))
            return m.DatePartOf(part=self.pick(list(DATE_PART_RANGES)), arg=ref)
        if choice == "date_trunc":
            ref = self.ref(*self.pick(self.columns(scope, ["datetime"])))
            return m.DateTrunc(unit=self.pick(["year", "quarter", "month", "week", "day"]), arg=ref)
        if choice == "window":
            return self.window(scope)
        return self.scalar_subquery(scope, self.pick(["number", "number", "datetime"]), sub_depth)[0]

    def case(self, scope: Sequence[tuple[str, str]]) -> m.Case:
        """CASE with 1–2 branches whose results all have one kind."""
        kind = self.pick(["text", "int", "num"])
        same = self.columns(scope, [kind])

        def result() -> m.ExprNode:
            if same and self.chance(30):
                return self.ref(*self.pick(same))
            if kind == "text":
                return m.Value(value=self.pick(["low", "high", "other", "it's"]))
            return m.Value(value=self.draw(st.integers(-5, 100)) if kind == "int" else self.pick([0.5, 1.25, 10.0]))

        whens = [m.When(condition=self.leaf(scope, sub_depth=MAX_SUB_DEPTH), then=result())
                 for _ in range(self.draw(st.integers(1, 2)))]
        return m.Case(whens=whens, otherwise=result() if self.chance(70) else None)

    def order_item(self, expr: m.ExprNode) -> m.OrderItem:
        return m.OrderItem(expr=expr, direction=self.pick(["asc", "desc"]), nulls=self.pick([None, "first", "last"]))

    def window(self, scope: Sequence[tuple[str, str]]) -> m.Window:
        """A ranking window (with ORDER BY) or an aggregate over a window."""
        func = self.pick(["row_number", "sum", "rank", "dense_rank", "avg", "count", "min", "max"])
        every = self.columns(scope)
        partition = [self.ref(*c) for c in self.draw(st.lists(st.sampled_from(every), max_size=2, unique=True))]
        arg: m.ExprNode | None = None
        if func in ("sum", "avg"):
            arg = self.ref(*self.pick(self.columns(scope, NUMBER)))
        elif func in ("min", "max") or (func == "count" and self.chance(50)):
            arg = self.ref(*self.pick(every))
        low = 1 if func in ("row_number", "rank", "dense_rank") else 0
        keys = self.draw(st.lists(st.sampled_from(every), min_size=low, max_size=2, unique=True))
        return m.Window(func=func, arg=arg, partition_by=partition, order_by=[self.order_item(self.ref(*c))
                                                                              for c in keys])

    def output_aliases(self, count: int, scope: Sequence[tuple[str, str]]) -> list[str | None]:
        """An alias (or none) per item: unique, never a column name of the tables in scope."""
        taken = {col.name.lower() for _, col in self.columns(scope)}
        out: list[str | None] = []
        for i in range(count):
            if not self.chance(50):
                out.append(None)
                continue
            candidates = [f"c{i}", *ODD_OUTPUT_ALIASES] if self.chance(30) else [f"c{i}", f"out_{i}"]
            free = [a for a in candidates if a.lower() not in taken]
            alias = self.pick(free)
            taken.add(alias.lower())
            out.append(alias)
        return out

    # --- aggregates ----------------------------------------------------------------------------

    def aggregate(self, scope: Sequence[tuple[str, str]]) -> tuple[m.ExprNode, st.SearchStrategy[m.Value]]:
        """An aggregate (sometimes rounded) and literals it is sensibly compared with."""
        func = self.pick(["count", "sum", "avg", "min", "max", "count_distinct"])
        if func == "count":
            node: m.ExprNode = m.Aggregate(func="count")
            return node, ints(0, 30)
        if func == "count_distinct":
            alias, col = self.pick(self.columns(scope))
            return m.Aggregate(func="count", arg=self.ref(alias, col), distinct=True), ints(0, 30)
        if func in ("sum", "avg"):
            alias, col = self.pick(self.columns(scope, NUMBER))
            arg: m.ExprNode = self.ref(alias, col)
            if self.chance(20):
                arg = self.arithmetic(alias, col)
            node = m.Aggregate(func=func, arg=arg, distinct=self.chance(10))
            if func == "avg" and self.chance(30):
                node = m.Function(name="round", args=[node, m.Value(value=2)])
            lits = self.literals(col)
            return node, lits if func == "avg" else lits | ints(0, 10_000)
        alias, col = self.pick(self.columns(scope))
        return m.Aggregate(func=func, arg=self.ref(alias, col)), self.literals(col)

    def having(self, scope: Sequence[tuple[str, str]], depth: int) -> m.ConditionNode:
        """A condition on aggregates."""
        if depth > 0 and self.chance(30):
            kind = self.pick(["and", "or", "not"])
            if kind == "not":
                return m.Not(condition=self.having(scope, depth - 1))
            parts = [self.having(scope, depth - 1) for _ in range(self.draw(st.integers(1, 3)))]
            return m.And(conditions=parts) if kind == "and" else m.Or(conditions=parts)
        expr, lits = self.aggregate(scope)
        if self.chance(20):
            return m.Between(expr=expr, low=self.draw(lits), high=self.draw(lits), negated=self.chance(30))
        return m.Comparison(op=self.pick(["=", "<>", "<", "<=", ">", ">="]), left=expr, right=self.draw(lits))

    # --- conditions ----------------------------------------------------------------------------

    def condition(self, scope: Sequence[tuple[str, str]], depth: int, sub_depth: int) -> m.ConditionNode:
        """A boolean tree of depth ≤ `depth` (a leaf is depth 1)."""
        if depth <= 1 or not self.chance(40):
            return self.leaf(scope, sub_depth)
        kind = self.pick(["and", "or", "not"])
        if kind == "not":
            return m.Not(condition=self.condition(scope, depth - 1, sub_depth))
        parts = [self.condition(scope, depth - 1, sub_depth) for _ in range(self.draw(st.integers(1, 3)))]
        return m.And(conditions=parts) if kind == "and" else m.Or(conditions=parts)

    def leaf(self, scope: Sequence[tuple[str, str]], sub_depth: int) -> m.ConditionNode:
        """One comparison, IN, BETWEEN, LIKE, IS NULL, or (while nesting allows) a sub-plan condition."""
        options = ["compare", "compare", "in", "between", "is_null"]
        if self.columns(scope, ["text"]):
            options += ["like", "like"]
        if sub_depth < MAX_SUB_DEPTH:
            options += ["in_subquery", "scalar"] + (["exists"] if sub_depth == 0 else [])
        choice = self.pick(options)
        if choice == "in_subquery":
            return self.in_subquery(scope, sub_depth)
        if choice == "exists":
            return self.exists(scope, sub_depth)
        if choice == "scalar":
            return self.scalar_comparison(scope, sub_depth)
        if choice == "like":
            return self.like(scope)
        if choice == "is_null":
            return m.IsNull(expr=self.ref(*self.pick(self.columns(scope))), negated=self.chance(50))
        operand = self.operand(scope)
        if choice == "in":
            values = self.draw(st.lists(operand.literals, min_size=1, max_size=4))
            return m.InList(expr=operand.expr, values=values, negated=self.chance(30))
        if choice == "between":
            low, high = self.draw(operand.literals), self.draw(operand.literals)
            if isinstance(low.value, int | float) and isinstance(high.value, int | float) and low.value > high.value:
                low, high = high, low
            return m.Between(expr=operand.expr, low=low, high=high, negated=self.chance(30))
        op = self.pick(["=", "<>", "<", "<=", ">", ">="])
        same = [c for c in self.columns(scope, [operand.kind])
                if not (isinstance(operand.expr, m.ColumnRef) and operand.expr.column == c[1].name)]
        if same and self.chance(20):
            right: m.ExprNode = self.ref(*self.pick(same))
        else:
            right = self.draw(operand.literals)
        left = operand.expr
        if self.chance(20):
            left, right = right, left
        return m.Comparison(op=op, left=left, right=right)

    def like(self, scope: Sequence[tuple[str, str]]) -> m.Like:
        """[NOT] LIKE / ILIKE with a pattern cut from a real value of the column."""
        operand = self.operand(scope, ["text"])
        col = operand.text_column
        samples = self.world.text_values.get((col.table, col.name), ()) if col else ()
        value = self.pick(samples or ("x",))
        shape = self.pick(["prefix", "contains", "exact", "underscore", "suffix", "odd"])
        cut = max(1, len(value) // 2)
        if shape == "prefix":
            pattern = value[:cut] + "%"
        elif shape == "contains":
            pattern = "%" + value[cut // 2: cut // 2 + 3] + "%"
        elif shape == "suffix":
            pattern = "%" + value[-cut:]
        elif shape == "underscore":
            pattern = value[:1] + "_" * max(0, len(value) - 1)
        elif shape == "odd":
            pattern = self.pick(["%'%", "%", "_", "%\\%", "O'%"])
        else:
            pattern = value
        insensitive = self.chance(40)
        pattern = pattern.swapcase() if insensitive else operand.case(pattern)
        return m.Like(expr=operand.expr, pattern=pattern, case_insensitive=insensitive, negated=self.chance(30))

    # --- sub-plans -----------------------------------------------------------------------------

    def sub_plan(self, table: str, select: Callable[[str], list[m.SelectItem]],
                 correlation: Sequence[tuple[str, str, str]], sub_depth: int) -> m.PlanModel:
        """A sub-plan over `table` (now and then joined to one more table): `correlation` holds
        (sub column, outer alias, outer column) equalities."""
        # SQLite has no indexes on Chinook's foreign keys: a sub-plan joins many-to-one only, so that a
        # correlated sub-plan costs at most a scan per outer row (and nested ones are not correlated).
        from_, joins, scope = self.tables(table, max_joins=1 if self.chance(20) else 0, to_parent_only=True)
        alias = scope[0][0]
        conditions: list[m.ConditionNode] = []
        for sub_col, outer_alias, outer_col in correlation:
            inner = m.ColumnRef(table=alias, column=sub_col)
            outer = m.ColumnRef(table=outer_alias, column=outer_col)
            left, right = (inner, outer) if self.chance(50) else (outer, inner)
            conditions.append(m.Comparison(op="=", left=left, right=right))
        if self.chance(40):
            conditions.append(self.condition(scope, depth=2, sub_depth=sub_depth + 1))
        where = None if not conditions else conditions[0] if len(conditions) == 1 else m.And(conditions=conditions)
        return m.PlanModel(select=select(alias), from_=from_, joins=joins, where=where, distinct=self.chance(15))

    def in_subquery(self, scope: Sequence[tuple[str, str]], sub_depth: int) -> m.InSubquery:
        """outer key [NOT] IN (sub-plan selecting the key it references, or that references it)."""
        alias, link, direction = self.pick(self.linked(scope, single=True))
        child_col, parent_col = link.pairs[0]
        if direction == "to_parent":
            outer_col, sub_table, sub_col = child_col, link.parent, parent_col
        else:
            outer_col, sub_table, sub_col = parent_col, link.child, child_col
        plan = self.sub_plan(sub_table, lambda a: [m.SelectItem(expr=m.ColumnRef(table=a, column=sub_col))],
                             [], sub_depth)
        if self.chance(25):  # keys that occur more than n times
            plan.group_by = [plan.select[0].expr.model_copy(deep=True)]
            plan.having = m.Comparison(op=self.pick([">", ">="]), left=m.Aggregate(func="count"),
                                       right=self.draw(ints(0, 5)))
        return m.InSubquery(expr=m.ColumnRef(table=alias, column=outer_col), plan=plan, negated=self.chance(40))

    def exists(self, scope: Sequence[tuple[str, str]], sub_depth: int) -> m.Exists:
        """[NOT] EXISTS (sub-plan correlated with an outer table on a foreign key)."""
        alias, link, direction = self.pick(self.linked(scope, correlated=True))
        if direction == "to_parent":
            sub_table = link.parent
            correlation = [(parent_col, alias, child_col) for child_col, parent_col in link.pairs]
        else:
            sub_table = link.child
            correlation = [(child_col, alias, parent_col) for child_col, parent_col in link.pairs]
        columns = self.world.columns[sub_table]

        def select(a: str) -> list[m.SelectItem]:
            if self.chance(30):
                return [m.SelectItem(expr=m.Value(value=1))]
            return [m.SelectItem(expr=m.ColumnRef(table=a, column=self.pick(columns).name))]

        return m.Exists(plan=self.sub_plan(sub_table, select, correlation, sub_depth), negated=self.chance(50))

    def scalar_subquery(self, scope: Sequence[tuple[str, str]], category: str,
                        sub_depth: int) -> tuple[m.ScalarSubquery, Kind]:
        """(SELECT agg(…) FROM t …), correlated on a foreign key about half the time; its kind."""
        kinds: tuple[Kind, ...] = NUMBER if category == "number" else ("datetime",)
        linked = [o for o in self.linked(scope, correlated=True)
                  if any(c.kind in kinds for c in self.world.columns[o[1].parent if o[2] == "to_parent" else o[1].child])]
        correlation: list[tuple[str, str, str]] = []
        if linked and sub_depth == 0 and self.chance(50):
            alias, link, direction = self.pick(linked)
            if direction == "to_parent":
                table = link.parent
                correlation = [(parent_col, alias, child_col) for child_col, parent_col in link.pairs]
            else:
                table = link.child
                correlation = [(child_col, alias, parent_col) for child_col, parent_col in link.pairs]
        else:
            table = self.pick([t for t in self.world.tables if any(c.kind in kinds for c in self.world.columns[t])])
        cols = [c for c in self.world.columns[table] if c.kind in kinds]
        if category == "number":
            func = self.pick(["avg", "count", "sum", "min", "max", "top"])
        else:
            func = self.pick(["max", "min", "top"])
        kind: Kind = "int" if func == "count" else "num" if category == "number" else "datetime"

        def select(a: str) -> list[m.SelectItem]:
            if func == "count":
                return [m.SelectItem(expr=m.Aggregate(func="count"))]
            column = m.ColumnRef(table=a, column=self.pick(cols).name)
            return [m.SelectItem(expr=column if func == "top" else m.Aggregate(func=func, arg=column))]

        plan = self.sub_plan(table, select, correlation, sub_depth)
        if func == "top":  # one value: the first row in some order
            plan.order_by = [self.order_item(plan.select[0].expr.model_copy(deep=True))]
            plan.limit = 1
        return m.ScalarSubquery(plan=plan), kind

    def scalar_comparison(self, scope: Sequence[tuple[str, str]], sub_depth: int) -> m.Comparison:
        """An outer number (or datetime) compared with a scalar sub-plan."""
        category = "datetime" if self.columns(scope, ["datetime"]) and self.chance(25) else "number"
        kinds: tuple[Kind, ...] = NUMBER if category == "number" else ("datetime",)
        subquery, _ = self.scalar_subquery(scope, category, sub_depth)
        outer = self.ref(*self.pick(self.columns(scope, kinds)))
        left, right = (outer, subquery) if self.chance(75) else (subquery, outer)
        return m.Comparison(op=self.pick(["<", ">", "=", "<>", "<=", ">="]), left=left, right=right)

    # --- plans ---------------------------------------------------------------------------------

    def plan(self) -> m.PlanModel:
        """A whole top-level plan."""
        from_, joins, scope = self.tables()
        group_by: list[m.ExprNode] = []
        having = None
        if self.chance(40):
            select, group_by, named = self.aggregate_select(scope)
            if self.chance(40):
                having = self.having(scope, depth=2)
                if named and self.chance(30):  # on an aggregate's output alias (SQLite and DuckDB allow it)
                    alias, lits = self.pick(named)
                    on_alias = m.Comparison(op=self.pick([">", "<", ">=", "<>"]),
                                            left=m.ColumnRef(table=None, column=alias), right=self.draw(lits))
                    having = m.And(conditions=[having, on_alias])
        else:
            count = self.draw(st.integers(1, 5))
            aliases = self.output_aliases(count, scope)
            select = [m.SelectItem(expr=self.select_expr(scope, windows=True, sub_depth=0), alias=alias)
                      for alias in aliases]
        where = self.condition(scope, depth=3, sub_depth=0) if self.chance(60) else None
        order_by = []
        if self.chance(60):
            chosen = self.draw(st.lists(st.integers(0, len(select) - 1), min_size=1, max_size=3, unique=True))
            for i in chosen:
                item = select[i]
                if isinstance(item.expr, m.Value) and not item.alias:
                    continue  # ORDER BY <literal> is positional: a known gap, see test_plan_properties
                expr = m.ColumnRef(table=None, column=item.alias) if item.alias else item.expr.model_copy(deep=True)
                order_by.append(self.order_item(expr))
        limit = self.draw(st.integers(0, 50)) if self.chance(50) else None
        offset = self.draw(st.integers(0, 20)) if self.chance(25) else None
        plan = m.PlanModel(select=select, from_=from_, joins=joins, where=where, group_by=group_by, having=having,
                           order_by=order_by, limit=limit, offset=offset, distinct=self.chance(20))
        self.loosen(plan)
        return plan

    def loosen(self, plan: m.PlanModel) -> None:
        """Write some names as a model might: table and column names in another case, and columns
        unqualified where one table in the plan's own FROM/JOINs has them (the validator resolves both)."""
        local = {ref.name_in_scope.lower(): ref.table for ref in plan.tables()}
        holders = Counter(col.name.lower() for table in local.values() for col in self.world.columns[table])

        def recase(name: str) -> str:
            return self.pick([name.lower(), name.upper(), name.swapcase()]) if self.chance(8) else name

        def visit(node: Any) -> None:
            if isinstance(node, m.PlanModel):
                self.loosen(node)
            elif isinstance(node, m.ColumnRef):
                if node.table is None:
                    return  # an output alias
                if node.table.lower() in local and holders[node.column.lower()] == 1 and self.chance(12):
                    node.table = None
                else:
                    node.table = recase(node.table)
                node.column = recase(node.column)
            elif isinstance(node, m.Node):
                for name in type(node).model_fields:
                    visit(getattr(node, name))
            elif isinstance(node, list):
                for item in node:
                    visit(item)

        for clause in (plan.select, plan.where, plan.group_by, plan.having, plan.order_by):
            visit(clause)
        for ref in plan.tables():
            ref.table = recase(ref.table)

    def aggregate_select(self, scope: Sequence[tuple[str, str]]) -> tuple[
            list[m.SelectItem], list[m.ExprNode], list[tuple[str, st.SearchStrategy[m.Value]]]]:
        """1–2 group keys (selected too), 1–3 aggregates, now and then a window over an aggregate, in some
        order; also the (output alias, literals) of the aliased aggregates."""
        keys: list[m.ExprNode] = []
        for _ in range(self.draw(st.integers(1, 2))):
            alias, col = self.pick(self.columns(scope))
            key: m.ExprNode = self.ref(alias, col)
            if col.kind == "datetime" and self.chance(50):
                key = m.DatePartOf(part=self.pick(list(DATE_PART_RANGES)), arg=key) if self.chance(60) else \
                    m.DateTrunc(unit=self.pick(["year", "quarter", "month", "week", "day"]), arg=key)
            if key not in keys:
                keys.append(key)
        aggregates = [self.aggregate(scope) for _ in range(self.draw(st.integers(1, 3)))]
        exprs = [k.model_copy(deep=True) for k in keys] + [a for a, _ in aggregates]
        if self.chance(20):
            exprs.append(self.window_over_aggregate(scope, keys))
        exprs = self.draw(st.permutations(exprs))
        aliases = self.output_aliases(len(exprs), scope)
        lits = {id(a): lit for a, lit in aggregates}
        named = [(alias, lits[id(e)]) for e, alias in zip(exprs, aliases, strict=True) if alias and id(e) in lits]
        return [m.SelectItem(expr=e, alias=a) for e, a in zip(exprs, aliases, strict=True)], keys, named

    def window_over_aggregate(self, scope: Sequence[tuple[str, str]], keys: list[m.ExprNode]) -> m.Window:
        """RANK() OVER (ORDER BY agg) or SUM(agg) OVER (…), partitioned by group keys only."""
        partition = [k.model_copy(deep=True) for k in keys[:1]] if len(keys) > 1 and self.chance(50) else []
        if self.chance(60):
            order = [self.order_item(self.aggregate(scope)[0])]
            return m.Window(func=self.pick(["rank", "dense_rank", "row_number"]), partition_by=partition,
                            order_by=order)
        return m.Window(func=self.pick(["sum", "max", "min"]), arg=m.Aggregate(func="count"), partition_by=partition)


def ints(low: int, high: int) -> st.SearchStrategy[m.Value]:
    """Integer literals in [low, high]."""
    return st.integers(low, high).map(lambda v: m.Value(value=v))


def dates() -> st.SearchStrategy[m.Value]:
    """'YYYY-MM-DD' literals between 2007 and 2011."""
    return st.dates(FIRST_DATE, LAST_DATE).map(lambda d: m.Value(value=d.isoformat()))


def plans(world: World) -> st.SearchStrategy[m.PlanModel]:
    """Random valid top-level plans over `world`."""

    @st.composite
    def build(draw: Callable[[st.SearchStrategy[Any]], Any]) -> m.PlanModel:
        return Builder(world, draw).plan()

    return build()


def plan_tables(plan: m.PlanModel) -> set[str]:
    """Lower-cased names of every table the plan reads: FROM, joins, and all sub-plans, walked independently."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, m.PlanModel):
            found.update(ref.table.lower() for ref in node.tables())
        if isinstance(node, m.Node):
            for name in type(node).model_fields:
                walk(getattr(node, name))
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(plan)
    return found
