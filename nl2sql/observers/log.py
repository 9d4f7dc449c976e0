"""The log observer: one compact line per event on the `nl2sql.events` logger.

`node.started` and `answer.delta` are logged at DEBUG, `run.failed`, `index.failed` and
`datasource.failed` at WARNING, every other event at INFO. The `level` option is the least level
the observer logs at all (events below it are not even delivered to it).

>>> from nl2sql.events.catalog import Event
>>> format_event(Event(name="node.finished", trace_id="t1", timestamp=0.0,
...                    data={"node": "planner", "sub_query_id": None, "ok": True, "duration_ms": 12.5}))
'node.finished trace=t1 node=planner ok=true duration_ms=12.5'
"""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, field_validator

from nl2sql.config.models import config_error
from nl2sql.events.catalog import CATALOG, Event

if TYPE_CHECKING:
    from nl2sql.config.models import Config

LOGGER_NAME = "nl2sql.events"
LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING, "ERROR": logging.ERROR}
#: Events logged at other than INFO.
EVENT_LEVELS: dict[str, int] = {
    "node.started": logging.DEBUG,
    "answer.delta": logging.DEBUG,
    "run.failed": logging.WARNING,
    "index.failed": logging.WARNING,
    "datasource.failed": logging.WARNING,
}
_BARE = re.compile(r"^[\w.:/@+\-]+$")


def event_level(name: str) -> int:
    """The logging level an event is written at."""
    return EVENT_LEVELS.get(name, logging.INFO)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(round(value, 3))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and _BARE.match(value):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def format_event(event: Event) -> str:
    """`<name> trace=<trace_id> key=value …`: the event's data, unset (None) fields left out."""
    parts = [event.name, f"trace={event.trace_id or '-'}"]
    parts += [f"{key}={_value(value)}" for key, value in event.data.items() if value is not None]
    return " ".join(parts)


class LogOptions(BaseModel):
    """Options of the log observer."""

    model_config = ConfigDict(extra="forbid")

    level: str = "INFO"

    @field_validator("level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        upper = value.upper()
        if upper not in LEVELS:
            raise config_error(f"unknown log level {value!r}", f"use one of: {', '.join(LEVELS)}")
        return upper


class LogObserver:
    """Writes one line per event through Python logging (logger `nl2sql.events`)."""

    options_model = LogOptions

    def __init__(self, level: str = "INFO", logger: logging.Logger | None = None) -> None:
        self.level = LEVELS[level.upper()]
        self.logger = logger or logging.getLogger(LOGGER_NAME)
        #: The catalog's names at or above the level (the others are never delivered).
        self.events = frozenset(name for name in CATALOG if event_level(name) >= self.level)

    @classmethod
    def from_options(cls, options: BaseModel, *, config: Config) -> LogObserver:
        """Build from validated `LogOptions`."""
        assert isinstance(options, LogOptions)
        return cls(level=options.level)

    def on_event(self, event: Event) -> None:
        level = event_level(event.name)
        if level < self.level or not self.logger.isEnabledFor(level):
            return
        self.logger.log(level, "%s", format_event(event),
                        extra={"nl2sql_event": event.name, "nl2sql_trace_id": event.trace_id})

    def close(self) -> None:
        """Nothing to release."""
