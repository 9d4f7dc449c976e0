"""The drift check of one datasource: reflect the live schema (the build's own reflect stage), diff it against the
live build, find what the change breaks, run the data expectations, and cut all of it to what the caller may see.

Status: `unchanged`, `drifted` (the schema differs or an expectation fails), `not_indexed` (no live build to
compare with) or `failed` (the database could not be read). A caller sees only the tables it may read: drift
confined to denied tables reads as unchanged, and policy patterns (they name denied tables) are shown to admins
and to the engine's own check (no caller) only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from nl2sql.config.models import DatasourceConfig, ExampleQuestionConfig, PoliciesConfig, VerifiedQueryConfig
from nl2sql.datasources.base import Adapter
from nl2sql.datasources.models import ColumnProfile, SchemaSnapshot
from nl2sql.errors import NL2SQLError
from nl2sql.index.build import plan_build
from nl2sql.index.chunks import Entry
from nl2sql.index.store import StateStore
from nl2sql.policies import Scope
from nl2sql.schema.expectations import Expectation, ExpectationResult, check_expectations, expectations_for
from nl2sql.schema.impact import (
    Impact,
    QueryImpact,
    Read,
    RunCheck,
    broken_cases,
    columns_read,
    stale_patterns,
    verified_impact,
)
from nl2sql.schema.snapshot import SchemaDiff, table_key
from nl2sql.verified.scope import allows_table

if TYPE_CHECKING:
    import pandas as pd

DriftStatus = Literal["unchanged", "drifted", "not_indexed", "failed"]
#: The exit code of `nl2sql index check` for each status (the worst datasource's).
EXIT_CODES: dict[DriftStatus, int] = {"unchanged": 0, "not_indexed": 0, "drifted": 1, "failed": 2}


class DriftReport(BaseModel):
    """What the drift check found in one datasource, as the caller may see it."""

    datasource_id: str
    status: DriftStatus
    build_id: str | None = None
    diff: SchemaDiff = Field(default_factory=SchemaDiff)
    impact: Impact = Field(default_factory=Impact)
    expectations: list[ExpectationResult] = Field(default_factory=list)
    message: str | None = None

    @property
    def failed_expectations(self) -> list[ExpectationResult]:
        """The expectations the live data breaks."""
        return [e for e in self.expectations if not e.passed]

    def event_fields(self) -> dict[str, object]:
        """What `schema.drifted` carries: counts, never a table, column or value."""
        return {"datasource_id": self.datasource_id, "changes": self.diff.counts(), "impact": self.impact.counts(),
                "failed_expectations": len(self.failed_expectations)}

    def drift_sha256(self) -> str | None:
        """What makes this drift distinct (the same drift found twice is published once); None when unchanged."""
        if self.status != "drifted":
            return None
        text = self.model_dump_json(include={"datasource_id", "diff", "impact"}) + "|".join(
            f"{e.table}.{e.column}:{e.kind}:{e.detail}" for e in self.failed_expectations)
        return hashlib.sha256(text.encode()).hexdigest()

    def markdown(self, *, values: bool = True, heading: bool = True) -> str:
        """The report as markdown (the drift flow's artifact; without its heading, `nl2sql index check`'s detail);
        without `values`, an expectation's failure is told by counts, never by the values it saw (Prefect's
        artifacts)."""
        lines = [f"# Drift check: {self.datasource_id}", "", f"**Status: {self.status}**"
                 + (f" (live build {self.build_id})" if self.build_id else "")] if heading else []
        if self.message:
            lines += ["", self.message]
        if not self.diff.empty:
            lines += ["", "## Schema changes", "", *diff_lines(self.diff)]
        impact = self.impact
        for title, queries in (("Verified queries", impact.verified_queries),
                               ("Example questions", impact.example_questions)):
            if queries:
                lines += ["", f"## {title} impacted", ""]
                lines += [f"- #{q.position} \"{q.question}\": {'; '.join(q.reasons)}" for q in queries]
        if impact.policy_patterns:
            lines += ["", "## Policy patterns that match no live table", ""]
            lines += [f"- role {p.role}, {p.kind}: `{p.pattern}`" for p in impact.policy_patterns]
        if impact.eval_cases:
            lines += ["", "## Eval cases whose gold SQL no longer runs", ""]
            lines += [f"- {c.case_id}: {c.reason}" for c in impact.eval_cases]
        if self.expectations:
            failed = self.failed_expectations
            lines += ["", f"## Data expectations: {len(self.expectations) - len(failed)} of {len(self.expectations)} "
                      "hold", ""]
            lines += [f"- `{e.table}.{e.column}` {e.kind.replace('_', ' ')} ({e.why}): "
                      f"{e.detail if values or e.kind != 'value_set' else e.counted}" for e in failed]
        return "\n".join(lines)


def check_drift(adapter: Adapter, store: StateStore, datasource: DatasourceConfig, *, policies: PoliciesConfig,
                caller: Scope | None = None, cases: Sequence[tuple[str, str]] = (), sample_rows: int = 100_000,
                expectations: bool = True) -> DriftReport:
    """The drift of one datasource against its live build, cut to `caller`'s scope (None: everything)."""
    ds = datasource.id
    live = store.live_build(ds)
    before = store.snapshot(ds, live.fingerprint) if live is not None and live.fingerprint else None
    if live is None or before is None:
        return DriftReport(datasource_id=ds, status="not_indexed",
                           message="No live index build to compare with: run `nl2sql index build`.")
    try:
        plan = plan_build(adapter, store)
    except NL2SQLError as exc:
        return DriftReport(datasource_id=ds, status="failed", build_id=live.build_id, message=str(exc))
    readable: Callable[[str], bool] = (lambda table: True) if caller is None else (
        lambda table: allows_table(caller, table))
    queries, examples = datasource.verified_queries, datasource.example_questions
    reads = [columns_read(q.sql, adapter.dialect, before) for q in queries]  # each statement parsed once
    example_reads = [columns_read(q.sql, adapter.dialect, before) for q in examples]

    def visible_impact(curated: Sequence[VerifiedQueryConfig] | Sequence[ExampleQuestionConfig],
                       read: list[Read | None]) -> list[QueryImpact]:
        """The impacted ones whose every table the caller may read."""
        shown = {i for i, r in enumerate(read) if r is not None and all(readable(t) for t in r[0])}
        return [q for q in verified_impact(curated, read, diff) if q.position in shown]

    profiles = _profiles(store.entries(live.build_id))
    diff = _confirmed_renames(plan.diff, adapter, plan.snapshot, profiles, sample_rows)
    impact = Impact(
        verified_queries=visible_impact(queries, reads),
        example_questions=visible_impact(examples, example_reads),
        policy_patterns=stale_patterns(policies, ds, before, plan.snapshot) if caller is None or caller.is_admin
        else [],
        eval_cases=broken_cases(cases, diff, before, adapter.dialect, _runs(adapter), readable))
    results: list[ExpectationResult] = []
    if expectations:
        read_by_verified = set().union(*(read[1] for read in reads if read is not None))
        expected = [e for e in expectations_for(before, profiles, read_by_verified)
                    if readable(e.table)]
        results = check_expectations(expected, _samples(adapter, plan.snapshot, expected, sample_rows), ds)
    report = DriftReport(datasource_id=ds, status="unchanged", build_id=live.build_id, diff=diff.scoped(readable),
                         impact=impact, expectations=results)
    if not report.diff.empty or report.failed_expectations or not impact.empty:
        report.status = "drifted"
    return report


