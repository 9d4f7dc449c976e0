"""What flow and task logs send to Prefect's API: no exception messages, no event lines Prefect would not get.

Prefect's API log handler sends every `prefect.flow_runs` / `prefect.task_runs` record (and those of
`PREFECT_LOGGING_EXTRA_LOGGERS`) to the server, where whoever reaches its API reads them. An exception's
message may quote a value (a database's conversion error, an engine fault), so the lines sent there keep
an exception's type and where it was raised, and leave its message out; the same lines still reach the
console and local log files whole. A record of the log observer (`nl2sql.events`) goes there only when
Prefect receives the whole event anyway (`events/prefect_events.py`).

>>> import logging
>>> record = logging.LogRecord("prefect.task_runs", logging.ERROR, __file__, 1,
...                            "Task run failed with exception: %r", (ValueError("alice@example.com"),), None)
>>> WithheldFormatter().format(record)
'Task run failed with exception: ValueError(…)'
>>> record = logging.LogRecord("prefect.flow_runs", logging.INFO, __file__, 1,
...                            "Finished in state Failed('Flow run encountered an exception: alice')", None, None)
>>> WithheldFormatter().format(record)
'Finished in state Failed(…)'
"""

from __future__ import annotations

import copy
import logging
import re
import threading
import traceback
from collections import deque
from types import TracebackType

from nl2sql.events.prefect_events import forwarded_whole

WITHHELD = "…"
#: A state as Prefect's engines log it: `Failed('message')`; the message is the exception's.
_STATE = re.compile(r"\b(Finished in state|Crash detected!) (\w+)\((.+)\)", re.DOTALL)
#: How many recent exception messages are remembered (a state line follows its exception's line), and the
#: shortest remembered (shorter ones would blank out unrelated text; state lines are matched by `_STATE`).
_RECENT = 64
_SHORTEST = 4


def _chain(exc: BaseException | None) -> list[BaseException]:
    """An exception and the ones it was raised from or during, oldest first."""
    out: list[BaseException] = []
    while exc is not None and all(exc is not e for e in out):
        out.append(exc)
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return out[::-1]


def withheld_traceback(exc: BaseException) -> str:
    """A traceback with every exception's type and frames, and none of their messages."""
    parts: list[str] = []
    chain = _chain(exc)
    for i, e in enumerate(chain):
        if i:
            parts.append("\nThe above exception was the direct cause of the following exception:\n\n"
                         if e.__cause__ is chain[i - 1] else
                         "\nDuring handling of the above exception, another exception occurred:\n\n")
        tb: TracebackType | None = e.__traceback__
        if tb is not None:
            parts.append("Traceback (most recent call last):\n")
            parts.extend(traceback.format_tb(tb))
        name = type(e).__qualname__
        module = type(e).__module__
        parts.append(f"{name if module in ('builtins', '__main__') else f'{module}.{name}'}: "
                     f"(message withheld from Prefect)\n")
    return "".join(parts).rstrip("\n")


class WithheldFormatter(logging.Formatter):
    """Formats a record for Prefect's API with exception messages left out (the record itself is not changed)."""

    def __init__(self, inner: logging.Formatter | None = None) -> None:
        super().__init__()
        self.inner = inner
        self._recent: deque[str] = deque(maxlen=_RECENT)
        self._lock = threading.Lock()

    def format(self, record: logging.LogRecord) -> str:
        record = copy.copy(record)
        exc = record.exc_info[1] if record.exc_info else None
        args = record.args if isinstance(record.args, tuple) else (record.args,) if record.args else ()
        raised = [e for a in (exc, *args) if isinstance(a, BaseException) for e in _chain(a)]
        message = record.getMessage()
        with self._lock:
            for e in raised:
                text = str(e)
                if len(text) >= _SHORTEST:
                    self._recent.append(text)
                message = message.replace(repr(e), f"{type(e).__name__}({WITHHELD})")
            for text in sorted(set(self._recent), key=len, reverse=True):
                message = message.replace(text, WITHHELD)
        message = _STATE.sub(lambda m: f"{m.group(1)} {m.group(2)}({WITHHELD})", message)
        if exc is not None:
            message = f"{message}\n{withheld_traceback(exc)}"
        record.msg, record.args = message, None
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return self.inner.format(record) if self.inner is not None else record.getMessage()


class _EventLines(logging.Filter):
    """Keeps from Prefect the log observer's lines of events Prefect does not receive whole."""

    def filter(self, record: logging.LogRecord) -> bool:
        name = getattr(record, "nl2sql_event", None)
        return name is None or forwarded_whole(name)


_EVENT_LINES = _EventLines()


def guard_prefect_logs() -> int:
    """Give every Prefect API log handler of this process the withholding formatter and the event-line filter
    (once each); returns how many handlers were guarded now."""
    from prefect.logging.handlers import APILogHandler

    loggers = [logging.getLogger(), *[lg for lg in logging.Logger.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger)]]
    guarded = 0
    for handler in {id(h): h for lg in loggers for h in lg.handlers}.values():
        if not isinstance(handler, APILogHandler) or isinstance(handler.formatter, WithheldFormatter):
            continue
        handler.setFormatter(WithheldFormatter(handler.formatter))
        if _EVENT_LINES not in handler.filters:
            handler.addFilter(_EVENT_LINES)
        guarded += 1
    return guarded
