"""Combine the result frames of sub-queries that ran on different databases: join, compare or union.

Join keys follow the one set of rules in `nl2sql.plan.join_keys`. Each side's key is cast first to its
own declared dtype, then to `join_dtype(left, right)`; a cast nulls a value, never changes it (7.5 is not
the integer 7, '03/04/2010' is not a date). Text is stripped on both sides and read only by ISO formats:
dates 'YYYY-MM-DD', date-times 'YYYY-MM-DD HH:MM[:SS[.ffffff]]' (or with 'T'), with an optional offset
('Z', '+HH:MM', '+HHMM', '+HH') that is turned into naive UTC; text booleans are true/false/t/f/yes/no/1/0.
Every non-null key that became null is counted and reported as one JOIN_KEY_UNCONVERTED warning per side
and column; the total is the column's non-null values.

DuckDB (an in-memory connection per call) matches the rows: each side is registered as a table of its row
positions and its converted keys (in a canonical text form, so equal values are equal strings), and the
join, its order, count and limit are one query. The output rows are then built from the frames' own
values, so nothing is re-typed on the way (a Decimal stays a Decimal, a big integer stays exact).

Union aligns columns by name (the left frame's order, then the right-only columns) after a leading
`datasource` column. A column keeps its values when both sides declare the same dtype, the same category
(integer with float, date with datetime), or one side `other`; otherwise both sides' values of that column
are rendered as text (ISO dates, 'true'/'false', hex for binary).

>>> left = Frame("q1", "chinook", ["CustomerId", "Total"], ["integer", "decimal"], [(1, 10), (2, 5)])
>>> right = Frame("q2", "support", ["customer_id", "tickets"], ["text", "integer"], [(" 2 ", 3), ("7.5", 1)])
>>> out = combine({"q1": left, "q2": right}, CombineSpec(kind="join", left="q1", right="q2",
...               join_keys=[JoinKeyPair(left="CustomerId", right="customer_id")]))
>>> out.columns, out.rows
(['CustomerId', 'Total', 'tickets'], [(2, 5, 3)])
>>> out.warnings[0].message
'1 of 2 support.customer_id values are not whole numbers and joined nothing.'
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal, get_args

import duckdb
import pandas as pd
from pydantic import BaseModel, ConfigDict

from nl2sql.errors import NL2SQLError, did_you_mean
from nl2sql.plan.join_keys import Dtype, category, describe, join_dtype

__all__ = [
    "AggregateError",
    "AggregateWarning",
    "CombineSpec",
    "Combined",
    "Frame",
    "JoinKeyPair",
    "combine",
    "convert",
]

JOIN_KEY_UNCONVERTED = "JOIN_KEY_UNCONVERTED"
DTYPES: frozenset[str] = frozenset(get_args(Dtype))


# --- the public shapes -----------------------------------------------------------------------------------


@dataclass
class Frame:
    """One sub-query's result: its datasource, column names, declared dtypes (one per column) and rows."""

    sub_query_id: str
    datasource_id: str
    columns: list[str]
    dtypes: list[Dtype]
    rows: list[tuple] = field(default_factory=list)


class JoinKeyPair(BaseModel):
    """One join key: a column of the left frame matched to a column of the right frame."""

    model_config = ConfigDict(extra="forbid")

    left: str
    right: str


