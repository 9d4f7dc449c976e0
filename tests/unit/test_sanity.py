"""The result checks' rules, without a database: which joins repeat which tables, the probes they build, which
filters are checked, the closest values, all-null columns."""

from __future__ import annotations

import pandas as pd
import pytest

from nl2sql.datasources.models import ColumnInfo, TableInfo
from nl2sql.plan import PlanModel
from nl2sql.sanity import (
    check_fan_out,
    check_nulls,
    check_values,
    closest_values,
    literal_filters,
    repeated_aliases,
    text_columns_elsewhere,
)
from nl2sql.sanity.values import LiteralFilter, plan_tables, spelt_alike


def table(name: str, key: list[str], *columns: tuple[str, str]) -> TableInfo:
    return TableInfo(name=name, primary_key=key,
                     columns=[ColumnInfo(name=c, type=t, primary_key=c in key) for c, t in columns])


TABLES = {t.name: t for t in [
    table("Invoice", ["InvoiceId"], ("InvoiceId", "INTEGER"), ("Total", "NUMERIC(10,2)"),
          ("BillingCountry", "NVARCHAR(40)")),
    table("InvoiceLine", ["InvoiceLineId"], ("InvoiceLineId", "INTEGER"), ("InvoiceId", "INTEGER"),
          ("UnitPrice", "NUMERIC(10,2)"), ("Quantity", "INTEGER")),
    table("Customer", ["CustomerId"], ("CustomerId", "INTEGER"), ("Country", "NVARCHAR(40)"),
          ("SupportRepId", "INTEGER")),
    table("Note", [], ("InvoiceId", "INTEGER"), ("Text", "TEXT")),
]}


def col(alias: str, name: str) -> dict:
    return {"kind": "column", "table": alias, "column": name}


def plan(*joins: tuple[str, str, str, str], select: list[dict] | None = None, where: dict | None = None,
         group_by: list[dict] | None = None, base: tuple[str, str] = ("Invoice", "i")) -> PlanModel:
    """FROM base, then each join (table, alias, its column, the column of an earlier alias it meets)."""
    return PlanModel.model_validate({
        "select": select or [{"expr": col(base[1], "InvoiceId")}], "from": {"table": base[0], "alias": base[1]},
        "joins": [{"table": {"table": t, "alias": a}, "on": [{"left": col(a, c), "right": col(o.split(".")[0],
                                                                                           o.split(".")[1])}]}
                  for t, a, c, o in joins],
        "where": where, "group_by": group_by or []})


def aliases(p: PlanModel) -> dict[str, TableInfo]:
    return plan_tables(p, TABLES.get)


def test_a_join_on_columns_that_are_not_the_far_tables_key_repeats_the_near_side() -> None:
    p = plan(("InvoiceLine", "il", "InvoiceId", "i.InvoiceId"))
    assert set(repeated_aliases(p, aliases(p))) == {"i"}  # each invoice once per line
    # the same join written from the lines: it is still the invoice that repeats
    p = plan(("Invoice", "i", "InvoiceId", "il.InvoiceId"), base=("InvoiceLine", "il"))
    assert set(repeated_aliases(p, aliases(p))) == {"i"}


def test_the_whole_near_side_of_the_join_tree_repeats() -> None:
    p = plan(("Customer", "c", "CustomerId", "i.InvoiceId"), ("InvoiceLine", "il", "InvoiceId", "i.InvoiceId"))
    # Customer reached on its key repeats nothing; the lines repeat the invoice and the customer joined to it
    assert set(repeated_aliases(p, aliases(p))) == {"i", "c"}


def test_a_table_without_a_known_key_counts_as_unique() -> None:
    p = plan(("Note", "n", "InvoiceId", "i.InvoiceId"))
    assert repeated_aliases(p, aliases(p)) == {}


