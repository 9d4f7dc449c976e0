"""The plan validator: one test per issue code (with an actionable message and no follow-on errors), name
resolution, correlation, scope refusals that name nothing, and the join-key type rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nl2sql.config import Config
from nl2sql.datasources import adapter_class
from nl2sql.datasources.models import SchemaSnapshot
from nl2sql.errors import GENERIC_REFUSAL, SecurityViolation
from nl2sql.plan import PlanModel, PlanValidationError, ValidatedPlan, generate_sql, validate_plan
from nl2sql.plan.join_keys import CATEGORY, category, coercible, describe, dtype_of, join_dtype
from nl2sql.policies import Scope, scope
from tests.unit.test_plan_golden import GOLDEN_FILES, load

CHINOOK_TABLES = ["Album", "Artist", "Customer", "Employee", "Genre", "Invoice", "InvoiceLine", "MediaType",
                  "Playlist", "PlaylistTrack", "Track"]
INVOICE_COLUMNS = ("InvoiceId, CustomerId, InvoiceDate, BillingAddress, BillingCity, BillingState, BillingCountry, "
                   "BillingPostalCode, Total")


@pytest.fixture(scope="module")
def snapshot(chinook_path: Path) -> SchemaSnapshot:
    return adapter_class("sqlite")("chinook", f"sqlite:///{chinook_path}").reflect()


@pytest.fixture(scope="module")
def scopes(demo_config: Config) -> dict[str, Scope]:
    return {role: scope(demo_config.policies, role, "chinook") for role in ("admin", "analyst", "viewer", "support")}


# --- plan building helpers -----------------------------------------------------------------------


def col(table: str | None, column: str) -> dict:
    return {"kind": "column", "table": table, "column": column}


def lit(value: Any) -> dict:
    return {"kind": "literal", "value": value}


def agg(func: str, arg: dict | None = None, **kw: Any) -> dict:
    return {"kind": "aggregate", "func": func, "arg": arg, **kw}


def cmp(left: dict, op: str, right: dict) -> dict:
    return {"kind": "compare", "op": op, "left": left, "right": right}


def key(left: dict, right: dict) -> dict:
    return {"left": left, "right": right}


def join(table: str, alias: str | None, *on: dict, type: str = "inner") -> dict:
    return {"type": type, "table": {"table": table, "alias": alias}, "on": list(on)}


def plan(*select: dict, table: str = "Invoice", alias: str | None = "i", **rest: Any) -> dict:
    """A plan over `table` selecting the given expressions (default: i.Total)."""
    items = [{"expr": e} for e in select] or [{"expr": col("i", "Total")}]
    return {"select": items, "from": {"table": table, "alias": alias}, **rest}


CUSTOMER = join("Customer", "c", key(col("c", "CustomerId"), col("i", "CustomerId")))


def check(data: dict, snapshot: SchemaSnapshot, scope_: Scope) -> ValidatedPlan:
    return validate_plan(PlanModel.model_validate(data), snapshot, scope_)


def problems(data: dict, snapshot: SchemaSnapshot, scope_: Scope) -> PlanValidationError:
    with pytest.raises(PlanValidationError) as caught:
        check(data, snapshot, scope_)
    return caught.value


# --- one test per code -----------------------------------------------------------------------------

CASES = [
    pytest.param(
        "CROSS_JOIN_WITH_KEYS",
        plan(joins=[{**CUSTOMER, "type": "cross"}]), "plan.joins[0]",
        ["A cross join to c pairs every row: it has no keys or condition."], id="CROSS_JOIN_WITH_KEYS"),
    pytest.param(
        "STAR_NOT_ALLOWED", plan(agg("max", {"kind": "star", "table": None})), "plan.select[0].arg",
        ["* stands for columns only as a whole select item"], id="STAR_NOT_ALLOWED"),
    pytest.param(
        "SET_OPERATION_BRANCH",
        plan(set_operations=[{"op": "union", "plan": plan(limit=3)}]), "plan.set_operations[0].plan.limit",
        ["cannot have its own limit", "put order_by and limit on the first plan"], id="SET_OPERATION_BRANCH"),
    pytest.param(
        "SET_OPERATION_COLUMNS",
        plan(set_operations=[{"op": "intersect", "plan": plan(col("i", "Total"), col("i", "InvoiceId"))}]),
        "plan.set_operations[0].plan.select",
        ["intersect combines plans of the same number of columns: the first selects 1, this one 2."],
        id="SET_OPERATION_COLUMNS"),
    pytest.param(
        "UNKNOWN_TABLE", plan(col(None, "Total"), table="Invoce", alias=None), "plan.from",
        ["There is no table Invoce.", "Did you mean Invoice?", "Tables: Album, Artist, Customer, Genre, Invoice,"],
        id="UNKNOWN_TABLE"),
    pytest.param(
        "UNKNOWN_COLUMN", plan(col("i", "Amount")), "plan.select[0]",
        [f"Invoice has no column Amount. Columns of Invoice: {INVOICE_COLUMNS}."], id="UNKNOWN_COLUMN"),
    pytest.param(
        "UNKNOWN_COLUMN", plan(col(None, "Totl")), "plan.select[0]",
        [f"Invoice has no column Totl. Did you mean Total? Columns of Invoice: {INVOICE_COLUMNS}."],
        id="UNKNOWN_COLUMN-unqualified"),
    pytest.param(
        "UNKNOWN_COLUMN", plan(col(None, "Totl"), joins=[CUSTOMER]), "plan.select[0]",
        ["No table in this plan has a column Totl.", "Did you mean i.Total?", "Set `table` to the alias",
         "Columns: i.InvoiceId,", "c.CustomerId"],
        id="UNKNOWN_COLUMN-unqualified-two-tables"),
    pytest.param(
        "UNKNOWN_ALIAS", plan(col("inv", "Total")), "plan.select[0]",
        ["No table or alias inv is in scope here.", "In scope: i."], id="UNKNOWN_ALIAS"),
    pytest.param(
        "AMBIGUOUS_COLUMN", plan(col(None, "UnitPrice"), table="InvoiceLine", alias="il",
                                 joins=[join("Track", "t", key(col("t", "TrackId"), col("il", "TrackId")))]),
        "plan.select[0]", ["Column UnitPrice is in more than one table", "set its table to one of il, t"],
        id="AMBIGUOUS_COLUMN"),
    pytest.param(
        "DUPLICATE_ALIAS",
        plan(col("i", "Total"), joins=[join("Customer", "i", key(col("i", "CustomerId"), col("i", "CustomerId")))]),
        "plan.joins[0].table", ["i is used twice in this plan.", "Give each use of a table its own alias"],
        id="DUPLICATE_ALIAS"),
    pytest.param(
        "JOIN_KEY_TYPE_MISMATCH",
        plan(joins=[join("Customer", "c", key(col("c", "FirstName"), col("i", "CustomerId")))]), "plan.joins[0].on[0]",
        ["c.FirstName is text but i.CustomerId is a number", "Join on columns that hold the same kind of value"],
        id="JOIN_KEY_TYPE_MISMATCH"),
    pytest.param(
        "JOIN_NOT_CONNECTED",
        plan(joins=[join("Customer", "c", key(col("i", "InvoiceId"), col("i", "CustomerId")))]), "plan.joins[0].on[0]",
        ["The join to c must compare a column of c with a column of a table joined before it."],
        id="JOIN_NOT_CONNECTED"),
    pytest.param(
        "JOIN_WITHOUT_KEYS", plan(joins=[join("Customer", "c")]), "plan.joins[0].on",
        ["The join to c has no keys.", "Add at least one pair of columns to compare."], id="JOIN_WITHOUT_KEYS"),
    pytest.param(
        "AGGREGATE_NOT_ALLOWED", plan(where=cmp(agg("sum", col("i", "Total")), ">", lit(10))), "plan.where.left",
        ["sum() cannot be used in where.", "Filter on aggregates with having instead."],
        id="AGGREGATE_NOT_ALLOWED"),
    pytest.param(
        "NESTED_AGGREGATE", plan(agg("sum", agg("max", col("i", "Total")))), "plan.select[0].arg",
        ["max() is inside another aggregate", "Compute the inner aggregate in a sub-plan."], id="NESTED_AGGREGATE"),
    pytest.param(
        "MISSING_ARGUMENT", plan(agg("sum")), "plan.select[0]", ["sum() needs an argument."], id="MISSING_ARGUMENT"),
    pytest.param(
        "MISSING_ARGUMENT", plan({"kind": "window", "func": "avg", "order_by": []}), "plan.select[0]",
        ["avg() over a window needs an argument."], id="MISSING_ARGUMENT-window"),
    pytest.param(
        "WINDOW_NOT_ALLOWED",
        plan(where=cmp({"kind": "window", "func": "row_number", "order_by": [{"expr": col("i", "Total")}]}, "=",
                       lit(1))),
        "plan.where.left", ["not used in where", "Select it in a sub-plan and filter the outer plan."],
        id="WINDOW_NOT_ALLOWED"),
    pytest.param(
        "WINDOW_WITHOUT_ORDER",
        plan({"kind": "window", "func": "rank", "partition_by": [col("i", "CustomerId")]}), "plan.select[0]",
        ["rank() needs order_by."], id="WINDOW_WITHOUT_ORDER"),
    pytest.param(
        "BAD_ARGUMENTS", plan({"kind": "function", "name": "nullif", "args": [col("i", "Total")]}),
        "plan.select[0]", ["nullif() takes 2 arguments, not 1."], id="BAD_ARGUMENTS"),
    pytest.param(
        "BAD_ARGUMENTS",
        plan({"kind": "window", "func": "row_number", "arg": col("i", "Total"), "order_by": [{"expr": col("i", "Total")}]}),
        "plan.select[0].arg", ["row_number() takes no argument."], id="BAD_ARGUMENTS-ranking"),
    pytest.param(
        "BAD_ARGUMENTS", plan({"kind": "function", "name": "coalesce", "args": [col("i", "Total")]}),
        "plan.select[0]", ["coalesce() takes at least 2 arguments, not 1."], id="BAD_ARGUMENTS-variadic"),
    pytest.param(
        "EMPTY_CASE", plan({"kind": "case", "whens": [], "otherwise": lit(1)}), "plan.select[0]",
        ["A case needs at least one when."], id="EMPTY_CASE"),
    pytest.param(
        "CONSTANT_KEY", plan(col("i", "Total"), order_by=[{"expr": lit(1)}]), "plan.order_by[0]",
        ["A constant in order_by", "Put a column or an expression"], id="CONSTANT_KEY"),
    pytest.param(
        "COMPARE_TYPE_MISMATCH",
        plan(col("i", "Total"), where={"kind": "compare", "op": "=", "left": col("i", "InvoiceDate"),
                                       "right": lit(5)}),
        "plan.where", ["i.InvoiceDate is", "but 5 is a number", "Compare values of the same kind"],
        id="COMPARE_TYPE_MISMATCH"),
    pytest.param(
        "LIKE_NOT_TEXT",
        plan(col("i", "Total"), where={"kind": "like", "expr": col("i", "Total"), "pattern": "1%"}),
        "plan.where.expr", ["like needs text, but i.Total is a number"], id="LIKE_NOT_TEXT"),
    pytest.param(
        "CASE_MIXED_TYPES",
        plan({"kind": "case", "whens": [{"condition": {"kind": "compare", "op": ">", "left": col("i", "Total"),
                                                       "right": lit(10)}, "then": lit("big")}], "otherwise": lit(0)}),
        "plan.select[0]", ["mix numbers and text", "Make every branch the same kind"], id="CASE_MIXED_TYPES"),
    pytest.param(
        "NOT_A_DATE", plan({"kind": "date_part", "part": "year", "arg": col("i", "Total")}), "plan.select[0].arg",
        ["date_part needs a date or timestamp, but i.Total is a number.", "Use a date or timestamp column."],
        id="NOT_A_DATE"),
    pytest.param(
        "SUBQUERY_COLUMNS",
        plan(where={"kind": "in_subquery", "expr": col("i", "CustomerId"),
                    "plan": plan(col("c", "CustomerId"), col("c", "Country"), table="Customer", alias="c")}),
        "plan.where.plan.select", ["This sub-plan must select exactly one column, not 2."], id="SUBQUERY_COLUMNS"),
    pytest.param(
        "EMPTY_IN_LIST", plan(where={"kind": "in", "expr": col("i", "BillingCountry"), "values": []}),
        "plan.where.values", ["An in condition needs at least one value."], id="EMPTY_IN_LIST"),
    pytest.param(
        "EMPTY_CONDITION", plan(where={"kind": "or", "conditions": []}), "plan.where.conditions",
        ["An or needs at least one condition."], id="EMPTY_CONDITION"),
    pytest.param(
        "GROUP_BY_MISMATCH", plan(col("i", "BillingCountry"), agg("sum", col("i", "Total"))), "plan.select[0]",
        ["i.BillingCountry is used without an aggregate but is not in group_by.",
         "Add it to group_by or aggregate it."], id="GROUP_BY_MISMATCH"),
    pytest.param(
        "JOIN_KEYS_MISMATCH",
        plan(col("a", "Title"), table="Album", alias="a", joins=[join("Invoice", "i", key(col("a", "AlbumId"),
                                                                                      col("i", "InvoiceId")))]),
        "plan.joins[0].on[0]", ["a.AlbumId = i.InvoiceId compares a key of Album with a key of Invoice",
                                "never name the same row", "no foreign key links them"], id="JOIN_KEYS_MISMATCH"),
    pytest.param(
        "JOIN_KEYS_MISMATCH",
        plan(col("t", "Name"), table="Track", alias="t", joins=[join("Playlist", "p", key(col("t", "TrackId"),
                                                                                         col("p", "PlaylistId")))]),
        "plan.joins[0].on[0]", ["a key of Track with a key of Playlist", "foreign keys: PlaylistTrack.TrackId → "
                                "Track.TrackId, PlaylistTrack.PlaylistId → Playlist.PlaylistId"],
        id="JOIN_KEYS_MISMATCH-two-links"),
    pytest.param(
        "BAD_LIMIT", plan(limit=-1), "plan.limit", ["limit must be 0 or more, not -1."], id="BAD_LIMIT"),
    pytest.param(
        "BAD_LIMIT", plan(limit=10**19), "plan.limit", ["limit must be at most 9223372036854775807, not 1"],
        id="BAD_LIMIT-past-64-bits"),
    pytest.param(
        "BAD_LIMIT", plan(offset=2**63), "plan.offset", ["offset must be at most 9223372036854775807"],
        id="BAD_LIMIT-offset"),
    pytest.param(
        "BAD_NUMBER", plan(where=cmp(col("i", "Total"), ">", lit(10**30))), "plan.where.right",
        ["The number 1000000000000000000000000000000 is out of range", "-9223372036854775808"], id="BAD_NUMBER"),
    pytest.param(
        "BAD_NUMBER", plan(where={"kind": "in", "expr": col("i", "Total"), "values": [lit(1), lit(-(2**63) - 1)]}),
        "plan.where.values[1]", ["is out of range"], id="BAD_NUMBER-in-list"),
    pytest.param(
        "BAD_NUMBER", plan(where=cmp(col("i", "Total"), "<", lit(float("inf")))), "plan.where.right",
        ["inf is not a number a database can compare with"], id="BAD_NUMBER-infinite"),
    pytest.param(
        "EMPTY_SELECT", {"select": [], "from": {"table": "Invoice", "alias": "i"}}, "plan.select",
        ["The plan selects nothing.", "Add at least one select item."], id="EMPTY_SELECT"),
]


@pytest.mark.parametrize(("code", "data", "path", "fragments"), CASES)
def test_issue_code(code: str, data: dict, path: str, fragments: list[str], snapshot: SchemaSnapshot,
                    scopes: dict[str, Scope]) -> None:
    error = problems(data, snapshot, scopes["analyst"])
    assert error.codes == [code], f"expected only {code}, got:\n{error}"
    issue = error.issues[0]
    assert issue.path == path
    for fragment in fragments:
        assert fragment in issue.message, f"{fragment!r} not in {issue.message!r}"
    assert str(issue) == f"[{code}] {issue.message} (at {path})"
    assert error.code == "PLAN_INVALID" and issue.message in str(error)


def test_numbers_at_the_bounds_stand_and_a_limit_may_be_bound_to_max_rows(snapshot: SchemaSnapshot,
                                                                          scopes: dict[str, Scope]) -> None:
    edge = plan(where={"kind": "in", "expr": col("i", "Total"), "values": [lit(2**63 - 1), lit(-(2**63)), lit(1e300),
                                                                           lit(True)]},
                limit=2**63 - 1, offset=2**63 - 1)
    assert check(edge, snapshot, scopes["analyst"]).plan.limit == 2**63 - 1
    at_most = PlanModel.model_validate(plan(limit=100))
    assert validate_plan(at_most, snapshot, scopes["analyst"], max_limit=100).plan.limit == 100
    with pytest.raises(PlanValidationError) as caught:
        validate_plan(PlanModel.model_validate(plan(limit=101)), snapshot, scopes["analyst"], max_limit=100)
    assert caught.value.codes == ["BAD_LIMIT"]
    assert "limit must be at most 100 (settings.resources.max_rows), not 101." in str(caught.value)


def test_every_code_is_covered() -> None:
    import re

    source = (Path(__file__).resolve().parents[2] / "nl2sql" / "plan" / "validate.py").read_text(encoding="utf-8")
    emitted = set(re.findall(r'self\.issue\(\s*"([A-Z_]+)"', source))
    tested = {case.values[0] for case in CASES}
    assert emitted == tested


# --- no follow-on errors ----------------------------------------------------------------------------


def test_unknown_table_causes_no_column_errors(snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    data = plan(col(None, "Total"), col(None, "Email"), col("c", "Whatever"),
                joins=[join("Custmer", "c", key(col("c", "CustomerId"), col("i", "CustomerId")))])
    error = problems(data, snapshot, scopes["analyst"])
    assert error.codes == ["UNKNOWN_TABLE"]
    assert "Did you mean Customer?" in error.issues[0].message


def test_duplicate_alias_keeps_the_first_table(snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    data = plan(col("i", "Total"), col(None, "BillingCity"),
                joins=[join("Customer", "i", key(col("i", "CustomerId"), col("i", "CustomerId")))])
    assert problems(data, snapshot, scopes["analyst"]).codes == ["DUPLICATE_ALIAS"]


def test_unresolved_join_key_is_reported_once(snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    ambiguous = plan(joins=[join("Customer", "c", key(col(None, "CustomerId"), col("c", "CustomerId")))])
    assert problems(ambiguous, snapshot, scopes["analyst"]).codes == ["AMBIGUOUS_COLUMN"]
    unknown = plan(joins=[join("Customer", "c", key(col("x", "CustomerId"), col("y", "CustomerId")))])
    assert problems(unknown, snapshot, scopes["analyst"]).codes == ["UNKNOWN_ALIAS", "UNKNOWN_ALIAS"]


def test_empty_sub_plan_select_is_reported_once(snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    sub = {"select": [], "from": {"table": "Customer", "alias": "c"}}
    data = plan(where={"kind": "in_subquery", "expr": col("i", "CustomerId"), "plan": sub})
    error = problems(data, snapshot, scopes["analyst"])
    assert error.codes == ["EMPTY_SELECT"] and error.issues[0].path == "plan.where.plan.select"


def test_several_problems_are_reported_at_once(snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    data = plan(
        col("i", "Amount"), col("x", "Total"),
        where={"kind": "and", "conditions": [
            cmp(agg("count"), ">", lit(1)),
            {"kind": "in", "expr": col("i", "BillingCountry"), "values": []},
        ]},
        limit=-5,
        offset=-1,
    )
    error = problems(data, snapshot, scopes["analyst"])
    assert error.codes == ["UNKNOWN_COLUMN", "UNKNOWN_ALIAS", "AGGREGATE_NOT_ALLOWED", "EMPTY_IN_LIST", "BAD_LIMIT",
                           "BAD_LIMIT"]
    assert [i.path for i in error.issues] == ["plan.select[0]", "plan.select[1]", "plan.where.conditions[0].left",
                                              "plan.where.conditions[1].values", "plan.limit", "plan.offset"]
    assert str(error).startswith("The plan has 6 problems:\n- [UNKNOWN_COLUMN] Invoice has no column Amount.")


# --- resolution -------------------------------------------------------------------------------------


def test_names_are_canonicalized(snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    data = {
        "select": [{"expr": col(None, "total")}, {"expr": col("INVOICE", "billingcity"), "alias": "city"}],
        "from": {"table": "invoice", "alias": None},
        "where": cmp(col(None, "TOTAL"), ">", lit(1)),
        "order_by": [{"expr": col(None, "city")}],
    }
    original = PlanModel.model_validate(data)
    validated = validate_plan(original, snapshot, scopes["analyst"])
    out = validated.plan
    assert out.from_.table == "Invoice"
    assert (out.select[0].expr.table, out.select[0].expr.column) == ("Invoice", "Total")
    assert (out.select[1].expr.table, out.select[1].expr.column) == ("Invoice", "BillingCity")
    assert (out.where.left.table, out.where.left.column) == ("Invoice", "Total")
    assert (out.order_by[0].expr.table, out.order_by[0].expr.column) == (None, "city")  # an output alias
    assert [t.name for t in validated.tables] == ["Invoice"] and validated.schemas == {}
    assert original.from_.table == "invoice" and original.select[0].expr.table is None  # the input is untouched
    assert generate_sql(out, "postgres") == (
        'SELECT "Invoice"."Total", "Invoice"."BillingCity" AS city FROM "Invoice" WHERE "Invoice"."Total" > 1 '
        "ORDER BY city ASC")


def test_unqualified_columns_get_their_alias(snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    data = plan(col(None, "total"), col(None, "email"), col("C", "country"), joins=[CUSTOMER])
    out = check(data, snapshot, scopes["analyst"]).plan
    assert [(s.expr.table, s.expr.column) for s in out.select] == [
        ("i", "Total"), ("c", "Email"), ("c", "Country")]
    assert [t.name for t in check(data, snapshot, scopes["analyst"]).tables] == ["Invoice", "Customer"]


def test_correlated_sub_plans_resolve_outer_aliases(snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    inner = plan(lit(1), table="invoice", alias="inv",
                 where=cmp(col("inv", "customerid"), "=", col("C", "customerid")))
    scalar = plan(agg("count"), table="Invoice", alias="i2",
                  where=cmp(col("i2", "CustomerId"), "=", col("c", "CustomerId")))
    data = {
        "select": [{"expr": col("c", "LastName")}, {"expr": {"kind": "subquery", "plan": scalar}, "alias": "n"}],
        "from": {"table": "Customer", "alias": "c"},
        "where": {"kind": "exists", "negated": True, "plan": inner},
    }
    validated = check(data, snapshot, scopes["analyst"])
    where = validated.plan.where.plan.where
    assert (where.left.table, where.left.column, where.right.table, where.right.column) == (
        "inv", "CustomerId", "c", "CustomerId")
    assert validated.plan.where.plan.from_.table == "Invoice"
    assert sorted(t.name for t in validated.tables) == ["Customer", "Invoice"]
    # a sub-plan's aliases are not visible outside it, and sibling sub-plans do not see each other
    leaky = {**data, "select": [*data["select"], {"expr": col("inv", "Total")}]}
    error = problems(leaky, snapshot, scopes["analyst"])
    assert error.codes == ["UNKNOWN_ALIAS"] and "In scope: c." in error.issues[0].message
    inner_error = problems({**data, "where": {"kind": "exists", "plan": plan(
        lit(1), table="Invoice", alias="inv", where=cmp(col("i2", "CustomerId"), "=", col("zz", "CustomerId")))}},
        snapshot, scopes["analyst"])
    assert inner_error.codes == ["UNKNOWN_ALIAS", "UNKNOWN_ALIAS"]
    assert "In scope: inv, c." in inner_error.issues[0].message


def test_correlated_reference_needs_no_group_by(snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    sub = plan(agg("sum", col("il", "UnitPrice")), table="InvoiceLine", alias="il",
               where=cmp(col("il", "InvoiceId"), "=", col("i", "InvoiceId")))
    check(plan(col("i", "InvoiceId"), {"kind": "subquery", "plan": sub}), snapshot, scopes["analyst"])


def test_self_join_needs_aliases(snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    good = plan(col("e", "LastName"), col("m", "LastName"), table="Employee", alias="e",
                joins=[join("Employee", "m", key(col("e", "ReportsTo"), col("m", "EmployeeId")), type="left")])
    assert [t.name for t in check(good, snapshot, scopes["admin"]).tables] == ["Employee"]
    bad = plan(col("Employee", "LastName"), table="Employee", alias=None,
               joins=[join("Employee", None, key(col("Employee", "ReportsTo"), col("Employee", "EmployeeId")))])
    error = problems(bad, snapshot, scopes["admin"])
    assert error.codes == ["DUPLICATE_ALIAS"] and error.issues[0].message.startswith("Employee is used twice")


def test_output_aliases_only_in_order_by_and_having(snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    base = {"select": [{"expr": col("i", "BillingCountry")}, {"expr": agg("sum", col("i", "Total")), "alias": "s"}],
            "from": {"table": "Invoice", "alias": "i"}, "group_by": [col("i", "billingcountry")]}
    check({**base, "having": cmp(col(None, "s"), ">", lit(1)), "order_by": [{"expr": col(None, "S")}]}, snapshot,
          scopes["analyst"])
    error = problems({**base, "where": cmp(col(None, "s"), ">", lit(1))}, snapshot, scopes["analyst"])
    assert error.codes == ["UNKNOWN_COLUMN"]


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=[p.stem for p in GOLDEN_FILES])
def test_golden_plans_validate(path: Path, snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    doc = load(path)
    validated = check(doc["plan"], snapshot, scopes["admin"])
    if '"kind": "star"' in json.dumps(doc["plan"]):
        return  # the validator lists the columns * stands for (test_select_star_lists_the_columns_of_the_plans_tables)
    assert generate_sql(validated.plan, "sqlite") == doc["sql"]["sqlite"]


# --- scope ----------------------------------------------------------------------------------------


def assert_generic(caught: pytest.ExceptionInfo[SecurityViolation], *names: str) -> None:
    message = str(caught.value)
    assert message == GENERIC_REFUSAL == caught.value.message
    for name in [*CHINOOK_TABLES, *names]:
        assert name.lower() not in message.lower()
    assert caught.value.node == "validator"


def test_viewer_reading_invoice_is_refused(snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    with pytest.raises(SecurityViolation) as caught:
        check(plan(col("i", "Total")), snapshot, scopes["viewer"])
    assert_generic(caught)


def test_denied_table_inside_not_exists_is_refused(snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    data = plan(col("t", "Name"), table="Track", alias="t", where={"kind": "exists", "negated": True, "plan": plan(
        lit(1), table="InvoiceLine", alias="il", where=cmp(col("il", "TrackId"), "=", col("t", "TrackId")))})
    with pytest.raises(SecurityViolation) as caught:
        check(data, snapshot, scopes["viewer"])
    assert_generic(caught)


def test_denied_table_deep_in_an_expression_is_refused(snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    deep = {"kind": "case", "whens": [{"condition": cmp({"kind": "subquery", "plan": plan(
        agg("max", col("e", "EmployeeId")), table="Employee", alias="e")}, ">", lit(0)), "then": lit("yes")}]}
    with pytest.raises(SecurityViolation) as caught:
        check(plan(deep), snapshot, scopes["analyst"])
    assert_generic(caught)


def test_scope_is_checked_before_anything_else(snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    data = plan(col("i", "NoSuchColumn"), col("zz", "x"), limit=-1,
                joins=[join("Employee", "e", key(col("e", "EmployeeId"), col("i", "Bogus")))])
    with pytest.raises(SecurityViolation) as caught:
        check(data, snapshot, scopes["analyst"])
    assert_generic(caught, "NoSuchColumn", "Bogus")


def test_unknown_table_outside_the_viewers_patterns_is_refused(snapshot: SchemaSnapshot,
                                                              scopes: dict[str, Scope]) -> None:
    for name in ("Salaries", "Invoce"):  # none exists; none is close to a table the viewer may read
        with pytest.raises(SecurityViolation) as caught:
            check(plan(col(None, "Total"), table=name, alias=None), snapshot, scopes["viewer"])
        assert_generic(caught, name)
    # a slip on a table the viewer may read is a name the refiner can fix
    error = problems(plan(col(None, "Total"), table="Albm", alias=None), snapshot, scopes["viewer"])
    assert error.codes == ["UNKNOWN_TABLE"] and "Did you mean Album?" in error.issues[0].message


def test_a_table_that_does_not_exist_is_a_name_to_refine_for_a_caller_who_reads_them_all(
        snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    # the admin reads every table: no table is hidden to be told apart from one the model invented
    error = problems(plan(col(None, "Salary"), table="Salaries", alias=None), snapshot, scopes["admin"])
    assert error.codes == ["UNKNOWN_TABLE"] and "There is no table Salaries." in error.issues[0].message
    # an analyst, who may not read Employee, gets the one answer for a missing table and a denied one
    with pytest.raises(SecurityViolation) as caught:
        check(plan(col(None, "Salary"), table="Salaries", alias=None), snapshot, scopes["analyst"])
    assert_generic(caught, "Salaries")


def test_denied_and_missing_tables_get_one_answer(snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    """An analyst's plan over Employee (denied) reads exactly like one over tables that do not exist."""
    messages = set()
    for name in ("Employee", "employee", "Employees", "Employe", "Salaries", "Weather"):
        with pytest.raises(SecurityViolation) as caught:
            check(plan(col(None, "LastName"), table=name, alias=None), snapshot, scopes["analyst"])
        assert_generic(caught, name)
        messages.add(str(caught.value))
    assert len(messages) == 1


