"""Events: the catalog (a strict model per name) and the in-process bus."""

from nl2sql.events.bus import EventBus
from nl2sql.events.catalog import CATALOG, Event, EventSpec, spec

__all__ = ["CATALOG", "Event", "EventBus", "EventSpec", "spec"]
