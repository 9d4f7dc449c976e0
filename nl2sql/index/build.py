"""Building one datasource's index: reflect → profile → relate (inferred keys) → entries → embed → commit (FAISS,
live pointer, snapshot and diff).

The stages are declared once (`BUILD`) and driven by one function (`build_datasource`): in place, one after
another, or each as a Prefect task (the `index-build` flow hands it `tasks/index.run_stage`); either way the same
events, timings and failure handling. Rebuilds are incremental: tables whose shape and row count are unchanged
since the live build keep their entries (no profiling; carried over as stored, with their vectors read from the
live build's index by position), and any other entry's vector comes from the embedding cache when its text was
embedded before, so a rebuild after one table changes embeds only that table's entries.

A big datasource's entries are split into segments by a hash of their table's name (`SEGMENT_TABLES` tables
each, about; the datasource's own entries, its description, examples and verified queries, in one more): a
segment none of whose tables changed is listed by the new build as it is, so a rebuild after one table changes
writes that table's segment and the datasource's, not the whole index.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from nl2sql.config.models import ProfileSettings
from nl2sql.datasources.base import Adapter
from nl2sql.datasources.models import ColumnProfile, InferredKeys, SchemaSnapshot, TableInfo
from nl2sql.errors import NL2SQLError
from nl2sql.index.chunks import ENTRY_FORMAT, BuildEntry, Entry, StoredEntry, build_entries, qualified
from nl2sql.index.collection import collection_paused
from nl2sql.index.embed import Embedder
from nl2sql.index.store import Segment, StateStore
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
#: Tables per segment of a build, about: a rebuild writes the segments of the tables that changed. One segment up to
#: twice this (a build the size of the wide benchmark's 1,200 tables is one file, rewritten by a rebuild in 0.6 s).
SEGMENT_TABLES = 1000


def segment_count(tables: int) -> int:
    """How many segments a first build of this many tables splits its tables' entries into."""
    return max(1, tables // SEGMENT_TABLES)


def segment_of(table: str, count: int) -> int:
    """The segment a table's entries go to, of `count`: by a hash of its name, so a table stays in its segment
    from one build to the next whatever other tables come and go."""
    return zlib.crc32(table.encode()) % count if count > 1 else 0


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
    segments: int = 1
    kept: dict[int, Segment] = field(default_factory=dict)
    #: How many name values each table the build carries over holds (its tables with any), from the live build's stats:
    #: with those profiled, the build keeps about `profile.max_name_values_total`.
    name_values_held: dict[str, int] = field(default_factory=dict)

    @property
    def parts(self) -> int:
        """How many segments the build lists: its tables' `segments`, and the datasource's own entries in one
        more where there are several (in the only one otherwise)."""
        return self.segments + 1 if self.segments > 1 else 1

    def part_of(self, entry: BuildEntry) -> int:
        """The segment an entry goes to (its position in the build's list)."""
        if entry.table is not None and entry.kind != "verified":
            return segment_of(entry.table, self.segments)
        return self.parts - 1


@dataclass
class PreviousVectors:
    """Where the live build keeps the vectors of the entries a build carries over (each `StoredEntry` knows its
    segment and row there): its id and the model that embedded them."""

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
    segments_written: int = 1
    segments: int = 1


def plan_build(adapter: Adapter, store: StateStore, *, full: bool = False) -> BuildPlan:
    """Reflect (from the live build's snapshot where the catalog says a table is unchanged), and compare with
    the live build: which tables must be profiled again (all of them when the live build is of another entry
    format), which of its segments the new build lists as they are, and which stored entries it carries into the
    segments it writes."""
    live = store.live_build(adapter.datasource_id)
    previous = store.snapshot(adapter.datasource_id, live.fingerprint) if live and live.fingerprint else None
    # tables whose catalog definition is unchanged are not reflected again (a full build reflects all)
    snapshot = adapter.reflect(None if full else previous)
    names = [qualified(t) for t in snapshot.tables]
    diff = diff_snapshots(previous, snapshot)
    count = segment_count(len(names))
    if full or live is None or previous is None or live.stats.get("entry_format") != ENTRY_FORMAT:
        return BuildPlan(snapshot, fingerprint(snapshot), names, previous=previous, diff=diff, segments=count)
    was = int(live.stats.get("segments", 1))
    if count / 2 <= was <= count * 2:  # tables move to other segments (all written again) only once the schema
        count = was                    # has halved or doubled since the segments were made
    changed = changed_tables(previous, snapshot)
    unchanged = set(names) - set(changed)
    plan = BuildPlan(snapshot, fingerprint(snapshot), changed, previous=previous, diff=diff, segments=count,
                     previous_vectors=PreviousVectors(live.build_id, live.model_id or ""),
                     name_values_held={t: int(n) for t, n in (live.stats.get("name_values") or {}).items()
                                       if t in unchanged})
    old = store.segments(live.build_id)
    by_part: dict[int, list[str]] = {}
    for name in names:
        by_part.setdefault(segment_of(name, count), []).append(name)
    touched = {segment_of(name, count) for name in changed}
    if len(old) == plan.parts and was == count:
        plan.kept = {k: old[k] for k, tables in by_part.items()
                     if k not in touched and k < plan.parts - 1 and old[k].tables == tuple(tables)}
    # the unchanged tables of the segments written are carried from the live build's segments that hold them
    carry = {name for k, tables in by_part.items() if k not in plan.kept for name in tables} - set(changed)
    sources = [s for s in old if s.tables is None or not carry.isdisjoint(s.tables)]
    plan.reused = [e for s in sources for e in store.stored_entries(s.segment_id)
                   if e.kind in ("table", "column", "relationship") and e.table in carry]
    return plan


def profile_tables(adapter: Adapter, plan: BuildPlan, settings: ProfileSettings,
                   progress: Progress | None = None, on_issue: ColumnIssue | None = None) -> list[ColumnProfile]:
    """Profile the tables that changed (bounded by settings.profile).

    A table whose profiling fails is indexed without profiles; `on_issue` hears of each of its
    columns with a fixed sentence and the error's type, never the database's text (it may quote a value).
    """
    profiles: list[ColumnProfile] = []
    changed = set(plan.changed_tables)
    todo = [t for t in plan.snapshot.tables if qualified(t) in changed]
    # name values left to keep: a column of more distinct values than are left keeps none, a smaller one after it may
    left = settings.max_name_values_total - sum(plan.name_values_held.values())
    for done, table in enumerate(todo, start=1):
        try:
            found = adapter.profile_table(table, sample_rows=settings.sample_rows,
                                          max_sample_values=settings.max_sample_values,
                                          low_cardinality=settings.low_cardinality,
                                          dominant_share=settings.dominant_share,
                                          max_name_values=settings.max_name_values, name_values_left=max(0, left))
            profiles += found
            left -= sum(len(p.name_values) for p in found)
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
    """The entries of the segments the build writes (those it keeps are the live build's), segment by segment: in
    each, the changed tables' and the reused ones in schema order, then the datasource-level ones (inferred keys read
    as declared ones: a keyless table's entries say what it belongs to)."""
    changed = set(plan.changed_tables)
    keyed = with_inferred_keys(plan.snapshot)
    partial = keyed.model_copy(update={"tables": [t for t in keyed.tables if qualified(t) in changed]})
    fresh = build_entries(partial, profiles, sample_questions=sample_questions, verified=verified,
                          description=description)
    order = {qualified(t): i for i, t in enumerate(plan.snapshot.tables)}
    by_table: list[BuildEntry] = [e for e in [*plan.reused, *fresh] if e.table is not None and e.kind != "verified"]
    by_table.sort(key=lambda e: (plan.part_of(e), order.get(e.table or "", 1 << 30),
                                 ("table", "column", "relationship").index(e.kind)))
    rest = [e for e in fresh if e.table is None or e.kind == "verified"]
    return [e for e in by_table if plan.part_of(e) not in plan.kept] + rest


def embed_entries(entries: Sequence[BuildEntry], embedder: Embedder, store: StateStore,
                  progress: Progress | None = None, previous: PreviousVectors | None = None,
                  datasource_id: str = "") -> tuple[np.ndarray, int, int]:
    """Vectors for every entry: a carried-over entry's from the live build's index (`previous`, read by position
    from its memory-mapped file), another known text's from the cache, the rest embedded; (vectors, embedded,
    cached)."""
    matrix = np.empty((len(entries), embedder.dimensions), dtype=np.float32)
    carried = {i: e for i, e in enumerate(entries) if isinstance(e, StoredEntry)}
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
                     carried: Sequence[StoredEntry]) -> np.ndarray | None:
    """The vectors of these entries, read from their rows of the live build's FAISS files in one batch per file
    (an incremental build reads these instead of the cache's rows: one lookup per entry of a big schema cost more
    than the change); None when there is no live build, it came from another model, or a file cannot be read."""
    if previous is None or previous.model_id != model_id or not carried:
        return None
    out = np.empty((len(carried), 0), dtype=np.float32)
    by_segment: dict[str, list[int]] = {}
    for i, e in enumerate(carried):
        by_segment.setdefault(e.segment_id, []).append(i)
    try:
        for segment_id, at in by_segment.items():
            index = read_index(store.index_path(datasource_id, segment_id), mapped=True)
            if out.shape[1] != index.d:
                out = np.empty((len(carried), index.d), dtype=np.float32)
            out[at] = index.reconstruct_batch(np.asarray([carried[i].position for i in at], dtype=np.int64))
    except Exception as exc:  # a missing or unreadable file: the cache and the embedder still answer
        log.warning("The vectors of build %s could not be read (%s); the embedding cache is used.",
                    previous.build_id, exc)
        return None
    return out