def _confirmed_renames(diff: SchemaDiff, adapter: Adapter, live: SchemaSnapshot, profiles: Sequence[ColumnProfile],
                       sample_rows: int) -> SchemaDiff:
    """The diff with each rename whose old column's recorded values the new column no longer holds any of read
    as a column dropped and one added again (a rename of a column without recorded values stands on its type)."""
    recorded = {(table_key(p.schema_name, p.table), p.column.lower()): p.sample_values for p in profiles}
    kept = []
    for rename in diff.renamed_columns:
        values = recorded.get((rename.table.lower(), rename.before.lower()))
        schema, _, name = rename.table.rpartition(".")
        info = live.table(name, schema or None)
        if values and info is not None:
            try:
                sample = adapter.sample_columns(info, [rename.after], sample_rows=sample_rows)
            except NL2SQLError:
                sample = None
            if sample is not None and not {str(v) for v in sample[rename.after] if v is not None} & set(values):
                continue
        kept.append(rename)
    return diff.model_copy(update={"renamed_columns": kept})


def _runs(adapter: Adapter) -> RunCheck:
    """Whether a statement still runs (one row fetched): None, or the database's complaint in one line."""
    def run(sql: str) -> str | None:
        try:
            adapter.execute(sql, row_limit=1, timeout_s=60)
        except NL2SQLError as exc:
            return f"{exc.code}: {exc.message}".splitlines()[0]
        return None

    return run


