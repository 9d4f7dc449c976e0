"""The aggregator: join, compare and union of frames from different databases, join-key coercion by the
shared type rules (a cast nulls, never changes, a value), and the unconverted-key warnings."""

from __future__ import annotations

import sys
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from nl2sql.aggregate import (
    JOIN_KEY_UNCONVERTED,
    AggregateError,
    Combined,
    CombineSpec,
    Frame,
    JoinKeyPair,
    combine,
    convert,
)
from nl2sql.errors import NL2SQLError


def frame(sub_query_id: str, datasource: str, columns: list[str], dtypes: list[str], rows: list) -> Frame:
    return Frame(sub_query_id, datasource, columns, dtypes, [tuple(r) for r in rows])  # type: ignore[arg-type]


def join(left: Frame, right: Frame, *pairs: tuple[str, str], how: str = "inner", row_limit: int = 1000,
         kind: str = "join") -> Combined:
    spec = CombineSpec(kind=kind, left=left.sub_query_id, right=right.sub_query_id,  # type: ignore[arg-type]
                       join_keys=[JoinKeyPair(left=a, right=b) for a, b in pairs], how=how)  # type: ignore[arg-type]
    return combine({left.sub_query_id: left, right.sub_query_id: right}, spec, row_limit=row_limit)


CUSTOMERS = frame("q1", "chinook", ["CustomerId", "Name"], ["integer", "text"],
                  [(1, "Ana"), (2, "Bo"), (3, "Cy"), (12, "Di")])


# --- join: keys of the same and of different types ------------------------------------------------------


def test_integer_to_integer_join_keeps_left_order_then_right_order():
    tickets = frame("q2", "support", ["customer_id", "subject"], ["integer", "text"],
                    [(3, "late"), (1, "refund"), (3, "broken"), (9, "nobody")])
    out = join(CUSTOMERS, tickets, ("CustomerId", "customer_id"))
    assert out.columns == ["CustomerId", "Name", "subject"]
    assert out.rows == [(1, "Ana", "refund"), (3, "Cy", "late"), (3, "Cy", "broken")]
    assert (out.total_rows, out.truncated, out.warnings) == (3, False, [])


def test_integer_to_text_join_strips_text_and_reports_a_value_that_is_not_a_whole_number():
    tickets = frame("q2", "support", ["customer_id", "tickets"], ["text", "integer"],
                    [(" 12 ", 4), ("7.5", 1), ("2", 2), (None, 9)])
    out = join(CUSTOMERS, tickets, ("CustomerId", "customer_id"))
    assert out.columns == ["CustomerId", "Name", "tickets"]
    assert out.rows == [(2, "Bo", 2), (12, "Di", 4)]
    [warning] = out.warnings
    assert warning.code == JOIN_KEY_UNCONVERTED == "JOIN_KEY_UNCONVERTED"
    # The null key is not a failure and not counted among the values.
    assert warning.message == "1 of 3 support.customer_id values are not whole numbers and joined nothing."
    assert warning.detail["column"] == "customer_id"
    assert (warning.detail["failed"], warning.detail["total"], warning.detail["dtype"]) == (1, 3, "integer")
    assert warning.detail["datasource"] == "support"


def test_a_whole_float_joins_an_integer_and_a_non_whole_one_is_null_not_rounded():
    scores = frame("q2", "analytics", ["cid", "score"], ["float", "float"],
                   [(1.0, 0.5), (2.9999, 0.7), (3.5, 0.1), (12.0, 0.9)])
    out = join(CUSTOMERS, scores, ("CustomerId", "cid"))
    assert out.rows == [(1, "Ana", 0.5), (12, "Di", 0.9)]  # 2.9999 is not 3, 3.5 not 3 or 4
    [warning] = out.warnings
    assert warning.message == "2 of 4 analytics.cid values are not whole numbers and joined nothing."


def test_a_decimal_that_is_not_whole_never_meets_an_integer():
    amounts = frame("q2", "billing", ["customer", "due"], ["decimal", "decimal"],
                    [(Decimal("2.00"), Decimal("9.99")), (Decimal("3.10"), Decimal("1"))])
    out = join(CUSTOMERS, amounts, ("CustomerId", "customer"))
    assert out.rows == [(2, "Bo", Decimal("9.99"))]
    assert out.warnings[0].detail == {"column": "customer", "failed": 1, "total": 2, "dtype": "integer",
                                      "datasource": "billing", "sub_query_id": "q2"}


