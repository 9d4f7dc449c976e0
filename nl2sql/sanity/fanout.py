"""Join fan-out: a join that reaches a table on columns that are not its whole key repeats the rows on the other
side, and a SUM, COUNT or AVG over a column of a repeated table counts those rows more than once."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from sqlglot import exp

from nl2sql.datasources.models import TableInfo
from nl2sql.plan import model as m
from nl2sql.plan.generate import plan_to_expression
from nl2sql.plan.validate import children
from nl2sql.sanity.findings import Finding, Probe
from nl2sql.sanity.values import resolve_column

FANNED_FUNCTIONS = frozenset({"sum", "count", "avg"})


@dataclass(frozen=True)
class Repeat:
    """A plan alias whose rows a join repeats, and the join that does: the table reached and on which columns."""

    alias: str
    reached: str
    on: tuple[str, ...]


def _is_whole_key(info: TableInfo, columns: set[str]) -> bool:
    key = {c.lower() for c in info.primary_key}
    return not key or key <= columns  # an unknown key counts as unique: no finding without evidence


def repeated_aliases(plan: m.PlanModel, tables: Mapping[str, TableInfo]) -> dict[str, Repeat]:
    """The plan's aliases whose rows its joins repeat: for each pair of joined tables, when the columns that reach
    one are not its whole primary key, every table on the other side of that join (the join tree cut there)."""
    sides: dict[frozenset[str], dict[str, set[str]]] = {}
    for join in plan.joins:
        for key in join.on:
            left, right = resolve_column(key.left, tables), resolve_column(key.right, tables)
            if left is None or right is None or left[0] == right[0]:
                continue
            columns = sides.setdefault(frozenset((left[0], right[0])), {left[0]: set(), right[0]: set()})
            columns[left[0]].add(key.left.column.lower())
            columns[right[0]].add(key.right.column.lower())
    repeated: dict[str, Repeat] = {}
    for edge, columns in sides.items():
        for far in edge:
            if _is_whole_key(tables[far], columns[far]):
                continue
            near = next(iter(edge - {far}))
            for alias in _component(near, [e for e in sides if e != edge]):
                repeated.setdefault(alias, Repeat(alias, tables[far].name, tuple(sorted(columns[far]))))
    return repeated


def _component(start: str, edges: list[frozenset[str]]) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        node = todo.pop()
        for edge in edges:
            if node in edge:
                for other in edge - seen:
                    seen.add(other)
                    todo.append(other)
    return seen


def _aggregates(node: m.Node) -> Iterator[m.Aggregate]:
    if isinstance(node, m.Aggregate):
        yield node
    elif not isinstance(node, m.ScalarSubquery | m.Window | m.PlanModel):
        for child in children(node):
            yield from _aggregates(child)


def _columns(node: m.Node) -> Iterator[m.ColumnRef]:
    if isinstance(node, m.ColumnRef):
        yield node
    elif not isinstance(node, m.PlanModel):
        for child in children(node):
            yield from _columns(child)


def fanned_aggregates(plan: m.PlanModel, tables: Mapping[str, TableInfo],
                      repeated: Mapping[str, Repeat]) -> list[tuple[m.Aggregate, str, str]]:
    """(aggregate, alias, column) for each SUM, COUNT or AVG, not DISTINCT, over a column of a repeated table."""
    out = []
    for item in plan.select:
        for agg in _aggregates(item.expr):
            if agg.func not in FANNED_FUNCTIONS or agg.distinct or agg.arg is None:
                continue
            for ref in _columns(agg.arg):
                resolved = resolve_column(ref, tables)
                if resolved is not None and resolved[0] in repeated:
                    out.append((agg, resolved[0], ref.column))
                    break
    return out


def fan_out_probe(plan: m.PlanModel, alias: str, key: str, dialect: str,
                  schemas: Mapping[str, str] | None = None) -> exp.Select:
    """`SELECT 1 FROM <the plan's tables and joins> WHERE <its WHERE> AND alias.key IS NOT NULL GROUP BY <its
    groups>, alias.key HAVING COUNT(*) > 1 LIMIT 1`: whether a row of the table is really repeated in a group."""
    key_ref = m.ColumnRef(table=alias, column=key)
    not_null = m.IsNull(expr=key_ref, negated=True)
    where = not_null if plan.where is None else m.And(conditions=[plan.where, not_null])
    probe = plan.model_copy(update={
        "select": [m.SelectItem(expr=m.Value(value=1), alias="repeated")], "where": where,
        "group_by": [*plan.group_by, key_ref],
        "having": m.Comparison(op=">", left=m.Aggregate(func="count"), right=m.Value(value=1)),
        "order_by": [], "limit": 1, "offset": None, "distinct": False})
    return plan_to_expression(probe, dialect, schemas=schemas)


def check_fan_out(plan: m.PlanModel, tables: Mapping[str, TableInfo], *, dialect: str,
                  schemas: Mapping[str, str] | None, probe: Probe) -> list[Finding]:
    """JOIN_FAN_OUT for each aggregate over a repeated table's column, once a probe confirms the repetition
    (no probe, so no finding, for a table without a single-column primary key)."""
    repeated = repeated_aliases(plan, tables)
    if not repeated:
        return []
    findings: list[Finding] = []
    confirmed: dict[str, bool] = {}
    for agg, alias, column in fanned_aggregates(plan, tables, repeated):
        info = tables[alias]
        if len(info.primary_key) != 1:
            continue
        if alias not in confirmed:
            confirmed[alias] = bool(probe(fan_out_probe(plan, alias, info.primary_key[0], dialect, schemas), 1))
        if not confirmed[alias]:
            continue
        cause = repeated[alias]
        findings.append(Finding(
            "JOIN_FAN_OUT",
            f"{agg.func.upper()} over {info.name}.{column} counts some {info.name} rows more than once: the join "
            f"to {cause.reached} on {', '.join(cause.on)} (not its whole key) repeats them. Aggregate "
            f"{cause.reached}'s own columns, or aggregate {info.name} without that join.",
            {"table": info.name, "column": column, "function": agg.func, "joined": cause.reached}))
    return findings
