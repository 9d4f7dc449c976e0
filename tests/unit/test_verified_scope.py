"""A verified query exists for a caller only when every table it reads is in the caller's scope: the matcher,
its parameter look-ups, routing entries and example questions."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from nl2sql.config import Config
from nl2sql.config.models import ParameterConfig, VerifiedQueryConfig
from nl2sql.datasources.base import Adapter
from nl2sql.errors import GENERIC_REFUSAL, SecurityViolation
from nl2sql.index.chunks import Entry, example_entries, verified_entries
from nl2sql.index.retrieve import LiveIndex, Retriever
from nl2sql.index.service import IndexService
from nl2sql.project import load_project
from nl2sql.verified.match import index_entries_of, match_verified
from nl2sql.verified.models import VerifiedQuery
from nl2sql.verified.scope import VerifiedCatalog, query_tables

CUSTOMERS = VerifiedQueryConfig(
    question="Which customers live in {country}?",
    sql="SELECT FirstName FROM Customer WHERE Country = :country",
    parameters={"country": ParameterConfig(column="Customer.Country", default="USA")})
GENRE = VerifiedQueryConfig(
    question="Which tracks are in the {genre} genre?",
    sql="SELECT t.Name FROM Track AS t JOIN Genre AS g ON g.GenreId = t.GenreId WHERE g.Name = :genre",
    parameters={"genre": ParameterConfig(column="Genre.Name", default="Jazz")})
GENRE_COUNT = VerifiedQueryConfig(question="How many tracks are there in each genre?",
                                  sql="SELECT GenreId, COUNT(*) FROM Track GROUP BY GenreId")
VALUES = {("Customer", "Country"): ["Brazil", "USA", "Canada"], ("Genre", "Name"): ["Jazz", "Rock"]}


def bag_embed(texts: list[str]) -> np.ndarray:
    """Unit vectors of hashed lower-case words: the same words, the same vector."""
    out = np.zeros((len(texts), 512), dtype=np.float64)
    for row, text in enumerate(texts):
        for word in re.findall(r"\w+", text.lower()):
            out[row, int(hashlib.sha256(word.encode()).hexdigest(), 16) % 512] += 1.0
    return out / np.linalg.norm(out, axis=1, keepdims=True)


class Lookups:
    """A value look-up that records every (datasource, table, column) it is asked for."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str]] = []

    def __call__(self, ds: str):
        def values(table: str, column: str) -> list[str]:
            self.asked.append((ds, table, column))
            return VALUES.get((table, column), [])
        return values


def match(question: str, readable: list[VerifiedQueryConfig], denied: list[VerifiedQueryConfig],
          lookups: Lookups):
    return match_verified(question, [("chinook", i, q) for i, q in enumerate(readable)],
                          denied=[("chinook", 10 + i, q) for i, q in enumerate(denied)], embed=bag_embed,
                          lookup=lookups, dialect_of=lambda ds: "sqlite", min_similarity=0.9)


# --- the tables of a verified query, and who has it ----------------------------------------------


def test_a_verified_query_reads_the_tables_of_its_sql_and_of_its_parameter_columns() -> None:
    assert query_tables(CUSTOMERS, "sqlite") == ("Customer",)
    assert query_tables(GENRE, "sqlite") == ("Track", "Genre")
    lookup_elsewhere = CUSTOMERS.model_copy(update={"sql": "SELECT 1 AS one FROM Track WHERE :country = 'x'"})
    assert query_tables(lookup_elsewhere, "sqlite") == ("Track", "Customer")
    cte = VerifiedQueryConfig(question="q", sql="WITH c AS (SELECT * FROM Customer) SELECT * FROM c")
    assert query_tables(cte, "sqlite") == ("Customer",)
    assert query_tables(VerifiedQueryConfig(question="q", sql="SELECT * FROM main.Invoice"), "sqlite") == (
        "main.Invoice",)
    assert query_tables(VerifiedQueryConfig(question="q", sql="DROP TABLE Customer"), "sqlite") is None