def test_date_to_iso_text_joins_and_a_non_iso_date_is_null_and_counted():
    sales = frame("q1", "shop", ["day", "sales"], ["date", "integer"],
                  [(date(2010, 3, 4), 10), (date(2010, 4, 3), 20)])
    notes = frame("q2", "crm", ["day", "note"], ["text", "text"],
                  [("2010-03-04", "launch"), ("03/04/2010", "ambiguous"), (" 2010-04-03 ", "easter"),
                   ("2010-02-30", "no such day")])
    out = join(sales, notes, ("day", "day"))
    assert out.columns == ["day", "sales", "note"]
    assert out.rows == [(date(2010, 3, 4), 10, "launch"), (date(2010, 4, 3), 20, "easter")]
    [warning] = out.warnings
    assert warning.message.startswith("2 of 4 crm.day values are not ISO dates")
    assert warning.detail["dtype"] == "date"


def test_a_datetime_with_an_offset_becomes_naive_utc():
    events = frame("q1", "web", ["at", "page"], ["datetime", "text"],
                   [(datetime(2024, 1, 1, 8, 0), "home"), (datetime(2024, 1, 1, 9, 30, 15, 500000), "cart")])
    logs = frame("q2", "logs", ["ts", "level"], ["text", "text"],
                 [("2024-01-01T10:00:00+02:00", "info"), ("2024-01-01 09:30:15.5Z", "warn"),
                  ("2024-01-01 08:00", "debug"), ("Jan 1 2024 8:00", "error")])
    out = join(events, logs, ("at", "ts"))
    assert out.rows == [(datetime(2024, 1, 1, 8, 0), "home", "info"),
                        (datetime(2024, 1, 1, 8, 0), "home", "debug"),
                        (datetime(2024, 1, 1, 9, 30, 15, 500000), "cart", "warn")]
    [warning] = out.warnings
    assert (warning.detail["failed"], warning.detail["total"], warning.detail["dtype"]) == (1, 4, "datetime")


def test_aware_datetimes_and_dates_meet_as_naive_utc_datetimes():
    tz = timezone(timedelta(hours=-5))
    left = frame("q1", "a", ["at", "x"], ["datetime", "integer"],
                 [(datetime(2024, 1, 1, 19, 0, tzinfo=tz), 1), (datetime(2024, 1, 2, 0, 0, tzinfo=tz), 2)])
    right = frame("q2", "b", ["day", "y"], ["date", "integer"], [(date(2024, 1, 2), 10)])
    out = join(left, right, ("at", "day"))
    assert out.rows == [(datetime(2024, 1, 1, 19, 0, tzinfo=tz), 1, 10)]  # 19:00-05:00 is midnight UTC


def test_text_booleans_join_a_boolean_and_other_words_are_counted():
    flags = frame("q1", "crm", ["vip", "label"], ["boolean", "text"], [(True, "gold"), (False, "plain")])
    text = frame("q2", "sheet", ["is_vip", "n"], ["text", "integer"],
                 [(" Yes ", 1), ("f", 2), ("T", 3), ("0", 4), ("maybe", 5)])
    out = join(flags, text, ("vip", "is_vip"))
    assert out.rows == [(True, "gold", 1), (True, "gold", 3), (False, "plain", 2), (False, "plain", 4)]
    assert out.warnings[0].message == "1 of 5 sheet.is_vip values are not true/false values and joined nothing."


def test_text_to_text_keys_are_stripped_on_both_sides():
    left = frame("q1", "a", ["code", "x"], ["text", "integer"], [("  AB", 1), ("cd ", 2)])
    right = frame("q2", "b", ["code", "y"], ["text", "integer"], [("AB  ", 10), ("CD", 20)])
    assert join(left, right, ("code", "code")).rows == [("  AB", 1, 10)]


def test_join_on_two_keys():
    left = frame("q1", "a", ["y", "m", "v"], ["integer", "integer", "integer"], [(2020, 1, 5), (2020, 2, 6)])
    right = frame("q2", "b", ["year", "month", "w"], ["text", "text", "integer"],
                  [("2020", "2", 60), ("2020", "1", 50), ("2021", "1", 0)])
    out = join(left, right, ("y", "year"), ("m", "month"))
    assert out.columns == ["y", "m", "v", "w"]
    assert out.rows == [(2020, 1, 5, 50), (2020, 2, 6, 60)]


def test_left_join_keeps_unmatched_left_rows_with_nulls():
    tickets = frame("q2", "support", ["customer_id", "subject"], ["integer", "text"], [(2, "late"), (2, "lost")])
    out = join(CUSTOMERS, tickets, ("CustomerId", "customer_id"), how="left")
    assert out.rows == [(1, "Ana", None), (2, "Bo", "late"), (2, "Bo", "lost"), (3, "Cy", None),
                        (12, "Di", None)]
    assert out.total_rows == 5


def test_a_right_column_that_clashes_is_renamed_after_its_datasource():
    left = frame("q1", "chinook", ["id", "Name", "support_Name"], ["integer", "text", "text"], [(1, "Ana", "x")])
    right = frame("q2", "support", ["cid", "Name", "id"], ["integer", "text", "integer"], [(1, "ana@x", 77)])
    out = join(left, right, ("id", "cid"))
    assert out.columns == ["id", "Name", "support_Name", "support_Name_2", "support_id"]
    assert out.rows == [(1, "Ana", "x", "ana@x", 77)]


