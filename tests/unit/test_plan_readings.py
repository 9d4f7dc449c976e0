"""A model's plan read against its question and its own labels (nl2sql.plan.readings): a range of positions has
one page, a label's unit one factor; anything else is left as the model wrote it."""

from __future__ import annotations

import re

import pytest

from nl2sql.plan import PlanModel
from nl2sql.plan.readings import read_against_question


def col(table: str | None, column: str) -> dict:
    return {"kind": "column", "table": table, "column": column}


def page(limit: int | None, offset: int | None) -> PlanModel:
    return PlanModel.model_validate({"select": [{"expr": col("t", "Name")}], "from": {"table": "Track", "alias": "t"},
                                     "order_by": [{"expr": col("t", "Milliseconds"), "direction": "desc"}],
                                     "limit": limit, "offset": offset})


@pytest.mark.parametrize(("question", "limit", "offset"), [
    ("Which are the 11th to 20th longest tracks?", 10, 9),
    ("Which are the 11th to 20th longest tracks?", 10, 11),
    ("Which customers come 11th through the 20th by last name?", 20, 10),  # the range's end written as LIMIT
    ("Show the 1st-5th invoices by total", 5, 1),
])
def test_a_range_of_positions_one_off_is_set_to_its_page(question: str, limit: int, offset: int) -> None:
    first, last = (int(n) for n in re.findall(r"(\d+)(?:st|nd|rd|th)", question))
    fixed, repairs = read_against_question(page(limit, offset), question)
    assert (fixed.limit, fixed.offset) == (last - first + 1, first - 1)
    assert [r.code for r in repairs] == ["QUESTION_RANGE"] and f"positions {first} to {last}" in repairs[0].message


@pytest.mark.parametrize(("question", "limit", "offset"), [
    ("Which are the 11th to 20th longest tracks?", 10, 10),  # right already
    ("Which are the 11th to 20th longest tracks?", 5, 3),  # another reading than one position off: the model's
    ("Which are the ten longest tracks?", 10, 1),  # no range named
    ("Compare the 1st to 5th and the 6th to 10th tracks", 5, 1),  # two ranges: which one is this plan?
    ("Which are the 11th to 20th longest tracks?", None, None),
])
def test_anything_else_is_left_as_written(question: str, limit: int | None, offset: int | None) -> None:
    plan = page(limit, offset)
    fixed, repairs = read_against_question(plan, question)
    assert fixed is plan and repairs == []


@pytest.mark.parametrize("question", ["Which genres sell best in Germany?", "What are the longest tracks?"])
def test_a_limit_the_question_asks_for_nowhere_is_dropped(question: str) -> None:
    fixed, repairs = read_against_question(page(5, None), question)
    assert fixed.limit is None and [r.code for r in repairs] == ["LIMIT_NOT_ASKED"]
    assert repairs[0].message.startswith("LIMIT 5 dropped")


@pytest.mark.parametrize(("question", "limit", "offset"), [
    ("Which are the five longest tracks?", 5, None),  # a number
    ("Which are the 5 longest tracks?", 10, None),  # a number, even another one: the model's to answer
    ("Who are the top customers by spend?", 10, None),  # `top` asks for a cut
    ("Which genre sells best in Germany?", 1, None),  # one row: the question's singular
    ("Which tracks are longest?", 10, 20),  # a page
])
def test_a_limit_the_question_asks_for_stays(question: str, limit: int, offset: int | None) -> None:
    plan = page(limit, offset)
    fixed, repairs = read_against_question(plan, question)
    assert fixed is plan and repairs == []


def divided(alias: str, column: str, factor: float, aggregate: str | None = None) -> PlanModel:
    value: dict = col("t", column)
    if aggregate:
        value = {"kind": "aggregate", "func": aggregate, "arg": value}
    expr = {"kind": "function", "name": "round", "args": [
        {"kind": "arithmetic", "op": "/", "left": value, "right": {"kind": "literal", "value": factor}},
        {"kind": "literal", "value": 2}]}
    return PlanModel.model_validate({"select": [{"expr": expr, "alias": alias}], "from": {"table": "Track", "alias": "t"}})


