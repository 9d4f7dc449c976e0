"""The in-process event bus: publish validated events; subscribers get them in order.

A subscriber fails open (its error is logged and the others still run) unless it subscribed
with `fail="raise"`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from nl2sql.events.catalog import Event, spec

log = logging.getLogger("nl2sql.events")
Subscriber = Callable[[Event], None]


@dataclass
class _Subscription:
    fn: Subscriber
    names: frozenset[str] | None
    fail: Literal["open", "raise"]


class EventBus:
    """Delivers each published event to the subscribers that asked for its name."""

    def __init__(self, trace_id: str | None = None) -> None:
        self.trace_id = trace_id
        self._subscriptions: list[_Subscription] = []
        self._lock = threading.RLock()

    def subscribe(self, fn: Subscriber, names: Iterable[str] | None = None,
                  fail: Literal["open", "raise"] = "open") -> Callable[[], None]:
        """Add a subscriber (to some names, or all); returns a function that removes it."""
        for name in names or ():
            spec(name)
        subscription = _Subscription(fn, frozenset(names) if names else None, fail)
        with self._lock:
            self._subscriptions.append(subscription)

        def unsubscribe() -> None:
            with self._lock:
                if subscription in self._subscriptions:
                    self._subscriptions.remove(subscription)

        return unsubscribe

    def publish(self, name: str, **data: object) -> Event:
        """Validate `data` against the catalog's model for `name` and deliver it."""
        model = spec(name).model
        event = Event(name=name, data=model(**data).model_dump(mode="json"), trace_id=self.trace_id,
                      timestamp=time.time())
        with self._lock:
            subscriptions = list(self._subscriptions)
            for sub in subscriptions:
                if sub.names is not None and name not in sub.names:
                    continue
                try:
                    sub.fn(event)
                except Exception:
                    if sub.fail == "raise":
                        raise
                    log.exception("event subscriber %r failed on %s", sub.fn, name)
        return event
