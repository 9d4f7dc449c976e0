"""Value not found: an empty result whose plan filters a text column on a literal the column does not hold."""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from sqlglot import exp

from nl2sql.datasources.base import table_expression
from nl2sql.datasources.models import TableInfo
from nl2sql.plan import model as m
from nl2sql.plan.join_keys import dtype_of
from nl2sql.sanity.findings import Finding, Probe

#: The most distinct values the probe reads to find the closest ones.
MAX_DISTINCT = 5000
#: The most closest values a finding names.
MAX_CLOSEST = 3


@dataclass(frozen=True)
class LiteralFilter:
    """`table.column = 'literal'` (or one value of an IN list) in a plan's WHERE."""

    table: TableInfo
    column: str
    literal: str

    @property
    def name(self) -> str:
        """`Table.Column`, as the asker's schema spells them."""
        return f"{self.table.name}.{self.column}"


def plan_tables(plan: m.PlanModel, lookup: Callable[[str], TableInfo | None]) -> dict[str, TableInfo]:
    """The plan's tables of the database by the name columns use for them (alias, else name; lower case): not its
    derived tables, nor its common tables, even one named like a table."""
    out = {}
    common = {c.name.lower() for c in plan.with_}
    for ref in [plan.from_, *(j.table for j in plan.joins)]:
        if ref.query is not None or ref.table.lower() in common:
            continue
        info = lookup(ref.table)
        if info is not None:
            out[ref.name_in_scope.lower()] = info
    return out


def resolve_column(ref: m.ColumnRef, tables: Mapping[str, TableInfo]) -> tuple[str, TableInfo] | None:
    """The plan alias and table a column reference reads (None when it is not one of the plan's own tables)."""
    if ref.table is not None:
        info = tables.get(ref.table.lower())
        return (ref.table.lower(), info) if info is not None and info.column(ref.column) else None
    holders = [(alias, info) for alias, info in tables.items() if info.column(ref.column)]
    return holders[0] if len(holders) == 1 else None


def _conjuncts(condition: m.Node | None) -> Iterator[m.Node]:
    if isinstance(condition, m.And | m.Or):
        for part in condition.conditions:
            yield from _conjuncts(part)
    elif condition is not None:
        yield condition


def literal_filters(plan: m.PlanModel, tables: Mapping[str, TableInfo],
                    lookup: Callable[[str], TableInfo | None] | None = None) -> list[LiteralFilter]:
    """Every text column of the plan's own tables its WHERE compares for equality with a string literal; with
    `lookup`, also those of the sub-plans it keeps rows by (`x IN (SELECT …)`, `EXISTS (…)`, not negated), which
    filter the answer as a join would."""
    found: list[LiteralFilter] = []
    for condition in _conjuncts(plan.where):
        if isinstance(condition, m.InSubquery | m.Exists) and not condition.negated and lookup is not None:
            sub = condition.plan
            found += [item for item in literal_filters(sub, plan_tables(sub, lookup), lookup) if item not in found]
            continue
        pairs: list[tuple[m.Node, m.Node]] = []
        if isinstance(condition, m.Comparison) and condition.op == "=":
            pairs = [(condition.left, condition.right), (condition.right, condition.left)]
        elif isinstance(condition, m.InList) and not condition.negated:
            pairs = [(condition.expr, value) for value in condition.values]
        for column, literal in pairs:
            if not (isinstance(column, m.ColumnRef) and isinstance(literal, m.Value)
                    and isinstance(literal.value, str)):
                continue
            resolved = resolve_column(column, tables)
            if resolved is None:
                continue
            info = resolved[1]
            reflected = info.column(column.column)
            if reflected is None or dtype_of(reflected.type) != "text":
                continue
            item = LiteralFilter(info, reflected.name, literal.value)
            if item not in found:
                found.append(item)
    return found


def closest_values(literal: str, values: list[str], n: int = MAX_CLOSEST) -> list[str]:
    """The stored values nearest to a literal: the same but for case first, then by similarity, then those that
    contain it or that it contains (a word or more).

    >>> closest_values("heavy metal", ["Rock", "Metal", "Heavy Metal", "Jazz"])
    ['Heavy Metal', 'Metal']
    """
    by_lower: dict[str, str] = {}
    for value in values:
        by_lower.setdefault(value.lower(), value)
    wanted = literal.lower().strip()
    ranked = difflib.get_close_matches(wanted, list(by_lower), n=n, cutoff=0.6)
    same = [key for key in by_lower if key.strip() == wanted]
    overlapping = [key for key in by_lower if min(len(key), len(wanted)) >= 3 and (key in wanted or wanted in key)]
    return [by_lower[key] for key in dict.fromkeys([*same, *ranked, *overlapping])][:n]