class CombineSpec(BaseModel):
    """How two frames are combined: joined, compared (full outer join on the keys) or stacked."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["join", "compare", "union"]
    left: str
    right: str
    join_keys: list[JoinKeyPair] = []
    how: Literal["inner", "left"] = "inner"


@dataclass
class AggregateWarning:
    """Something the combination did that the asker should know about (code, message, structured detail)."""

    code: str
    message: str
    detail: dict


@dataclass
class Combined:
    """The combined result: columns, at most `row_limit` rows, the full row count, and warnings."""

    columns: list[str]
    rows: list[tuple]
    total_rows: int
    truncated: bool
    warnings: list[AggregateWarning]


class AggregateError(NL2SQLError):
    """Frames could not be combined as asked (a missing frame or column, keys of types that cannot meet)."""

    code = "AGGREGATOR_FAILED"


# --- casting one value -----------------------------------------------------------------------------------

_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_ISO_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_ISO_DATETIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?"
    r"(Z|[+-]\d{2}(?::?\d{2})?)?"
)
_TRUE = frozenset({"true", "t", "yes", "1"})
_FALSE = frozenset({"false", "f", "no", "0"})


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def _text_number(text: str) -> Decimal | None:
    text = text.strip()
    return Decimal(text) if _NUMBER.fullmatch(text) else None


def _to_integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() else None
    if isinstance(value, str):
        value = _text_number(value)
    if isinstance(value, Decimal) and value.is_finite() and value.adjusted() < 1000 \
            and value == value.to_integral_value():
        return int(value)
    return None


def _to_decimal(value: Any) -> Decimal | None:
    if isinstance(value, bool):
        return Decimal(int(value))
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):  # the float's shortest reading: 0.1 is 0.1, not its binary expansion
        return Decimal(repr(value)) if math.isfinite(value) else None
    if isinstance(value, str):
        return _text_number(value)
    if isinstance(value, Decimal):
        return value if value.is_finite() else None
    return None


def _to_float(value: Any) -> float | None:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    number = _to_decimal(value)
    if number is None:
        return None
    result = float(number)
    if not math.isfinite(result) or Decimal(repr(result)) != number:
        return None  # the float would not hold the same value
    return result


def _to_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bytes | bytearray | memoryview):
        return None
    return _render(value)


def _to_date(value: Any) -> date | None:
    if isinstance(value, datetime):
        stamp = _to_datetime(value)
        return stamp.date() if stamp is not None and stamp.time() == datetime.min.time() else None
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        match = _ISO_DATE.fullmatch(value.strip())
        if match:
            try:
                return date(*map(int, match.groups()))
            except ValueError:
                return None
    return None


def _to_datetime(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        if value.tzinfo is not None and value.utcoffset() is not None:
            try:
                return value.astimezone(UTC).replace(tzinfo=None)
            except OverflowError:
                return None
        return value.replace(tzinfo=None)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    if not isinstance(value, str):
        return None
    text = value.strip()
    if _ISO_DATE.fullmatch(text):
        day = _to_date(text)
        return None if day is None else datetime(day.year, day.month, day.day)
    match = _ISO_DATETIME.fullmatch(text)
    if not match:
        return None
    year, month, day_, hour, minute, second, fraction, offset = match.groups()
    try:
        stamp = datetime(int(year), int(month), int(day_), int(hour), int(minute), int(second or 0),
                         int((fraction or "0").ljust(6, "0")))
        if offset and offset != "Z":
            digits = offset[1:].replace(":", "")
            delta = timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
            stamp -= delta if offset[0] == "+" else -delta
    except (ValueError, OverflowError):
        return None
    return stamp


def _to_boolean(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        return True if text in _TRUE else False if text in _FALSE else None
    if _is_number(value):
        return True if value == 1 else False if value == 0 else None
    return None


def _to_binary(value: Any) -> bytes | None:
    return bytes(value) if isinstance(value, bytes | bytearray | memoryview) else None


def _to_other(value: Any) -> Any:
    return value.strip() if isinstance(value, str) else value


_CASTS: dict[str, Callable[[Any], Any]] = {
    "integer": _to_integer, "decimal": _to_decimal, "float": _to_float, "text": _to_text, "date": _to_date,
    "datetime": _to_datetime, "boolean": _to_boolean, "binary": _to_binary, "other": _to_other,
}  # fmt: skip

_REASONS: dict[str, str] = {
    "integer": "are not whole numbers", "decimal": "are not numbers", "float": "are not numbers",
    "text": "are not text", "date": "are not ISO dates (YYYY-MM-DD)",
    "datetime": "are not ISO dates or date-times (YYYY-MM-DD HH:MM:SS)",
    "boolean": "are not true/false values", "binary": "are not binary data", "other": "could not be read",
}  # fmt: skip


def convert(value: Any, declared: Dtype, joined: Dtype) -> Any:
    """A key value cast to its declared dtype and then to the joined one; None when a cast would change it.

    >>> convert(" 12 ", "text", "integer"), convert("7.5", "text", "integer"), convert(3.0, "float", "integer")
    (12, None, 3)
    >>> convert("2010-03-04T10:00:00+02:00", "text", "datetime")
    datetime.datetime(2010, 3, 4, 8, 0)
    >>> convert("03/04/2010", "text", "date") is None, convert(" Yes ", "text", "boolean")
    (True, True)
    """
    if value is None:
        return None
    value = _CASTS[declared](value)
    return None if value is None else _CASTS[joined](value)


def _decimal_text(value: Decimal) -> str:
    """The one text of a decimal's value: 1.50, 1.5 and 15E-1 are all '15E-1' (exact, unlike normalize())."""
    if value == 0:
        return "0"
    sign, digits, exponent = value.as_tuple()
    text = "".join(map(str, digits)).rstrip("0")
    exponent = int(exponent) + len(digits) - len(text)
    return f"{'-' if sign else ''}{text}E{exponent}"