def test_a_table_written_in_the_plural_or_singular_is_repaired(snapshot: SchemaSnapshot,
                                                               scopes: dict[str, Scope]) -> None:
    validated = check(plan(col("Tracks", "Name"), table="Tracks", alias=None), snapshot, scopes["viewer"])
    assert validated.plan.from_.table == "Track" and [r.code for r in validated.repairs] == ["TABLE_NAME"]
    assert "Tracks" in generate_sql(validated.plan, "sqlite")
    validated = check(plan(col("c", "Country"), table="customers", alias="c"), snapshot, scopes["analyst"])
    assert validated.plan.from_.table == "Customer"
    # the plural of a table the caller may not read is refused like any other name outside its tables
    with pytest.raises(SecurityViolation):
        check(plan(col(None, "LastName"), table="Employees", alias=None), snapshot, scopes["analyst"])


def test_unreachable_datasource_is_refused(snapshot: SchemaSnapshot, demo_config: Config) -> None:
    elsewhere = scope(demo_config.policies, "viewer", "webanalytics")
    assert not elsewhere.reachable
    with pytest.raises(SecurityViolation) as caught:
        check(plan(col("g", "Name"), table="Genre", alias="g"), snapshot, elsewhere)
    assert_generic(caught)


def test_unknown_table_suggestions_only_name_visible_tables(snapshot: SchemaSnapshot,
                                                             scopes: dict[str, Scope]) -> None:
    error = problems(plan(col(None, "LastName"), table="Custmers", alias=None), snapshot, scopes["analyst"])
    assert error.codes == ["UNKNOWN_TABLE"]
    message = error.issues[0].message
    assert "Did you mean Customer?" in message and "Employee" not in message
    assert message.endswith("Tables: Album, Artist, Customer, Genre, Invoice, InvoiceLine, MediaType, Playlist, "
                            "PlaylistTrack, Track.")
    # the viewer misspelling a table it cannot see gets the refusal, never "Did you mean Invoice"
    with pytest.raises(SecurityViolation) as caught:
        check(plan(col(None, "Total"), table="Invoce", alias=None), snapshot, scopes["viewer"])
    assert_generic(caught, "Invoce")


