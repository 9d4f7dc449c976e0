"""Scope evidence: a question that speaks of sales is refused for a caller who may read none of the tables that
record them, and only then (the demo's built index, its real roles)."""

from __future__ import annotations

import pytest

from nl2sql.index.service import IndexService


@pytest.mark.parametrize("question", ["Which genres sell best in Germany?", "How much did we earn in each year?",
                                      "Which genre has sold the most units?", "What was the total revenue per year?",
                                      "Which customers bought Jazz in 2011?"])
def test_sales_questions_need_records_a_viewer_may_not_read(demo_index: IndexService, question: str) -> None:
    assert demo_index.needs_unreadable_records(question, ["viewer"], "chinook")
    assert demo_index.needs_unreadable_records(question, ["support"], "chinook")  # customers, but no invoices


@pytest.mark.parametrize("role", ["admin", "analyst"])
def test_a_caller_who_reads_the_transactions_is_never_refused(demo_index: IndexService, role: str) -> None:
    assert not demo_index.needs_unreadable_records("Which genres sell best in Germany?", [role], "chinook")


@pytest.mark.parametrize("question", [
    "How many tracks are there in each genre?",  # no sales word
    "How many songs longer than ten minutes do we sell?",  # what the catalog offers
    "What is the most expensive track we have?",  # a price, and the viewer reads Track.UnitPrice
    "Which track costs the most to buy?",  # "buy" beside a price: the amount a viewer may read answers it
    "List the albums in alphabetical order",  # a sort order, not an order placed
])
def test_catalog_questions_stay_with_the_planner(demo_index: IndexService, question: str) -> None:
    assert not demo_index.needs_unreadable_records(question, ["viewer"], "chinook")


def test_a_datasource_without_transaction_tables_is_left_to_the_planner(demo_index: IndexService) -> None:
    # the support desk records no sales: nothing there is evidence of data the caller may not read
    assert not demo_index.needs_unreadable_records("How much revenue did ticket sales bring in?", ["support"],
                                                   "support")


def test_a_word_a_readable_value_explains_does_not_count(demo_index: IndexService) -> None:
    # 'Sales Support Agent' is a job title of Employee, which the support role may not read, but the analyst's
    # scope without Employee still holds every transaction table: check the value rule on its own instead
    from nl2sql.index.scope_evidence import needs_unreadable_records

    live = demo_index.live("chinook")
    assert live is not None
    facts = live.facts()
    catalog = {"Album", "Artist", "Genre", "MediaType", "Playlist", "PlaylistTrack", "Track"}
    assert needs_unreadable_records("How many sales agents are there?", facts, catalog)
    assert not needs_unreadable_records("How many sales agents are there?", facts, catalog | {"Employee"})
