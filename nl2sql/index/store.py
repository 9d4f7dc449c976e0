"""The state store: builds, entries, schema snapshots and diffs, the embedding cache (SQLite), FAISS files.

A build's entries and vectors are held in segments: each a FAISS file and its entries' rows, written once and
never changed. A build is an ordered list of segments, its entries theirs in that order; an incremental build
writes the segments whose tables changed and lists the live build's others as they are, so what it writes grows
with the change, not with the datasource (`index.build` decides which tables a segment holds).

A build is invisible until it commits: its segments are written first, then one transaction marks it committed
and moves the datasource's live pointer to it, so readers see either the old build or the new one. A crash
mid-build leaves a `building` row that no reader looks at; the next build of that datasource marks it abandoned
and removes the segments it wrote. The last `keep` committed builds are kept, and a segment goes with the last
build that lists it.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nl2sql.datasources.models import SchemaSnapshot, share_field_sets
from nl2sql.index.chunks import BuildEntry, Entry, EntryTable, StoredEntry
from nl2sql.private_files import private_file, private_folder
from nl2sql.schema.snapshot import SchemaDiff

#: Numbered migrations; `PRAGMA user_version` records how many have run.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE builds (
        build_id TEXT PRIMARY KEY, datasource_id TEXT NOT NULL, status TEXT NOT NULL,
        started_at REAL NOT NULL, finished_at REAL, pid INTEGER, fingerprint TEXT,
        model_id TEXT, entry_count INTEGER, index_kind TEXT, stats TEXT
    );
    CREATE INDEX builds_by_datasource ON builds (datasource_id, status);
    CREATE TABLE live (datasource_id TEXT PRIMARY KEY, build_id TEXT NOT NULL REFERENCES builds (build_id));
    CREATE TABLE entries (
        build_id TEXT NOT NULL, position INTEGER NOT NULL, entry TEXT NOT NULL, PRIMARY KEY (build_id, position)
    );
    CREATE TABLE snapshots (
        datasource_id TEXT NOT NULL, fingerprint TEXT NOT NULL, taken_at REAL NOT NULL, snapshot TEXT NOT NULL,
        PRIMARY KEY (datasource_id, fingerprint)
    );
    CREATE TABLE diffs (
        datasource_id TEXT NOT NULL, from_fingerprint TEXT, to_fingerprint TEXT NOT NULL, created_at REAL NOT NULL,
        diff TEXT NOT NULL
    );
    CREATE TABLE embedding_cache (
        model_id TEXT NOT NULL, text_hash TEXT NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (model_id, text_hash)
    );
    """,
    """
    CREATE TABLE plan_cache (
        cache_key TEXT PRIMARY KEY, datasource_id TEXT NOT NULL, fingerprint TEXT NOT NULL, plan TEXT NOT NULL,
        created_at REAL NOT NULL, hits INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE traces (
        trace_id TEXT PRIMARY KEY, created_at REAL NOT NULL, question TEXT NOT NULL, status TEXT NOT NULL,
        document TEXT NOT NULL
    );
    CREATE INDEX traces_by_time ON traces (created_at);
    """,
    """
    CREATE TABLE approvals (
        trace_id TEXT NOT NULL, request_id TEXT NOT NULL, request TEXT NOT NULL, status TEXT NOT NULL,
        created_at REAL NOT NULL, resolved_at REAL, approver TEXT, role TEXT, reason TEXT,
        PRIMARY KEY (trace_id, request_id)
    );
    CREATE INDEX approvals_by_status ON approvals (status, created_at);
    CREATE TABLE pinned_runs (trace_id TEXT PRIMARY KEY, created_at REAL NOT NULL, state TEXT NOT NULL);
    """,
    """
    CREATE TABLE drift_checks (
        datasource_id TEXT PRIMARY KEY, checked_at REAL NOT NULL, status TEXT NOT NULL, drift_sha256 TEXT
    );
    """,
    # segments: a build before this held one, named as the build (its entries and FAISS file already were)
    """
    ALTER TABLE entries RENAME COLUMN build_id TO segment_id;
    CREATE TABLE segments (
        segment_id TEXT PRIMARY KEY, datasource_id TEXT NOT NULL, build_id TEXT NOT NULL, entry_count INTEGER NOT NULL,
        tables TEXT, counts TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX segments_by_build ON segments (build_id);
    CREATE TABLE build_segments (
        build_id TEXT NOT NULL, ordinal INTEGER NOT NULL, segment_id TEXT NOT NULL, PRIMARY KEY (build_id, ordinal)
    );
    CREATE INDEX build_segments_by_segment ON build_segments (segment_id);
    INSERT INTO segments (segment_id, datasource_id, build_id, entry_count, tables)
        SELECT build_id, datasource_id, build_id, COALESCE(entry_count, 0), NULL FROM builds
        WHERE status IN ('committed', 'building');
    INSERT INTO build_segments (build_id, ordinal, segment_id)
        SELECT build_id, 0, build_id FROM builds WHERE status = 'committed'
    """,
)