def test_viewer_can_read_the_catalog(snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    data = plan(col("t", "Name"), col("g", "Name"), table="track", alias="t",
                joins=[join("genre", "g", key(col("t", "GenreId"), col("g", "GenreId")))])
    assert [t.name for t in check(data, snapshot, scopes["viewer"]).tables] == ["Track", "Genre"]
    error = problems(plan(col("t", "Price"), table="Track", alias="t"), snapshot, scopes["viewer"])
    assert error.codes == ["UNKNOWN_COLUMN"] and "Did you mean UnitPrice?" in error.issues[0].message


# --- join keys ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dialect", "type_name", "dtype"),
    [
        ("sqlite", "INTEGER", "integer"), ("sqlite", "BIGINT", "integer"), ("sqlite", "NVARCHAR(40)", "text"),
        ("sqlite", "TEXT", "text"), ("sqlite", "NUMERIC(10, 2)", "decimal"), ("sqlite", "REAL", "float"),
        ("sqlite", "DATETIME", "datetime"), ("sqlite", "DATE", "date"), ("sqlite", "BLOB", "binary"),
        ("sqlite", "BOOLEAN", "boolean"), ("sqlite", "", "other"), ("sqlite", "  ", "other"),
        ("sqlite", "not a type!", "other"),
        ("duckdb", "INTEGER", "integer"), ("duckdb", "HUGEINT", "integer"), ("duckdb", "UBIGINT", "integer"),
        ("duckdb", "VARCHAR", "text"), ("duckdb", "DECIMAL(10,2)", "decimal"), ("duckdb", "DOUBLE", "float"),
        ("duckdb", "TIMESTAMP", "datetime"), ("duckdb", "TIMESTAMP WITH TIME ZONE", "datetime"),
        ("duckdb", "DATE", "date"), ("duckdb", "BOOLEAN", "boolean"), ("duckdb", "BLOB", "binary"),
        ("duckdb", "UUID", "text"), ("duckdb", "TIME", "other"), ("duckdb", "INTERVAL", "other"),
        ("duckdb", "INTEGER[]", "other"),
        ("postgres", "integer", "integer"), ("postgres", "smallint", "integer"),
        ("postgres", "character varying(40)", "text"), ("postgres", "character(2)", "text"),
        ("postgres", "numeric(10,2)", "decimal"), ("postgres", "money", "decimal"),
        ("postgres", "double precision", "float"), ("postgres", "real", "float"),
        ("postgres", "timestamp without time zone", "datetime"), ("postgres", "timestamp with time zone", "datetime"),
        ("postgres", "date", "date"), ("postgres", "boolean", "boolean"), ("postgres", "bytea", "binary"),
        ("postgres", "uuid", "text"), ("postgres", "time without time zone", "other"), ("postgres", "jsonb", "other"),
    ],
)
def test_dtype_of(dialect: str, type_name: str, dtype: str) -> None:
    assert dtype_of(type_name, dialect) == dtype