def _canonical(value: Any, dtype: Dtype) -> str | None:
    """A key as text that two equal values of `dtype` share (the join itself compares these)."""
    if value is None:
        return None
    if dtype == "integer":
        return str(value)
    if dtype == "decimal":
        return _decimal_text(value)
    if dtype == "float":
        return repr(value + 0.0)  # -0.0 + 0.0 is 0.0
    if dtype == "boolean":
        return "true" if value else "false"
    if dtype in ("date", "datetime"):
        return value.isoformat()
    if dtype == "binary":
        return value.hex()
    if dtype == "text":
        return value
    # `other` on both sides: compare by what the value is.
    if isinstance(value, bool):
        return f"b:{value}"
    if _is_number(value):
        number = _to_decimal(value)
        return f"n:{_decimal_text(number)}" if number is not None else f"n:{value!r}"
    if isinstance(value, datetime):
        return f"t:{_to_datetime(value).isoformat()}"  # type: ignore[union-attr]
    if isinstance(value, date):
        return f"t:{_to_datetime(value).isoformat()}"  # type: ignore[union-attr]
    if isinstance(value, bytes | bytearray | memoryview):
        return f"x:{bytes(value).hex()}"
    return f"s:{value}"


def _render(value: Any) -> Any:
    """A value as text, for a union column whose two sides cannot share a type."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime | date):
        return value.isoformat(sep=" ") if isinstance(value, datetime) else value.isoformat()
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)


# --- checking the inputs ---------------------------------------------------------------------------------


def _frame(frames: Mapping[str, Frame], sub_query_id: str, side: str) -> Frame:
    if sub_query_id not in frames:
        known = sorted(frames)
        guess = did_you_mean(sub_query_id, known)
        hint = f" Did you mean '{guess}'?" if guess else ""
        raise AggregateError(
            f"The {side} input of the combination, sub-query '{sub_query_id}', has no result.{hint} "
            f"Results: {', '.join(known) or '(none)'}.",
            fix="Name the sub-query whose result should be combined.",
        )
    frame = frames[sub_query_id]
    if len(frame.dtypes) != len(frame.columns):
        raise AggregateError(
            f"Sub-query '{sub_query_id}' ({frame.datasource_id}) has {len(frame.columns)} columns but "
            f"{len(frame.dtypes)} dtypes.",
            fix="Declare one dtype per column.",
            datasource=frame.datasource_id,
        )
    unknown = [d for d in frame.dtypes if d not in DTYPES]
    if unknown:
        raise AggregateError(
            f"Sub-query '{sub_query_id}' ({frame.datasource_id}) declares unknown dtypes: "
            f"{', '.join(map(repr, unknown))}.",
            fix=f"Use one of: {', '.join(sorted(DTYPES))}.",
            datasource=frame.datasource_id,
        )
    for number, row in enumerate(frame.rows):
        if len(row) != len(frame.columns):
            raise AggregateError(
                f"Row {number} of sub-query '{sub_query_id}' ({frame.datasource_id}) has {len(row)} values "
                f"for {len(frame.columns)} columns.",
                datasource=frame.datasource_id,
            )
    return frame


def _column(frame: Frame, name: str) -> int:
    if name in frame.columns:
        return frame.columns.index(name)
    guess = did_you_mean(name, frame.columns)
    hint = f" Did you mean '{guess}'?" if guess else ""
    raise AggregateError(
        f"The join key '{name}' is not a column of {frame.datasource_id} (sub-query '{frame.sub_query_id}').{hint} "
        f"Columns: {', '.join(frame.columns) or '(none)'}.",
        fix="Join on a column the sub-query returns.",
        datasource=frame.datasource_id,
    )


@dataclass
class _Key:
    left_index: int
    right_index: int
    dtype: Dtype


def _keys(left: Frame, right: Frame, spec: CombineSpec) -> list[_Key]:
    if not spec.join_keys:
        raise AggregateError(
            f"A {spec.kind} of '{spec.left}' and '{spec.right}' needs at least one join key.",
            fix="Name the columns the two results share.",
        )
    keys = []
    for pair in spec.join_keys:
        li, ri = _column(left, pair.left), _column(right, pair.right)
        ld, rd = left.dtypes[li], right.dtypes[ri]
        joined = join_dtype(ld, rd)
        if joined is None:
            raise AggregateError(
                f"Cannot join {left.datasource_id}.{pair.left}, which is {describe(ld)}, to "
                f"{right.datasource_id}.{pair.right}, which is {describe(rd)}.",
                fix="Join on columns that hold the same kind of value.",
            )
        keys.append(_Key(li, ri, joined))
    return keys


def _unique(name: str, used: set[str]) -> str:
    candidate, n = name, 1
    while candidate in used:
        n += 1
        candidate = f"{name}_{n}"
    used.add(candidate)
    return candidate


# --- converting the keys ---------------------------------------------------------------------------------


def _convert_side(frame: Frame, indexes: Sequence[int], dtypes: Sequence[Dtype],
                  warnings: list[AggregateWarning], seen: set[tuple[str, int, str]], verb: str) -> list[list[Any]]:
    """Each key column of `frame` converted (one list per key), with a warning per column that lost values."""
    converted = []
    for index, joined in zip(indexes, dtypes, strict=True):
        declared = frame.dtypes[index]
        values = [convert(row[index], declared, joined) for row in frame.rows]
        converted.append(values)
        if (frame.sub_query_id, index, joined) in seen:
            continue
        seen.add((frame.sub_query_id, index, joined))
        total = sum(row[index] is not None for row in frame.rows)
        failed = sum(row[index] is not None and v is None for row, v in zip(frame.rows, values, strict=True))
        if failed:
            name = frame.columns[index]
            warnings.append(AggregateWarning(
                code=JOIN_KEY_UNCONVERTED,
                message=f"{failed} of {total} {frame.datasource_id}.{name} values {_REASONS[joined]} and {verb} nothing.",
                detail={"column": name, "failed": failed, "total": total, "dtype": joined,
                        "datasource": frame.datasource_id, "sub_query_id": frame.sub_query_id},
            ))  # fmt: skip
    return converted


def _register(con: duckdb.DuckDBPyConnection, table: str, keys: list[list[Any]], dtypes: Sequence[Dtype],
              n_rows: int, ranks: list[int | None] | None = None) -> None:
    """A table of row positions, canonical keys ("k0", "k1"…) and an optional sort rank."""
    data: dict[str, pd.Series] = {"pos": pd.Series(range(n_rows), dtype="int64")}
    for i, (values, dtype) in enumerate(zip(keys, dtypes, strict=True)):
        data[f"k{i}"] = pd.Series([_canonical(v, dtype) for v in values], dtype=object)
    if ranks is not None:
        data["rank"] = pd.Series(ranks, dtype=object)
    frame = pd.DataFrame(data)
    source = f"{table}_source"
    con.register(source, frame)
    columns = ['CAST("pos" AS BIGINT) AS "pos"']
    columns += [f'CAST("k{i}" AS VARCHAR) AS "k{i}"' for i in range(len(keys))]
    if ranks is not None:
        columns.append('CAST("rank" AS BIGINT) AS "rank"')
    con.execute(f'CREATE TABLE "{table}" AS SELECT {", ".join(columns)} FROM "{source}"')
    con.unregister(source)


def _match(left_keys: list[list[Any]], right_keys: list[list[Any]], dtypes: Sequence[Dtype], n_left: int,
           n_right: int, join: str, order: str, row_limit: int,
           ranks: tuple[list[int | None], list[int | None]] | None = None) -> tuple[list[tuple], int]:
    """The (left position, right position) pairs of the join, in order and limited, and their full count."""
    with duckdb.connect(":memory:") as con:
        _register(con, "l", left_keys, dtypes, n_left, ranks[0] if ranks else None)
        _register(con, "r", right_keys, dtypes, n_right, ranks[1] if ranks else None)
        on = " AND ".join(f'"l"."k{i}" = "r"."k{i}"' for i in range(len(dtypes)))
        query = f'SELECT "l"."pos" AS "lpos", "r"."pos" AS "rpos" FROM "l" {join} JOIN "r" ON {on}'
        total = con.execute(f'SELECT count(*) FROM ({query}) AS "matched"').fetchone()[0]  # type: ignore[index]
        pairs = con.execute(f"{query} ORDER BY {order} LIMIT ?", [row_limit]).fetchall()
    return pairs, int(total)


# --- the three kinds -------------------------------------------------------------------------------------


def _keyed_sides(left: Frame, right: Frame, spec: CombineSpec, verb: str) -> tuple[
        list[_Key], list[Dtype], list[list[Any]], list[list[Any]], list[AggregateWarning]]:
    """The join keys, their dtypes, both sides' key values converted to them, and the warnings of the conversion."""
    keys = _keys(left, right, spec)
    warnings: list[AggregateWarning] = []
    seen: set[tuple[str, int, str]] = set()
    dtypes = [k.dtype for k in keys]
    lk = _convert_side(left, [k.left_index for k in keys], dtypes, warnings, seen, verb)
    rk = _convert_side(right, [k.right_index for k in keys], dtypes, warnings, seen, verb)
    return keys, dtypes, lk, rk, warnings


