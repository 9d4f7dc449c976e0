"""The demo's index: routing picks the right database, retrieval respects the caller's scope."""

from __future__ import annotations

import pytest

from nl2sql.errors import SecurityViolation
from nl2sql.index.route import fuse


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("How many urgent tickets are still open?", "support"),
        ("Which album has the most tracks?", "chinook"),
        ("Which campaign brought the most web orders?", "webanalytics"),
        ("Which agent got the worst satisfaction scores?", "support"),
        ("How many sessions bounced after one page?", "webanalytics"),
        ("Which artists have the most albums?", "chinook"),
    ],
)
def test_demo_questions_route_first_to_their_database(demo_index, question: str, expected: str) -> None:
    routing = demo_index.route(question, "admin")
    assert routing.picks[0] == expected, routing.explanation()


def test_viewer_gets_no_invoice_entry(demo_index) -> None:
    result = demo_index.retrieve("Which invoices had the highest totals?", "viewer")
    assert result.routing.picks == ["chinook"]
    assert result.schema is not None
    assert {"Invoice", "InvoiceLine", "Customer", "Employee"}.isdisjoint(result.schema.table_names())
    rendered = result.schema.render() + " ".join(result.schema.foreign_keys)
    assert "Invoice" not in rendered and "Customer" not in rendered


def test_denied_entries_never_vote(demo_index) -> None:
    routing = demo_index.route("How many urgent tickets are still open?", "viewer")
    assert [c.datasource_id for c in routing.candidates] == ["chinook"]  # support is out of the viewer's reach


def test_no_reachable_datasource_is_refused_before_any_search(demo_index) -> None:
    with pytest.raises(SecurityViolation):
        demo_index.route("anything", "viewer", ["support", "webanalytics"])


def test_schema_keeps_keys_and_join_paths(demo_index) -> None:
    schema = demo_index.schema("Which genres sell best in Germany?", "admin", "chinook")
    names = schema.table_names()
    assert {"Genre", "Invoice"} <= set(names)
    assert {"InvoiceLine", "Track"} <= set(names)  # the tables that join genres to invoices
    invoice = next(t for t in schema.tables if t.name == "Invoice")
    assert any(c.primary_key for c in invoice.columns)


def test_fuse_ranks_unranked_last() -> None:
    scores = fuse({"table": ["a"], "column": ["a", "b"]}, ["a", "b", "c"], 60)
    assert scores["a"] > scores["b"] > scores["c"]