def commit_index(store: StateStore, build_id: str, plan: BuildPlan, entries: Sequence[BuildEntry], vectors: np.ndarray,
                 *, keep: int) -> tuple[str | None, str, float | None]:
    """Write the segments the build wrote (a FAISS file and the entries of each), then list them with those it
    kept and switch the live pointer; (replaced build, kind, worst recall@20 of a graph segment)."""
    ds = plan.snapshot.datasource_id
    parts = [plan.part_of(e) for e in entries]
    listed: list[str] = []
    kinds: set[str] = set()
    recalls: list[float] = []
    counts: Counter[str] = Counter(e.kind for e in entries)
    for k in range(plan.parts):
        if k in plan.kept:
            listed.append(plan.kept[k].segment_id)
            counts.update(plan.kept[k].counts)
            continue
        at = [i for i, part in enumerate(parts) if part == k]
        segment_id = build_id if plan.parts == 1 else f"{build_id}-{k:03d}"
        index, kind = build_index(vectors[at])
        kinds.add(kind)
        if kind == "hnsw":
            recalls.append(recall_at_k(index, vectors[at], k=20))
        write_index(index, store.index_path(ds, segment_id))
        store.write_segment(build_id, segment_id, [entries[i] for i in at],
                            None if plan.parts == 1 else sorted({entries[i].table or "" for i in at} - {""},
                                                                key=_schema_order(plan)))
        listed.append(segment_id)
    kind = "hnsw" if "hnsw" in kinds else "flat"
    recall = min(recalls) if recalls else None
    stats = {"counts": dict(counts), "recall_at_20": recall, "changed_tables": len(plan.changed_tables),
             "entry_format": ENTRY_FORMAT, "inferred_keys": _inferred_counts(plan.snapshot),
             "name_values": _name_values_by_table(plan, entries),
             "segments": plan.segments, "segments_written": plan.parts - len(plan.kept)}
    replaced = store.commit_build(build_id, snapshot=plan.snapshot, fingerprint=plan.fingerprint,
                                  diff=plan.diff, index_kind=kind, entry_count=sum(counts.values()), stats=stats,
                                  keep=keep, segments=listed)
    return replaced, kind, recall


