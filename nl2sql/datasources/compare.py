"""Comparing result rows the way the evals do (and the planner's candidates are grouped): by value, numbers within a
tolerance, order only when it matters.

A number matches a number within `tolerance` (0.005 by default) and a string that spells a
number; dates and timestamps compare by their ISO text, a midnight timestamp equal to its date;
everything else compares as text. Without `order_matters`, rows are compared as multisets.

>>> rows_match([(2009, 449.46)], [("2009", 449.4600001)])
True
>>> rows_match([(1,), (2,)], [(2,), (1,)], order_matters=True)
False
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

TOLERANCE = 0.005
MIDNIGHT = re.compile(r"^(\d{4}-\d{2}-\d{2})[ T]00:00:00(\.0+)?$")
NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def canonical_value(value: Any) -> Any:
    """One spelling per value: None, a bool, a float, or text (dates as ISO, midnight as the date)."""
    if value is None:
        return None
    if hasattr(value, "item") and not isinstance(value, str | bytes):  # numpy / pandas scalars
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float | Decimal):
        return float(value)
    if isinstance(value, dt.datetime | dt.date):
        value = value.isoformat(sep=" ") if isinstance(value, dt.datetime) else value.isoformat()
    text = str(value)
    midnight = MIDNIGHT.match(text)
    if midnight:
        return midnight.group(1)
    return text.replace("T", " ", 1) if re.match(r"^\d{4}-\d{2}-\d{2}T", text) else text


def _as_number(value: Any) -> float | None:
    if isinstance(value, float):
        return value
    if isinstance(value, str) and NUMBER.match(value.strip()):
        return float(value)
    return None


def values_match(left: Any, right: Any, *, tolerance: float = TOLERANCE) -> bool:
    """Whether two single values match under the comparison rules."""
    a, b = canonical_value(left), canonical_value(right)
    if a is None or b is None:
        return a is None and b is None
    na, nb = _as_number(a), _as_number(b)
    if na is not None and nb is not None and not (isinstance(a, str) and isinstance(b, str)):
        return abs(na - nb) <= tolerance
    return a == b


def _sort_key(row: Sequence[Any]) -> tuple:
    key = []
    for value in row:
        v = canonical_value(value)
        n = _as_number(v)
        key.append((0, round(n, 2), "") if n is not None else (1, 0.0, "" if v is None else str(v)))
    return tuple(key)


def rows_match(left: Sequence[Sequence[Any]], right: Sequence[Sequence[Any]], *, order_matters: bool = False,
               tolerance: float = TOLERANCE) -> bool:
    """Whether two result sets hold the same rows (same columns in the same order) under the rules."""
    if len(left) != len(right):
        return False
    if not order_matters:
        left, right = sorted(left, key=_sort_key), sorted(right, key=_sort_key)
    return all(
        len(a) == len(b) and all(values_match(x, y, tolerance=tolerance) for x, y in zip(a, b, strict=True))
        for a, b in zip(left, right, strict=True)
    )


def result_key(rows: Sequence[Sequence[Any]]) -> tuple:
    """One key per result, whatever its rows' order: the same rows under the rules (numbers to 2 places) give the
    same key; a result's width is part of it.

    >>> result_key([("Rock", 2), ("Jazz", 1.0)]) == result_key([("Jazz", "1"), ("Rock", 2.001)])
    True
    >>> result_key([("Rock",)]) == result_key([("Rock", 1)])
    False
    """
    return len(rows[0]) if rows else 0, tuple(sorted(_sort_key(row) for row in rows))