def _join(left: Frame, right: Frame, spec: CombineSpec, row_limit: int) -> Combined:
    keys, dtypes, lk, rk, warnings = _keyed_sides(left, right, spec, "joined")
    pairs, total = _match(lk, rk, dtypes, len(left.rows), len(right.rows), spec.how.upper(),
                          '"lpos", "rpos" NULLS FIRST', row_limit)

    right_keys = {k.right_index for k in keys}
    kept = [i for i in range(len(right.columns)) if i not in right_keys]
    used = set(left.columns)
    columns = list(left.columns)
    for i in kept:
        name = right.columns[i]
        columns.append(_unique(f"{right.datasource_id}_{name}", used) if name in used else _unique(name, used))
    rows = []
    for lpos, rpos in pairs:
        other = right.rows[rpos] if rpos is not None else None
        rows.append(tuple(left.rows[lpos]) + tuple(other[i] if other is not None else None for i in kept))
    return Combined(columns, rows, total, total > len(rows), warnings)


def _sort_ranks(left_keys: list[list[Any]], right_keys: list[list[Any]], dtypes: Sequence[Dtype]
                ) -> tuple[list[int | None], list[int | None]]:
    """Each row's place in the order of the distinct complete keys of both sides (None: a key is null)."""
    def tuples(keys: list[list[Any]]) -> list[tuple | None]:
        rows = list(zip(*keys, strict=True)) if keys and keys[0] else []
        return [None if any(v is None for v in t) else t for t in rows]

    lt, rt = tuples(left_keys), tuples(right_keys)
    by_canonical: dict[tuple, tuple] = {}
    for t in (*lt, *rt):
        if t is not None:
            by_canonical.setdefault(tuple(_canonical(v, d) for v, d in zip(t, dtypes, strict=True)), t)
    try:
        ordered = sorted(by_canonical, key=lambda c: by_canonical[c])
    except TypeError:  # `other` keys of mixed Python types: order by their canonical text
        ordered = sorted(by_canonical)
    place = {c: n for n, c in enumerate(ordered)}

    def ranks(ts: list[tuple | None]) -> list[int | None]:
        return [None if t is None else place[tuple(_canonical(v, d) for v, d in zip(t, dtypes, strict=True))]
                for t in ts]

    return ranks(lt), ranks(rt)


