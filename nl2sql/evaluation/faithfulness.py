"""Answer faithfulness: the numbers and names a written answer states, checked against the rows it was given.

Deterministic, with no model. A number (1,297, 1234.5, $523.06, -5) is supported when it equals a
value in the rows at the precision written (523.1 and 523 support 523.06; 523.60 does not), the row
count, or the sum of a numeric column; a percentage (37.2%) also when it is a share in the rows times
100. A number inside a text cell or the question is always supported. Ordinals (2nd), list markers
(``1.`` at the start of a line), numbers glued to a word or identifier (chinook_001, MPEG-4, #7) and
the month and day of a date (and a time of day) are never checked. Names are checked only when quoted ("Jazz") or bold
(**Rock**): a text cell, a column name or the question contains the name, or the name contains a
text cell. Bold spans with a digit, ending in ``:`` or longer than six words are skipped.

>>> check_faithfulness("Total sales were $523.1 across 2 countries.", "Sales by country?",
...                    ["Country", "Total"], [["USA", 300.0], ["Canada", 223.06]])
Faithfulness(faithful=True, unsupported_numbers=[], unsupported_entities=[], checked=2)
>>> check_faithfulness('The top genre is **Jazz**, with 1,300 tracks.', "Top genre?",
...                    ["Name", "Tracks"], [["Rock", 1297]])
Faithfulness(faithful=False, unsupported_numbers=['1,300'], unsupported_entities=['Jazz'], checked=2)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from nl2sql.datasources.compare import canonical_value

# A number as an answer writes it: sign, currency, thousands separators, decimals, a percent sign.
_NUMBER = re.compile(
    r"(?P<sign>-)?(?P<cur>[$€£¥])?(?P<int>\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?P<frac>\.\d+)?"
    r"(?P<pct>\s?%|\s+per\s?cent\b)?"
)
# Any number inside free text (a text cell, the question): supported wherever it stands.
_LOOSE_NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?|\d+")
_LIST_MARKER = re.compile(r"(?m)^[ \t]*(?:[-*+>#][ \t]*)*(\d{1,3})[.)](?=\s|$)")
_MONTH = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
          r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")
# Dates: the year is checked, the month, day and time are not (the spans listed are masked).
_DATE_PATTERNS = (
    # 2009-01-01, 2013-02, 2009-01-01 10:30:00: mask everything after the year
    re.compile(r"(?<![\d\w])\d{4}(?P<mask>-\d{2}(?:-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?)?)(?!\d)"),
    # 01/15/2013, 15.01.2013
    re.compile(r"(?<![\d\w.])(?P<mask>\d{1,2}([/.])\d{1,2}\2)\d{4}(?!\d)"),
    # 2013/01/15
    re.compile(r"(?<![\d\w])\d{4}(?P<mask>/\d{1,2}/\d{1,2})(?!\d)"),
    # January 5, 2013 / Jan. 5th
    re.compile(rf"\b{_MONTH}\.?\s+(?P<mask>\d{{1,2}})(?:st|nd|rd|th)?(?![\d\w])"),
    # 5 January 2013 / 5th of March
    re.compile(rf"(?<![\d\w])(?P<mask>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}\b"),
    # a time of day (10:30, 23:59:59), finer than the day
    re.compile(r"(?<![\d\w:])(?P<mask>\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?)(?![\d:])"),
)
_QUOTES = (
    re.compile(r'"([^"\n]+)"'),
    re.compile(r"“([^”\n]+)”"),
    re.compile(r"‘([^’\n]+)’"),
    re.compile(r"(?<!\w)'([^'\n]+)'(?!\w)"),
)
_BOLD = re.compile(r"\*\*(?!\s)(.+?)(?<!\s)\*\*")
_MAX_BOLD_WORDS = 6
_STRIP = "\"'“”‘’`*_ \t"


@dataclass
class Faithfulness:
    """Whether an answer's numbers and names are all supported, what was not (as written), how many were checked."""

    faithful: bool
    unsupported_numbers: list[str] = field(default_factory=list)
    unsupported_entities: list[str] = field(default_factory=list)
    checked: int = 0


@dataclass
class _Support:
    """What the shown rows and the question can support."""

    values: list[float] = field(default_factory=list)
    totals: list[float] = field(default_factory=list)  # row counts and column sums
    free: set[float] = field(default_factory=set)  # numbers inside text cells and the question
    texts: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    question: str = ""