DTYPES = list(CATEGORY)


@pytest.mark.parametrize(
    ("left", "right", "joined"),
    [
        ("integer", "float", "integer"), ("float", "integer", "integer"), ("integer", "decimal", "integer"),
        ("decimal", "float", "decimal"), ("date", "datetime", "datetime"), ("datetime", "date", "datetime"),
        ("integer", "boolean", "boolean"), ("boolean", "decimal", "boolean"), ("text", "date", "date"),
        ("integer", "text", "integer"), ("text", "boolean", "boolean"), ("text", "text", "text"),
        ("text", "binary", None), ("binary", "integer", None), ("date", "integer", None), ("boolean", "date", None),
    ],
)
def test_join_dtype(left: str, right: str, joined: str | None) -> None:
    assert join_dtype(left, right) == joined
    assert join_dtype(right, left) == joined
    assert coercible(left, right) is (joined is not None)


def test_text_is_parsed_only_when_asked() -> None:
    for other in ("integer", "decimal", "float", "date", "datetime", "boolean"):
        assert join_dtype("text", other, parse_text=False) is None
        assert not coercible(other, "text", parse_text=False)
        assert coercible("text", other)
    assert coercible("text", "text", parse_text=False)


@pytest.mark.parametrize("dtype", DTYPES)
def test_other_never_blocks(dtype: str) -> None:
    assert join_dtype("other", dtype) == dtype
    assert join_dtype(dtype, "other", parse_text=False) == dtype
    assert coercible("other", dtype, parse_text=False)