def test_only_a_plain_sum_count_or_avg_over_a_repeated_table_is_probed() -> None:
    probes: list[str] = []

    def probe(tree, limit):  # type: ignore[no-untyped-def]
        probes.append(tree.sql(dialect="sqlite"))
        return [(1,)]

    def findings(func: str, column: str, *, distinct: bool = False) -> list[str]:
        agg = {"kind": "aggregate", "func": func, "arg": col(column.split(".")[0], column.split(".")[1]),
               "distinct": distinct}
        p = plan(("InvoiceLine", "il", "InvoiceId", "i.InvoiceId"), select=[{"expr": agg}],
                 where={"kind": "compare", "op": ">", "left": col("i", "Total"), "right": {"kind": "literal",
                                                                                           "value": 1}})
        return [f.code for f in check_fan_out(p, aliases(p), dialect="sqlite", schemas=None, probe=probe)]

    assert findings("sum", "i.Total") == ["JOIN_FAN_OUT"]
    assert probes[-1] == ("SELECT 1 AS repeated FROM Invoice AS i INNER JOIN InvoiceLine AS il ON il.InvoiceId = "
                          "i.InvoiceId WHERE i.Total > 1 AND NOT i.InvoiceId IS NULL GROUP BY i.InvoiceId "
                          "HAVING COUNT(*) > 1 LIMIT 1")
    assert findings("avg", "i.Total") == findings("count", "i.Total") == ["JOIN_FAN_OUT"]
    assert findings("sum", "i.Total", distinct=True) == []
    assert findings("max", "i.Total") == []
    assert findings("sum", "il.UnitPrice") == []  # the lines are not repeated
    calls = len(probes)
    assert findings("sum", "i.Total") and len(probes) == calls + 1


def test_no_finding_when_the_probe_finds_no_repeated_row() -> None:
    p = plan(("InvoiceLine", "il", "InvoiceId", "i.InvoiceId"),
             select=[{"expr": {"kind": "aggregate", "func": "sum", "arg": col("i", "Total")}}])
    assert check_fan_out(p, aliases(p), dialect="sqlite", schemas=None, probe=lambda tree, limit: []) == []


def test_the_value_check_reads_equality_and_in_filters_on_text_columns() -> None:
    where = {"kind": "and", "conditions": [
        {"kind": "compare", "op": "=", "left": col("i", "BillingCountry"), "right": {"kind": "literal",
                                                                                     "value": "germany"}},
        {"kind": "in", "expr": col("c", "Country"), "values": [{"kind": "literal", "value": "France"},
                                                               {"kind": "literal", "value": "Brasil"}]},
        {"kind": "in", "expr": col("c", "Country"), "negated": True, "values": [{"kind": "literal",
                                                                                 "value": "Spain"}]},
        {"kind": "compare", "op": "=", "left": col("i", "Total"), "right": {"kind": "literal", "value": "3"}},
        {"kind": "compare", "op": "<>", "left": col("c", "Country"), "right": {"kind": "literal", "value": "USA"}}]}
    p = plan(("Customer", "c", "CustomerId", "i.InvoiceId"), where=where)
    filters = literal_filters(p, aliases(p))
    assert [(f.name, f.literal) for f in filters] == [("Invoice.BillingCountry", "germany"),
                                                      ("Customer.Country", "France"), ("Customer.Country", "Brasil")]
    stored = {"germany": [], "France": [(1,)], "Brasil": []}
    countries = [("Germany",), ("France",), ("Brazil",), ("USA",)]

    def probe(tree, limit):  # type: ignore[no-untyped-def]
        sql = tree.sql()
        if "DISTINCT" in sql:
            return countries
        return next(rows for literal, rows in stored.items() if f"'{literal}'" in sql)

    found = check_values(filters, samples=lambda item: [], probe=probe)
    assert [f.message for f in found] == ["'germany' is not a Invoice.BillingCountry; closest: 'Germany'.",
                                          "'Brasil' is not a Customer.Country; closest: 'Brazil'."]
    # a value among the profiled samples needs no probe at all
    assert check_values(filters[:1], samples=lambda item: ["germany"], probe=None) == []  # type: ignore[arg-type]


