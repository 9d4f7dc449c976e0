"""Matching a question to a verified query: read the parameters from the question, then compare by meaning.

Parameters are read first (a text parameter tied to a column is looked for among that column's
values, so "customers in brazil" reads `Brazil` as stored; numbers, years and dates by their
shape; anything else by lining the question up with the template). The template is then filled
with those values and compared with the question by embedding similarity, so "How many customers
are in Brazil?" meets "How many customers are in {country}?" as the near-identical sentence it is.

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
from nl2sql.index.chunks import VerifiedQuery
from nl2sql.verified.params import ParameterError, bind_parameters, coerce_value

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
                    lookup: ValueLookup) -> dict[str, Any] | None:
    """The parameters' values as the question gives them (defaults where it gives none); None when one is missing."""
    aligned = _template_regex(template).match(question)
    values: dict[str, Any] = {}
    taken: set[str] = set()
    order = [n for n in PLACEHOLDER.findall(template) if n in parameters]
    order += [n for n in parameters if n not in order]
    for name in order:
        param = parameters[name]
        slot = aligned.group(name) if aligned and name in aligned.groupdict() else None
        value: Any = None
        if param.type == "text" and param.column:
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


def match_verified(question: str, candidates: Sequence[tuple[str, int, VerifiedQueryConfig]], *, embed: Embed,
                   lookup: Callable[[str], ValueLookup], dialect_of: Callable[[str], str],
                   min_similarity: float) -> VerifiedMatch | None:
    """The best verified query (datasource, position, query) for the question at or above `min_similarity`."""
    readable: list[tuple[str, int, VerifiedQueryConfig, dict[str, Any], str]] = []
    for ds, position, query in candidates:
        values = read_parameters(question, query.question, query.parameters, lookup(ds))
        if values is not None:
            readable.append((ds, position, query, values, fill_template(query.question, values)))
    if not readable:
        return None
    vectors = embed([question] + [filled for *_, filled in readable])
    sims = vectors[1:] @ vectors[0]
    best = int(np.argmax(sims))
    if float(sims[best]) < min_similarity:
        return None
    ds, position, query, values, filled = readable[best]
    in_question = set(PLACEHOLDER.findall(query.question))
    return VerifiedMatch(datasource_id=ds, position=position, question=query.question, filled=filled,
                         sql=bind_parameters(query.sql, dialect_of(ds), values), parameters=values,
                         similarity=round(float(sims[best]), 4),
                         defaults_used=sorted(n for n in query.parameters if n not in in_question))


def index_entries_of(datasource: DatasourceConfig) -> list[VerifiedQuery]:
    """A datasource's verified queries as index entries (routing votes): each question with its defaults, or
    its parameters' names, filled in."""
    out = []
    for query in datasource.verified_queries:
        values = {name: p.default if p.default is not None else name.replace("_", " ")
                  for name, p in query.parameters.items()}
        out.append(VerifiedQuery(question=fill_template(query.question, values), sql=query.sql,
                                 datasource=datasource.id, parameters={n: p.type for n, p in query.parameters.items()}))
    return out
