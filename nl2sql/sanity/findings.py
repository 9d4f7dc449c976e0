"""What a check reports, and how it reads the database."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

#: Runs a probe (a SELECT tree) under the asker's scope and returns its rows (at most `limit`).
Probe = Callable[[exp.Select, int], list[tuple[Any, ...]]]

#: The findings a corrected plan can fix: each sends the sub-query back to the refiner once.
RETRYABLE = frozenset({"VALUE_NOT_FOUND", "JOIN_FAN_OUT"})


@dataclass(frozen=True)
class Finding:
    """One thing a check found: its code, a sentence for the asker (and the refiner), and details."""

    code: str
    message: str
    detail: dict[str, Any] = field(default_factory=dict)
    #: whether a corrected plan may fix it (a RETRYABLE code's finding that names no likely fix is only reported)
    fixable: bool = True