@dataclass(frozen=True)
class Segment:
    """A part of a build's entries and vectors: its id (its FAISS file's name), the tables its entries are about
    (None: a segment written before builds had more than one, holding every table), how many entries, and how many
    of each kind."""

    segment_id: str
    tables: tuple[str, ...] | None
    entry_count: int
    counts: dict[str, int]


@dataclass(frozen=True)
class BuildInfo:
    """One build of one datasource's index."""

    build_id: str
    datasource_id: str
    status: str
    started_at: float
    finished_at: float | None
    fingerprint: str | None
    model_id: str | None
    entry_count: int | None
    index_kind: str | None
    stats: dict


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


#: How often, and how long apart at first, a connection tries to switch a new state database to WAL.
WAL_TRIES, WAL_BACKOFF_S = 8, 0.05


def _use_wal(conn: sqlite3.Connection) -> None:
    """Put the database in WAL mode (once per file: the mode is kept in it). Switching needs the database to
    itself, and SQLite answers "database is locked" at once, without waiting, while another connection reads it:
    two processes opening a new state folder together (an index build's parallel tasks) met exactly that. So the
    mode is read first, and the switch is tried again, a little later each time."""
    for attempt in range(WAL_TRIES):
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == WAL_TRIES - 1:
                raise
            time.sleep(WAL_BACKOFF_S * 2**attempt)


