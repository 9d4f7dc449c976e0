"""The run trace: one question's trace id, its events in order, and the log context of its threads.

Every event of a run goes through its trace, which holds a lock while the bus delivers it, so
run.started is always first and exactly one terminal event (run.finished or run.failed) is last,
whatever an observer does. While a trace is entered, every log record (on any thread that copied
the caller's context, as Prefect's task runner and the inline executor do) carries its trace id.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from nl2sql.events import TERMINAL_EVENTS, Event, EventBus

CURRENT_TRACE: contextvars.ContextVar[str | None] = contextvars.ContextVar("nl2sql_trace_id", default=None)
_factory_lock = threading.Lock()
_factory_installed = False


def install_trace_ids() -> None:
    """Give every log record a `trace_id` attribute (the current run's, or None); idempotent."""
    global _factory_installed
    with _factory_lock:
        if _factory_installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            record.trace_id = CURRENT_TRACE.get()
            return record

        logging.setLogRecordFactory(factory)
        _factory_installed = True


class RunTrace:
    """One run: its trace id, a bus of its own (observers subscribed), the events it published, its clock."""

    def __init__(self, trace_id: str, bus: EventBus | None = None, *, timeout_s: float | None = None,
                 askers: Iterable[Callable[[Event], None]] = ()) -> None:
        self.trace_id = trace_id
        #: who hears what is for the asker alone (`tell_asker`): the CLI's display, a desk's reply, an MCP call
        self.askers = list(askers)
        self.bus = bus or EventBus(trace_id=trace_id)
        self.bus.trace_id = trace_id
        self.events: list[Event] = []
        self.started_at = time.monotonic()
        self.deadline = self.started_at + timeout_s if timeout_s else None
        self.timeout_s = timeout_s
        self.waited_s = 0.0  # time spent waiting for a person (an approver): not the run's own time
        self.model_s = 0.0  # time with a model call in flight (bounded apart: each call's timeout, the call cap)
        self._calls_in_flight = 0
        self._model_since = 0.0
        self.closed = False
        self._lock = threading.RLock()
        install_trace_ids()

    # --- events ------------------------------------------------------------------------------

    def publish(self, name: str, **data: object) -> Event | None:
        """Publish one of this run's events (dropped once the run has ended: nothing follows the terminal event)."""
        with self._lock:
            if self.closed:
                return None
            if name in TERMINAL_EVENTS:
                self.closed = True
            event = self.bus.publish(name, **data)
            self.events.append(event)
            return event

    def tell_asker(self, name: str, **data: Any) -> None:
        """Hand the asker's listeners something of their own answer (the rows as soon as they exist): not an event
        of the bus, so no observer, event stream, audit log or trace ever holds it."""
        with self._lock:
            if self.closed:
                return
            event = Event(name=name, data=data, trace_id=self.trace_id, timestamp=time.time())
            for fn in list(self.askers):
                try:
                    fn(event)
                except Exception:
                    logging.getLogger("nl2sql.trace").exception("a listener failed on %s", name)

    def follow(self, fn: Callable[[Event], None], names: Iterable[str] | None = None) -> Callable[[], None]:
        """Replay what this run already published and subscribe `fn` to the rest, with nothing lost or doubled."""
        wanted = frozenset(names) if names else None
        with self._lock:
            for event in self.events:
                if wanted is None or event.name in wanted:
                    fn(event)
            return self.bus.subscribe(fn, wanted)

    # --- time --------------------------------------------------------------------------------

    def remaining_s(self) -> float | None:
        """Seconds left before the run's time limit (None without one); time waiting for a person or for a model
        does not count."""
        return None if self.deadline is None else self.deadline + self.waited_s + self.model_time_s() - time.monotonic()

    def model_time_s(self) -> float:
        """Seconds this run has had at least one model call in flight (calls of parallel sub-queries overlap)."""
        with self._lock:
            in_flight = time.monotonic() - self._model_since if self._calls_in_flight else 0.0
            return self.model_s + in_flight

    @contextmanager
    def waiting_for_a_model(self) -> Iterator[None]:
        """The run's clock stands still inside: a model call is bounded by its own deadline (`llm.models.*.timeout_s`)
        and the run's calls by `settings.pipeline.max_llm_calls`, so a slow local model still writing its answer is
        never cut by the run's `settings.pipeline.timeout_s`, which bounds the engine's own time."""
        with self._lock:
            if not self._calls_in_flight:
                self._model_since = time.monotonic()
            self._calls_in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self._calls_in_flight -= 1
                if not self._calls_in_flight:
                    self.model_s += time.monotonic() - self._model_since

    @contextmanager
    def waiting_for_a_person(self) -> Iterator[None]:
        """The run's clock stands still inside: an approver's wait is bounded by its own timeout
        (`settings.approvals.timeout_s`), not by the run's `settings.pipeline.timeout_s`."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.waited_s += time.monotonic() - started

    def elapsed_ms(self) -> float:
        """Milliseconds since the run began."""
        return (time.monotonic() - self.started_at) * 1000

    # --- log context -------------------------------------------------------------------------

    @contextmanager
    def entered(self) -> Iterator[RunTrace]:
        """Log records written inside carry this run's trace id."""
        token = CURRENT_TRACE.set(self.trace_id)
        try:
            yield self
        finally:
            CURRENT_TRACE.reset(token)