def test_each_demo_role_has_the_verified_queries_over_its_tables_only(demo_config: Config) -> None:
    catalog = VerifiedCatalog(demo_config, lambda ds: demo_config.datasource(ds).dialect)
    ids = [d.id for d in demo_config.datasources]

    def questions(role: str) -> tuple[set[str], set[str]]:
        readable, denied = catalog.split(role, ids)
        return {q.query.question for q in readable}, {q.query.question for q in denied}

    everything = {q.question for d in demo_config.datasources for q in d.verified_queries}
    assert questions("admin") == (everything, set()) and questions("analyst") == (everything, set())
    viewer, viewer_denied = questions("viewer")
    assert viewer == {"How many tracks are there in each genre?", "Which tracks are in the {genre} genre?",
                      "Which albums did {artist} release?"}
    assert viewer_denied == everything - viewer
    support, _ = questions("support")
    assert support == {"Which customers live in {country}?"} | {
        q.question for q in demo_config.datasource("support").verified_queries}
    assert {q.query.question for q in catalog.readable("support", ["chinook"])} == {"Which customers live in {country}?"}


def test_a_verified_query_whose_sql_cannot_be_read_is_nobody_s(demo_config: Config) -> None:
    broken = VerifiedQueryConfig(question="Drop the customers?", sql="DELETE FROM Customer")
    chinook = demo_config.datasource("chinook")
    datasource = chinook.model_copy(update={"verified_queries": [*chinook.verified_queries, broken]})
    config = demo_config.model_copy(update={"datasources": [datasource]})
    catalog = VerifiedCatalog(config, lambda ds: "sqlite")
    readable, denied = catalog.split("admin", ["chinook"])
    assert broken not in [q.query for q in readable + denied]
    assert "Drop the customers?" not in [q.question for q in index_entries_of(datasource)]


# --- the matcher -------------------------------------------------------------------------------


@pytest.mark.parametrize("country", ["Brazil", "Narnia"])
def test_a_close_denied_query_refuses_without_any_look_up(country: str) -> None:
    lookups = Lookups()
    with pytest.raises(SecurityViolation) as refused:
        match(f"Which customers live in {country}?", [GENRE, GENRE_COUNT], [CUSTOMERS], lookups)
    assert refused.value.message == GENERIC_REFUSAL
    assert lookups.asked == []  # not the denied column, and not the caller's own, which are far from the question


def test_only_the_caller_s_close_queries_look_values_up() -> None:
    lookups = Lookups()
    found = match("Which customers live in brazil?", [CUSTOMERS, GENRE], [], lookups)
    assert found is not None and found.parameters == {"country": "Brazil"}  # as stored
    assert "Country = 'Brazil'" in found.sql
    assert lookups.asked == [("chinook", "Customer", "Country")]  # the genre query is far: not looked up
    lookups = Lookups()
    assert match("How many tracks are there in each genre?", [GENRE_COUNT, GENRE], [CUSTOMERS], lookups) is not None
    assert lookups.asked == []


def test_a_denied_query_is_read_from_the_question_s_words_only() -> None:
    lookups = Lookups()
    # far from the question with the default filled in, and the question does not line up with it: no match
    assert match("Show me everybody from Brazil", [GENRE_COUNT], [CUSTOMERS], lookups) is None
    assert match("Show me everybody from Narnia", [GENRE_COUNT], [CUSTOMERS], lookups) is None
    assert lookups.asked == []


def test_of_two_equally_close_queries_the_caller_s_own_answers() -> None:
    twin = GENRE_COUNT.model_copy(update={"sql": "SELECT COUNT(*) FROM Invoice"})
    found = match("How many tracks are there in each genre?", [GENRE_COUNT], [twin], Lookups())
    assert found is not None and "Track" in found.sql
    with pytest.raises(SecurityViolation):
        match("How many tracks are there in each genre?", [], [twin], Lookups())


def test_nothing_close_is_no_match_for_readable_and_denied_alike() -> None:
    assert match("Which employees were hired in 2003?", [GENRE_COUNT], [CUSTOMERS], Lookups()) is None


# --- routing and examples ------------------------------------------------------------------------


