"""Retrieval and routing read from FAISS only the vectors of entries the caller may see: no stored vector outside
the caller's scope is scored, reconstructed or copied out on the question path."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nl2sql.config import Config
from nl2sql.index import retrieve
from nl2sql.index.retrieve import LiveIndex
from nl2sql.index.service import IndexService
from nl2sql.policies import scope

QUESTIONS = ["Which customers spent the most on invoices?", "How many tracks are there in each genre?",
             "Which employees support the most customers?"]


class GuardedIndex:
    """A live build's FAISS index that records every stored vector the question path reads, and fails on any other
    use (a search over everything, a copy of every vector)."""

    def __init__(self, index: Any) -> None:
        self.index = index
        self.read: set[int] = set()

    def reconstruct(self, position: int) -> np.ndarray:
        self.read.add(int(position))
        return self.index.reconstruct(position)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the question path used the FAISS index's {name}")


@pytest.fixture
def guarded(demo_index: IndexService, monkeypatch: pytest.MonkeyPatch) -> dict[str, GuardedIndex]:
    """Every live build of the demo wrapped in a GuardedIndex, by datasource."""
    retriever = demo_index.retriever
    guards: dict[str, GuardedIndex] = {}
    real_live, real_scores = retriever.live, retrieve.similarities_of

    def live(datasource_id: str) -> LiveIndex | None:
        found = real_live(datasource_id)
        if found is None:
            return None
        guard = guards.setdefault(datasource_id, GuardedIndex(found.index))
        return LiveIndex(found.build_id, found.entries, guard, found.snapshot)  # type: ignore[arg-type]

    def scores(index: Any, query: np.ndarray, ids: np.ndarray) -> np.ndarray:
        assert isinstance(index, GuardedIndex)
        index.read |= set(ids.tolist())
        return real_scores(index.index, query, ids)

    monkeypatch.setattr(retriever, "live", live)
    monkeypatch.setattr(retrieve, "similarities_of", scores)
    return guards


@pytest.mark.parametrize("role", ["viewer", "support", "analyst"])
def test_no_vector_outside_the_callers_scope_is_read(demo_config: Config, demo_index: IndexService,
                                                      guarded: dict[str, GuardedIndex], role: str) -> None:
    for question in QUESTIONS:
        routing = demo_index.route(question, role)
        for ds in routing.picks:
            demo_index.retrieve_schema(question, role, ds)
    assert guarded, "nothing was searched"
    for ds, guard in guarded.items():
        caller = scope(demo_config.policies, role, ds)
        entries = demo_index.retriever.live(ds).entries  # type: ignore[union-attr]
        outside = sorted({t for i in guard.read for t in entries[i].tables if not caller.allows(*_split(t))})
        assert not outside, f"{role} read vectors of {ds}: {outside}"
        assert guard.read or not caller.reachable


def test_the_guard_sees_what_a_caller_who_may_read_everything_reads(demo_index: IndexService,
                                                                    guarded: dict[str, GuardedIndex]) -> None:
    demo_index.retrieve_schema(QUESTIONS[0], "admin", "chinook")
    entries = demo_index.retriever.live("chinook").entries  # type: ignore[union-attr]
    assert {"Invoice", "Customer", "Employee"} <= {t for i in guarded["chinook"].read for t in entries[i].tables}


def _split(table: str) -> tuple[str, str | None]:
    schema, _, name = table.rpartition(".")
    return name, schema or None


def test_each_scope_is_worked_out_once_and_never_serves_another(demo_index: IndexService) -> None:
    live = demo_index.retriever.live("chinook")
    assert live is not None
    live._views.clear()
    for _ in range(3):
        demo_index.retrieve_schema(QUESTIONS[0], "viewer", "chinook")
    [viewer] = live._views.values()  # one view for three calls of one scope
    demo_index.retrieve_schema(QUESTIONS[0], "analyst", "chinook")
    demo_index.route(QUESTIONS[0], "viewer")
    assert len(live._views) == 3  # the analyst's, and routing's view of the viewer's scope
    analyst = list(live._views.values())[1]
    assert "Invoice" in analyst.readable and "Invoice" not in viewer.readable
    assert not {t for i in viewer.scored_ids.tolist() for t in live.entries[i].tables} - set(viewer.readable)


def test_a_predicate_that_cannot_be_hashed_is_asked_afresh(demo_index: IndexService) -> None:
    live = demo_index.retriever.live("chinook")
    assert live is not None

    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

        def __call__(self, table: str) -> bool:
            return table == "Genre"

    before = len(live._views)
    view = live.view(Unhashable())
    assert list(view.readable) == ["Genre"] and len(live._views) == before


def test_a_graph_search_returns_only_the_entries_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    from nl2sql.index.vectors import EntrySelector, build_index, searched

    rng = np.random.default_rng(7)
    data = rng.normal(size=(3000, 32)).astype("float32")
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    index, kind = build_index(data, hnsw_above=1000)
    assert kind == "hnsw"
    among = np.sort(rng.choice(3000, size=600, replace=False))
    selector = EntrySelector(among, 3000)
    exact = data[among] @ data[:50].T
    found = 0
    for q in range(50):
        ids, sims = searched(index, data[q], selector, 10)
        assert set(ids.tolist()) <= set(among.tolist()) and len(ids) == 10
        assert np.all(np.diff(sims) <= 1e-6)  # best first
        found += len(set(ids.tolist()) & set(among[np.argsort(-exact[:, q])[:10]].tolist()))
    assert found / 500 >= 0.95  # recall@10 against scoring every given entry


@pytest.mark.parametrize("role", ["viewer", "analyst"])
def test_searching_the_index_sends_what_scoring_every_entry_sends(demo_index: IndexService,
                                                                  monkeypatch: pytest.MonkeyPatch, role: str) -> None:
    # the demo's builds are small and flat; with the threshold at zero and taken for graphs, every question
    # searches
    import sys

    route_module = sys.modules["nl2sql.index.route"]  # (the package exports the function `route`)

    narrow = demo_index.config.settings.retrieval.model_copy(update={"whole_schema_columns": 0})
    service = IndexService(demo_index.config.model_copy(update={"settings": demo_index.config.settings.model_copy(
        update={"retrieval": narrow})}), demo_index.store, demo_index.retriever)
    questions = [*QUESTIONS, "Which genres have the longest tracks?", "Which albums are by Led Zeppelin?"]
    scored = {q: service.retrieve_schema(q, role, "chinook").render() for q in questions}
    routed = {q: service.route(q, role).explanation() for q in questions}
    monkeypatch.setattr(retrieve, "EXACT_UP_TO", 0)
    monkeypatch.setattr(route_module, "EXACT_UP_TO", 0)
    for ds in ("chinook", "support", "webanalytics"):  # searched as a graph index is (a flat one's filtered scan)
        monkeypatch.setattr(demo_index.retriever.live(ds), "graph", True)
    searches: list[int] = []
    real_search = LiveIndex.search
    monkeypatch.setattr(LiveIndex, "search", lambda self, *a: searches.append(1) or real_search(self, *a))
    for q in questions:
        assert service.retrieve_schema(q, role, "chinook").render() == scored[q]
        assert service.route(q, role).explanation() == routed[q]
    assert len(searches) >= 2 * len(questions)