def _name_values_by_table(plan: BuildPlan, entries: Sequence[BuildEntry]) -> dict[str, int]:
    """How many name values each table of the build holds (tables with none left out): those its fresh column entries
    keep, and those of the tables it carries over."""
    counts = Counter(plan.name_values_held)
    for e in entries:
        if isinstance(e, Entry) and e.kind == "column" and e.table and e.metadata.get("names"):
            counts[e.table] += len(e.metadata["names"])
    return dict(counts)


def _schema_order(plan: BuildPlan) -> Callable[[str], int]:
    """A table's place in the snapshot (how a segment lists its tables)."""
    order = {qualified(t): i for i, t in enumerate(plan.snapshot.tables)}
    return lambda table: order.get(table, 1 << 30)


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
        # a big schema's stages make its snapshot, entries and keys by the hundred thousand; profiling and
        # embedding run long and make few (and they publish progress)
        with nullcontext() if name in ("profile", "embed") else collection_paused():
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
    counts = Counter(e.kind for e in entries)
    for segment in plan.kept.values():
        counts.update(segment.counts)
    cached += sum(s.entry_count for s in plan.kept.values())  # listed as they are: nothing embedded
    emit("index.swapped", datasource_id=datasource_id, build_id=build_id, replaced_build_id=replaced,
         counts=dict(counts), embedded=embedded, cached=cached, changed_tables=len(plan.changed_tables))
    return BuildResult(datasource_id=datasource_id, build_id=build_id, replaced=replaced, fingerprint=plan.fingerprint,
                       counts=dict(counts), embedded=embedded, cached=cached, index_kind=kind, recall_at_20=recall,
                       seconds=seconds, diff=plan.diff, tables=len(plan.snapshot.tables),
                       changed_tables=plan.changed_tables, segments_written=plan.parts - len(plan.kept),
                       segments=plan.parts)
