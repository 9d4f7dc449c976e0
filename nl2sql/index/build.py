"""Building one datasource's index: reflect → profile → relate (inferred keys) → entries → embed → commit (FAISS,
live pointer, snapshot and diff).

The stages are declared once (`BUILD`) and driven by one function (`build_datasource`): in place, one after
another, or each as a Prefect task (the `index-build` flow hands it `tasks/index.run_stage`); either way the same
events, timings and failure handling. Rebuilds are incremental: tables whose shape and row count are unchanged
since the live build keep their entries (no profiling; carried over as stored, with their vectors read from the
live build's index by position), and any other entry's vector comes from the embedding cache when its text was
embedded before, so a rebuild after one table changes embeds only that table's entries.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from nl2sql.config.models import ProfileSettings
from nl2sql.datasources.base import Adapter
from nl2sql.datasources.models import ColumnProfile, InferredKeys, SchemaSnapshot, TableInfo
from nl2sql.errors import NL2SQLError
from nl2sql.index.chunks import ENTRY_FORMAT, BuildEntry, StoredEntry, build_entries, qualified
from nl2sql.index.embed import Embedder
from nl2sql.index.store import StateStore
from nl2sql.index.vectors import build_index, read_index, recall_at_k, write_index
from nl2sql.schema.inferred_keys import infer_keys, with_inferred_keys
from nl2sql.schema.snapshot import SchemaDiff, changed_tables, diff_snapshots, fingerprint
from nl2sql.verified.models import VerifiedQuery

log = logging.getLogger(__name__)

#: (stage, done, total): how far a build has got, for progress bars and artifacts.
Progress = Callable[[str, int, int], None]
#: (table, column, stage, message): a column that could not be profiled.
ColumnIssue = Callable[[str, str, str, str], None]
#: Texts per embedding call (progress is reported between calls).
EMBED_CHUNK = 256


@dataclass
class BuildPlan:
    """What a build will do: the snapshot, which tables need profiling, which entries carry over, and what changed
    since the live build."""

    snapshot: SchemaSnapshot
    fingerprint: str
    changed_tables: list[str]
    reused: list[BuildEntry] = field(default_factory=list)
    previous: SchemaSnapshot | None = None
    diff: SchemaDiff = field(default_factory=SchemaDiff)
    previous_vectors: PreviousVectors | None = None


@dataclass
class PreviousVectors:
    """Where the live build keeps the vectors of the entries a build carries over (each `StoredEntry` knows its row):
    its id and the model that embedded them."""

    build_id: str
    model_id: str


@dataclass
class BuildResult:
    """What one build did."""

    datasource_id: str
    build_id: str
    replaced: str | None
    fingerprint: str
    counts: dict[str, int]
    embedded: int
    cached: int
    index_kind: str
    recall_at_20: float | None
    seconds: dict[str, float]
    diff: SchemaDiff
    tables: int
    changed_tables: list[str]


def plan_build(adapter: Adapter, store: StateStore, *, full: bool = False) -> BuildPlan:
    """Reflect (from the live build's snapshot where the catalog says a table is unchanged), and compare with
    the live build: which tables must be profiled again (all of them when the live build is of another entry
    format)."""
    live = store.live_build(adapter.datasource_id)
    previous = store.snapshot(adapter.datasource_id, live.fingerprint) if live and live.fingerprint else None
    # tables whose catalog definition is unchanged are not reflected again (a full build reflects all)
    snapshot = adapter.reflect(None if full else previous)
    names = [qualified(t) for t in snapshot.tables]
    diff = diff_snapshots(previous, snapshot)
    if full or live is None or previous is None or live.stats.get("entry_format") != ENTRY_FORMAT:
        return BuildPlan(snapshot, fingerprint(snapshot), names, previous=previous, diff=diff)
    changed = changed_tables(previous, snapshot)
    keep = set(names) - set(changed)
    old_entries = store.stored_entries(live.build_id)
    reused = [e for e in old_entries if e.kind in ("table", "column", "relationship") and e.table in keep]
    return BuildPlan(snapshot, fingerprint(snapshot), changed, reused=reused, previous=previous, diff=diff,
                     previous_vectors=PreviousVectors(live.build_id, live.model_id or ""))


def profile_tables(adapter: Adapter, plan: BuildPlan, settings: ProfileSettings,
                   progress: Progress | None = None, on_issue: ColumnIssue | None = None) -> list[ColumnProfile]:
    """Profile the tables that changed (bounded by settings.profile).

    A table whose profiling fails is indexed without profiles; `on_issue` hears of each of its
    columns with a fixed sentence and the error's type, never the database's text (it may quote a value).
    """
    profiles: list[ColumnProfile] = []
    changed = set(plan.changed_tables)
    todo = [t for t in plan.snapshot.tables if qualified(t) in changed]
    for done, table in enumerate(todo, start=1):
        try:
            profiles += adapter.profile_table(table, sample_rows=settings.sample_rows,
                                              max_sample_values=settings.max_sample_values,
                                              low_cardinality=settings.low_cardinality)
        except Exception as exc:  # one table's profile must not sink the build
            cause = getattr(exc, "__cause__", None) or exc
            for column in table.columns:
                if on_issue:
                    on_issue(qualified(table), column.name, "profile",
                             f"profiling failed ({type(cause).__name__}); indexed without statistics")
        if progress:
            progress("profile", done, len(todo))
    return profiles


def relate_tables(adapter: Adapter, plan: BuildPlan, settings: ProfileSettings) -> BuildPlan:
    """The plan with the keys its database does not declare, inferred from names and a bounded sample of values
    (`nl2sql.schema.inferred_keys`; None with `profile.infer_keys` off); the live build's where nothing they rest
    on changed. A column that cannot be sampled is only left without an inferred key."""
    inferred: InferredKeys | None
    if not settings.infer_keys:
        inferred = None  # not inferred (rather than none found): a later build with the setting on infers them all
    else:
        def sample(table: TableInfo, columns: Sequence[str], rows: int) -> pd.DataFrame:
            try:
                return adapter.sample_columns(table, columns, sample_rows=rows)
            except Exception:  # one column's sample must not sink the build
                return pd.DataFrame({c: [] for c in columns}, dtype=object)
        inferred = infer_keys(plan.snapshot, sample, sample_rows=settings.sample_rows, previous=plan.previous,
                              changed=plan.changed_tables)
    return replace(plan, snapshot=plan.snapshot.model_copy(update={"inferred_keys": inferred}))


def make_entries(plan: BuildPlan, profiles: Sequence[ColumnProfile], *, sample_questions: Sequence[str] = (),
                 verified: Sequence[VerifiedQuery] = (), description: str = "") -> list[BuildEntry]:
    """Entries of the changed tables, the reused ones, and the datasource-level ones, in schema order (inferred
    keys read as declared ones: a keyless table's entries say what it belongs to)."""
    changed = set(plan.changed_tables)
    keyed = with_inferred_keys(plan.snapshot)
    partial = keyed.model_copy(update={"tables": [t for t in keyed.tables if qualified(t) in changed]})
    fresh = build_entries(partial, profiles, sample_questions=sample_questions, verified=verified,
                          description=description)
    order = {qualified(t): i for i, t in enumerate(plan.snapshot.tables)}
    by_table: list[BuildEntry] = [e for e in [*plan.reused, *fresh] if e.table is not None and e.kind != "verified"]
    by_table.sort(key=lambda e: (order.get(e.table or "", 1 << 30), ("table", "column", "relationship").index(e.kind)))
    rest = [e for e in fresh if e.table is None or e.kind == "verified"]
    return by_table + rest


def embed_entries(entries: Sequence[BuildEntry], embedder: Embedder, store: StateStore,
                  progress: Progress | None = None, previous: PreviousVectors | None = None,
                  datasource_id: str = "") -> tuple[np.ndarray, int, int]:
    """Vectors for every entry: a carried-over entry's from the live build's index (`previous`, read by position
    from its memory-mapped file), another known text's from the cache, the rest embedded; (vectors, embedded,
    cached)."""
    matrix = np.empty((len(entries), embedder.dimensions), dtype=np.float32)
    carried = {i: e.position for i, e in enumerate(entries) if isinstance(e, StoredEntry)}
    rows = previous_vectors(store, datasource_id, previous, embedder.model_id, list(carried.values()))
    if rows is None:
        carried = {}
    else:
        matrix[list(carried)] = rows
    todo = [i for i in range(len(entries)) if i not in carried]
    hashes = {i: entries[i].text_hash for i in todo}
    known = store.cached_vectors(embedder.model_id, list(hashes.values()))
    text_of = {hashes[i]: entries[i].text for i in todo}
    missing = list(dict.fromkeys(h for h in hashes.values() if h not in known))
    # shortest first across the whole build, so each call's batches hold texts of one length (entries come
    # table by table, and a chunk of mixed lengths is mostly padding)
    lengths = dict(zip(missing, embedder.token_counts([text_of[h] for h in missing]), strict=True))
    missing.sort(key=lengths.__getitem__)
    for start in range(0, len(missing), EMBED_CHUNK):
        chunk = missing[start:start + EMBED_CHUNK]
        vectors = embedder.embed([text_of[h] for h in chunk])
        fresh = dict(zip(chunk, vectors, strict=True))
        store.cache_vectors(embedder.model_id, fresh)  # kept even if the build dies later: nothing is lost
        known.update(fresh)
        if progress:
            progress("embed", min(start + EMBED_CHUNK, len(missing)), len(missing))
    for i in todo:
        matrix[i] = known[hashes[i]]
    return matrix, len(missing), len(entries) - len(missing)


def previous_vectors(store: StateStore, datasource_id: str, previous: PreviousVectors | None, model_id: str,
                     positions: Sequence[int]) -> np.ndarray | None:
    """The vectors at these rows of the live build's FAISS file, read in one batch (an incremental build reads these
    instead of the cache's rows: one lookup per entry of a big schema cost more than the change); None when there is
    no live build, it came from another model, or its file cannot be read."""
    if previous is None or previous.model_id != model_id or not positions:
        return None
    try:
        index = read_index(store.index_path(datasource_id, previous.build_id), mapped=True)
        rows = index.reconstruct_batch(np.asarray(positions, dtype=np.int64))
    except Exception as exc:  # a missing or unreadable file: the cache and the embedder still answer
        log.warning("The vectors of build %s could not be read (%s); the embedding cache is used.",
                    previous.build_id, exc)
        return None
    return np.asarray(rows, dtype=np.float32)


def commit_index(store: StateStore, build_id: str, plan: BuildPlan, entries: Sequence[BuildEntry], vectors: np.ndarray,
                 *, keep: int) -> tuple[str | None, str, float | None]:
    """Write the FAISS file and the entries, then switch the live pointer; (replaced build, kind, recall@20)."""
    index, kind = build_index(vectors)
    recall = recall_at_k(index, vectors, k=20) if kind == "hnsw" else None
    write_index(index, store.index_path(plan.snapshot.datasource_id, build_id))
    store.write_entries(build_id, entries)
    stats = {"counts": dict(Counter(e.kind for e in entries)), "recall_at_20": recall,
             "changed_tables": len(plan.changed_tables), "entry_format": ENTRY_FORMAT,
             "inferred_keys": _inferred_counts(plan.snapshot)}
    replaced = store.commit_build(build_id, snapshot=plan.snapshot, fingerprint=plan.fingerprint,
                                  diff=plan.diff, index_kind=kind,
                                  entry_count=len(entries), stats=stats, keep=keep)
    return replaced, kind, recall


def _inferred_counts(snapshot: SchemaSnapshot) -> dict[str, int]:
    """How many keys and references the build inferred."""
    inferred = snapshot.inferred_keys
    if inferred is None:
        return {"primary_keys": 0, "references": 0}
    return {"primary_keys": len(inferred.primary_keys),
            "references": sum(len(refs) for refs in inferred.foreign_keys.values())}


@dataclass(frozen=True)
class Stage:
    """One stage of a build: its name (the task's), the function, and whether it is safe to repeat."""

    name: str
    fn: Callable[..., Any]
    retries: int = 0


#: The build's stages, in order.
BUILD = (
    Stage("reflect", plan_build, retries=1),
    Stage("profile", profile_tables),
    Stage("relate", relate_tables),
    Stage("entries", make_entries),
    Stage("embed", embed_entries),
    Stage("commit", commit_index),
)
STAGES = {stage.name: stage for stage in BUILD}
#: (stage, *args, **kwargs) → the stage function's result: how a stage runs (in place, or as a task run).
RunStage = Callable[..., Any]
#: (event name, **fields): where a build's events go (the run's event bus).
Publish = Callable[..., None]


def run_in_place(stage: Stage, *args: Any, **kwargs: Any) -> Any:
    """Run a stage here and now."""
    return stage.fn(*args, **kwargs)


def publish_unreadable(publish: Publish, datasource_id: str, exc: NL2SQLError) -> None:
    """The events of a build whose database could not be opened or read: the datasource's problem, with its fix."""
    publish("datasource.failed", datasource_id=datasource_id, message=exc.message, fix=exc.fix)
    publish("index.failed", datasource_id=datasource_id, message=str(exc))


def build_datasource(adapter: Adapter, store: StateStore, embedder: Embedder, *, profile: ProfileSettings,
                     keep: int = 3, sample_questions: Sequence[str] = (), verified: Sequence[VerifiedQuery] = (),
                     description: str = "", full: bool = False, progress: Progress | None = None,
                     publish: Publish | None = None, run_stage: RunStage = run_in_place) -> BuildResult:
    """Every stage of one datasource's build, each through `run_stage`; events through `publish`; the previous
    build stays live on any failure."""
    datasource_id = adapter.datasource_id
    emit: Publish = publish or (lambda name, **fields: None)
    seconds: dict[str, float] = {}

    def stage(name: str, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        result = run_stage(STAGES[name], *args, **kwargs)
        seconds[name] = round(time.perf_counter() - started, 3)
        return result

    def column_failed(table: str, column: str, stage_name: str, message: str) -> None:
        emit("index.column_failed", datasource_id=datasource_id, table=table, column=column, stage=stage_name,
             message=message)

    emit("index.started", datasource_id=datasource_id, full=full)
    try:
        plan = stage("reflect", adapter, store, full=full)
    except NL2SQLError as exc:  # the database could not be read: a datasource problem, with its fix
        publish_unreadable(emit, datasource_id, exc)
        raise
    except Exception as exc:
        emit("index.failed", datasource_id=datasource_id, message=f"{type(exc).__name__}: {exc}")
        raise
    try:
        profiles = stage("profile", adapter, plan, profile, progress, column_failed)
        plan = stage("relate", adapter, plan, profile)
        entries = stage("entries", plan, profiles, sample_questions=sample_questions, verified=verified,
                        description=description)
        build_id = store.begin_build(datasource_id, embedder.model_id)  # invisible until it commits
        try:
            vectors, embedded, cached = stage("embed", entries, embedder, store, progress, plan.previous_vectors,
                                              datasource_id)
            replaced, kind, recall = stage("commit", store, build_id, plan, entries, vectors, keep=keep)
        except BaseException as exc:
            store.fail_build(build_id, f"{type(exc).__name__}: {exc}")
            raise
    except Exception as exc:
        emit("index.failed", datasource_id=datasource_id, message=f"{type(exc).__name__}: {exc}")
        raise
    counts = dict(Counter(e.kind for e in entries))
    emit("index.swapped", datasource_id=datasource_id, build_id=build_id, replaced_build_id=replaced, counts=counts,
         embedded=embedded, cached=cached, changed_tables=len(plan.changed_tables))
    return BuildResult(datasource_id=datasource_id, build_id=build_id, replaced=replaced, fingerprint=plan.fingerprint,
                       counts=counts, embedded=embedded, cached=cached, index_kind=kind, recall_at_20=recall,
                       seconds=seconds, diff=plan.diff, tables=len(plan.snapshot.tables),
                       changed_tables=plan.changed_tables)
