"""Matching a question to a verified query: read the parameters from the question, then compare by meaning.

Parameters are read first (a text parameter tied to a column is looked for among that column's
values, so "customers in brazil" reads `Brazil` as stored; numbers, years and dates by their
shape; anything else by lining the question up with the template). The template is then filled
with those values and compared with the question by embedding similarity, so "How many customers
are in Brazil?" meets "How many customers are in {country}?" as the near-identical sentence it is.

Only the caller's own verified queries (`verified/scope.py`) ever look values up in a database, and
only when the question comes close to them with the values it gives in words (within
`PROBE_MARGIN` of `min_similarity`). A query over a table the caller may not read is read from
the question's words alone, with no database asked: when it is the closest match, the caller is
refused with the generic sentence, whatever the value names ("Brazil" or "Narnia" alike), so
neither the answer nor its timing tells which values a denied column holds.

>>> from nl2sql.config.models import ParameterConfig
>>> read_parameters("Revenue by country in 2010", "Revenue by country in {year}", {"year": ParameterConfig(type="year")},
...                 lambda table, column: [])
{'year': 2010}
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nl2sql.config.models import PLACEHOLDER, DatasourceConfig, ParameterConfig, VerifiedQueryConfig
from nl2sql.errors import SecurityViolation
from nl2sql.verified.models import VerifiedQuery
from nl2sql.verified.params import ParameterError, bind_parameters, coerce_value
from nl2sql.verified.scope import curated_queries

#: (table, column) → the column's distinct values, for text parameters tied to a column.
ValueLookup = Callable[[str, str], Sequence[str]]
#: Texts → unit vectors.
Embed = Callable[[list[str]], np.ndarray]

SHAPES = {
    "year": re.compile(r"\b(1[89]\d\d|2\d\d\d)\b"),
    "date": re.compile(r"\b(\d{4}-\d{2}-\d{2})\b"),
    "integer": re.compile(r"(?<![\w.])(\d+)(?![\w.])"),
    "number": re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)(?![\w.])"),
}
#: A verified query of the caller's whose parameters need a database look-up is looked up only when the
#: question, with the values it gives in words, is at least this close to `min_similarity`.
PROBE_MARGIN = 0.25


@dataclass
class VerifiedMatch:
    """A verified query chosen for a question, with its parameters bound."""

    datasource_id: str
    position: int
    question: str
    filled: str
    sql: str
    parameters: dict[str, Any]
    similarity: float
    defaults_used: list[str] = field(default_factory=list)


def _template_regex(template: str) -> re.Pattern[str]:
    tokens = re.split(r"\s+", template.strip().rstrip("?.! "))
    pieces = []
    for token in tokens:
        parts = re.split(PLACEHOLDER, token)
        pieces.append("".join(f"(?P<{p}>.+?)" if i % 2 else re.escape(p) for i, p in enumerate(parts)))
    return re.compile(r"^\s*" + r"\s+".join(pieces) + r"\s*[?.!]*\s*$", re.IGNORECASE)


def _value_in(question: str, values: Sequence[str]) -> str | None:
    lowered = question.lower()
    for value in sorted({str(v) for v in values if v is not None and str(v).strip()}, key=len, reverse=True):
        if re.search(r"(?<!\w)" + re.escape(value.lower()) + r"(?!\w)", lowered):
            return value
    return None


def read_parameters(question: str, template: str, parameters: Mapping[str, ParameterConfig],
                    lookup: ValueLookup | None) -> dict[str, Any] | None:
    """The parameters' values as the question gives them (defaults where it gives none); None when one is missing.

    Without a `lookup`, a text parameter tied to a column takes the words in its place in the
    template, as a free text parameter does (no database is asked).

    >>> read_parameters("Which customers live in Narnia?", "Which customers live in {country}?",
    ...                 {"country": ParameterConfig(column="Customer.Country", default="USA")}, None)
    {'country': 'Narnia'}
    """
    aligned = _template_regex(template).match(question)
    values: dict[str, Any] = {}
    taken: set[str] = set()
    order = [n for n in PLACEHOLDER.findall(template) if n in parameters]
    order += [n for n in parameters if n not in order]
    for name in order:
        param = parameters[name]
        slot = aligned.group(name) if aligned and name in aligned.groupdict() else None
        value: Any = None
        if param.type == "text" and param.column and lookup is not None:
            table, _, column = param.column.rpartition(".")
            value = _value_in(slot or question, lookup(table, column))
        elif param.type == "text":
            value = slot.strip() if slot else None
        else:
            for found in SHAPES[param.type].findall(slot or question):
                if found not in taken:
                    value = found
                    break
        if value is None:
            if param.default is None:
                return None
            value = param.default
        try:
            values[name] = coerce_value(name, value, param)
        except ParameterError:
            return None
        taken.add(str(value))
    return values


def fill_template(template: str, values: Mapping[str, Any]) -> str:
    """The template with each `{name}` replaced by its value."""
    return PLACEHOLDER.sub(lambda m: str(values.get(m.group(1), m.group(1))), template)


def _looks_up(query: VerifiedQueryConfig) -> bool:
    return any(p.type == "text" and p.column for p in query.parameters.values())


def _named(query: VerifiedQueryConfig) -> dict[str, Any]:
    return {name: p.default if p.default is not None else name.replace("_", " ") for name, p in query.parameters.items()}


@dataclass
class _Reading:
    datasource_id: str
    position: int
    query: VerifiedQueryConfig
    readable: bool
    values: dict[str, Any] | None
    filled: str


def match_verified(question: str, candidates: Sequence[tuple[str, int, VerifiedQueryConfig]], *, embed: Embed,
                   lookup: Callable[[str], ValueLookup], dialect_of: Callable[[str], str],
                   min_similarity: float,
                   denied: Sequence[tuple[str, int, VerifiedQueryConfig]] = ()) -> VerifiedMatch | None:
    """The best verified query (datasource, position, query) for the question at or above `min_similarity`.

    `candidates` are the caller's verified queries; `denied` those over a table the caller may not
    read: they are read from the question's words only (`lookup` is never called for them), and
    when one of them is the best match the caller is refused (SecurityViolation, the generic
    sentence) instead of being answered by another query or routed on.
    """
    pool = [(ds, p, q, True) for ds, p, q in candidates] + [(ds, p, q, False) for ds, p, q in denied]
    # first from the question's words alone, for every query, then look-ups for the caller's close ones
    sketches: list[tuple[_Reading, bool]] = []
    for ds, position, query, readable in pool:
        values = read_parameters(question, query.question, query.parameters, None)
        probe = readable and _looks_up(query)
        if values is None and not probe:
            continue
        shown = values if values is not None else _named(query)
        sketches.append((_Reading(ds, position, query, readable, values, fill_template(query.question, shown)), probe))
    if not sketches:
        return None
    vectors = embed([question] + [r.filled for r, _ in sketches])
    asked = vectors[0]
    readings: list[tuple[_Reading, float]] = []
    looked_up: list[_Reading] = []
    for (reading, probe), sim in zip(sketches, (vectors[1:] @ asked).tolist(), strict=True):
        if not probe:
            readings.append((reading, sim))
        elif sim >= min_similarity - PROBE_MARGIN:
            values = read_parameters(question, reading.query.question, reading.query.parameters,
                                     lookup(reading.datasource_id))
            if values is not None:
                looked_up.append(_Reading(reading.datasource_id, reading.position, reading.query, True, values,
                                          fill_template(reading.query.question, values)))
    if looked_up:
        readings += zip(looked_up, (embed([r.filled for r in looked_up]) @ asked).tolist(), strict=True)
    if not readings:
        return None
    # the caller's own queries first: of two equally close, the one the caller may run answers
    readings.sort(key=lambda item: not item[0].readable)
    best = int(np.argmax([sim for _, sim in readings]))
    chosen, similarity = readings[best]
    if similarity < min_similarity:
        return None
    if not chosen.readable:
        raise SecurityViolation()
    query, values, ds = chosen.query, chosen.values or {}, chosen.datasource_id
    in_question = set(PLACEHOLDER.findall(query.question))
    return VerifiedMatch(datasource_id=ds, position=chosen.position, question=query.question, filled=chosen.filled,
                         sql=bind_parameters(query.sql, dialect_of(ds), values), parameters=values,
                         similarity=round(float(similarity), 4),
                         defaults_used=sorted(n for n in query.parameters if n not in in_question))


def index_entries_of(datasource: DatasourceConfig, dialect: str | None = None) -> list[VerifiedQuery]:
    """A datasource's verified queries as index entries (routing votes): each question with its defaults, or
    its parameters' names, filled in, and the tables it reads (so only a caller who may read them all counts
    it); a query whose SQL cannot be read is left out."""
    out = []
    for curated in curated_queries(datasource, dialect or datasource.dialect):
        query = curated.query
        out.append(VerifiedQuery(question=fill_template(query.question, _named(query)), sql=query.sql,
                                 datasource=datasource.id, parameters={n: p.type for n, p in query.parameters.items()},
                                 tables=list(curated.tables)))
    return out
