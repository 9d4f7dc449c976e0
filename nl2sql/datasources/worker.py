"""Statements in a worker process: a caller's statement cannot take more memory or time than its bounds.

Some engines allocate outside their own accounting: DuckDB's `repeat('x', 2000000000)`, string builders, list
builders and regex results are ordinary heap allocations that its `memory_limit` does not see, and a function
that is busy allocating does not look at an interrupt. So an adapter whose `runs_in_worker` is set runs the
statements of callers in child processes of its own:

- each child bounds its private memory with RLIMIT_DATA (`settings.resources.statement_process_memory`) before it
  opens the database, so an allocation past the bound fails inside the engine (DuckDB answers "Out of Memory
  Error") and the child lives on;
- the child cancels its statement at the time limit as the adapter does in process; if no answer has come
  `INTERRUPT_GRACE_S` later, the parent kills the child and reports QueryTimeout, and the next statement gets a
  new child;
- a child that dies (killed for memory by the system, or crashed) is reported as a DatasourceError, never as a
  hang or a traceback.

The protocol is one pickled request and one pickled answer per statement over the child's stdin and a private
copy of its stdout (the child's own stdout goes to stderr, so nothing a library prints can break the protocol).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import resource
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from nl2sql.errors import DatasourceError, NL2SQLError

if TYPE_CHECKING:
    from nl2sql.datasources.base import Adapter
    from nl2sql.policies import Scope

#: Seconds past a statement's time limit before its child is killed: the engine's own interrupt comes first.
INTERRUPT_GRACE_S = 2.0
#: Seconds a new child may take to import the engine and say it is ready.
START_TIMEOUT_S = 30.0
#: Seconds an idle child waits for a statement before it exits (a long-running server does not keep them all).
IDLE_EXIT_S = 600.0


@dataclass(frozen=True)
class AdapterSpec:
    """What a child needs to open the same adapter: the class's import path and its constructor's arguments."""

    class_path: str
    kwargs: dict[str, Any] = field(default_factory=dict)


def _open(spec: AdapterSpec) -> Adapter:
    module, _, name = spec.class_path.partition(":")
    return getattr(importlib.import_module(module), name)(**spec.kwargs)


class StatementWorker:
    """One child process running one adapter's statements, one at a time."""

    def __init__(self, spec: AdapterSpec, memory_bytes: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from nl2sql.datasources.worker import serve; serve()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, close_fds=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._send = Connection(os.dup(self.process.stdin.fileno()), readable=False)
        self._receive = Connection(os.dup(self.process.stdout.fileno()), writable=False)
        self.process.stdin.close()
        self.process.stdout.close()
        self._send.send((spec, memory_bytes))
        self.ready = False
        self.idle_since = time.monotonic()

    def _wait_ready(self) -> None:
        if self.ready:
            return
        answer = self._answer(START_TIMEOUT_S)
        if answer != "ready":
            raise DatasourceError("The statement worker could not start.", fix="See the engine's log for why.")
        self.ready = True

    def _answer(self, timeout_s: float) -> Any:
        if not self._receive.poll(timeout_s):
            raise TimeoutError
        return self._receive.recv()

    def fetch(self, sql: str, *, row_limit: int, timeout_s: float, scope: Scope | None,
              datasource: str) -> tuple[Any, list[tuple], float]:
        """(description, rows, when it was sent: `time.monotonic()`) of one statement run in the child; raises what
        the adapter raises there, or TimeoutError once the child, no answer given, was stopped. A child's start does
        not count against the statement's time."""
        try:
            self._wait_ready()
            sent = time.monotonic()
            self._send.send((sql, row_limit, timeout_s, scope))
            kind, payload = self._answer(timeout_s + INTERRUPT_GRACE_S)
        except TimeoutError:  # the adapter reports it as its own QueryTimeout
            self.stop()
            raise
        except (EOFError, OSError):
            code = self.stop()
            raise DatasourceError(
                f"The statement stopped the process that ran it on datasource '{datasource}' (exit {code}): it "
                "likely needed more memory than the process may use.",
                fix="Narrow the question, or raise settings.resources.statement_process_memory.",
                datasource=datasource,
            ) from None
        if kind == "error":
            raise payload
        return (*payload, sent)

    @property
    def alive(self) -> bool:
        """Whether the child still runs."""
        return self.process.poll() is None

    def stop(self) -> int | None:
        """Kill the child (a statement it runs is abandoned) and reap it; its exit code."""
        for conn in (self._send, self._receive):
            with contextlib.suppress(OSError):
                conn.close()
        if self.process.poll() is None:
            self.process.kill()
        try:
            return self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            return None


class WorkerPool:
    """Up to `size` children for one adapter, started on demand and kept while they are sound."""

    def __init__(self, spec: AdapterSpec, *, memory_bytes: int, size: int) -> None:
        self.spec = spec
        self.memory_bytes = memory_bytes
        self.size = size
        self._idle: list[StatementWorker] = []
        self._started = 0
        self._condition = threading.Condition()
        self._closed = False
        # children die with the pool, even one nobody closed
        self._finalizer = weakref.finalize(self, _stop_all, self._idle)

    def fetch(self, sql: str, *, row_limit: int, timeout_s: float, scope: Scope | None,
              datasource: str) -> tuple[Any, list[tuple], float]:
        """`StatementWorker.fetch` in an idle child (or a new one, up to `size`; else wait for one to be free)."""
        worker = self._acquire()
        keep = False
        try:
            result = worker.fetch(sql, row_limit=row_limit, timeout_s=timeout_s, scope=scope, datasource=datasource)
            keep = True
            return result
        except NL2SQLError:  # an answer came: the engine refused or failed the statement in a sound child
            # keep it; a stopped child (a lost one, or one stopped for time) is gone
            keep = worker.alive and worker.ready
            raise
        finally:
            self._release(worker, keep=keep)

    def _acquire(self) -> StatementWorker:
        with self._condition:
            while True:
                if self._closed:
                    raise DatasourceError("The datasource was closed.")
                while self._idle:
                    worker = self._idle.pop()
                    # one idle for half the time after which it leaves by itself is retired here first, so
                    # that no statement is ever sent to a child on its way out
                    if worker.alive and time.monotonic() - worker.idle_since < IDLE_EXIT_S / 2:
                        return worker
                    self._started -= 1
                    worker.stop()
                if self._started < self.size:
                    self._started += 1
                    break
                self._condition.wait()
        try:
            return StatementWorker(self.spec, self.memory_bytes)
        except BaseException:
            with self._condition:
                self._started -= 1
                self._condition.notify()
            raise

    def _release(self, worker: StatementWorker, *, keep: bool) -> None:
        with self._condition:
            if keep and worker.alive and not self._closed:
                worker.idle_since = time.monotonic()
                self._idle.append(worker)
            else:
                self._started -= 1
                worker.stop()
            self._condition.notify()

    def close(self) -> None:
        """Stop every idle child; a busy one stops when its statement ends."""
        with self._condition:
            self._closed = True
            _stop_all(self._idle)
            self._condition.notify_all()


def _stop_all(workers: list[StatementWorker]) -> None:
    while workers:
        workers.pop().stop()


# --- the child ------------------------------------------------------------------------------------------------


def serve() -> None:
    """The child's loop: bound the memory, open the adapter, answer statements until stdin closes."""
    replies = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)  # whatever a library prints goes to stderr, never into the protocol
    requests = Connection(os.dup(0), writable=False)
    spec, memory_bytes = requests.recv()
    resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))
    adapter = _open(spec)
    replies.send("ready")
    while True:
        try:
            if not requests.poll(IDLE_EXIT_S):
                break
            sql, row_limit, timeout_s, scope = requests.recv()
        except EOFError:
            break
        try:
            description, rows = adapter._fetch(sql, row_limit=row_limit, timeout_s=timeout_s, scope=scope)
            # the driver's type codes need not pickle (DuckDB's don't): send them as the adapter names them
            answer: tuple[str, Any] = ("rows", ([(d[0], adapter.type_name(d[1])) for d in description], rows))
        except NL2SQLError as exc:
            answer = ("error", exc)
        except MemoryError:
            answer = ("error", out_of_memory_error(adapter.datasource_id))
        try:
            replies.send(answer)
        except MemoryError:
            replies.send(("error", out_of_memory_error(adapter.datasource_id)))
        except Exception as exc:  # a value that does not pickle: say so rather than leave the parent waiting
            replies.send(("error", DatasourceError(
                f"The result could not be read on datasource '{adapter.datasource_id}': {type(exc).__name__}.",
                datasource=adapter.datasource_id)))
    adapter.close()


def out_of_memory_error(datasource: str) -> DatasourceError:
    """What the asker reads when a statement ran out of the memory it may use."""
    return DatasourceError(
        f"The statement needed more memory than it may use on datasource '{datasource}' and was stopped.",
        fix="Narrow the question (filters, aggregates, a LIMIT), or raise settings.resources.duckdb_memory_limit and "
        "statement_process_memory.", datasource=datasource)
