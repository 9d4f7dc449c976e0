"""The event catalog: one strict pydantic model per event name, with `stream` and `audit` flags.

Events carry no rows and no secrets. This catalog holds the index and datasource events; the
question's events join it with the ask flow.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from nl2sql.errors import UnknownNameError


class EventData(BaseModel):
    """Base of every event's data: strict, so a stray field fails loudly."""

    model_config = ConfigDict(extra="forbid")


class IndexStarted(EventData):
    """A datasource's index build began."""

    datasource_id: str
    full: bool = False


class IndexSwapped(EventData):
    """A new build is live (the previous one, if any, is replaced)."""

    datasource_id: str
    build_id: str
    replaced_build_id: str | None
    counts: dict[str, int]
    embedded: int
    cached: int
    changed_tables: int


class IndexFailed(EventData):
    """A build failed; the previous build (if any) stays live."""

    datasource_id: str
    message: str


class IndexColumnFailed(EventData):
    """One column could not be profiled; the message never quotes a value."""

    datasource_id: str
    table: str
    column: str
    stage: str
    message: str


class DatasourceFailed(EventData):
    """A datasource could not be reached or reflected."""

    datasource_id: str
    message: str
    fix: str | None = None


@dataclass(frozen=True)
class EventSpec:
    """A catalog entry: the event's model, whether it streams to callers, whether it is audited."""

    name: str
    model: type[EventData]
    stream: bool = False
    audit: bool = False
    description: str = ""


CATALOG: dict[str, EventSpec] = {
    spec.name: spec
    for spec in (
        EventSpec("index.started", IndexStarted, description="A datasource's index build began."),
        EventSpec("index.swapped", IndexSwapped, audit=True, description="A new index build is live."),
        EventSpec("index.failed", IndexFailed, audit=True, description="An index build failed."),
        EventSpec("index.column_failed", IndexColumnFailed, description="A column could not be profiled."),
        EventSpec("datasource.failed", DatasourceFailed, audit=True, description="A datasource failed."),
    )
}


class Event(BaseModel):
    """One published event: its name, validated data, and the run it belongs to."""

    name: str
    data: dict
    trace_id: str | None = None
    timestamp: float = Field(description="Seconds since the epoch.")


def spec(name: str) -> EventSpec:
    """The catalog entry of an event name (UnknownNameError for a name not in the catalog)."""
    if name not in CATALOG:
        raise UnknownNameError("event", name, CATALOG)
    return CATALOG[name]