def _numeric(value: Any, dtype: Dtype) -> int | float | Decimal | None:
    number = _CASTS[dtype](value) if value is not None else None
    return number if _is_number(number) else None


def _difference(a: Any, b: Any) -> int | float | Decimal | None:
    if a is None or b is None:
        return None
    if isinstance(a, float) or isinstance(b, float):
        return float(a) - float(b)
    return a - b


def _compare(left: Frame, right: Frame, spec: CombineSpec, row_limit: int) -> Combined:
    keys, dtypes, lk, rk, warnings = _keyed_sides(left, right, spec, "matched")
    ranks = _sort_ranks(lk, rk, dtypes)
    order = 'coalesce("l"."rank", "r"."rank") NULLS LAST, "lpos" NULLS LAST, "rpos" NULLS LAST'
    pairs, total = _match(lk, rk, dtypes, len(left.rows), len(right.rows), "FULL OUTER", order, row_limit,
                          ranks)

    left_values = [i for i in range(len(left.columns)) if i not in {k.left_index for k in keys}]
    right_values = [i for i in range(len(right.columns)) if i not in {k.right_index for k in keys}]
    used: set[str] = set()
    columns = [_unique(left.columns[k.left_index], used) for k in keys]
    columns += [_unique(f"{left.datasource_id}_{left.columns[i]}", used) for i in left_values]
    columns += [_unique(f"{right.datasource_id}_{right.columns[i]}", used) for i in right_values]
    left_numbers = [i for i in left_values if category(left.dtypes[i]) == "number"]
    right_numbers = [i for i in right_values if category(right.dtypes[i]) == "number"]
    difference = len(left_numbers) == 1 and len(right_numbers) == 1
    if difference:
        columns.append(_unique("difference", used))

    rows = []
    for lpos, rpos in pairs:
        key_side = lk if lpos is not None else rk
        pos = lpos if lpos is not None else rpos
        lrow = left.rows[lpos] if lpos is not None else None
        rrow = right.rows[rpos] if rpos is not None else None
        row = [values[pos] for values in key_side]
        row += [lrow[i] if lrow is not None else None for i in left_values]
        row += [rrow[i] if rrow is not None else None for i in right_values]
        if difference:
            (li,), (ri,) = left_numbers, right_numbers
            a = _numeric(lrow[li], left.dtypes[li]) if lrow is not None else None
            b = _numeric(rrow[ri], right.dtypes[ri]) if rrow is not None else None
            row.append(_difference(a, b))
        rows.append(tuple(row))
    return Combined(columns, rows, total, total > len(rows), warnings)