def test_categories_and_words() -> None:
    assert [category(d) for d in ("integer", "decimal", "float", "date", "datetime")] == ["number"] * 3 + ["temporal"] * 2
    assert describe("decimal") == "a number" and describe("datetime") == "a date" and describe("text") == "text"
    assert describe("other") == "of unknown type" and describe("binary") == "binary data"


@pytest.mark.parametrize(
    ("left", "right"),
    [(col("i", "InvoiceDate"), lit("2010-01-01")), (col("i", "Total"), lit("12.5")), (col("i", "Total"), lit(3)),
     (col("i", "InvoiceId"), lit(True))],
)
def test_comparisons_every_engine_takes_are_allowed(snapshot: SchemaSnapshot, scopes: dict[str, Scope],
                                                     left: dict, right: dict) -> None:
    check(plan(col("i", "Total"), where={"kind": "compare", "op": ">=", "left": left, "right": right}),
          snapshot, scopes["admin"])


# --- repairs: what has exactly one reading is fixed and reported ----------------------------------------------


def test_a_table_name_where_its_one_alias_is_in_scope_is_repaired(snapshot: SchemaSnapshot,
                                                                   scopes: dict[str, Scope]) -> None:
    data = plan(col("Invoice", "Total"), col("customer", "Country"), joins=[CUSTOMER])
    validated = check(data, snapshot, scopes["analyst"])
    columns = [item.expr for item in validated.plan.select]
    assert [(c.table, c.column) for c in columns] == [("i", "Total"), ("c", "Country")]
    assert [r.code for r in validated.repairs] == ["ALIAS_FOR_TABLE_NAME", "ALIAS_FOR_TABLE_NAME"]
    assert validated.repairs[0].message == "Invoice.Total read as i.Total (the alias of Invoice)."
    assert "i.Total" in generate_sql(validated.plan, "sqlite")


def test_a_table_name_with_two_aliases_in_scope_is_not_guessed(snapshot: SchemaSnapshot,
                                                                scopes: dict[str, Scope]) -> None:
    second = join("Invoice", "j", key(col("j", "InvoiceId"), col("i", "InvoiceId")))
    error = problems(plan(col("Invoice", "Total"), joins=[second]), snapshot, scopes["analyst"])
    assert [i.code for i in error.issues] == ["UNKNOWN_ALIAS"]


