"""The adapter registry (dialect name → adapter class), built-ins and plugins (entry point group `nl2sql.adapters`)
alike. It sits below every package: config validation reads its names, and an adapter class is imported only
when first asked for.

>>> adapter_class("sqlite").__name__
'SQLiteAdapter'
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from nl2sql.errors import UnknownNameError

if TYPE_CHECKING:
    from nl2sql.datasources.base import Adapter

ENTRY_POINT_GROUP = "nl2sql.adapters"

#: Built-in adapters, registered by import path exactly as a plugin's entry point would be.
_PATHS: dict[str, str] = {
    "sqlite": "nl2sql.datasources.sqlite:SQLiteAdapter",
    "duckdb": "nl2sql.datasources.duckdb:DuckDBAdapter",
    "postgresql": "nl2sql.datasources.postgresql:PostgreSQLAdapter",
}
_CLASSES: dict[str, type[Adapter]] = {}
_plugins_loaded = False


def register_adapter(name: str, target: str | type[Adapter]) -> None:
    """Register an adapter class (or its `module:Class` path) under a dialect name."""
    if isinstance(target, str):
        _PATHS[name] = target
        _CLASSES.pop(name, None)
    else:
        _CLASSES[name] = target
        _PATHS.setdefault(name, f"{target.__module__}:{target.__qualname__}")


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        _PATHS.setdefault(ep.name, ep.value)


def adapter_names() -> list[str]:
    """Every registered dialect name."""
    _load_plugins()
    return sorted(_PATHS)


def adapter_class(name: str) -> type[Adapter]:
    """The adapter class for a dialect, or UnknownNameError with a suggestion."""
    _load_plugins()
    if name not in _CLASSES:
        if name not in _PATHS:
            raise UnknownNameError("adapter", name, _PATHS)
        module, _, attr = _PATHS[name].partition(":")
        _CLASSES[name] = getattr(importlib.import_module(module), attr)
    return _CLASSES[name]