def test_the_value_check_reads_the_filters_of_the_sub_plans_that_keep_rows() -> None:
    def sub(value: str) -> dict:
        return {"select": [{"expr": col("c", "CustomerId")}], "from": {"table": "Customer", "alias": "c"},
                "where": {"kind": "compare", "op": "=", "left": col("c", "Country"),
                          "right": {"kind": "literal", "value": value}}}
    where = {"kind": "and", "conditions": [
        {"kind": "in_subquery", "expr": col("i", "InvoiceId"), "plan": sub("Germany")},
        {"kind": "exists", "plan": sub("France")},
        {"kind": "in_subquery", "expr": col("i", "InvoiceId"), "plan": sub("Spain"), "negated": True}]}
    p = plan(where=where)
    assert literal_filters(p, aliases(p)) == []  # without a lookup only the plan's own tables are read
    assert [(f.name, f.literal) for f in literal_filters(p, aliases(p), TABLES.get)] == [
        ("Customer.Country", "Germany"), ("Customer.Country", "France")]  # a NOT IN keeps rows without it


def test_a_value_another_readable_column_holds_as_written_is_fixable_and_named() -> None:
    filters = [LiteralFilter(TABLES["Invoice"], "BillingCountry", literal) for literal in ("Canada", "Narnia")]
    readable = [TABLES["Invoice"], TABLES["Customer"], TABLES["Note"]]
    probed: list[str] = []

    def probe(tree, limit):  # type: ignore[no-untyped-def]
        sql = tree.sql()
        probed.append(sql)
        return [(1,)] if "Country" in sql and "Billing" not in sql and "'Canada'" in sql else []

    found = check_values(filters, samples=lambda item: [], probe=probe,
                         elsewhere=lambda item: text_columns_elsewhere(item, readable))
    assert [f.fixable for f in found] == [True, False]
    assert found[0].message == "'Canada' is not a Invoice.BillingCountry; it is a Customer.Country."
    assert found[0].detail["found_in"] == "Customer.Country" and "found_in" not in found[1].detail
    # only the other text columns of the tables given are probed: never a number column, never one not given
    narnia = [sql for sql in probed if "'Narnia'" in sql and "DISTINCT" not in sql]
    assert [sql.split(" WHERE ")[1].split(" =")[0] for sql in narnia] == ['"BillingCountry"', '"Country"', '"Text"']


@pytest.mark.parametrize(("literal", "values", "closest"), [
    ("heavy metal", ["Rock", "Metal", "Heavy Metal", "Jazz"], ["Heavy Metal", "Metal"]),
    ("ROCK", ["Rock", "Rock And Roll", "Pop"], ["Rock", "Rock And Roll"]),
    ("zydeco", ["Rock", "Jazz"], []),
])
def test_closest_values(literal: str, values: list[str], closest: list[str]) -> None:
    assert closest_values(literal, values) == closest


@pytest.mark.parametrize(("literal", "value", "alike"), [
    ("Brasil", "Brazil", True),                    # a letter slipped
    ("alternative punk", "Alternative & Punk", True),  # punctuation
    ("Sao Paulo", "São Paulo", True),              # accents
    ("heavy metal", "Metal", True),                # whole words of it
    ("Narnia", "Austria", False),                  # merely near
    ("Narnia", "Argentina", False),
    ("met", "Metallica", False),                   # a part of a word is not a word
])
def test_a_stored_value_reads_as_the_literal_spelt_differently(literal: str, value: str, alike: bool) -> None:
    assert spelt_alike(literal, value) is alike


def test_a_missing_value_is_fixable_only_when_a_stored_one_reads_as_it() -> None:
    filters = [LiteralFilter(TABLES["Customer"], "Country", literal) for literal in ("Brasil", "Narnia")]
    stored = [("Brazil",), ("Austria",), ("Argentina",)]
    found = check_values(filters, samples=lambda item: [], probe=lambda sql, limit: [] if limit == 1 else stored)
    assert [f.fixable for f in found] == [True, False]
    assert found[0].detail["closest"][0] == "Brazil" and "Brazil" not in found[1].detail["closest"]


def test_all_null_columns_of_a_result_with_rows() -> None:
    frame = pd.DataFrame({"a": [1, None], "b": [None, None], "c": [float("nan"), None]})
    assert [f.detail["column"] for f in check_nulls(frame)] == ["b", "c"]
    assert check_nulls(pd.DataFrame({"b": []})) == []