def test_a_plan_without_repairs_reports_none(snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    assert check(plan(col("i", "Total")), snapshot, scopes["analyst"]).repairs == []


def test_a_column_of_a_table_grouped_by_its_key_is_added_to_group_by(snapshot: SchemaSnapshot,
                                                                      scopes: dict[str, Scope]) -> None:
    data = plan(col("c", "CustomerId"), col("c", "LastName"), agg("sum", col("i", "Total")), joins=[CUSTOMER],
                group_by=[col("c", "CustomerId")])
    validated = check(data, snapshot, scopes["analyst"])
    assert [(e.table, e.column) for e in validated.plan.group_by] == [("c", "CustomerId"), ("c", "LastName")]
    assert [r.code for r in validated.repairs] == ["GROUP_BY_DEPENDENT_COLUMN"]
    assert "GROUP BY c.CustomerId, c.LastName" in generate_sql(validated.plan, "sqlite")


def test_a_column_not_determined_by_the_grouped_key_is_still_an_error(snapshot: SchemaSnapshot,
                                                                      scopes: dict[str, Scope]) -> None:
    data = plan(col("c", "Country"), col("i", "BillingCity"), agg("sum", col("i", "Total")), joins=[CUSTOMER],
                group_by=[col("c", "Country")])
    error = problems(data, snapshot, scopes["analyst"])
    assert [i.code for i in error.issues] == ["GROUP_BY_MISMATCH"]


def test_a_column_written_in_another_case_is_read_as_the_schema_has_it(snapshot: SchemaSnapshot,
                                                                       scopes: dict[str, Scope]) -> None:
    validated = check(plan(col("i", "total")), snapshot, scopes["analyst"])
    assert validated.plan.select[0].expr.column == "Total"
    assert [r.code for r in validated.repairs] == ["COLUMN_CASE"]


def test_a_column_on_a_table_without_it_is_read_on_the_one_table_here_that_has_it(
        snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    # COUNT(i.LastName) with Customer joined: only Customer has LastName
    data = plan(col("c", "Country"), agg("count", col("i", "LastName")), joins=[CUSTOMER], group_by=[col("c", "Country")])
    validated = check(data, snapshot, scopes["analyst"])
    assert (validated.plan.select[1].expr.arg.table, validated.plan.select[1].expr.arg.column) == ("c", "LastName")
    assert [r.code for r in validated.repairs] == ["COLUMN_ON_OTHER_TABLE"]
    assert validated.repairs[0].message == ("i.LastName read as c.LastName (Invoice has no column LastName; c is the "
                                            "one table here that has it).")
    assert "COUNT(c.LastName)" in generate_sql(validated.plan, "sqlite")


def test_a_missing_column_with_a_like_named_one_on_its_table_is_not_moved(snapshot: SchemaSnapshot,
                                                                            scopes: dict[str, Scope]) -> None:
    # i.Country: Invoice's BillingCountry or Customer's Country are two readings
    error = problems(plan(col("i", "Country"), joins=[CUSTOMER]), snapshot, scopes["analyst"])
    assert [i.code for i in error.issues] == ["UNKNOWN_COLUMN"] and "Did you mean BillingCountry?" in str(error)


def test_a_join_key_on_a_table_without_it_is_not_moved(snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    # moving i.LastName to c would compare c with itself
    wrong = join("Customer", "c", key(col("c", "LastName"), col("i", "LastName")))
    error = problems(plan(col("i", "Total"), joins=[wrong]), snapshot, scopes["analyst"])
    assert "UNKNOWN_COLUMN" in [i.code for i in error.issues]


@pytest.mark.parametrize("customer_first", [True, False])
def test_a_join_of_two_things_keys_goes_through_the_one_table_that_links_them(
        customer_first: bool, snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    # Customer.CustomerId = InvoiceLine.InvoiceId: a customer's key against an invoice's; Invoice links the two
    pair = (col("c", "CustomerId"), col("il", "InvoiceId"))
    data = (plan(col("c", "LastName"), agg("sum", col("il", "Quantity")), table="Customer", alias="c",
                 joins=[join("InvoiceLine", "il", key(*pair))], group_by=[col("c", "LastName")]) if customer_first else
            plan(col("c", "LastName"), table="InvoiceLine", alias="il", joins=[join("Customer", "c", key(*pair[::-1]))]))
    validated = check(data, snapshot, scopes["analyst"])
    assert [r.code for r in validated.repairs] == ["JOIN_THROUGH_LINK_TABLE"]
    assert "joined through Invoice" in validated.repairs[0].message
    assert "Invoice" in [t.name for t in validated.tables]
    sql = generate_sql(validated.plan, "sqlite")
    if customer_first:
        assert ("FROM Customer AS c INNER JOIN Invoice ON Invoice.CustomerId = c.CustomerId "
                "INNER JOIN InvoiceLine AS il ON il.InvoiceId = Invoice.InvoiceId") in sql
    else:
        assert ("FROM InvoiceLine AS il INNER JOIN Invoice ON Invoice.InvoiceId = il.InvoiceId "
                "INNER JOIN Customer AS c ON c.CustomerId = Invoice.CustomerId") in sql
    check(validated.plan.model_dump(by_alias=True), snapshot, scopes["analyst"])  # the repaired plan is valid as is


def test_a_link_table_already_read_or_out_of_scope_is_not_added(snapshot: SchemaSnapshot,
                                                                scopes: dict[str, Scope]) -> None:
    # Invoice is read already: the wrong pair is the model's to fix, not a second Invoice to add
    wrong = join("InvoiceLine", "il", key(col("c", "CustomerId"), col("il", "InvoiceId")))
    error = problems(plan(col("i", "Total"), joins=[CUSTOMER, wrong]), snapshot, scopes["analyst"])
    assert error.codes == ["JOIN_KEYS_MISMATCH"] and "Invoice.CustomerId → Customer.CustomerId" in str(error)
    # a key pair of one thing (a foreign key and the key it references, a self-join's) is left alone
    assert check(plan(col("i", "Total"), joins=[CUSTOMER]), snapshot, scopes["analyst"]).repairs == []


def test_a_column_of_the_table_one_foreign_key_away_joins_that_table(snapshot: SchemaSnapshot,
                                                                    scopes: dict[str, Scope]) -> None:
    # tracks sold in 2009: InvoiceLine has no InvoiceDate; its InvoiceId references Invoice, which has it
    year = {"kind": "date_part", "part": "year", "arg": col("il", "InvoiceDate")}
    data = plan(agg("sum", col("il", "Quantity")), table="InvoiceLine", alias="il", where=cmp(year, "=", lit(2009)))
    validated = check(data, snapshot, scopes["analyst"])
    assert [r.code for r in validated.repairs] == ["COLUMN_ON_PARENT_TABLE"]
    assert "Invoice, which its InvoiceId references, was joined in" in validated.repairs[0].message
    sql = generate_sql(validated.plan, "sqlite")
    assert "FROM InvoiceLine AS il LEFT JOIN Invoice ON Invoice.InvoiceId = il.InvoiceId" in sql
    assert "Invoice.InvoiceDate" in sql
    check(validated.plan.model_dump(by_alias=True), snapshot, scopes["analyst"])  # the repaired plan is valid as is


def test_a_column_on_a_parent_the_plan_already_joins_is_read_there(snapshot: SchemaSnapshot,
                                                                   scopes: dict[str, Scope]) -> None:
    # Email is Customer's and Employee's (so not "the one other table"), and Invoice references Customer, which
    # the plan joins on that very key: c's Email, not a second Customer joined in
    data = plan(col("i", "Email"), agg("count"), joins=[
        CUSTOMER, join("Employee", "e", key(col("e", "EmployeeId"), col("c", "SupportRepId")))],
        group_by=[col("c", "CustomerId")])
    validated = check(data, snapshot, scopes["admin"])
    assert [r.code for r in validated.repairs] == ["COLUMN_ON_PARENT_TABLE", "GROUP_BY_DEPENDENT_COLUMN"]
    assert "c is the Customer its CustomerId references" in validated.repairs[0].message
    sql = generate_sql(validated.plan, "sqlite")
    assert sql.count("JOIN Customer") == 1 and "SELECT c.Email" in sql
    assert "GROUP BY c.CustomerId, c.Email" in sql


def test_a_key_shown_beside_its_tables_grouped_name_is_grouped_by(snapshot: SchemaSnapshot,
                                                                   scopes: dict[str, Scope]) -> None:
    artist = join("Artist", "ar", key(col("ar", "ArtistId"), col("al", "ArtistId")))
    data = plan(col("ar", "Name"), col("ar", "ArtistId"), agg("count"), table="Album", alias="al", joins=[artist],
                group_by=[col("ar", "Name")])
    validated = check(data, snapshot, scopes["analyst"])
    assert [r.code for r in validated.repairs] == ["GROUP_BY_SHOWN_KEY"]
    assert "GROUP BY ar.Name, ar.ArtistId" in generate_sql(validated.plan, "sqlite")
    # over the table alone, grouping by its key would count ones: still a mismatch
    alone = plan(col("c", "FirstName"), col("c", "CustomerId"), agg("count"), table="Customer", alias="c",
                 group_by=[col("c", "FirstName")])
    assert [i.code for i in problems(alone, snapshot, scopes["analyst"]).issues] == ["GROUP_BY_MISMATCH"]
    # a grouped foreign key names another table's rows: the shown key of this one is not added
    tracks = plan(col("t", "TrackId"), agg("count"), table="Track", alias="t",
                  joins=[join("Album", "al", key(col("al", "AlbumId"), col("t", "AlbumId")))],
                  group_by=[col("t", "GenreId")])
    assert [i.code for i in problems(tracks, snapshot, scopes["analyst"]).issues] == ["GROUP_BY_MISMATCH"]


def test_a_join_key_named_after_the_other_side_follows_the_declared_key(snapshot: SchemaSnapshot,
                                                                        scopes: dict[str, Scope]) -> None:
    # Customer has no InvoiceId; the one foreign key between the two ends at i.CustomerId on Invoice's side
    data = plan(col("c", "LastName"), joins=[join("Customer", "c", key(col("i", "CustomerId"), col("c", "InvoiceId")))])
    validated = check(data, snapshot, scopes["analyst"])
    assert [r.code for r in validated.repairs] == ["JOIN_ON_DECLARED_KEY"]
    assert "JOIN Customer AS c ON i.CustomerId = c.CustomerId" in generate_sql(validated.plan, "sqlite")
    # the kept side is no end of a key between them: two readings, still unknown
    stray = plan(col("c", "LastName"), joins=[join("Customer", "c", key(col("i", "Total"), col("c", "InvoiceId")))])
    assert "UNKNOWN_COLUMN" in [i.code for i in problems(stray, snapshot, scopes["analyst"]).issues]


def test_a_column_one_foreign_key_away_is_not_joined_when_unreadable_or_ambiguous(
        snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    # Track.Name on an InvoiceLine is Track's, but the viewer may not read InvoiceLine at all: refused first
    with pytest.raises(SecurityViolation):
        check(plan(col("il", "Name"), table="InvoiceLine", alias="il"), snapshot, scopes["viewer"])
    # Customer.SupportRepId references Employee, which the analyst may not read: no join, and no word of it
    error = problems(plan(col("c", "Title"), table="Customer", alias="c"), snapshot, scopes["analyst"])
    assert error.codes == ["UNKNOWN_COLUMN"] and "Employee" not in str(error)
    # Track references Album, Genre and MediaType, and both Genre and MediaType have a Name: Track.Name is its own,
    # but a Track "GenreName"-like slip with two holders stays an error naming both
    error = problems(plan(col("t", "MediaTypeName"), table="Track", alias="t"), snapshot, scopes["viewer"])
    assert error.codes == ["UNKNOWN_COLUMN"]


def test_a_missing_column_names_the_readable_tables_that_have_it(snapshot: SchemaSnapshot,
                                                                 scopes: dict[str, Scope]) -> None:
    error = problems(plan(col("t", "Quantity"), table="Track", alias="t"), snapshot, scopes["analyst"])
    assert "Quantity is a column of InvoiceLine: join that table and take it from there." in str(error)
    error = problems(plan(col("t", "Quantity"), table="Track", alias="t"), snapshot, scopes["viewer"])
    assert "InvoiceLine" not in str(error)  # the viewer may not read it


def test_a_column_the_tables_are_joined_on_is_read_from_one_of_them(snapshot: SchemaSnapshot,
                                                                   scopes: dict[str, Scope]) -> None:
    # FROM Invoice i JOIN Customer c ON c.CustomerId = i.CustomerId: an unqualified CustomerId has one value per row
    data = plan(col(None, "CustomerId"), agg("sum", col("i", "Total")), joins=[CUSTOMER],
                group_by=[col(None, "CustomerId")])
    validated = check(data, snapshot, scopes["analyst"])
    assert [r.code for r in validated.repairs] == ["JOIN_KEY_COLUMN", "JOIN_KEY_COLUMN"]
    assert "CustomerId read as i.CustomerId" in validated.repairs[0].message
    assert "SELECT i.CustomerId, SUM(i.Total)" in generate_sql(validated.plan, "sqlite")
    # the FROM table is kept by a LEFT join: its value is the one
    left = plan(col(None, "CustomerId"), joins=[join("Customer", "c", key(col("c", "CustomerId"),
                                                                         col("i", "CustomerId")), type="left")])
    assert [r.code for r in check(left, snapshot, scopes["analyst"]).repairs] == ["JOIN_KEY_COLUMN"]


def test_a_column_of_tables_not_all_joined_on_it_stays_ambiguous(snapshot: SchemaSnapshot,
                                                                 scopes: dict[str, Scope]) -> None:
    # Track and InvoiceLine both have TrackId, joined on it, but by LEFT joins from Genre: a NULL on one side only
    data = plan(col(None, "TrackId"), table="Genre", alias="g",
                joins=[join("Track", "t", key(col("t", "GenreId"), col("g", "GenreId")), type="left"),
                       join("InvoiceLine", "il", key(col("il", "TrackId"), col("t", "TrackId")), type="left")])
    assert problems(data, snapshot, scopes["analyst"]).codes == ["AMBIGUOUS_COLUMN"]
    # joined on another column: two values per row
    other = plan(col(None, "UnitPrice"), table="InvoiceLine", alias="il",
                 joins=[join("Track", "t", key(col("t", "TrackId"), col("il", "TrackId")))])
    assert problems(other, snapshot, scopes["analyst"]).codes == ["AMBIGUOUS_COLUMN"]


def test_a_column_labelled_with_another_tables_name_is_read_on_that_table_wherever_the_plan_names_it(
        snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    # SELECT T2.Name AS genre … FROM Genre AS T1 JOIN Track AS T2 … GROUP BY T1.GenreId, T2.Name: aliases mixed up
    data = plan({"kind": "column", "table": "T2", "column": "Name"}, agg("count", col("T2", "TrackId")),
                table="Genre", alias="T1", joins=[join("Track", "T2", key(col("T1", "GenreId"), col("T2", "GenreId")))],
                group_by=[col("T1", "GenreId"), col("T2", "Name")])
    data["select"][0]["alias"] = "genre"
    validated = check(data, snapshot, scopes["analyst"])
    assert [r.code for r in validated.repairs] == ["LABEL_NAMES_TABLE"]
    assert "T2.Name AS genre read as T1.Name" in validated.repairs[0].message
    sql = generate_sql(validated.plan, "sqlite")
    assert sql.startswith("SELECT T1.Name AS genre, COUNT(T2.TrackId)") and "GROUP BY T1.GenreId, T1.Name" in sql


@pytest.mark.parametrize("label", ["track", "name", "tracks_total", None])
def test_a_label_that_names_no_other_table_with_the_column_changes_nothing(label: str | None, snapshot: SchemaSnapshot,
                                                                          scopes: dict[str, Scope]) -> None:
    data = plan(col("T2", "Name"), table="Genre", alias="T1",
                joins=[join("Track", "T2", key(col("T1", "GenreId"), col("T2", "GenreId")))])
    data["select"][0]["alias"] = label
    validated = check(data, snapshot, scopes["analyst"])
    assert not validated.repairs and validated.plan.select[0].expr.table == "T2"


def test_a_label_naming_a_table_without_the_column_changes_nothing(snapshot: SchemaSnapshot,
                                                                   scopes: dict[str, Scope]) -> None:
    data = plan(col("T2", "Milliseconds"), table="Genre", alias="T1",
                joins=[join("Track", "T2", key(col("T1", "GenreId"), col("T2", "GenreId")))])
    data["select"][0]["alias"] = "genre"  # Genre has no Milliseconds
    assert not check(data, snapshot, scopes["analyst"]).repairs


BRAZIL = "Which customers live in Brazil?"


def invented_address(on: dict) -> dict:
    """Customers joined to an Address table the model made up, filtered on its Country."""
    return plan(col("c", "FirstName"), col("a", "City"), table="Customer", alias="c",
                joins=[join("Address", "a", on)], where=cmp(col("a", "Country"), "=", lit("Brazil")))


def assert_join_dropped(data: dict, question: str, message: str, sql: str, snapshot: SchemaSnapshot,
                        caller: Scope) -> None:
    """The plan validates with one INVENTED_JOIN repair, saying `message`, and renders as `sql`."""
    validated = validate_plan(PlanModel.model_validate(data), snapshot, caller, question)
    [repair] = validated.repairs
    assert repair.code == "INVENTED_JOIN"  # the message names an alias or a column, never the table the model wrote
    assert repair.message == message
    assert generate_sql(validated.plan, "sqlite") == sql


def test_a_join_to_an_invented_table_on_a_column_the_readable_table_lacks_is_dropped(
        snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    data = invented_address(key(col("c", "AddressId"), col("a", "AddressId")))
    assert_join_dropped(data, BRAZIL, "The join on c.AddressId, a column Customer does not have, was dropped; City, "
                        "Country read from Customer.", "SELECT c.FirstName, c.City FROM Customer AS c "
                        "WHERE c.Country = 'Brazil'", snapshot, scopes["analyst"])
    # without the question (a verified, cached or gold plan) nothing is dropped: refused as ever
    with pytest.raises(SecurityViolation):
        validate_plan(PlanModel.model_validate(data), snapshot, scopes["analyst"])


@pytest.mark.parametrize(("case", "data", "role", "question"), [
    # joined on a key the readable table has: the model reached for another table, it did not invent a link
    ("real key", invented_address(key(col("c", "CustomerId"), col("a", "CustomerId"))), "analyst", BRAZIL),
    # the question names the table
    ("named", invented_address(key(col("c", "AddressId"), col("a", "AddressId"))), "analyst",
     "Which customers have an address in Brazil?"),
    # a column read through it that the readable table lacks
    ("own column", plan(col("a", "Street"), table="Customer", alias="c",
                        joins=[join("Address", "a", key(col("c", "AddressId"), col("a", "AddressId")))]),
     "analyst", BRAZIL),
    # a table outside the viewer's reach on a key the readable table has: refused, not read from Track
    ("hidden", plan(agg("sum", col("il", "UnitPrice")), table="Track", alias="t",
                    joins=[join("InvoiceLine", "il", key(col("t", "TrackId"), col("il", "TrackId")))]),
     "viewer", "Which tracks sell best?"),
    # an existing table the viewer may not read, on a column Track lacks: the same answer as an invented one
    # would get, so whether Invoice exists is not told; here it is named by the question, so refused
    ("hidden and named", plan(col("t", "Name"), table="Track", alias="t",
                              joins=[join("Invoice", "i", key(col("t", "InvoiceId"), col("i", "InvoiceId")))]),
     "viewer", "Which tracks are on an invoice?"),
])
def test_a_join_that_was_not_invented_is_refused_as_ever(case: str, data: dict, role: str, question: str,
                                                        snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    with pytest.raises(SecurityViolation):
        validate_plan(PlanModel.model_validate(data), snapshot, scopes[role], question)


def rep_email(table: str) -> dict:
    """Customers joined to a table named after their support rep's key, filtered on its Email."""
    return plan(col("c", "FirstName"), table="Customer", alias="c",
                joins=[join(table, "r", key(col("c", "SupportRepId"), col("r", "SupportRepId")))],
                where={"kind": "like", "expr": col("r", "Email"), "pattern": "%gmail.com"})


@pytest.mark.parametrize("table", ["SupportRep", "SupportRepId", "support_rep"])
def test_a_join_to_a_table_named_after_a_foreign_key_column_is_dropped(table: str, snapshot: SchemaSnapshot,
                                                                        scopes: dict[str, Scope]) -> None:
    assert_join_dropped(rep_email(table), "Which customers use a gmail address?",
                        "The join on a table named after c.SupportRepId, which is a column, was dropped; "
                        "Email read from Customer.", "SELECT c.FirstName FROM Customer AS c "
                        "WHERE c.Email LIKE '%gmail.com'", snapshot, scopes["analyst"])


@pytest.mark.parametrize("table, question", [
    # the question names the table word by word: it asks about the reps, which the analyst may not read
    ("SupportRep", "Which customers have support reps with a gmail address?"),
    # a table named after no column of the join: refused as ever
    ("Representative", "Which customers use a gmail address?"),
])
def test_a_table_named_by_the_question_or_after_no_column_is_refused(table: str, question: str,
                                                                     snapshot: SchemaSnapshot,
                                                                     scopes: dict[str, Scope]) -> None:
    with pytest.raises(SecurityViolation):
        validate_plan(PlanModel.model_validate(rep_email(table)), snapshot, scopes["analyst"], question)


def test_an_invented_join_gets_the_same_answer_whether_the_table_exists_or_not(
        snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    # Invoice exists but the viewer may not read it; Nowhere does not exist: both are dropped alike
    def listing(table: str) -> dict:
        return plan(col("t", "Name"), table="Track", alias="t",
                    joins=[join(table, "x", key(col("t", "SaleId"), col("x", "SaleId")))],
                    where=cmp(col("x", "Composer"), "=", lit("AC/DC")))
    question = "Which tracks did AC/DC write?"
    hidden, missing = (validate_plan(PlanModel.model_validate(listing(t)), snapshot, scopes["viewer"], question)
                       for t in ("Invoice", "Nowhere"))
    assert hidden.repairs == missing.repairs and hidden.plan == missing.plan
    assert generate_sql(hidden.plan, "sqlite") == "SELECT t.Name FROM Track AS t WHERE t.Composer = 'AC/DC'"


# --- scope inside every construct ---------------------------------------------------------------------


#: For the viewer (the music catalog only): Employee, Invoice and Customer are denied.
DENIED_INSIDE = {
    "union_branch": "SELECT g.Name FROM Genre g UNION SELECT e.LastName FROM Employee e",
    "intersect_branch": "SELECT g.Name FROM Genre g INTERSECT SELECT c.Country FROM Customer c",
    "except_branch_sub_query": "SELECT g.Name FROM Genre g EXCEPT SELECT g2.Name FROM Genre g2 WHERE g2.GenreId IN "
                               "(SELECT i.InvoiceId FROM Invoice i)",
    "common_table": "WITH staff AS (SELECT e.LastName FROM Employee e) SELECT s.LastName FROM staff s",
    "second_common_table": "WITH a AS (SELECT g.GenreId FROM Genre g), b AS (SELECT e.EmployeeId FROM Employee e) "
                           "SELECT a.GenreId FROM a",
    "derived_table": "SELECT x.LastName FROM (SELECT e.LastName FROM Employee e) x",
    "derived_table_in_join": "SELECT g.Name FROM Genre g JOIN (SELECT c.SupportRepId FROM Customer c) x "
                             "ON x.SupportRepId = g.GenreId",
    "cross_join": "SELECT g.Name FROM Genre g CROSS JOIN Employee e",
    "comma_join": "SELECT g.Name FROM Genre g, Invoice i",
    "join_condition": "SELECT g.Name FROM Genre g JOIN Track t ON t.GenreId = g.GenreId AND t.TrackId IN "
                      "(SELECT i.InvoiceId FROM Invoice i)",
    "like_pattern": "SELECT g.Name FROM Genre g WHERE g.Name LIKE (SELECT MIN(e.LastName) FROM Employee e)",
    "cast": "SELECT CAST((SELECT MAX(i.Total) FROM Invoice i) AS INTEGER) AS x FROM Genre g",
    "function": "SELECT SUBSTR(g.Name, 1, (SELECT COUNT(*) FROM Customer c)) FROM Genre g",
    "truth": "SELECT g.Name FROM Genre g WHERE (SELECT COUNT(*) FROM Employee e)",
    "common_table_inside_derived_table": "SELECT x.n FROM (WITH s AS (SELECT e.EmployeeId AS n FROM Employee e) "
                                         "SELECT s.n FROM s) x",
    "common_table_named_like_it_reads_the_table": "WITH Genre AS (SELECT e.LastName AS Name FROM Employee e) "
                                                  "SELECT Genre.Name FROM Genre",
}


@pytest.mark.parametrize("sql", DENIED_INSIDE.values(), ids=DENIED_INSIDE.keys())
def test_a_denied_table_inside_any_construct_is_refused(sql: str, snapshot: SchemaSnapshot,
                                                        scopes: dict[str, Scope]) -> None:
    from nl2sql.plan import plan_from_sql

    with pytest.raises(SecurityViolation) as caught:
        validate_plan(plan_from_sql(sql, "sqlite"), snapshot, scopes["viewer"])
    assert_generic(caught, "staff")


def test_a_common_table_named_like_a_denied_table_is_the_common_table(snapshot: SchemaSnapshot,
                                                                      scopes: dict[str, Scope]) -> None:
    from nl2sql.plan import plan_from_sql

    plan = plan_from_sql("WITH employee AS (SELECT g.Name AS LastName FROM Genre g) SELECT Employee.LastName "
                         "FROM Employee", "sqlite")
    validated = validate_plan(plan, snapshot, scopes["viewer"])
    assert [t.name for t in validated.tables] == ["Genre"]  # the database's table read: Genre only
    # the reference is written as the common table's own name, so no dialect can read it as the table
    for dialect in ("sqlite", "postgres", "snowflake"):
        sql = generate_sql(validated.plan, dialect)
        assert sql.count("employee") == 3 and "Employee" not in sql.replace("Employee.", ""), sql


def test_select_star_lists_the_columns_of_the_plans_tables(snapshot: SchemaSnapshot, scopes: dict[str, Scope]) -> None:
    from nl2sql.plan import plan_from_sql

    validated = validate_plan(plan_from_sql("SELECT g.*, m.Name AS media FROM Genre g CROSS JOIN MediaType m",
                                            "sqlite"), snapshot, scopes["viewer"])
    assert generate_sql(validated.plan, "sqlite") == ("SELECT g.GenreId, g.Name, m.Name AS media FROM Genre AS g "
                                                      "CROSS JOIN MediaType AS m")
    derived = validate_plan(plan_from_sql("SELECT * FROM (SELECT g.Name, COUNT(*) AS n FROM Genre g GROUP BY "
                                          "g.Name) x", "sqlite"), snapshot, scopes["viewer"])
    assert [item.expr.column for item in derived.plan.select] == ["Name", "n"]  # type: ignore[union-attr]