def test_values_are_returned_as_the_frames_hold_them():
    big = 2**62 + 1  # a float could not tell it from its neighbours
    left = frame("q1", "a", ["id", "amount"], ["integer", "decimal"], [(big, Decimal("1.10")), (big - 1, None)])
    right = frame("q2", "b", ["id", "seen"], ["text", "datetime"], [(str(big), datetime(2024, 5, 6, 7, 8))])
    out = join(left, right, ("id", "id"))
    assert out.rows == [(big, Decimal("1.10"), datetime(2024, 5, 6, 7, 8))]
    assert isinstance(out.rows[0][1], Decimal)


# --- compare ---------------------------------------------------------------------------------------------


def test_compare_is_a_full_outer_join_ordered_by_key_with_a_difference():
    chinook = frame("q1", "chinook", ["country", "revenue"], ["text", "decimal"],
                    [("USA", Decimal("523.06")), ("Canada", Decimal("303.96")), ("Brazil", Decimal("190.10"))])
    web = frame("q2", "web", ["country", "revenue"], ["text", "decimal"],
                [(" Canada", Decimal("300.00")), ("USA", Decimal("523.06")), ("Chile", Decimal("10"))])
    out = join(chinook, web, ("country", "country"), kind="compare")
    assert out.columns == ["country", "chinook_revenue", "web_revenue", "difference"]
    assert out.rows == [
        ("Brazil", Decimal("190.10"), None, None),
        ("Canada", Decimal("303.96"), Decimal("300.00"), Decimal("3.96")),
        ("Chile", None, Decimal("10"), None),
        ("USA", Decimal("523.06"), Decimal("523.06"), Decimal("0.00")),
    ]
    assert (out.total_rows, out.truncated) == (4, False)


def test_compare_orders_numbers_as_numbers_and_keys_are_the_converted_values():
    left = frame("q1", "a", ["n", "count"], ["integer", "integer"], [(10, 1), (9, 2)])
    right = frame("q2", "b", ["n", "count"], ["text", "float"], [(" 9", 2.5), ("100", 1.0), ("x", 3.0)])
    out = join(left, right, ("n", "n"), kind="compare")
    assert out.columns == ["n", "a_count", "b_count", "difference"]
    assert out.rows == [(9, 2, 2.5, -0.5), (10, 1, None, None), (100, None, 1.0, None), (None, None, 3.0, None)]
    # In a compare the row still shows, so the warning says it matched nothing.
    assert out.warnings[0].message == "1 of 3 b.n values are not whole numbers and matched nothing."


def test_compare_without_exactly_one_number_per_side_has_no_difference():
    left = frame("q1", "a", ["k", "x", "y"], ["integer", "integer", "float"], [(1, 1, 1.0)])
    right = frame("q2", "a", ["k", "x"], ["integer", "integer"], [(1, 5)])
    out = join(left, right, ("k", "k"), kind="compare")
    assert out.columns == ["k", "a_x", "a_y", "a_x_2"]  # the same datasource twice: names stay unique
    assert out.rows == [(1, 1, 1.0, 5)]


# --- union -----------------------------------------------------------------------------------------------


def test_union_stacks_rows_with_a_datasource_column_and_aligns_columns_by_name():
    left = frame("q1", "chinook", ["name", "country"], ["text", "text"], [("Ana", "PT"), ("Bo", "SE")])
    right = frame("q2", "support", ["email", "name"], ["text", "text"], [("c@x", "Cy")])
    out = combine({"q1": left, "q2": right}, CombineSpec(kind="union", left="q1", right="q2"))
    assert out.columns == ["datasource", "name", "country", "email"]
    assert out.rows == [("chinook", "Ana", "PT", None), ("chinook", "Bo", "SE", None),
                        ("support", "Cy", None, "c@x")]
    assert (out.total_rows, out.truncated, out.warnings) == (3, False, [])


def test_union_renders_a_column_as_text_only_when_its_types_cannot_share_one():
    left = frame("q1", "a", ["id", "amount", "day"], ["integer", "integer", "date"],
                 [(1, 5, date(2024, 1, 2))])
    right = frame("q2", "b", ["id", "amount", "day"], ["text", "float", "datetime"],
                  [("B-7", 2.5, datetime(2024, 1, 3, 4, 5))])
    out = combine({"q1": left, "q2": right}, CombineSpec(kind="union", left="q1", right="q2"))
    # id: a number and text → text on both sides; amount: two numbers and day: two dates → kept.
    assert out.rows == [("a", "1", 5, date(2024, 1, 2)), ("b", "B-7", 2.5, datetime(2024, 1, 3, 4, 5))]


