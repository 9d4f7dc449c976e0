"""The configuration's observers checked against the observer registry: each exists and its options validate."""

from __future__ import annotations

from collections.abc import Callable

from nl2sql.config.load import checked_plugin
from nl2sql.config.models import Config
from nl2sql.errors import ConfigProblem
from nl2sql.observers import observer_class, observer_names


def check_observers(config: Config, file_of: Callable[[str], str], valid: set[str]) -> list[ConfigProblem]:
    """The problems of the `observers` section."""
    if "observers" not in valid:
        return []
    file = file_of("observers")
    known = tuple(observer_names())
    problems: list[ConfigProblem] = []
    for index, observer in enumerate(config.observers):
        checked_plugin(file, f"observers[{index}]", "observer", observer.use, observer.options, known,
                       observer_class, problems)
    return problems
