"""PlanModel: the typed query plan a model emits as structured output, and SQL is generated from.

A plan is a tree: expressions (`Expr`) and conditions (`Condition`) are tagged unions keyed by
`kind`; sub-plans appear in IN / EXISTS conditions and as scalar sub-queries, and may refer to
the aliases of the plans around them (correlation). Date parts and truncation are portable
operations that the generator renders per dialect.

>>> plan = PlanModel.model_validate({
...     "select": [{"expr": {"kind": "column", "table": None, "column": "Name"}, "alias": None}],
...     "from": {"table": "Genre", "alias": None}})
>>> plan.from_.table
'Genre'
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

AggregateFunction = Literal["count", "sum", "avg", "min", "max"]
WindowFunction = Literal["row_number", "rank", "dense_rank", "sum", "avg", "count", "min", "max"]
ScalarFunction = Literal[
    "round", "coalesce", "abs", "lower", "upper", "length", "nullif", "concat",
    # text
    "substr", "replace", "trim", "ltrim", "rtrim", "instr",
    # numbers
    "ceil", "floor", "power", "mod", "sqrt", "sign",
    # dates
    "date", "datetime", "days_between", "format_date", "current_date", "current_timestamp",
]
CastType = Literal["integer", "real", "numeric", "text", "date", "timestamp", "boolean"]
SetOperator = Literal["union", "union_all", "intersect", "except"]
DatePart = Literal["year", "quarter", "month", "day", "hour", "minute", "day_of_week"]
TruncUnit = Literal["year", "quarter", "month", "week", "day"]
ComparisonOp = Literal["=", "<>", "<", "<=", ">", ">="]
ArithmeticOp = Literal["+", "-", "*", "/"]


class Node(BaseModel):
    """Base of every plan node: strict, so a model's stray key is an error it can fix."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# --- expressions -------------------------------------------------------------------------------


class ColumnRef(Node):
    """A column of a table in scope (by alias, or table name), or a SELECT alias when `table` is null."""

    kind: Literal["column"] = "column"
    table: str | None = Field(description="Alias (or name) of a table in FROM/JOIN, of this or an outer plan.")
    column: str


class Value(Node):
    """A literal: text, number, boolean or null. Dates are text such as '2011-06-30'."""

    kind: Literal["literal"] = "literal"
    value: str | int | float | bool | None


class Aggregate(Node):
    """An aggregate; `arg` null means COUNT(*)."""

    kind: Literal["aggregate"] = "aggregate"
    func: AggregateFunction
    arg: Expr | None = None
    distinct: bool = False


class Arithmetic(Node):
    """left op right."""

    kind: Literal["arithmetic"] = "arithmetic"
    op: ArithmeticOp
    left: Expr
    right: Expr


class Function(Node):
    """A scalar function: round(x, digits), coalesce(a, b, …), abs, lower, upper, length, nullif, concat(a, b, …);
    text: substr(x, start[, length]) (1-based), replace(x, from, to), trim, ltrim, rtrim, instr(x, part) (1-based
    position of part in x, 0 when absent); numbers: ceil, floor, power(x, y), mod(x, y), sqrt, sign; dates:
    date(x) (the day of a timestamp), datetime(x), days_between(start, end) (end − start in days, fractional),
    format_date(x, '%Y-%m') (strftime's codes), current_date(), current_timestamp()."""

    kind: Literal["function"] = "function"
    name: ScalarFunction
    args: list[Expr]


class Cast(Node):
    """CAST(arg AS type), to a standard type (each dialect writes its own name for it)."""

    kind: Literal["cast"] = "cast"
    arg: Expr
    to: CastType


class Star(Node):
    """`*` or `t.*` in SELECT: every column of the tables in scope (or of `table`) that the caller may read, listed
    by the validator."""

    kind: Literal["star"] = "star"
    table: str | None = None


class When(Node):
    """One branch of a CASE."""

    condition: Condition
    then: Expr


class Case(Node):
    """CASE WHEN … THEN … ELSE … END."""

    kind: Literal["case"] = "case"
    whens: list[When]
    otherwise: Expr | None = None


class DatePartOf(Node):
    """A part of a date or timestamp as a number (year 2011, month 1–12, day_of_week 0=Sunday–6)."""

    kind: Literal["date_part"] = "date_part"
    part: DatePart
    arg: Expr


class DateTrunc(Node):
    """A date or timestamp truncated to the start of its year, quarter, month, week (Monday) or day."""

    kind: Literal["date_trunc"] = "date_trunc"
    unit: TruncUnit
    arg: Expr


class OrderItem(Node):
    """One ORDER BY key."""

    expr: Expr
    direction: Literal["asc", "desc"] = "asc"
    nulls: Literal["first", "last"] | None = None


class Window(Node):
    """A window function: func(arg) OVER (PARTITION BY … ORDER BY …)."""

    kind: Literal["window"] = "window"
    func: WindowFunction
    arg: Expr | None = None
    partition_by: list[Expr] = Field(default_factory=list)
    order_by: list[OrderItem] = Field(default_factory=list)


class ScalarSubquery(Node):
    """A sub-plan returning one value (one row, one column), used as an expression."""

    kind: Literal["subquery"] = "subquery"
    plan: PlanModel