class StateStore:
    """The engine's state folder: `state.db` and `index/<datasource>/<build>.faiss`."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = private_folder(state_dir)  # profiled sample values, approvals, traces: the owner's only
        self.index_dir = private_folder(state_dir / "index")
        self.path = private_file(state_dir / "state.db")
        self._local = threading.local()
        with self.connect() as conn:
            self._migrate(conn)

    # --- connections ---------------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            _use_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            self._local.conn = conn
        return conn

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection, in one transaction (committed on success, rolled back on error)."""
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _migrate(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
            for statement in filter(str.strip, script.split(";")):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # --- builds --------------------------------------------------------------------------------

    def index_path(self, datasource_id: str, segment_id: str) -> Path:
        """Where a segment's FAISS file lives (a build of one segment: named as the build)."""
        return self.index_dir / datasource_id / f"{segment_id}.faiss"

    def begin_build(self, datasource_id: str, model_id: str) -> str:
        """Start an invisible build (abandoning earlier ones whose process is gone); its id."""
        build_id = time.strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)
        doomed: list[str] = []
        with self.connect() as conn:
            for (stale, pid) in conn.execute(
                    "SELECT build_id, pid FROM builds WHERE datasource_id = ? AND status = 'building'", (datasource_id,)):
                if not _pid_alive(pid) or pid == os.getpid():
                    conn.execute("UPDATE builds SET status = 'abandoned', finished_at = ? WHERE build_id = ?",
                                 (time.time(), stale))
                    doomed += [stale, *self._drop_unlisted(conn, stale)]  # its file may precede its rows
            conn.execute("INSERT INTO builds (build_id, datasource_id, status, started_at, pid, model_id) "
                         "VALUES (?, ?, 'building', ?, ?, ?)", (build_id, datasource_id, time.time(), os.getpid(), model_id))
        self._unlink(datasource_id, doomed)
        return build_id

    def write_segment(self, build_id: str, segment_id: str, entries: Sequence[BuildEntry],
                      tables: Sequence[str] | None) -> None:
        """Store a segment a build wrote: its entries (position = row in its FAISS file; a carried-over one as it
        was stored) and the tables they are about."""
        counts: dict[str, int] = {}
        for e in entries:
            counts[e.kind] = counts.get(e.kind, 0) + 1
        with self.connect() as conn:
            ds = conn.execute("SELECT datasource_id FROM builds WHERE build_id = ?", (build_id,)).fetchone()[0]
            conn.execute("INSERT INTO segments (segment_id, datasource_id, build_id, entry_count, tables, counts) "
                         "VALUES (?, ?, ?, ?, ?, ?)", (segment_id, ds, build_id, len(entries),
                                                        None if tables is None else json.dumps(list(tables)),
                                                        json.dumps(counts)))
            conn.executemany("INSERT INTO entries (segment_id, position, entry) VALUES (?, ?, ?)",
                             [(segment_id, i, e.document if isinstance(e, StoredEntry) else e.model_dump_json())
                              for i, e in enumerate(entries)])

    def write_entries(self, build_id: str, entries: Sequence[BuildEntry]) -> None:
        """Store a build's entries as its one segment, named as the build (a small build's whole index)."""
        self.write_segment(build_id, build_id, entries, None)

    def segments(self, build_id: str) -> list[Segment]:
        """A build's segments, in order (its entries are theirs, one segment after the other)."""
        with self.connect() as conn:
            rows = conn.execute("SELECT s.segment_id, s.tables, s.entry_count, s.counts FROM build_segments b "
                                "JOIN segments s ON s.segment_id = b.segment_id WHERE b.build_id = ? "
                                "ORDER BY b.ordinal", (build_id,)).fetchall()
        return [Segment(r[0], None if r[1] is None else tuple(json.loads(r[1])), r[2], json.loads(r[3]))
                for r in rows]

    def _drop_unlisted(self, conn: sqlite3.Connection, build_id: str) -> list[str]:
        """Delete the rows of the segments `build_id` wrote that no committed or kept build lists (a pruned,
        failed or abandoned build's own); their ids, for their files to go after the transaction."""
        conn.execute("DELETE FROM build_segments WHERE build_id = ?", (build_id,))
        doomed = [r[0] for r in conn.execute(
            "SELECT segment_id FROM segments s WHERE build_id = ? AND NOT EXISTS "
            "(SELECT 1 FROM build_segments b WHERE b.segment_id = s.segment_id)", (build_id,))]
        for segment_id in doomed:
            conn.execute("DELETE FROM entries WHERE segment_id = ?", (segment_id,))
            conn.execute("DELETE FROM segments WHERE segment_id = ?", (segment_id,))
        return doomed

    def _unlink(self, datasource_id: str, segment_ids: Sequence[str]) -> None:
        for segment_id in segment_ids:
            self.index_path(datasource_id, segment_id).unlink(missing_ok=True)

    def commit_build(self, build_id: str, *, snapshot: SchemaSnapshot, fingerprint: str, diff: SchemaDiff,
                     index_kind: str, entry_count: int, stats: dict, keep: int,
                     segments: Sequence[str] | None = None) -> str | None:
        """Make a build live in one transaction and record its snapshot and diff; the build it replaced. Its
        entries are those of `segments`, in order (by default its one segment, named as the build)."""
        with self.connect() as conn:
            ds = conn.execute("SELECT datasource_id FROM builds WHERE build_id = ?", (build_id,)).fetchone()[0]
            conn.executemany("INSERT INTO build_segments (build_id, ordinal, segment_id) VALUES (?, ?, ?)",
                             [(build_id, i, s) for i, s in enumerate(segments or [build_id])])
            previous = conn.execute("SELECT build_id FROM live WHERE datasource_id = ?", (ds,)).fetchone()
            conn.execute("UPDATE builds SET status = 'committed', finished_at = ?, fingerprint = ?, entry_count = ?, "
                         "index_kind = ?, stats = ? WHERE build_id = ?",
                         (time.time(), fingerprint, entry_count, index_kind, json.dumps(stats), build_id))
            conn.execute("INSERT INTO live (datasource_id, build_id) VALUES (?, ?) "
                         "ON CONFLICT (datasource_id) DO UPDATE SET build_id = excluded.build_id", (ds, build_id))
            conn.execute("INSERT OR REPLACE INTO snapshots (datasource_id, fingerprint, taken_at, snapshot) "
                         "VALUES (?, ?, ?, ?)", (ds, fingerprint, time.time(), snapshot.model_dump_json()))
            last = conn.execute("SELECT to_fingerprint FROM diffs WHERE datasource_id = ? ORDER BY rowid DESC LIMIT 1",
                                (ds,)).fetchone()
            if last is None or last[0] != fingerprint:
                conn.execute("INSERT INTO diffs (datasource_id, from_fingerprint, to_fingerprint, created_at, diff) "
                             "VALUES (?, ?, ?, ?, ?)",
                             (ds, last[0] if last else None, fingerprint, time.time(), diff.model_dump_json()))
        self.prune(ds, keep)
        return previous[0] if previous else None

    def fail_build(self, build_id: str, message: str) -> None:
        """Mark a build failed (the live pointer is untouched) and drop the segments it wrote."""
        with self.connect() as conn:
            row = conn.execute("SELECT datasource_id FROM builds WHERE build_id = ?", (build_id,)).fetchone()
            conn.execute("UPDATE builds SET status = 'failed', finished_at = ?, stats = ? WHERE build_id = ?",
                         (time.time(), json.dumps({"error": message}), build_id))
            doomed = self._drop_unlisted(conn, build_id)
        if row:
            self._unlink(row[0], [*doomed, build_id])  # a segment's file may be written before its rows

    def prune(self, datasource_id: str, keep: int) -> list[str]:
        """Delete committed builds beyond the newest `keep` (never the live one), and the segments no build left
        lists; the builds' ids."""
        segments: list[str] = []
        with self.connect() as conn:
            live = conn.execute("SELECT build_id FROM live WHERE datasource_id = ?", (datasource_id,)).fetchone()
            rows = conn.execute("SELECT build_id FROM builds WHERE datasource_id = ? AND status = 'committed' "
                                "ORDER BY started_at DESC", (datasource_id,)).fetchall()
            doomed = [r[0] for r in rows[keep:] if not live or r[0] != live[0]]
            for build_id in doomed:
                conn.execute("UPDATE builds SET status = 'pruned' WHERE build_id = ?", (build_id,))
                conn.execute("DELETE FROM build_segments WHERE build_id = ?", (build_id,))
            if doomed:  # a pruned build's segments may be listed by a kept one, and an older one's by it
                segments = [r[0] for r in conn.execute(
                    "SELECT segment_id FROM segments s WHERE datasource_id = ? AND NOT EXISTS "
                    "(SELECT 1 FROM build_segments b WHERE b.segment_id = s.segment_id) AND NOT EXISTS "
                    "(SELECT 1 FROM builds w WHERE w.build_id = s.build_id AND w.status = 'building')",
                    (datasource_id,))]
                for segment_id in segments:
                    conn.execute("DELETE FROM entries WHERE segment_id = ?", (segment_id,))
                    conn.execute("DELETE FROM segments WHERE segment_id = ?", (segment_id,))
        self._unlink(datasource_id, segments)
        return doomed

    def _info(self, row: tuple) -> BuildInfo:
        return BuildInfo(build_id=row[0], datasource_id=row[1], status=row[2], started_at=row[3], finished_at=row[4],
                         fingerprint=row[5], model_id=row[6], entry_count=row[7], index_kind=row[8],
                         stats=json.loads(row[9]) if row[9] else {})

    _COLUMNS = "build_id, datasource_id, status, started_at, finished_at, fingerprint, model_id, entry_count, index_kind, stats"

    def live_build(self, datasource_id: str) -> BuildInfo | None:
        """The build readers use for a datasource (None before the first build commits)."""
        with self.connect() as conn:
            row = conn.execute(f"SELECT {', '.join('b.' + c.strip() for c in self._COLUMNS.split(','))} "
                               "FROM live l JOIN builds b ON b.build_id = l.build_id WHERE l.datasource_id = ?",
                               (datasource_id,)).fetchone()
        return self._info(row) if row else None

    def builds(self, datasource_id: str) -> list[BuildInfo]:
        """Every build of a datasource, newest first."""
        with self.connect() as conn:
            rows = conn.execute(f"SELECT {self._COLUMNS} FROM builds WHERE datasource_id = ? ORDER BY started_at DESC",
                                (datasource_id,)).fetchall()
        return [self._info(r) for r in rows]

    _IN_ORDER = ("FROM build_segments b JOIN entries e ON e.segment_id = b.segment_id WHERE b.build_id = ? "
                 "ORDER BY b.ordinal, e.position")

    def entries(self, build_id: str) -> list[Entry]:
        """A build's entries, in index order."""
        with self.connect() as conn:
            rows = conn.execute(f"SELECT e.entry {self._IN_ORDER}", (build_id,)).fetchall()
        return [Entry.model_validate_json(r[0]) for r in rows]

    def entry_table(self, build_id: str) -> EntryTable:
        """A build's entries in index order, as columns (`EntryTable`, what a live build holds): SQLite reads each
        field out of the stored documents, none is decoded whole, and rows are read as they are added."""
        out, tables_of = EntryTable(), {}
        fields = ", ".join(f"json_extract(e.entry, '$.{f}')" for f in ("id", "datasource_id", "kind", "table", "column",
                                                                     "tables", "text", "metadata"))
        with self.connect() as conn:
            for id_, ds, kind, table, column, tables, text, metadata in conn.execute(
                    f"SELECT {fields} {self._IN_ORDER}", (build_id,)):
                if tables not in tables_of:
                    tables_of[tables] = tuple(json.loads(tables)) if tables else ()
                out.append(id_, ds, kind, table, column, tables_of[tables], text, metadata or "{}")
        return out

    def stored_entries(self, segment_id: str) -> list[StoredEntry]:
        """A segment's entries as stored, in order: kind, table and text read by SQLite, nothing decoded (a build
        of one segment: its id is the build's)."""
        with self.connect() as conn:
            rows = conn.execute("SELECT json_extract(entry, '$.kind'), json_extract(entry, '$.table'), "
                                "json_extract(entry, '$.text'), entry, position, segment_id FROM entries "
                                "WHERE segment_id = ? ORDER BY position", (segment_id,)).fetchall()
        return [StoredEntry(*row) for row in rows]

    def snapshot(self, datasource_id: str, fingerprint: str) -> SchemaSnapshot | None:
        """A recorded snapshot."""
        with self.connect() as conn:
            row = conn.execute("SELECT snapshot FROM snapshots WHERE datasource_id = ? AND fingerprint = ?",
                               (datasource_id, fingerprint)).fetchone()
        if row is None:
            return None
        snapshot = SchemaSnapshot.model_validate_json(row[0])
        share_field_sets(snapshot)  # a third of a big snapshot's memory otherwise
        return snapshot

    def diffs(self, datasource_id: str) -> list[tuple[str | None, str, float, SchemaDiff]]:
        """(from, to, when, diff) between consecutive snapshots, oldest first."""
        with self.connect() as conn:
            rows = conn.execute("SELECT from_fingerprint, to_fingerprint, created_at, diff FROM diffs "
                                "WHERE datasource_id = ? ORDER BY rowid", (datasource_id,)).fetchall()
        return [(r[0], r[1], r[2], SchemaDiff.model_validate_json(r[3])) for r in rows]

    # --- embedding cache -----------------------------------------------------------------------

    def purge(self, before: float) -> dict[str, int]:
        """Delete what retention lets go of, older than `before` (a Unix time): run traces, resolved approvals,
        pinned states of suspended runs, cached plans, and the rows of failed and pruned builds (their files are
        gone already); never a live or kept build, a pending approval, or the embedding cache. Counts by kind."""
        statements = {
            "traces": "DELETE FROM traces WHERE created_at < ?",
            "approvals": "DELETE FROM approvals WHERE status != 'pending' AND COALESCE(resolved_at, created_at) < ?",
            "pinned_runs": "DELETE FROM pinned_runs WHERE created_at < ?",
            "cached_plans": "DELETE FROM plan_cache WHERE created_at < ?",
            "build_records": "DELETE FROM builds WHERE status IN ('failed', 'pruned') "
                             "AND COALESCE(finished_at, started_at) < ?",
        }
        with self.connect() as conn:
            return {kind: conn.execute(sql, (before,)).rowcount for kind, sql in statements.items()}

    def record_drift_check(self, datasource_id: str, status: str, drift_sha256: str | None) -> bool:
        """Record the engine's latest drift check of a datasource; whether its drift (`drift_sha256`, None when
        there is none) is new: not the one the previous check found."""
        with self.connect() as conn:
            row = conn.execute("SELECT drift_sha256 FROM drift_checks WHERE datasource_id = ?",
                               (datasource_id,)).fetchone()
            conn.execute("INSERT OR REPLACE INTO drift_checks VALUES (?, ?, ?, ?)",
                         (datasource_id, time.time(), status, drift_sha256))
        return drift_sha256 is not None and (row is None or row[0] != drift_sha256)

    def cached_vectors(self, model_id: str, text_hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """Vectors already computed for these texts."""
        found: dict[str, np.ndarray] = {}
        unique = list(dict.fromkeys(text_hashes))
        with self.connect() as conn:
            for start in range(0, len(unique), 500):
                chunk = unique[start:start + 500]
                marks = ",".join("?" * len(chunk))
                for text_hash, blob in conn.execute(
                        f"SELECT text_hash, vector FROM embedding_cache WHERE model_id = ? AND text_hash IN ({marks})",
                        (model_id, *chunk)):
                    found[text_hash] = np.frombuffer(blob, dtype=np.float32)
        return found

    def cache_vectors(self, model_id: str, vectors: dict[str, np.ndarray]) -> None:
        """Remember computed vectors by text hash."""
        with self.connect() as conn:
            conn.executemany("INSERT OR REPLACE INTO embedding_cache (model_id, text_hash, vector) VALUES (?, ?, ?)",
                             [(model_id, h, v.astype(np.float32).tobytes()) for h, v in vectors.items()])

    # --- plan cache and traces -----------------------------------------------------------------

    def cached_plan(self, cache_key: str) -> str | None:
        """A cached plan's JSON (its hit counted), or None."""
        with self.connect() as conn:
            row = conn.execute("SELECT plan FROM plan_cache WHERE cache_key = ?", (cache_key,)).fetchone()
            if row:
                conn.execute("UPDATE plan_cache SET hits = hits + 1 WHERE cache_key = ?", (cache_key,))
        return row[0] if row else None

    def cache_plan(self, cache_key: str, datasource_id: str, fingerprint: str, plan_json: str) -> None:
        """Remember a plan that validated and ran."""
        with self.connect() as conn:
            conn.execute("INSERT OR REPLACE INTO plan_cache (cache_key, datasource_id, fingerprint, plan, created_at) "
                         "VALUES (?, ?, ?, ?, ?)", (cache_key, datasource_id, fingerprint, plan_json, time.time()))

    def forget_plans(self, datasource_id: str | None = None) -> int:
        """Drop the cached plans (of one datasource, or all); how many."""
        with self.connect() as conn:
            if datasource_id is None:
                return conn.execute("DELETE FROM plan_cache").rowcount
            return conn.execute("DELETE FROM plan_cache WHERE datasource_id = ?", (datasource_id,)).rowcount

    def save_trace(self, trace_id: str, question: str, status: str, document: dict) -> None:
        """Store a run's trace document (steps, sizes, explanations, SQL, timings; never rows past the preview)."""
        with self.connect() as conn:
            conn.execute("INSERT OR REPLACE INTO traces (trace_id, created_at, question, status, document) "
                         "VALUES (?, ?, ?, ?, ?)", (trace_id, time.time(), question, status,
                                                    json.dumps(document, default=str)))

    def trace(self, trace_id: str) -> dict | None:
        """A stored trace document, or None."""
        with self.connect() as conn:
            row = conn.execute("SELECT document FROM traces WHERE trace_id = ?", (trace_id,)).fetchone()
        return json.loads(row[0]) if row else None

    # --- approvals and suspended runs ----------------------------------------------------------

    def save_approval(self, trace_id: str, request_id: str, request: dict) -> None:
        """Record a statement waiting for an approver (again: kept as it was)."""
        with self.connect() as conn:
            conn.execute("INSERT OR IGNORE INTO approvals (request_id, trace_id, request, status, created_at) "
                         "VALUES (?, ?, ?, 'pending', ?)", (request_id, trace_id, json.dumps(request), time.time()))

    def resolve_approval(self, trace_id: str, request_id: str, status: str, *, approver: str | None = None,
                         role: str | None = None, reason: str | None = None) -> None:
        """Record how a run's request ended: approved, denied or timed_out."""
        with self.connect() as conn:
            conn.execute("UPDATE approvals SET status = ?, resolved_at = ?, approver = ?, role = ?, reason = ? "
                         "WHERE trace_id = ? AND request_id = ?",
                         (status, time.time(), approver, role, reason, trace_id, request_id))

    def approvals(self, status: str | None = "pending", trace_id: str | None = None) -> list[dict]:
        """Recorded requests (pending ones by default), oldest first: trace id, status and the request."""
        query, args = "SELECT trace_id, status, request, approver, role, reason FROM approvals WHERE 1 = 1", []
        if status is not None:
            query, args = query + " AND status = ?", [*args, status]
        if trace_id is not None:
            query, args = query + " AND trace_id = ?", [*args, trace_id]
        with self.connect() as conn:
            rows = conn.execute(query + " ORDER BY created_at", args).fetchall()
        return [{"trace_id": r[0], "status": r[1], "request": json.loads(r[2]), "approver": r[3], "role": r[4],
                 "reason": r[5]} for r in rows]

    def pin_run(self, trace_id: str, state: dict) -> None:
        """Keep a suspended run's decisions, so its resumed run asks no model again."""
        with self.connect() as conn:
            conn.execute("INSERT OR REPLACE INTO pinned_runs (trace_id, created_at, state) VALUES (?, ?, ?)",
                         (trace_id, time.time(), json.dumps(state, default=str)))

    def pinned_run(self, trace_id: str) -> dict | None:
        """A suspended run's pinned decisions, or None."""
        with self.connect() as conn:
            row = conn.execute("SELECT state FROM pinned_runs WHERE trace_id = ?", (trace_id,)).fetchone()
        return json.loads(row[0]) if row else None
