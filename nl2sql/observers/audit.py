"""The audit observer: audited events (the catalog's `audit` flag) as JSON lines in day files.

Each line is the whole event (name, trace_id, timestamp in ISO UTC, data), appended to
`<folder>/YYYY-MM-DD.jsonl` for the event's UTC day. `on_event` only queues the line; a daemon
thread, started by the first audited event, writes batches, opening and appending the day file per
batch. The queue is bounded (`MAX_QUEUE`): a line that does not fit is dropped, counted in
`dropped` and warned about once. `close()` writes what is queued and what arrives while it closes;
an `atexit` hook (through a weak reference, unregistered by `close`) does the same for a process
that never closes. Day files older than `max_age_days` are deleted by `purge`, which runs when the
observer is built.

>>> from nl2sql.events.catalog import Event
>>> day_of(Event(name="run.started", timestamp=86400.0 * 365, data={}))
'1971-01-01'
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import re
import threading
import weakref
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from nl2sql.events.catalog import AUDIT_EVENTS, Event
from nl2sql.private_files import private_file, private_folder

if TYPE_CHECKING:
    from nl2sql.config.models import Config

log = logging.getLogger(__name__)

DAY_FILE = re.compile(r"^(\d{4}-\d{2}-\d{2})\.jsonl$")
_STOP = object()


def day_of(event: Event) -> str:
    """The UTC day of an event, `YYYY-MM-DD`."""
    return datetime.fromtimestamp(event.timestamp, tz=UTC).strftime("%Y-%m-%d")


def audit_line(event: Event) -> str:
    """The event as one JSON line (without the newline)."""
    record = {
        "name": event.name,
        "trace_id": event.trace_id,
        "timestamp": datetime.fromtimestamp(event.timestamp, tz=UTC).isoformat(),
        "data": event.data,
    }
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)


class AuditOptions(BaseModel):
    """Options of the audit observer."""

    model_config = ConfigDict(extra="forbid")

    max_age_days: int | None = Field(default=None, ge=1, description="Default: storage.audit_max_age_days.")
    folder: str | None = Field(default=None, description="Default: <state_dir>/audit; relative to nl2sql.yaml.")


class AuditObserver:
    """Appends audited events to day files from its own writer thread."""

    options_model = AuditOptions
    #: Lines the queue holds before new ones are dropped (tests lower it).
    MAX_QUEUE = 10_000
    #: Lines written per batch at most.
    BATCH = 1_000
    #: How long `close` waits for the writer before writing the rest itself.
    CLOSE_TIMEOUT_S = 30.0

    def __init__(self, folder: str | Path, max_age_days: int = 30) -> None:
        self.folder = Path(folder)
        self.max_age_days = max_age_days
        #: The audited names, read from the catalog when the observer is built.
        self.events = frozenset(AUDIT_EVENTS)
        self.dropped = 0
        self._queue: queue.Queue[object] = queue.Queue(maxsize=self.MAX_QUEUE)
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._warned = False
        self._closing = False
        self._closed = False
        self._atexit: Callable[[], None] | None = None

    @classmethod
    def configured(cls, options: AuditOptions, config: Config) -> AuditObserver:
        """The observer the options describe (its folder and the age its files are kept), nothing purged yet."""
        folder = config.base_dir / options.folder if options.folder else config.state_dir / "audit"
        return cls(folder.resolve(), max_age_days=options.max_age_days or config.storage.audit_max_age_days)

    @classmethod
    def from_options(cls, options: BaseModel, *, config: Config) -> AuditObserver:
        """Build from validated `AuditOptions`, then purge day files past their age."""
        assert isinstance(options, AuditOptions)
        observer = cls.configured(options, config)
        try:
            observer.purge()
        except OSError as exc:
            log.warning("could not purge old audit files in %s: %s", observer.folder, exc)
        return observer

    # --- receiving -----------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        """Queue an audited event's line (never blocks; a line that does not fit is dropped)."""
        if event.name not in self.events:
            return
        item = (day_of(event), audit_line(event))
        with self._lock:
            if self._closed:
                write_now = True
            else:
                write_now = False
                try:
                    self._queue.put_nowait(item)
                except queue.Full:
                    self._drop()
                    return
                if self._thread is None and not self._closing:
                    self._start()
        if write_now:  # after close: written on the caller's thread, so no audited line is lost
            self._write_safely([item])

    def _drop(self) -> None:
        self.dropped += 1
        if not self._warned:
            self._warned = True
            log.warning(
                "the audit queue is full (%d lines): audit lines are being dropped; "
                "the audit folder %s may be slow or unwritable", self.MAX_QUEUE, self.folder)

    def _start(self) -> None:
        ref = weakref.ref(self)

        def flush_at_exit() -> None:
            observer = ref()
            if observer is not None:
                observer.close()

        self._atexit = flush_at_exit
        atexit.register(flush_at_exit)
        self._thread = threading.Thread(target=self._run, name="nl2sql-audit-writer", daemon=True)
        self._thread.start()

    # --- writing -------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            batch: list[tuple[str, str]] = []
            stop = False
            while True:
                if item is _STOP:
                    stop = True
                    break
                batch.append(item)  # type: ignore[arg-type]
                if len(batch) >= self.BATCH:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch:
                self._write_safely(batch)
            if stop:
                return

    def _write_safely(self, batch: list[tuple[str, str]]) -> None:
        try:
            with self._write_lock:
                self._write_batch(batch)
        except Exception:
            log.exception("could not write %d audit line(s) to %s", len(batch), self.folder)

    def _write_batch(self, batch: list[tuple[str, str]]) -> None:
        """Append a batch of `(day, line)` to the day files, each opened once per batch."""
        by_day: dict[str, list[str]] = {}
        for day, line in batch:
            by_day.setdefault(day, []).append(line)
        private_folder(self.folder)  # the audit trail names askers and approvers: its owner's only
        for day, lines in by_day.items():
            fd = os.open(private_file(self.folder / f"{day}.jsonl"), os.O_WRONLY | os.O_APPEND)
            with os.fdopen(fd, "a", encoding="utf-8") as handle:
                handle.write("".join(f"{line}\n" for line in lines))

    def _drain(self) -> None:
        batch: list[tuple[str, str]] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP:
                batch.append(item)  # type: ignore[arg-type]
        if batch:
            self._write_safely(batch)

    def close(self) -> None:
        """Write everything queued (and what arrives while closing), stop the writer. Idempotent."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            thread = self._thread
        if self._atexit is not None:
            atexit.unregister(self._atexit)
            self._atexit = None
        if thread is not None:
            try:
                self._queue.put(_STOP, timeout=self.CLOSE_TIMEOUT_S)
            except queue.Full:
                log.warning("the audit writer did not make room within %.0f s", self.CLOSE_TIMEOUT_S)
            thread.join(timeout=self.CLOSE_TIMEOUT_S)
        with self._lock:
            self._closed = True
        self._drain()

    # --- retention -----------------------------------------------------------------------------

    def day_files(self) -> list[Path]:
        """The day files in the folder, oldest first."""
        if not self.folder.is_dir():
            return []
        return sorted(p for p in self.folder.iterdir() if DAY_FILE.match(p.name) and p.is_file())

    def purge(self, now: datetime | float | None = None) -> int:
        """Delete day files older than `max_age_days` (by their UTC day); returns how many were deleted."""
        if now is None:
            today = datetime.now(tz=UTC).date()
        elif isinstance(now, datetime):
            today = (now if now.tzinfo else now.replace(tzinfo=UTC)).astimezone(UTC).date()
        else:
            today = datetime.fromtimestamp(now, tz=UTC).date()
        cutoff = today - timedelta(days=self.max_age_days)
        deleted = 0
        for path in self.day_files():
            match = DAY_FILE.match(path.name)
            assert match is not None
            try:
                day = date.fromisoformat(match.group(1))
            except ValueError:
                continue
            if day < cutoff:
                path.unlink(missing_ok=True)
                deleted += 1
        return deleted


def purge_audit_files(config: Config, now: datetime | float | None = None) -> int:
    """Delete the day files past their age in the folder of every audit observer the project configures; how many."""
    deleted = 0
    for observer in config.observers:
        if observer.use == "audit":
            deleted += AuditObserver.configured(AuditOptions.model_validate(observer.options), config).purge(now)
    return deleted