def _profiles(entries: Sequence[Entry]) -> list[ColumnProfile]:
    """The profile the live build recorded on its column entries."""
    out = []
    for entry in entries:
        if entry.kind != "column" or entry.table is None or entry.column is None:
            continue
        schema, _, name = entry.table.rpartition(".")
        meta = entry.metadata
        out.append(ColumnProfile(table=name, schema_name=schema or None, column=entry.column,
                                 type=str(meta.get("type", "")), distinct_count=meta.get("distinct"),
                                 null_share=meta.get("null_share"), sample_values=meta.get("samples") or []))
    return out


def _samples(adapter: Adapter, live: SchemaSnapshot, expected: Sequence[Expectation],
             sample_rows: int) -> dict[str, pd.DataFrame]:
    """A sample of each expected table's live columns that the expectations name (a column gone is left out:
    its expectations fail on its absence); a table gone or unreadable has no sample."""
    wanted: dict[str, list[str]] = {}
    for expectation in expected:
        wanted.setdefault(expectation.table, [])
        wanted[expectation.table] += [c for c in expectation.columns if c not in wanted[expectation.table]]
    frames: dict[str, pd.DataFrame] = {}
    for key, columns in wanted.items():
        info = next((t for t in live.tables if table_key(t.schema_name, t.name) == key), None)
        if info is None:
            continue
        present = {c.name.lower(): c.name for c in info.columns}
        names = [present[c.lower()] for c in columns if c.lower() in present]
        try:
            frames[key] = adapter.sample_columns(info, names, sample_rows=sample_rows)
        except NL2SQLError:
            continue
    return frames


def diff_lines(diff: SchemaDiff) -> list[str]:
    """The diff as one markdown bullet per change."""
    lines = [f"- table added: `{t}`" for t in diff.added_tables]
    lines += [f"- table dropped: `{t}`" for t in diff.removed_tables]
    lines += [f"- column renamed: `{r.table}.{r.before}` → `{r.table}.{r.after}`" for r in diff.renamed_columns]
    lines += [f"- column added: `{c}`" for c in diff.unrenamed_added_columns()]
    lines += [f"- column dropped: `{c}`" for c in diff.unrenamed_removed_columns()]
    lines += [f"- column changed: `{c.table}.{c.column}` {c.before} → {c.after}" for c in diff.changed_columns]
    lines += [f"- primary key changed: `{k.table}` ({', '.join(k.before)}) → ({', '.join(k.after)})"
              for k in diff.changed_primary_keys]
    lines += [f"- foreign key added: `{fk}`" for fk in diff.added_foreign_keys]
    lines += [f"- foreign key dropped: `{fk}`" for fk in diff.removed_foreign_keys]
    lines += [f"- columns reordered: `{t}`" for t in diff.reordered_columns]
    return lines