def _union(left: Frame, right: Frame, row_limit: int) -> Combined:
    # Align by name: each right column takes the first left column of that name not yet taken.
    right_to_out: dict[int, int] = {}
    out_names = list(left.columns)
    out_dtypes: list[list[Dtype]] = [[d] for d in left.dtypes]
    taken: set[int] = set()
    for ri, name in enumerate(right.columns):
        match = next((li for li, n in enumerate(left.columns) if n == name and li not in taken), None)
        if match is None:
            out_names.append(name)
            out_dtypes.append([right.dtypes[ri]])
            right_to_out[ri] = len(out_names) - 1
        else:
            taken.add(match)
            out_dtypes[match].append(right.dtypes[ri])
            right_to_out[ri] = match
    as_text = []
    for dtypes in out_dtypes:
        a, b = (dtypes + dtypes)[:2]
        as_text.append(not (a == b or "other" in (a, b) or category(a) == category(b)))

    def render(values: list[Any]) -> tuple:
        return tuple(_render(v) if text else v for v, text in zip(values, as_text, strict=True))

    used = set(out_names)
    columns = [_unique("datasource", used), *out_names]
    total = len(left.rows) + len(right.rows)
    rows = []
    for row in left.rows[:row_limit]:
        rows.append((left.datasource_id, *render([*row, *[None] * (len(out_names) - len(left.columns))])))
    for row in right.rows[: max(0, row_limit - len(rows))]:
        values: list[Any] = [None] * len(out_names)
        for ri, out in right_to_out.items():
            values[out] = row[ri]
        rows.append((right.datasource_id, *render(values)))
    return Combined(columns, rows, total, total > len(rows), [])


def combine(frames: Mapping[str, Frame], spec: CombineSpec, *, row_limit: int = 1000) -> Combined:
    """Combine the frames `spec` names (join, compare or union), returning at most `row_limit` rows."""
    if row_limit < 0:
        raise AggregateError(f"The row limit must be 0 or more, not {row_limit}.")
    left = _frame(frames, spec.left, "left")
    right = _frame(frames, spec.right, "right")
    if spec.kind == "join":
        return _join(left, right, spec, row_limit)
    if spec.kind == "compare":
        return _compare(left, right, spec, row_limit)
    return _union(left, right, row_limit)