# --- limits, errors, empty frames ------------------------------------------------------------------------


def test_row_limit_truncates_and_total_rows_counts_everything():
    many = frame("q2", "support", ["customer_id", "n"], ["integer", "integer"], [(1, i) for i in range(5)])
    out = join(CUSTOMERS, many, ("CustomerId", "customer_id"), row_limit=3)
    assert out.rows == [(1, "Ana", 0), (1, "Ana", 1), (1, "Ana", 2)]
    assert (out.total_rows, out.truncated) == (5, True)
    compared = join(CUSTOMERS, many, ("CustomerId", "customer_id"), kind="compare", row_limit=2)
    assert (len(compared.rows), compared.total_rows, compared.truncated) == (2, 8, True)
    union = combine({"q1": CUSTOMERS, "q2": many}, CombineSpec(kind="union", left="q1", right="q2"), row_limit=6)
    assert (len(union.rows), union.total_rows, union.truncated) == (6, 9, True)
    assert union.rows[3:] == [("chinook", 12, "Di", None, None), ("support", None, None, 1, 0),
                              ("support", None, None, 1, 1)]


def test_keys_of_types_that_cannot_meet_are_an_aggregator_error_in_words():
    left = frame("q1", "files", ["blob", "x"], ["binary", "integer"], [(b"\x00", 1)])
    right = frame("q2", "shop", ["day", "y"], ["date", "integer"], [(date(2024, 1, 1), 2)])
    with pytest.raises(AggregateError) as info:
        join(left, right, ("blob", "day"))
    assert isinstance(info.value, NL2SQLError)
    assert info.value.code == "AGGREGATOR_FAILED"
    assert "files.blob, which is binary data" in info.value.message
    assert "shop.day, which is a date" in info.value.message


@pytest.mark.parametrize(("spec", "needle"), [
    (CombineSpec(kind="join", left="q1", right="q3", join_keys=[JoinKeyPair(left="CustomerId", right="x")]),
     "sub-query 'q3', has no result"),
    (CombineSpec(kind="join", left="q1", right="q2", join_keys=[JoinKeyPair(left="CustomerID", right="n")]),
     "Did you mean 'CustomerId'?"),
    (CombineSpec(kind="compare", left="q1", right="q2"), "needs at least one join key"),
])
def test_a_spec_that_names_what_is_not_there_is_an_aggregator_error(spec: CombineSpec, needle: str):
    other = frame("q2", "support", ["n"], ["integer"], [(1,)])
    with pytest.raises(AggregateError, match=needle.replace("?", r"\?")):
        combine({"q1": CUSTOMERS, "q2": other}, spec)


def test_empty_frames_combine_to_no_rows_with_the_right_columns():
    empty = frame("q2", "support", ["customer_id", "subject"], ["text", "text"], [])
    out = join(CUSTOMERS, empty, ("CustomerId", "customer_id"))
    assert (out.columns, out.rows, out.total_rows, out.truncated, out.warnings) == (
        ["CustomerId", "Name", "subject"], [], 0, False, [])
    assert join(CUSTOMERS, empty, ("CustomerId", "customer_id"), how="left").rows[0] == (1, "Ana", None)
    compared = join(empty, CUSTOMERS, ("customer_id", "CustomerId"), kind="compare")
    assert compared.columns == ["customer_id", "support_subject", "chinook_Name"]
    assert compared.rows[:2] == [(1, None, "Ana"), (2, None, "Bo")]
    both_empty = combine({"q1": empty, "q2": empty}, CombineSpec(kind="union", left="q1", right="q2"))
    assert (both_empty.columns, both_empty.rows, both_empty.total_rows) == (
        ["datasource", "customer_id", "subject"], [], 0)


def test_convert_nulls_never_changes_a_value():
    assert convert(" 12 ", "text", "integer") == 12
    assert convert("12.0", "text", "integer") == 12
    assert convert("1_000", "text", "integer") is None
    assert convert(2**53 + 1, "integer", "float") is None  # a float cannot hold it
    assert convert(0.1, "float", "decimal") == Decimal("0.1")
    assert convert(True, "boolean", "integer") == 1
    assert convert(2, "integer", "boolean") is None
    assert convert("2024-01-01T00:30:00-01:30", "text", "datetime") == datetime(2024, 1, 1, 2, 0)
    assert convert("2024-01-01T10:00", "text", "date") is None  # a time is not a date
    assert convert(datetime(2024, 1, 1), "datetime", "date") == date(2024, 1, 1)
    assert convert("2024-01-01", "text", "datetime") == datetime(2024, 1, 1)
    assert convert(None, "text", "integer") is None


def test_the_aggregator_does_not_import_prefect():
    import subprocess

    code = "import sys, nl2sql.aggregate; print('prefect' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
