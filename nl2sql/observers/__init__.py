"""Observers of the engine's events: the registry, building them from `observers:` and subscribing them.

An observer gets every event it asked for (its `events` attribute, else all of them) through the
bus, which fails open: an observer that raises is logged and the others still run. Built-ins
(`log`, `audit`, `otel`) are registered exactly like plugins, which declare their classes in the
entry point group `nl2sql.observers`. Each observer class has `options_model` (a strict pydantic
model of its `options:`) and a classmethod `from_options(options, *, config)`.

>>> observer_class("log").__name__
'LogObserver'
>>> sorted(OBSERVERS)
['audit', 'log', 'otel']
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, ValidationError

from nl2sql.config.load import option_problems
from nl2sql.errors import ConfigError, ConfigProblem, UnknownNameError
from nl2sql.events.catalog import Event
from nl2sql.observers.audit import AuditObserver
from nl2sql.observers.log import LogObserver
from nl2sql.observers.otel import OtelObserver

if TYPE_CHECKING:
    from nl2sql.config.models import Config
    from nl2sql.events.bus import EventBus

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "nl2sql.observers"


@runtime_checkable
class Observer(Protocol):
    """What the engine needs of an observer. `on_event` must never block: slow work goes to a queue."""

    def on_event(self, event: Event) -> None: ...

    def close(self) -> None: ...


#: Registered observer classes by name: the built-ins, then plugins as they are first asked for.
OBSERVERS: dict[str, type] = {
    "log": LogObserver,
    "audit": AuditObserver,
    "otel": OtelObserver,
}
_entry_points: dict[str, EntryPoint] | None = None


def register_observer(name: str, cls: type) -> None:
    """Register an observer class under a name (as a plugin's entry point would)."""
    OBSERVERS[name] = cls


def _plugin_entry_points() -> dict[str, EntryPoint]:
    global _entry_points
    if _entry_points is None:
        _entry_points = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return _entry_points


def observer_names() -> list[str]:
    """Every registered observer name: built-ins and plugins."""
    return sorted(set(OBSERVERS) | set(_plugin_entry_points()))


def observer_class(name: str) -> type:
    """The observer class registered under `name` (UnknownNameError with a suggestion when none is)."""
    if name not in OBSERVERS:
        ep = _plugin_entry_points().get(name)
        if ep is None:
            raise UnknownNameError("observer", name, observer_names())
        OBSERVERS[name] = ep.load()
    return OBSERVERS[name]


# --- building ----------------------------------------------------------------------------------




def _relocated(err: ConfigError, file: str, index: int) -> list[ConfigProblem]:
    """An observer's own ConfigError (keys relative to its options; '' is the observer) placed in the file."""
    out = []
    for p in err.problems:
        where = f"observers[{index}].options.{p.key}" if p.key else f"observers[{index}].use"
        out.append(ConfigProblem(p.file or file, where, p.message, p.fix))
    return out


def close_observers(observers: Iterable[Any]) -> None:
    """Close each observer; one that raises is logged and the others are still closed."""
    for observer in observers:
        try:
            observer.close()
        except Exception:
            log.exception("closing observer %r failed", observer)


def build_observers(config: Config) -> list[Observer]:
    """Build the configured observers in config order; every problem is one line of one ConfigError.

    An observer already built is closed again when another one cannot be built.
    """
    file = str(config.path or "nl2sql.yaml")
    problems: list[ConfigProblem] = []
    planned: list[tuple[int, type, BaseModel]] = []
    for index, entry in enumerate(config.observers):
        where = f"observers[{index}].use"
        try:
            cls = observer_class(entry.use)
        except UnknownNameError as exc:
            fix = f"did you mean '{exc.guess}'?" if exc.guess else f"registered observers: {', '.join(exc.known)}"
            problems.append(ConfigProblem(file, where, f"unknown observer '{entry.use}'", fix))
            continue
        except Exception as exc:
            problems.append(ConfigProblem(
                file, where, f"observer plugin '{entry.use}' could not be loaded ({type(exc).__name__}: {exc})",
                "check that the package providing it is installed and importable"))
            continue
        options_model = getattr(cls, "options_model", None)
        if not (isinstance(options_model, type) and issubclass(options_model, BaseModel)) or not callable(
            getattr(cls, "from_options", None)
        ):
            problems.append(ConfigProblem(
                file, where, f"'{entry.use}' is not an observer class",
                "an observer class needs options_model (a pydantic model) and a classmethod from_options"))
            continue
        try:
            options = options_model.model_validate(entry.options)
        except ValidationError as exc:
            problems.extend(option_problems(exc, file, f"observers[{index}].options", options_model))
            continue
        planned.append((index, cls, options))
    if problems:
        raise ConfigError(problems)

    built: list[Observer] = []
    for index, cls, options in planned:
        try:
            built.append(cls.from_options(options, config=config))
        except ConfigError as exc:
            problems.extend(_relocated(exc, file, index))
        except Exception as exc:
            problems.append(ConfigProblem(
                file, f"observers[{index}]", f"observer '{config.observers[index].use}' could not be started "
                f"({type(exc).__name__}: {exc})", "check its options"))
    if problems:
        close_observers(built)
        raise ConfigError(problems)
    return built


def subscribe_observers(bus: EventBus, observers: Sequence[Observer]) -> Callable[[], None]:
    """Subscribe each observer (fail open; to its `events`, else to every event); returns unsubscribe-all."""
    unsubscribes: list[Callable[[], None]] = []
    for observer in observers:
        names = getattr(observer, "events", None)
        if names is not None and not names:
            continue
        unsubscribes.append(bus.subscribe(observer.on_event, names=names, fail="open"))

    def unsubscribe_all() -> None:
        for unsubscribe in unsubscribes:
            unsubscribe()

    return unsubscribe_all


__all__ = [
    "ENTRY_POINT_GROUP",
    "OBSERVERS",
    "AuditObserver",
    "LogObserver",
    "Observer",
    "OtelObserver",
    "build_observers",
    "close_observers",
    "observer_class",
    "observer_names",
    "register_observer",
    "subscribe_observers",
]