#: How alike a stored value and a literal must be to read as the same words misspelt ('Brasil', 'Brazil': 0.83).
SPELLING_SIMILARITY = 0.8


def spelt_alike(literal: str, value: str) -> bool:
    """Whether a stored value reads as the literal written differently: the same letters and digits but for case,
    accents and punctuation, one containing the other as whole words, or a slip of a letter or two.

    >>> [spelt_alike("brasil", v) for v in ("Brazil", "Alternative & Punk", "Austria")]
    [True, False, False]
    >>> spelt_alike("Narnia", "Argentina"), spelt_alike("heavy metal", "Metal")
    (False, True)
    """
    a, b = _letters(literal), _letters(value)
    if not a or not b:
        return False
    if a == b or (min(len(a), len(b)) >= 3 and (f" {a} " in f" {b} " or f" {b} " in f" {a} ")):
        return True
    return min(difflib.SequenceMatcher(None, a, b).ratio(), difflib.SequenceMatcher(None, b, a).ratio()) \
        >= SPELLING_SIMILARITY


def _letters(text: str) -> str:
    """Lower-case words of letters and digits, accents dropped: `Alternative & Punk` → `alternative punk`."""
    plain = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    return " ".join(re.findall(r"[a-z0-9]+", plain))


def _column(name: str) -> exp.Column:
    return exp.column(exp.to_identifier(name, quoted=True))


def exists_probe(item: LiteralFilter) -> exp.Select:
    """`SELECT 1 FROM table WHERE column = 'literal' LIMIT 1`: whether the table holds the value at all."""
    return (exp.select(exp.Literal.number(1)).from_(table_expression(item.table.name, item.table.schema_name))
            .where(exp.EQ(this=_column(item.column), expression=exp.Literal.string(item.literal))).limit(1))


def distinct_probe(item: LiteralFilter) -> exp.Select:
    """The column's distinct non-null values (bounded by the caller's row limit)."""
    return (exp.select(_column(item.column)).distinct()
            .from_(table_expression(item.table.name, item.table.schema_name))
            .where(exp.Not(this=exp.Is(this=_column(item.column), expression=exp.Null()))))


#: The most other columns the value check probes for a literal its own column does not hold.
MAX_ELSEWHERE = 40


def check_values(filters: list[LiteralFilter], *, samples: Callable[[LiteralFilter], list[str]],
                 probe: Probe, elsewhere: Callable[[LiteralFilter], list[LiteralFilter]] | None = None
                 ) -> list[Finding]:
    """VALUE_NOT_FOUND for each filter literal the column holds nowhere: looked up among the column's profiled
    values, then probed; the finding names the closest stored values, and is fixable when one of them reads as the
    literal spelt differently (`Brasil`: `Brazil`), or when another column the caller may read holds the literal
    as written (`elsewhere`: the same literal in each such column; `Germany` asked of `Artist.Name` is a
    `Customer.Country`). A value nothing holds or resembles (`Narnia`) is not replaced by a near neighbour: the
    empty answer is the answer."""
    findings = []
    for item in filters:
        profiled = samples(item)
        if item.literal in profiled or probe(exists_probe(item), 1):
            continue
        stored = [str(row[0]) for row in probe(distinct_probe(item), MAX_DISTINCT) if row and row[0] is not None]
        closest = closest_values(item.literal, [*profiled, *stored])
        alike = any(spelt_alike(item.literal, value) for value in closest)
        holder = None if alike or elsewhere is None else next(
            (other for other in elsewhere(item)[:MAX_ELSEWHERE] if probe(exists_probe(other), 1)), None)
        if holder is not None:
            hint = f"it is a {holder.name}"
        else:
            hint = f"closest: {', '.join(repr(v) for v in closest)}" if closest else "no stored value is close"
        detail = {"table": item.table.name, "column": item.column, "closest": closest,
                  **({"found_in": holder.name} if holder is not None else {})}
        findings.append(Finding("VALUE_NOT_FOUND", f"{item.literal!r} is not a {item.name}; {hint}.", detail,
                                fixable=alike or holder is not None))
    return findings


def text_columns_elsewhere(item: LiteralFilter, tables: Iterable[TableInfo]) -> list[LiteralFilter]:
    """The same literal in every other text column of `tables` (the caller's readable ones), the filter's own
    table first."""
    ordered = sorted(tables, key=lambda t: t != item.table)
    return [LiteralFilter(table, column.name, item.literal) for table in ordered for column in table.columns
            if dtype_of(column.type) == "text" and (table, column.name) != (item.table, item.column)]
