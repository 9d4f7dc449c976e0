"""A big datasource's build is held in segments: a rebuild writes the segments of the tables that changed and lists
the others as they are, and what it serves is what a full build serves."""

from __future__ import annotations

import shutil
import sqlite3
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

import nl2sql.index.build as building
from nl2sql.config.models import ProfileSettings
from nl2sql.datasources import adapter_class
from nl2sql.flows.index import summary_markdown
from nl2sql.index import StateStore, build_datasource, vectors
from nl2sql.index.embed import shared_embedder
from nl2sql.index.retrieve import Retriever
from nl2sql.index.store import MIGRATIONS
from nl2sql.index.vectors import all_vectors, read_index


@pytest.fixture
def support_copy(demo_dir: Path, tmp_path: Path) -> Path:
    target = tmp_path / "support.sqlite"
    shutil.copyfile(demo_dir / "data" / "support.sqlite", target)
    return target


@pytest.fixture
def one_table_per_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's support database (4 tables) split as a schema of thousands of tables is."""
    monkeypatch.setattr(building, "SEGMENT_TABLES", 1)


def build(path: Path, store: StateStore, **kwargs):
    adapter = adapter_class("sqlite")("support", f"sqlite:///{path}")
    try:
        return build_datasource(adapter, store, shared_embedder(), profile=ProfileSettings(), keep=2,
                                sample_questions=["How many tickets are open?"], **kwargs)
    finally:
        adapter.close()


def vectors_of(store: StateStore, build_id: str) -> np.ndarray:
    """A build's vectors in entry order, read segment by segment."""
    return np.concatenate([all_vectors(read_index(store.index_path("support", s.segment_id)))
                           for s in store.segments(build_id)])


def add_region_to_agents(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE agents ADD COLUMN region TEXT")
    conn.close()


def test_a_rebuild_writes_the_changed_tables_segment_and_lists_the_others_as_they_are(
        support_copy: Path, tmp_path: Path, one_table_per_segment: None) -> None:
    store = StateStore(tmp_path / "state")
    first = build(support_copy, store)
    before = store.segments(first.build_id)
    assert first.segments == len(before) == 5 and first.segments_written == 5  # 4 tables' and the datasource's
    assert [s.tables for s in before[:-1] if s.tables] and before[-1].tables == ()
    add_region_to_agents(support_copy)
    changed = build(support_copy, store)
    after = store.segments(changed.build_id)
    moved = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a.segment_id != b.segment_id]
    agents = next(i for i, s in enumerate(before) if s.tables and "agents" in s.tables)
    assert moved == sorted({agents, 4}) and changed.segments_written == 2  # agents' and the datasource's
    assert changed.embedded == 2 and changed.cached == sum(changed.counts.values()) - 2  # the table and its column
    # equal to a full build of the same database: the same entries in the same order, the same vectors
    fresh = StateStore(tmp_path / "fresh")
    full = build(support_copy, fresh)
    assert store.entries(changed.build_id) == fresh.entries(full.build_id)
    assert np.allclose(vectors_of(store, changed.build_id), vectors_of(fresh, full.build_id), atol=1e-6)
    assert changed.counts == full.counts and store.live_build("support").entry_count == sum(full.counts.values())
    assert "flat, 2 of 5 segments written" in summary_markdown([changed], {})  # the build's artifact says so


