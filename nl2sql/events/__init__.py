"""Events: the catalog (a strict model per name) and the in-process bus."""

from nl2sql.events.bus import EventBus
from nl2sql.events.catalog import (
    AUDIT_EVENTS,
    CATALOG,
    STREAM_EVENTS,
    TERMINAL_EVENTS,
    Event,
    EventSpec,
    spec,
)

__all__ = ["AUDIT_EVENTS", "CATALOG", "STREAM_EVENTS", "TERMINAL_EVENTS", "Event", "EventBus", "EventSpec", "spec"]
