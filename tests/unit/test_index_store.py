"""Builds are atomic and versioned; rebuilds are incremental; snapshots and diffs are recorded."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from nl2sql.config.models import ProfileSettings
from nl2sql.datasources import adapter_class
from nl2sql.datasources.models import ColumnInfo, SchemaSnapshot, TableInfo, share_field_sets
from nl2sql.index import StateStore, build_datasource
from nl2sql.index.embed import Embedder, shared_embedder
from nl2sql.index.retrieve import Retriever


@pytest.fixture
def support_copy(demo_dir: Path, tmp_path: Path) -> Path:
    target = tmp_path / "support.sqlite"
    shutil.copyfile(demo_dir / "data" / "support.sqlite", target)
    return target


def build(path: Path, store: StateStore, **kwargs):
    adapter = adapter_class("sqlite")("support", f"sqlite:///{path}")
    try:
        return build_datasource(adapter, store, shared_embedder(), profile=ProfileSettings(), keep=2, **kwargs)
    finally:
        adapter.close()


def test_rebuild_after_one_table_changes_embeds_only_that_table(support_copy: Path, tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    first = build(support_copy, store, sample_questions=["How many tickets are open?"])
    assert first.replaced is None and first.embedded == sum(first.counts.values()) and first.cached == 0
    again = build(support_copy, store, sample_questions=["How many tickets are open?"])
    assert again.embedded == 0 and again.changed_tables == [] and again.replaced == first.build_id
    with sqlite3.connect(support_copy) as conn:
        conn.execute("ALTER TABLE agents ADD COLUMN region TEXT")
    changed = build(support_copy, store, sample_questions=["How many tickets are open?"])
    assert changed.changed_tables == ["agents"]
    assert 0 < changed.embedded <= 7  # the agents table's entries only (its text and columns)
    assert changed.diff.added_columns == ["agents.region"]
    diffs = store.diffs("support")
    assert [d[3].added_columns for d in diffs][-1] == ["agents.region"]


def test_an_incremental_build_reads_the_vectors_it_reuses_from_the_live_build(support_copy: Path,
                                                                                tmp_path: Path) -> None:
    import numpy as np

    from nl2sql.index.vectors import all_vectors, read_index

    store = StateStore(tmp_path / "state")
    first = build(support_copy, store)
    with store.connect() as conn:  # an emptied cache: what the build reuses can only come from the live build
        conn.execute("DELETE FROM embedding_cache")
    with sqlite3.connect(support_copy) as conn:
        conn.execute("ALTER TABLE agents ADD COLUMN region TEXT")
    changed = build(support_copy, store)
    assert 0 < changed.embedded <= 7 and changed.cached == sum(changed.counts.values()) - changed.embedded
    old, new = (read_index(store.index_path("support", b.build_id)) for b in (first, changed))
    old_entries, new_entries = store.entries(first.build_id), store.entries(changed.build_id)
    before = dict(zip((e.text_hash for e in old_entries), all_vectors(old), strict=True))
    kept = [(i, e.text_hash) for i, e in enumerate(new_entries) if e.text_hash in before]
    assert len(kept) >= len(new_entries) - 7
    assert all(np.array_equal(all_vectors(new)[i], before[h]) for i, h in kept)


def test_an_incremental_build_carries_reused_entries_as_stored_and_equals_a_full_build(support_copy: Path,
                                                                                        tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    first = build(support_copy, store)
    with sqlite3.connect(support_copy) as conn:
        conn.execute("ALTER TABLE agents ADD COLUMN region TEXT")
    changed = build(support_copy, store)
    stored = {e.text_hash: e.document for e in store.stored_entries(first.build_id)}
    carried = [e for e in store.stored_entries(changed.build_id) if e.table != "agents" and e.text_hash in stored]
    assert carried and all(e.document == stored[e.text_hash] for e in carried)  # written back byte for byte
    fresh = StateStore(tmp_path / "fresh")
    full = build(support_copy, fresh)
    assert store.entries(changed.build_id) == fresh.entries(full.build_id)  # same entries, same order


def test_a_new_entry_format_rewrites_every_table(support_copy: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import nl2sql.index.build as building
    import nl2sql.index.chunks as chunks

    store = StateStore(tmp_path / "state")
    first = build(support_copy, store)
    assert store.live_build("support").stats["entry_format"] == chunks.ENTRY_FORMAT
    # the next release writes column texts another way: nothing changed in the database, yet every table is
    # written again, and only the texts that changed are embedded
    monkeypatch.setattr(building, "ENTRY_FORMAT", chunks.ENTRY_FORMAT + 1)
    monkeypatch.setattr(chunks, "_type_words", lambda type_name: "kind")
    again = build(support_copy, store)
    assert sorted(again.changed_tables) == sorted(first.changed_tables) and again.changed_tables
    texts = [e.text for e in store.entries(again.build_id) if e.kind == "column"]
    assert texts and all(", kind" in t for t in texts)
    assert 0 < again.embedded < sum(again.counts.values())  # table and relationship texts came from the cache
    assert build(support_copy, store).changed_tables == []  # the new format is now the live one's


def test_keeps_the_last_n_builds_and_never_the_live_one_goes(support_copy: Path, tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    builds = [build(support_copy, store).build_id for _ in range(4)]
    statuses = {b.build_id: b.status for b in store.builds("support")}
    assert [statuses[b] for b in builds] == ["pruned", "pruned", "committed", "committed"]
    assert store.live_build("support").build_id == builds[-1]
    assert not store.index_path("support", builds[0]).exists()
    assert store.index_path("support", builds[-1]).exists()


def test_a_failed_build_leaves_the_previous_one_live(support_copy: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    store = StateStore(tmp_path / "state")
    good = build(support_copy, store)

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr("nl2sql.index.build.write_index", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        build(support_copy, store)
    assert store.live_build("support").build_id == good.build_id
    assert store.builds("support")[0].status == "failed"
    retriever = Retriever(store, shared_embedder())
    assert retriever.schema_for("open tickets", "support", lambda t: True).tables  # still serving


def test_a_build_left_building_by_a_dead_process_is_abandoned(support_copy: Path, tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    live = build(support_copy, store)
    with store.connect() as conn:
        conn.execute("INSERT INTO builds (build_id, datasource_id, status, started_at, pid) "
                     "VALUES ('dead', 'support', 'building', 0, 999999999)")
    store.index_path("support", "dead").write_bytes(b"partial")
    nxt = build(support_copy, store)
    statuses = {b.build_id: b.status for b in store.builds("support")}
    assert statuses["dead"] == "abandoned" and not store.index_path("support", "dead").exists()
    assert nxt.replaced == live.build_id


def test_migrations_are_numbered_and_idempotent(tmp_path: Path) -> None:
    StateStore(tmp_path)
    again = StateStore(tmp_path)
    with again.connect() as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] >= 1


def test_entry_ids_are_stable(support_copy: Path, tmp_path: Path) -> None:
    one = build(support_copy, StateStore(tmp_path / "a"))
    two = build(support_copy, StateStore(tmp_path / "b"))
    ids_one = [e.id for e in StateStore(tmp_path / "a").entries(one.build_id)]
    ids_two = [e.id for e in StateStore(tmp_path / "b").entries(two.build_id)]
    assert ids_one == ids_two and len(set(ids_one)) == len(ids_one)


def test_a_table_that_cannot_be_profiled_is_indexed_without_statistics(support_copy: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from nl2sql.datasources.base import Adapter
    from nl2sql.errors import DatasourceError
    from nl2sql.index.build import plan_build, profile_tables

    original = Adapter.profile_table

    def failing(self, table, **kwargs):
        if table.name == "agents":
            raise DatasourceError("value 'Secret Name' could not be cast")
        return original(self, table, **kwargs)

    monkeypatch.setattr(Adapter, "profile_table", failing)
    adapter = adapter_class("sqlite")("support", f"sqlite:///{support_copy}")
    issues: list[tuple[str, str, str, str]] = []
    plan = plan_build(adapter, StateStore(tmp_path / "state"))
    profiles = profile_tables(adapter, plan, ProfileSettings(), on_issue=lambda *i: issues.append(i))
    assert {p.table for p in profiles} == {"tickets", "ticket_messages", "satisfaction_surveys"}
    assert [i[1] for i in issues] == ["agent_id", "name", "team", "hired_on"]
    assert all("Secret" not in i[3] and "DatasourceError" in i[3] for i in issues)


def test_an_index_of_another_precision_is_re_embedded_and_a_mismatch_is_told(
        support_copy: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = StateStore(tmp_path / "state")
    exact = Embedder(precision="float32")
    adapter = adapter_class("sqlite")("support", f"sqlite:///{support_copy}")
    try:
        first = build_datasource(adapter, store, exact, profile=ProfileSettings())
    finally:
        adapter.close()
    assert store.live_build("support").model_id == exact.model_id
    assert Retriever(store, exact).schema_for("open tickets", "support", lambda t: True).tables
    assert "embedded by" not in caplog.text
    tables = Retriever(store, shared_embedder()).schema_for("open tickets", "support", lambda t: True).tables
    assert tables and "embedded by all-MiniLM-L6-v2-onnx-int8, questions are embedded by" in caplog.text
    assert "nl2sql index build --datasource support" in caplog.text
    again = build(support_copy, store)  # the int8 embedder: nothing of the float build's cache is reused
    assert again.cached == 0 and again.embedded == sum(first.counts.values())
    assert store.live_build("support").model_id == shared_embedder().model_id


def test_a_build_in_place_runs_the_declared_stages_and_publishes(support_copy: Path, tmp_path: Path) -> None:
    from nl2sql.index.build import BUILD, run_in_place

    ran: list[str] = []
    events: list[tuple[str, dict]] = []

    def recording(stage, *args, **kwargs):
        ran.append(stage.name)
        return run_in_place(stage, *args, **kwargs)

    result = build(support_copy, StateStore(tmp_path / "state"), run_stage=recording,
                   publish=lambda name, **fields: events.append((name, fields)))
    assert ran == [stage.name for stage in BUILD] == list(result.seconds)
    assert [name for name, _ in events] == ["index.started", "index.swapped"]
    assert events[1][1]["build_id"] == result.build_id and events[1][1]["counts"] == result.counts


def test_a_build_that_cannot_read_its_database_publishes_why(tmp_path: Path) -> None:
    from nl2sql.errors import NL2SQLError

    store = StateStore(tmp_path / "state")
    events: list[str] = []
    with pytest.raises(NL2SQLError):
        build(tmp_path / "missing.sqlite", store, publish=lambda name, **fields: events.append(name))
    assert events == ["index.started", "datasource.failed", "index.failed"]
    assert store.live_build("support") is None


def test_purge_deletes_what_retention_lets_go_of_and_keeps_the_rest(support_copy: Path, tmp_path: Path) -> None:
    import time

    store = StateStore(tmp_path / "state")
    live = build(support_copy, store)
    store.save_trace("old-run", "q", "success", {})
    store.save_approval("old-run", "r1", {"sql": "SELECT 1"})
    store.resolve_approval("old-run", "r1", "approved")
    store.save_approval("waiting-run", "r2", {"sql": "SELECT 2"})
    store.pin_run("old-run", {})
    store.cache_plan("k", "support", live.fingerprint, "{}")
    failed = store.begin_build("support", "model")
    store.fail_build(failed, "boom")
    assert store.purge(before=time.time() - 3600) == {  # nothing is an hour old yet
        "traces": 0, "approvals": 0, "pinned_runs": 0, "cached_plans": 0, "build_records": 0}
    assert store.purge(before=time.time() + 1) == {
        "traces": 1, "approvals": 1, "pinned_runs": 1, "cached_plans": 1, "build_records": 1}
    assert store.trace("old-run") is None and store.cached_plan("k") is None
    assert [a["trace_id"] for a in store.approvals()] == ["waiting-run"]  # a pending request is never purged
    assert store.live_build("support").build_id == live.build_id


def test_a_new_state_database_becomes_wal_while_another_process_reads_it(tmp_path: Path) -> None:
    """Two processes opening a new state folder together: the switch to WAL waits for the reader, not fails."""
    import threading
    import time

    from nl2sql.index.store import _use_wal

    path = tmp_path / "state.db"
    reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    reader.execute("CREATE TABLE t (x INTEGER)")
    reader.execute("BEGIN")
    reader.execute("SELECT * FROM t").fetchall()  # a read transaction holds the database
    with pytest.raises(sqlite3.OperationalError, match="locked"):  # what a plain switch meets
        sqlite3.connect(path, timeout=0.1, isolation_level=None).execute("PRAGMA journal_mode = WAL")
    threading.Timer(0.2, lambda: reader.execute("COMMIT")).start()
    started = time.monotonic()
    writer = sqlite3.connect(path, timeout=0.1, isolation_level=None)
    _use_wal(writer)
    assert writer.execute("PRAGMA journal_mode").fetchone()[0] == "wal" and time.monotonic() - started >= 0.15
    _use_wal(sqlite3.connect(path, isolation_level=None))  # already WAL: nothing to switch


def test_a_live_build_holds_its_entries_as_columns_that_read_back_as_the_stored_entries(support_copy: Path,
                                                                                        tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    built = build(support_copy, store)
    stored = store.entries(built.build_id)
    table = store.entry_table(built.build_id)
    assert len(table) == len(stored) and list(table) == stored and table[-1] == stored[-1]
    assert table[1:3] == stored[1:3]
    with pytest.raises(IndexError):
        table[len(stored)]
    columns = [i for i, e in enumerate(stored) if e.kind == "column"]
    assert all(table.metadata(i) == stored[i].metadata for i in columns)
    # a table's name and its tuple of tables are one object for all its entries (a big schema repeats them)
    of_tickets = [i for i in columns if stored[i].table == "tickets"]
    assert len({id(table.tables[i]) for i in of_tickets}) == 1 and len({id(table.tables_of[i]) for i in of_tickets}) == 1
    live = Retriever(store, shared_embedder()).live("support")
    assert live is not None and live.entries.ids == table.ids


def test_a_loaded_snapshot_shares_its_field_sets_and_reads_and_dumps_as_recorded(support_copy: Path,
                                                                                 tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    build(support_copy, store)
    info = store.live_build("support")
    assert info is not None and info.fingerprint
    with store.connect() as conn:
        recorded = conn.execute("SELECT snapshot FROM snapshots WHERE fingerprint = ?", (info.fingerprint,)).fetchone()[0]
    snapshot = store.snapshot("support", info.fingerprint)
    assert snapshot is not None
    assert snapshot.model_dump_json() == recorded
    assert snapshot.model_dump(exclude_unset=True) == SchemaSnapshot.model_validate_json(recorded).model_dump(
        exclude_unset=True)
    first, second = snapshot.tables[0].columns[0], snapshot.tables[1].columns[0]
    assert first.__pydantic_fields_set__ is second.__pydantic_fields_set__
    first.comment = "changed"  # setting a field marks nothing new on the others
    assert second.__pydantic_fields_set__ == set(ColumnInfo.model_fields) and second.comment != "changed"


def test_only_a_full_field_set_is_shared() -> None:
    given = SchemaSnapshot(datasource_id="d", dialect="sqlite", tables=[TableInfo(name="t", columns=[
        ColumnInfo(name="a", type="INTEGER"), ColumnInfo(name="b", type="TEXT", nullable=False, primary_key=True,
                                                         comment=None)])])
    share_field_sets(given)
    partial, full = given.tables[0].columns
    assert partial.__pydantic_fields_set__ == {"name", "type"} and full.__pydantic_fields_set__ == set(
        ColumnInfo.model_fields)
    partial.comment = "x"
    assert partial.__pydantic_fields_set__ == {"name", "type", "comment"}
    assert full.__pydantic_fields_set__ == set(ColumnInfo.model_fields)


def test_a_build_keeps_name_values_within_its_budget_and_an_incremental_one_counts_what_it_carries(
        tmp_path: Path) -> None:
    path = tmp_path / "music.sqlite"
    with sqlite3.connect(path) as conn:  # one value a row: no sample values, 60 and 70 name values
        conn.execute("CREATE TABLE artists (artist_id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO artists (name) VALUES (?)", [(f"Artist {i}",) for i in range(60)])
        conn.execute("CREATE TABLE bands (band_id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO bands (name) VALUES (?)", [(f"Band {i}",) for i in range(70)])
    store = StateStore(tmp_path / "state")

    def build_music(total: int, **kwargs):
        adapter = adapter_class("sqlite")("music", f"sqlite:///{path}")
        try:
            build_datasource(adapter, store, shared_embedder(), profile=ProfileSettings(max_name_values_total=total),
                             keep=2, **kwargs)
        finally:
            adapter.close()
        return store.live_build("music").stats["name_values"]

    assert build_music(100) == {"artists": 60}  # the bands' 70 do not fit in the 40 left
    for i, table in enumerate(("bands", "artists", "artists")):  # a rebuilt table counts once, carried ones as held
        with sqlite3.connect(path) as conn:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN note_{i} TEXT")
        assert build_music(100) == {"artists": 60}
    assert build_music(200, full=True) == {"artists": 60, "bands": 70}
    assert build_music(0, full=True) == {}