@pytest.mark.parametrize(("alias", "column", "written", "aggregate", "wanted"), [
    ("minutes", "Milliseconds", 1000, None, 60_000),  # milliseconds to seconds, labelled minutes
    ("avg_minutes", "Milliseconds", 1000.0, "avg", 60_000),
    ("length_seconds", "Milliseconds", 60_000, "max", 1000),
    ("megabytes", "Bytes", 1024, None, 1024 ** 2),
    ("hours", "Seconds", 60, None, 3600),
])
def test_a_label_in_one_unit_divides_by_its_factor(alias: str, column: str, written: float, aggregate: str | None,
                                                   wanted: float) -> None:
    fixed, repairs = read_against_question(divided(alias, column, written, aggregate), "any question")
    division = fixed.select[0].expr.args[0]  # type: ignore[union-attr]
    assert division.right.value == wanted and [r.code for r in repairs] == ["UNIT_FACTOR"]


@pytest.mark.parametrize(("alias", "column", "written"), [
    ("minutes", "Milliseconds", 60_000),  # right already
    ("megabytes", "Bytes", 1_000_000),  # decimal megabytes: a reading of its own
    ("minutes", "Milliseconds", 7),  # no unit's factor: the model meant something else
    ("min_length", "Milliseconds", 1000),  # `min` is a minimum as often as minutes
    ("minutes", "Bytes", 1000),  # a size labelled in time: no reading
    ("seconds_per_megabyte", "Milliseconds", 1000),  # two units in the label
    ("share", "Milliseconds", 1000),
])
def test_a_factor_with_another_reading_is_left_as_written(alias: str, column: str, written: float) -> None:
    plan = divided(alias, column, written)
    fixed, repairs = read_against_question(plan, "any question")
    assert fixed is plan and repairs == []


def genre_tracks(select: list[dict], where: dict) -> PlanModel:
    return PlanModel.model_validate({
        "select": [{"expr": e} for e in select], "from": {"table": "Genre", "alias": "g"},
        "joins": [{"type": "inner", "table": {"table": "Track", "alias": "t"},
                   "on": [{"left": col("g", "GenreId"), "right": col("t", "GenreId")}]}], "where": where})


def equals(ref: dict, value: object) -> dict:
    return {"kind": "compare", "op": "=", "left": ref, "right": {"kind": "literal", "value": value}}


@pytest.fixture(scope="module")
def chinook_tables(chinook_path) -> dict:  # type: ignore[no-untyped-def]
    from nl2sql.datasources import adapter_class

    snapshot = adapter_class("sqlite")("chinook", f"sqlite:///{chinook_path}").reflect()
    return {t.name: t for t in snapshot.tables}


def test_a_list_of_the_value_its_filter_fixes_shows_the_other_tables_column(chinook_tables: dict) -> None:
    # "List the tracks in the bossa nova genre", written with the genre's alias on the shown column
    plan = genre_tracks([col("g", "Name")], equals(col("g", "Name"), "Bossa Nova"))
    fixed, repairs = read_against_question(plan, "List the tracks in the bossa nova genre.", chinook_tables)
    assert fixed.select[0].expr.table == "t" and fixed.where.left.table == "g"  # type: ignore[union-attr]
    assert [r.code for r in repairs] == ["SHOWN_COLUMN_FIXED"]


@pytest.mark.parametrize(("select", "where"), [
    ([col("g", "Name"), col("t", "Composer")], equals(col("g", "Name"), "Jazz")),  # one column says something
    ([col("g", "Name")], {"kind": "compare", "op": ">", "left": col("g", "Name"), "right": {"kind": "literal",
                                                                                         "value": "J"}}),
    ([col("g", "GenreId")], equals(col("g", "GenreId"), 2)),  # Track's GenreId: joined on it, so fixed as well
    ([col("t", "Composer")], equals(col("t", "Composer"), "AC/DC")),  # no other table has a Composer
])
def test_a_list_that_says_something_is_left_as_written(select: list[dict], where: dict, chinook_tables: dict) -> None:
    plan = genre_tracks(select, where)
    fixed, repairs = read_against_question(plan, "any question", chinook_tables)
    assert fixed is plan and repairs == []