def test_example_questions_that_are_verified_queries_are_about_their_tables() -> None:
    verified = [VerifiedQuery(question="How much did we earn in each year?", sql="SELECT 1", datasource="chinook",
                              tables=["Invoice"])]
    entries = example_entries("chinook", ["How much did we  earn in each year?", "Which album has the most tracks?"],
                              verified)
    assert [e.tables for e in entries] == [["Invoice"], []]
    untagged = VerifiedQuery(question="q?", sql="SELECT 1", datasource="chinook")
    assert verified_entries("chinook", [*verified, untagged])[0].tables == ["Invoice"]
    assert len(verified_entries("chinook", [*verified, untagged])) == 1  # no tables known: no entry


def test_demo_verified_entries_name_their_tables(demo_config: Config) -> None:
    entries = {q.question: q.tables for q in index_entries_of(demo_config.datasource("chinook"))}
    assert entries["Which customers live in USA?"] == ["Customer"]
    assert entries["Who are the top 5 customers by total spend?"] == ["Customer", "Invoice"]
    assert set(entries["Which tracks are in the Jazz genre?"]) == {"Track", "Genre", "Album", "Artist"}


class Edited(Retriever):
    """The demo's live builds, one datasource's entries edited: some dropped, extra ones (embedded here) added."""

    def __init__(self, base: Retriever, datasource_id: str, extra: list[Entry],
                 drop: Callable[[Entry], bool] = lambda entry: False) -> None:
        super().__init__(base.store, base.embedder)
        self.base, self.datasource_id, self.extra, self.drop = base, datasource_id, extra, drop

    def live(self, datasource_id: str) -> LiveIndex | None:
        live = self.base.live(datasource_id)
        if live is None or datasource_id != self.datasource_id:
            return live
        kept = [i for i, e in enumerate(live.entries) if not self.drop(e)]
        vectors = np.stack([live.vector(i) for i in kept])
        if self.extra:
            added = self.embedder.embed_cached([e.text for e in self.extra]).astype(vectors.dtype)
            vectors = np.vstack([vectors, added])
        return LiveIndex.of_vectors(live.build_id + "+", [live.entries[i] for i in kept] + self.extra, vectors,
                                    live.snapshot)


def _services(config: Config, demo_index, strategy: str, extra: list[Entry],
              drop: Callable[[Entry], bool] = lambda entry: False) -> tuple[IndexService, IndexService]:
    config = config.model_copy(deep=True)
    config.settings.routing.strategy = strategy  # type: ignore[assignment]
    return (IndexService(config, store=demo_index.store, retriever=demo_index.retriever),
            IndexService(config, store=demo_index.store,
                         retriever=Edited(demo_index.retriever, "chinook", extra, drop)))


def _scores(service: IndexService, question: str, role: str) -> list[dict[str, Any]]:
    return service.route(question, role).explanation()["candidates"]


QUESTION = "Which loyal patrons spent the most on invoices last spring?"


@pytest.mark.parametrize("strategy", ["evidence", "votes"])
def test_a_verified_query_over_denied_tables_does_not_move_a_caller_s_routing(demo_config: Config, demo_index,
                                                                              strategy: str) -> None:
    denied = VerifiedQuery(question=QUESTION, sql="SELECT * FROM Invoice", datasource="chinook",
                           tables=["Invoice", "Customer"])
    extra = verified_entries("chinook", [denied]) + example_entries("chinook", [QUESTION], [denied])
    plain, more = _services(demo_config, demo_index, strategy, extra)
    for role in ("viewer", "support"):
        assert _scores(more, QUESTION, role) == _scores(plain, QUESTION, role), role
        # what `nl2sql retrieve` shows: routing and the schema
        before, after = plain.retrieve(QUESTION, role), more.retrieve(QUESTION, role)
        assert after.routing.explanation() == before.routing.explanation()
        assert (after.retrieved and after.retrieved.render()) == (before.retrieved and before.retrieved.render())
    assert _scores(more, QUESTION, "admin") != _scores(plain, QUESTION, "admin")  # it would count for a reader


VIEWER_TABLES = {"Album", "Artist", "Genre", "MediaType", "Playlist", "PlaylistTrack", "Track"}