def _as_number(value: Any) -> float | None:
    value = canonical_value(value)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float):
        return value
    text = str(value).strip().replace(",", "")
    if re.fullmatch(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", text):
        return float(text)
    return None


def _free_numbers(text: str) -> set[float]:
    found = set()
    for match in _LOOSE_NUMBER.finditer(text):
        found.add(float(match.group().replace(",", "")))
    for digits in re.findall(r"\d+", text):
        found.add(float(digits))
    return found


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


def _compact(text: str) -> str:
    return re.sub(r"[\W_]+", "", text.casefold())


def _support(question: str, result_sets: Iterable[tuple[Sequence[str], Sequence[Sequence[Any]]]]) -> _Support:
    support = _Support(question=_norm(question), free=_free_numbers(question))
    for columns, rows in result_sets:
        support.columns.extend(_norm(str(c)) for c in columns)
        support.totals.append(float(len(rows)))
        sums: dict[int, float] = {}
        not_numeric: set[int] = set()
        for row in rows:
            for i, cell in enumerate(row):
                value = canonical_value(cell)
                if value is None:
                    continue
                number = _as_number(value)
                if number is not None:
                    support.values.append(number)
                    sums[i] = sums.get(i, 0.0) + number
                else:
                    not_numeric.add(i)
                if isinstance(value, str):
                    support.texts.append(_norm(value))
                    support.free |= _free_numbers(value)
        support.totals.extend(total for i, total in sums.items() if i not in not_numeric)
    support.texts = [t for t in dict.fromkeys(support.texts) if t]
    return support


def _masked(text: str) -> str:
    """The text with list markers and the non-year parts of dates blanked out (positions kept)."""
    chars = list(text)

    def blank(start: int, end: int) -> None:
        chars[start:end] = " " * (end - start)

    for match in _LIST_MARKER.finditer(text):
        blank(*match.span(1))
    for pattern in _DATE_PATTERNS:
        for match in pattern.finditer(text):
            blank(*match.span("mask"))
    return "".join(chars)


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _numbers(text: str) -> list[tuple[str, float, int, bool]]:
    """The checkable numbers: (as written, value, decimals written, is a percentage)."""
    masked = _masked(text)
    out = []
    for match in _NUMBER.finditer(masked):
        start, end = match.span()
        before = masked[start - 1] if start > 0 else ""
        before2 = masked[start - 2] if start > 1 else ""
        sign = match.group("sign")
        if sign and before.isdigit():
            sign, start = None, start + 1  # a range such as 2009-2010: the second number is positive
        elif _is_word(before) or before in "#@" or (before in "-./" and _is_word(before2)):
            continue  # chinook_001, MPEG-4, #7, No.5, v1.2
        after = masked[end] if end < len(masked) else ""
        after2 = masked[end + 1] if end + 1 < len(masked) else ""
        if _is_word(after) or (after == "-" and after2.isalpha()):
            continue  # 2nd, 4K, 5-star
        written = text[start:end].strip()
        digits = match.group("int").replace(",", "") + (match.group("frac") or "")
        value = float(digits) * (-1 if sign else 1)
        decimals = len(match.group("frac") or "") - (1 if match.group("frac") else 0)
        out.append((written, value, decimals, bool(match.group("pct"))))
    return out


def _number_supported(value: float, decimals: int, percent: bool, support: _Support) -> bool:
    tolerance = 0.5 * 10**-decimals + 1e-9
    if any(abs(value - free) < 1e-9 for free in support.free):
        return True
    if any(abs(value - v) <= tolerance for v in support.values) or any(
        abs(value - t) <= tolerance for t in support.totals
    ):
        return True
    return percent and any(abs(value - v * 100) <= tolerance for v in support.values)


def _names(text: str) -> list[str]:
    """The names to check: bold spans (less the skipped ones) and quoted names, as written."""
    names: list[tuple[int, str]] = []
    bold_spans: list[tuple[int, int]] = []
    for match in _BOLD.finditer(text):
        inner = match.group(1).strip()
        if any(c.isdigit() for c in inner) or inner.endswith(":") or len(inner.split()) > _MAX_BOLD_WORDS:
            continue
        bold_spans.append(match.span())
        names.append((match.start(), inner))
    for pattern in _QUOTES:
        for match in pattern.finditer(text):
            if any(s <= match.start() and match.end() <= e for s, e in bold_spans):
                continue  # **"Jazz"** is checked once, as the bold name
            names.append((match.start(), match.group(1)))
    out = []
    for _, raw in sorted(names):
        name = raw.strip(_STRIP).rstrip(".,;:!?").strip(_STRIP)
        if any(c.isalpha() for c in name):
            out.append(name)
    return out


def _name_supported(name: str, support: _Support) -> bool:
    norm, compact = _norm(name), _compact(name)
    if norm in support.question or any(norm in t for t in support.texts):
        return True
    if any(norm in c or (compact and compact in _compact(c)) for c in support.columns):
        return True
    return any(re.search(rf"(?<!\w){re.escape(t)}(?!\w)", norm) for t in support.texts)


def check_faithfulness(answer: str, question: str, columns: list[str], rows: list[list],
                       *, more: Sequence[tuple[Sequence[str], Sequence[Sequence[Any]]]] = ()) -> Faithfulness:
    """Check an answer's numbers and quoted or bold names against the rows shown (and `more` result sets)."""
    support = _support(question, [(columns, rows), *more])
    unsupported_numbers: list[str] = []
    unsupported_entities: list[str] = []
    checked = 0
    for written, value, decimals, percent in _numbers(answer):
        checked += 1
        if not _number_supported(value, decimals, percent, support) and written not in unsupported_numbers:
            unsupported_numbers.append(written)
    for name in _names(answer):
        checked += 1
        if not _name_supported(name, support) and name not in unsupported_entities:
            unsupported_entities.append(name)
    return Faithfulness(faithful=not unsupported_numbers and not unsupported_entities,
                        unsupported_numbers=unsupported_numbers, unsupported_entities=unsupported_entities,
                        checked=checked)
