"""`readable_sql` lays a statement out for a person and changes nothing but the spaces between its tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from nl2sql.evaluation.suite import load_suite
from nl2sql.plan.generate import readable_sql

SUITES = sorted((Path(__file__).resolve().parents[2] / "suites").glob("*.yaml"))
STATEMENTS = [case.sql for path in SUITES for case in load_suite(path).cases if case.sql]


def _squeezed(text: str) -> str:
    return "".join(text.split())


def test_the_suites_have_statements_to_lay_out() -> None:
    assert len(STATEMENTS) > 40


@pytest.mark.parametrize("dialect", ["sqlite", "duckdb", "postgres", None])
def test_only_whitespace_changes_and_lines_stay_short(dialect: str | None) -> None:
    for sql in STATEMENTS:
        laid = readable_sql(sql, dialect)
        assert _squeezed(laid) == _squeezed(sql), sql
        assert max(len(line) for line in laid.splitlines()) <= max(100, max(len(w) for w in sql.split()))


def test_a_clause_word_inside_a_string_or_a_name_stays_where_it_is() -> None:
    sql = "SELECT 'GROUP BY x, y' AS \"from where\", a FROM t WHERE b = 'ORDER BY'"
    laid = readable_sql(sql, "sqlite")
    assert laid.splitlines() == ["SELECT 'GROUP BY x, y' AS \"from where\", a", "FROM t", "WHERE b = 'ORDER BY'"]


def test_text_that_does_not_tokenize_is_shown_as_written() -> None:
    assert readable_sql("SELECT 'unterminated", "sqlite") == "SELECT 'unterminated"