@pytest.mark.parametrize("strategy", ["evidence", "votes"])
def test_the_demo_s_verified_and_example_questions_over_denied_tables_give_a_viewer_nothing(
        demo_config: Config, demo_index, strategy: str) -> None:
    def denied(entry: Entry) -> bool:
        return entry.kind in ("verified", "example") and not set(entry.tables) <= VIEWER_TABLES

    plain, without = _services(demo_config, demo_index, strategy, [], denied)
    dropped = [e.text for e in demo_index.retriever.live("chinook").entries if denied(e)]
    assert "Which customers live in USA?" in dropped and "How much did we earn in each year?" in dropped
    for question in dropped:  # as close to a denied entry as a question gets: the entry itself
        assert _scores(without, question, "viewer") == _scores(plain, question, "viewer"), question


def test_a_verified_entry_without_tables_counts_for_nobody(demo_config: Config, demo_index) -> None:
    untagged = Entry(id="old", datasource_id="chinook", kind="verified", text=QUESTION,
                     metadata={"sql": "SELECT * FROM Invoice"})
    plain, more = _services(demo_config, demo_index, "evidence", [untagged])
    for role in ("viewer", "admin"):
        assert _scores(more, QUESTION, role) == _scores(plain, QUESTION, role), role


# --- in the pipeline: Brazil and Narnia ----------------------------------------------------------


@pytest.fixture(scope="module")
def unindexed_demo(tmp_path_factory: pytest.TempPathFactory) -> Config:
    from nl2sql.demo import init_demo

    return load_project(init_demo(tmp_path_factory.mktemp("verified-demo"), env={}))


def _comparable(result: Any) -> dict[str, Any]:
    data = result.model_dump(mode="json")
    for key in ("trace_id", "duration_ms", "question"):
        data.pop(key)
    return data


@pytest.mark.parametrize("execute", [True, False])
def test_brazil_and_narnia_are_refused_alike_with_no_statement(unindexed_demo: Config, monkeypatch,
                                                               execute: bool) -> None:
    from nl2sql.config.models import HookConfig
    from nl2sql.pipeline import Runtime
    from nl2sql.pipeline.inline import ask_inline

    statements: list[str] = []
    real_run = Adapter._run  # (every statement for a caller goes through it, whichever process then runs it)

    def spy(self: Adapter, sql: str, **kwargs: Any):
        statements.append(f"{self.datasource_id}: {sql}")
        return real_run(self, sql, **kwargs)

    monkeypatch.setattr(Adapter, "_run", spy)
    # a reviewer shows the SQL before it is approved: it must never see a denied verified query's
    review = HookConfig(use="sql_review", options={"tables": ["chinook.*"]}, approver_roles=["admin"])
    runtime = Runtime(unindexed_demo.model_copy(update={"hooks": [review]}), observers=[])
    events: list[Any] = []
    runtime.listeners.append(events.append)
    opened: list[str] = []
    real_get = runtime.catalog.get
    monkeypatch.setattr(runtime.catalog, "get", lambda ds: opened.append(ds) or real_get(ds))
    try:
        results = [ask_inline(runtime, f"Which customers live in {country}?", roles=["viewer"], execute=execute)
                   for country in ("Brazil", "Narnia")]
        assert statements == [] and opened == []  # no adapter asked: no value probe of the denied column
        brazil, narnia = results
        assert brazil.status == "error" and [e.code for e in brazil.errors] == ["SECURITY_VIOLATION"]
        assert brazil.answer.content == GENERIC_REFUSAL and brazil.sub_queries == [] and brazil.approvals == []
        assert _comparable(brazil) == _comparable(narnia)
        names = [e.name for e in events]
        assert "hook.decision" not in names and "approval.requested" not in names
        shown = " ".join(str(e.data) for e in events)
        assert "Customer" not in shown and "SELECT" not in shown.upper()
        steps = [[e.data["node"] for e in events if e.trace_id == r.trace_id and e.name == "node.finished"]
                 for r in results]
        assert steps[0] == steps[1] == ["curated_matcher"]
        # the same question from a caller who may read Customer does look the value up
        allowed = ask_inline(runtime, "Which customers live in Brazil?", roles=["support"], execute=execute)
        assert allowed.sub_queries[0].source == "verified" and opened and statements
    finally:
        runtime.close()