def test_a_segmented_build_serves_what_a_build_of_one_segment_serves(support_copy: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    whole = StateStore(tmp_path / "whole")
    build(support_copy, whole)
    monkeypatch.setattr(building, "SEGMENT_TABLES", 1)
    split = StateStore(tmp_path / "split")
    build(support_copy, split)
    assert len(split.segments(split.live_build("support").build_id)) == 5
    one, many = Retriever(whole, shared_embedder()), Retriever(split, shared_embedder())
    for question in ("How many tickets are open?", "average satisfaction score by agent",
                     "messages sent on each ticket last week"):
        a = one.schema_for(question, "support", lambda t: True)
        b = many.schema_for(question, "support", lambda t: True)
        assert [(t.name, [c.name for c in t.columns]) for t in a.tables] == \
               [(t.name, [c.name for c in t.columns]) for t in b.tables]
    query = many.embed("open tickets")
    live_one, live_many = one.live("support"), many.live("support")
    ids = np.arange(len(live_many.entries))[::-1]  # out of order, across every segment
    by_text = dict(zip(live_one.entries.texts, live_one.scores(query, np.arange(len(live_one.entries))),
                       strict=True))
    assert np.allclose(live_many.scores(query, ids), [by_text[live_many.entries.texts[i]] for i in ids], atol=1e-6)


def test_pruning_keeps_every_segment_a_kept_build_lists_and_drops_the_rest(support_copy: Path, tmp_path: Path,
                                                                            one_table_per_segment: None) -> None:
    store = StateStore(tmp_path / "state")
    builds = [build(support_copy, store).build_id]
    for column in ("region", "desk", "shift"):  # each rebuild writes agents' segment again
        with sqlite3.connect(support_copy) as conn:
            conn.execute(f"ALTER TABLE agents ADD COLUMN {column} TEXT")
        conn.close()
        builds.append(build(support_copy, store).build_id)
    kept = [b.build_id for b in store.builds("support") if b.status == "committed"]
    assert kept == builds[:-3:-1]
    listed = {s.segment_id for b in kept for s in store.segments(b)}
    files = {p.stem for p in (store.index_dir / "support").glob("*.faiss")}
    assert files == listed  # the first build's untouched segments are still listed: they stay
    assert any(s.segment_id.startswith(builds[0]) for s in store.segments(builds[-1]))
    with store.connect() as conn:
        stored = {r[0] for r in conn.execute("SELECT DISTINCT segment_id FROM entries")}
    assert stored == listed
    assert Retriever(store, shared_embedder()).schema_for("agents by region", "support", lambda t: True).tables


def test_a_failed_segmented_build_drops_only_what_it_wrote(support_copy: Path, tmp_path: Path,
                                                           one_table_per_segment: None,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    store = StateStore(tmp_path / "state")
    good = build(support_copy, store)
    files = sorted(p.name for p in (store.index_dir / "support").glob("*.faiss"))
    add_region_to_agents(support_copy)
    real_commit = store.commit_build

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(store, "commit_build", broken)  # after its segments are written
    with pytest.raises(RuntimeError, match="disk full"):
        build(support_copy, store)
    monkeypatch.setattr(store, "commit_build", real_commit)
    assert store.live_build("support").build_id == good.build_id
    assert sorted(p.name for p in (store.index_dir / "support").glob("*.faiss")) == files
    assert [s.segment_id for s in store.segments(good.build_id)] == [p[:-len(".faiss")] for p in files]
    assert len(store.entries(good.build_id)) == sum(good.counts.values())


def test_a_build_stored_before_segments_reads_as_one_and_the_next_build_carries_from_it(
        support_copy: Path, tmp_path: Path) -> None:
    legacy = StateStore(tmp_path / "legacy")
    old = build(support_copy, legacy)
    rows = legacy.stored_entries(old.build_id)
    folder = tmp_path / "state"
    (folder / "index" / "support").mkdir(parents=True)
    shutil.copyfile(legacy.index_path("support", old.build_id), folder / "index" / "support" / f"{old.build_id}.faiss")
    with sqlite3.connect(folder / "state.db", isolation_level=None) as conn:  # as the store was before segments
        for script in MIGRATIONS[:4]:
            for statement in filter(str.strip, script.split(";")):
                conn.execute(statement)
        conn.execute("PRAGMA user_version = 4")
        with legacy.connect() as source:
            for table in ("builds", "live", "snapshots", "diffs", "embedding_cache"):
                for row in source.execute(f"SELECT * FROM {table}"):
                    conn.execute(f"INSERT INTO {table} VALUES ({', '.join('?' * len(row))})", row)
        conn.executemany("INSERT INTO entries (build_id, position, entry) VALUES (?, ?, ?)",
                         [(old.build_id, e.position, e.document) for e in rows])
    conn.close()
    store = StateStore(folder)
    [segment] = store.segments(old.build_id)
    assert segment.segment_id == old.build_id and segment.tables is None and segment.entry_count == len(rows)
    assert store.entries(old.build_id) == legacy.entries(old.build_id)
    add_region_to_agents(support_copy)
    with store.connect() as conn:  # what it carries can only come from the old build's file
        conn.execute("DELETE FROM embedding_cache")
    nxt = build(support_copy, store)
    assert nxt.changed_tables == ["agents"] and nxt.embedded <= 7


@pytest.mark.parametrize("parallel_from", [0, 10**9])
def test_segments_score_as_one_index_on_one_thread_or_several(monkeypatch: pytest.MonkeyPatch,
                                                              parallel_from: int) -> None:
    monkeypatch.setattr(vectors, "PARALLEL_FROM", parallel_from)
    rng = np.random.default_rng(7)
    data = rng.normal(size=(900, 16)).astype("float32")
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    cuts = [0, 250, 251, 600, 900]  # one segment of a single vector, and one left out of the ids below
    split = vectors.SegmentedIndex([vectors.flat_index(data[a:b]) for a, b in pairwise(cuts)])
    ids = rng.permutation(np.setdiff1d(np.arange(900), np.arange(251, 600)))
    query = data[3]
    expected = data[ids] @ query
    assert np.allclose(vectors.similarities_of(split, query, ids), expected, atol=1e-5)
    assert np.allclose(vectors.similarities_of(split, query, np.sort(ids)), data[np.sort(ids)] @ query, atol=1e-5)
    best, sims = vectors.searched(split, query, vectors.EntrySelector(ids, 900), 5)
    order = np.argsort(-expected, kind="stable")[:5]
    assert best.tolist() == ids[order].tolist() and np.allclose(sims, expected[order], atol=1e-5)
    assert np.array_equal(split.reconstruct(251), data[251])
