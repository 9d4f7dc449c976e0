"""Join-key type rules, one set for the validator (keys inside one SQL) and the aggregator (across databases).

Types fall into dtypes (integer, decimal, float, text, date, datetime, boolean, binary, other)
and coarser categories (number, text, temporal, boolean, binary, other). Two keys are
`coercible` when one can be cast to the other's type without changing a value's meaning;
`join_dtype` is the type both sides are cast to: the shared one; text parsed as the other
side's type; integer meets decimal or float as integer (a non-whole value cannot equal a whole
one, and floats cannot tell large ids apart); date and datetime as datetime; a number and a
boolean as boolean. A type that cannot be read is `other` and never blocks a join.

>>> dtype_of("NVARCHAR(40)"), dtype_of("NUMERIC(10,2)"), dtype_of("DATETIME"), dtype_of("")
('text', 'decimal', 'datetime', 'other')
>>> join_dtype("integer", "float"), join_dtype("text", "date"), coercible("text", "integer", parse_text=False)
('integer', 'date', False)
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from functools import lru_cache
from typing import Literal

from sqlglot import exp
from sqlglot.errors import SqlglotError

Dtype = Literal["integer", "decimal", "float", "text", "date", "datetime", "boolean", "binary", "other"]
Category = Literal["number", "text", "temporal", "boolean", "binary", "other"]

CATEGORY: dict[str, Category] = {
    "integer": "number", "decimal": "number", "float": "number", "text": "text", "date": "temporal",
    "datetime": "temporal", "boolean": "boolean", "binary": "binary", "other": "other",
}  # fmt: skip
T = exp.DataType.Type


def _types(*names: str) -> set:
    return {getattr(T, n) for n in names if hasattr(T, n)}


DECIMAL_TYPES = _types("DECIMAL", "BIGDECIMAL", "UDECIMAL", "MONEY", "SMALLMONEY", "DECIMAL32", "DECIMAL64",
                       "DECIMAL128", "DECIMAL256")
DATE_TYPES = _types("DATE", "DATE32")
TIME_ONLY_TYPES = _types("TIME", "TIMETZ", "TIME_NS")
BINARY_TYPES = _types("BINARY", "VARBINARY", "BLOB", "LONGBLOB", "MEDIUMBLOB", "TINYBLOB")
EXTRA_TEXT_TYPES = _types("CHAR", "NCHAR", "UUID")


@lru_cache(maxsize=4096)
def dtype_of(type_name: str, dialect: str | None = None) -> Dtype:
    """The dtype of a reflected column type name (`other` when it cannot be read)."""
    if not type_name or not type_name.strip():
        return "other"
    try:
        kind = exp.DataType.build(type_name, dialect=dialect).this
    except (SqlglotError, ValueError):
        return "other"
    if kind in exp.DataType.INTEGER_TYPES:
        return "integer"
    if kind in DECIMAL_TYPES:
        return "decimal"
    if kind in exp.DataType.REAL_TYPES:
        return "float"
    if kind in exp.DataType.TEXT_TYPES or kind in EXTRA_TEXT_TYPES:
        return "text"
    if kind in DATE_TYPES:
        return "date"
    if kind in TIME_ONLY_TYPES:
        return "other"
    if kind in exp.DataType.TEMPORAL_TYPES:
        return "datetime"
    if kind in (T.BOOLEAN, T.BIT):
        return "boolean"
    if kind in BINARY_TYPES:
        return "binary"
    return "other"


def value_dtype(value: object) -> Dtype | None:
    """The dtype of a Python value (None for NULL, which fits anywhere; bool before int: a bool is an int)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, Decimal):
        return "decimal"
    if isinstance(value, float):
        return "float"
    if isinstance(value, dt.datetime):
        return "datetime"
    if isinstance(value, dt.date):
        return "date"
    if isinstance(value, bytes):
        return "binary"
    return "text"


def category(dtype: Dtype) -> Category:
    """The coarse category of a dtype."""
    return CATEGORY[dtype]


def join_dtype(left: Dtype, right: Dtype, *, parse_text: bool = True) -> Dtype | None:
    """The dtype both keys are cast to before joining, or None when they cannot meet."""
    if left == right:
        return left
    if "other" in (left, right):
        return right if left == "other" else left
    pair = {left, right}
    cats = {category(left), category(right)}
    if cats == {"number"}:
        return "integer" if "integer" in pair else "decimal"
    if cats == {"temporal"}:
        return "datetime"
    if cats == {"number", "boolean"}:
        return "boolean"
    if "text" in pair and "binary" not in pair and parse_text:
        return right if left == "text" else left
    return None


def coercible(left: Dtype, right: Dtype, *, parse_text: bool = True) -> bool:
    """Whether keys of these dtypes can be joined (text parsed as the other side only if `parse_text`)."""
    return join_dtype(left, right, parse_text=parse_text) is not None


def describe(dtype: Dtype) -> str:
    """A dtype in words, for messages ('a number', 'text', 'a date')."""
    return {"number": "a number", "text": "text", "temporal": "a date", "boolean": "a boolean",
            "binary": "binary data", "other": "of unknown type"}[category(dtype)]