ExprNode = (ColumnRef | Value | Aggregate | Arithmetic | Function | Cast | Case | DatePartOf | DateTrunc | Window
            | ScalarSubquery | Star)
Expr = Annotated[ExprNode, Field(discriminator="kind")]


# --- conditions --------------------------------------------------------------------------------


class Comparison(Node):
    """left op right."""

    kind: Literal["compare"] = "compare"
    op: ComparisonOp
    left: Expr
    right: Expr


class InList(Node):
    """expr [NOT] IN (values…)."""

    kind: Literal["in"] = "in"
    expr: Expr
    values: list[Expr]
    negated: bool = False


class Between(Node):
    """expr [NOT] BETWEEN low AND high."""

    kind: Literal["between"] = "between"
    expr: Expr
    low: Expr
    high: Expr
    negated: bool = False


class Like(Node):
    """expr [NOT] LIKE / ILIKE pattern (% and _ wildcards): a text, or an expression that makes one."""

    kind: Literal["like"] = "like"
    expr: Expr
    pattern: str | Expr
    case_insensitive: bool = False
    negated: bool = False


class IsNull(Node):
    """expr IS [NOT] NULL."""

    kind: Literal["is_null"] = "is_null"
    expr: Expr
    negated: bool = False


class And(Node):
    """All of the conditions."""

    kind: Literal["and"] = "and"
    conditions: list[Condition]


class Or(Node):
    """Any of the conditions."""

    kind: Literal["or"] = "or"
    conditions: list[Condition]


class Not(Node):
    """NOT condition."""

    kind: Literal["not"] = "not"
    condition: Condition


class InSubquery(Node):
    """expr [NOT] IN (sub-plan with one column)."""

    kind: Literal["in_subquery"] = "in_subquery"
    expr: Expr
    plan: PlanModel
    negated: bool = False


class Exists(Node):
    """[NOT] EXISTS (sub-plan), usually correlated with the outer plan's aliases."""

    kind: Literal["exists"] = "exists"
    plan: PlanModel
    negated: bool = False


class Truth(Node):
    """A boolean column or expression used as a condition (true rows pass)."""

    kind: Literal["truth"] = "truth"
    expr: Expr


ConditionNode = Comparison | InList | Between | Like | IsNull | And | Or | Not | InSubquery | Exists | Truth
Condition = Annotated[ConditionNode, Field(discriminator="kind")]


# --- the plan ----------------------------------------------------------------------------------


class TableRef(Node):
    """A table, optionally under an alias (needed for self-joins); or a derived table: a sub-plan (`query`) read
    under its alias (`table` then names it too); or a common table expression of this or an outer plan, by name."""

    table: str
    alias: str | None = None
    query: PlanModel | None = Field(default=None, description="A derived table: the sub-plan read under `alias`.")

    @property
    def name_in_scope(self) -> str:
        """How columns refer to this table: its alias, else its name."""
        return self.alias or self.table


class JoinKey(Node):
    """One equality of a join condition."""

    left: ColumnRef
    right: ColumnRef


class Join(Node):
    """INNER or LEFT JOIN table ON all key pairs (and `condition`, for any other condition); CROSS JOIN (every pair
    of rows) has neither."""

    type: Literal["inner", "left", "cross"] = "inner"
    table: TableRef
    on: list[JoinKey] = Field(default_factory=list)
    condition: Condition | None = None


class SelectItem(Node):
    """One output column."""

    expr: Expr
    alias: str | None = None


class CommonTable(Node):
    """WITH name AS (plan): a named sub-plan the plan (and the plans inside it) reads like a table."""

    name: str
    plan: PlanModel


class SetOperation(Node):
    """A set operation with another plan: UNION (distinct rows), UNION ALL, INTERSECT, EXCEPT."""

    op: SetOperator
    plan: PlanModel


class PlanModel(Node):
    """A single SELECT over one datasource, as a tree; with `set_operations`, the first of several combined (its
    order_by, limit and offset then apply to the combined rows)."""

    with_: list[CommonTable] = Field(default_factory=list, alias="with")
    select: list[SelectItem]
    from_: TableRef = Field(alias="from")
    joins: list[Join] = Field(default_factory=list)
    where: Condition | None = None
    group_by: list[Expr] = Field(default_factory=list)
    having: Condition | None = None
    order_by: list[OrderItem] = Field(default_factory=list)
    limit: int | None = None
    offset: int | None = None
    distinct: bool = False
    set_operations: list[SetOperation] = Field(default_factory=list)

    #: The unions written once in the plan's JSON schema for structured output (`llm.json_schema`).
    json_schema_unions: ClassVar[dict[str, object]] = {"Expr": Expr, "Condition": Condition}

    def tables(self) -> list[TableRef]:
        """FROM and JOIN tables of this plan (not of its sub-plans)."""
        return [self.from_, *(j.table for j in self.joins)]


for _model in (Aggregate, Arithmetic, Function, Cast, When, Case, DatePartOf, DateTrunc, OrderItem, Window,
               ScalarSubquery, Comparison, InList, Between, Like, IsNull, And, Or, Not, InSubquery, Exists, Truth,
               TableRef, Join, CommonTable, SetOperation, PlanModel):
    _model.model_rebuild()
