"""What a schema change breaks: verified queries and example questions that read a dropped or changed table or
column, policy patterns that no longer match any live table, eval cases whose gold SQL no longer runs.

Names are compared without regard to case, as SQL names are. A column the SQL does not qualify is counted against
every table the statement reads that had it, so an ambiguous reading errs towards reporting.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, Field
from sqlglot import exp

from nl2sql.config.models import ExampleQuestionConfig, PoliciesConfig, VerifiedQueryConfig
from nl2sql.datasources.guard import guard_sql, tables_read
from nl2sql.datasources.models import SchemaSnapshot
from nl2sql.errors import NL2SQLError
from nl2sql.policies.scope import pattern_matches
from nl2sql.schema.snapshot import SchemaDiff, table_key

#: (sql) → None when the statement runs on the live database, else why not (one line, no rows).
RunCheck = Callable[[str], str | None]
#: What a statement reads: its tables and its (table, column) pairs, named as the diff names them (lower case).
Read = tuple[list[str], set[tuple[str, str]]]


class QueryImpact(BaseModel):
    """A verified query (or an example question) the change breaks, and why."""

    position: int = Field(description="Its place in the datasource's verified_queries (or example_questions), "
                          "from 0.")
    question: str
    tables: list[str]
    reasons: list[str]


class PatternImpact(BaseModel):
    """A policy pattern that matched a table of the live build and matches none of the live schema."""

    role: str
    kind: Literal["allow", "deny"]
    pattern: str


class CaseImpact(BaseModel):
    """An eval case whose gold SQL reads a changed table and no longer runs."""

    case_id: str
    tables: list[str]
    reason: str


class Impact(BaseModel):
    """Everything a schema change breaks in one datasource."""

    verified_queries: list[QueryImpact] = Field(default_factory=list)
    example_questions: list[QueryImpact] = Field(default_factory=list)
    policy_patterns: list[PatternImpact] = Field(default_factory=list)
    eval_cases: list[CaseImpact] = Field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Whether nothing is impacted."""
        return not (self.verified_queries or self.example_questions or self.policy_patterns or self.eval_cases)

    def counts(self) -> dict[str, int]:
        """How many of each (what an event may carry)."""
        return {"verified_queries": len(self.verified_queries), "example_questions": len(self.example_questions),
                "policy_patterns": len(self.policy_patterns), "eval_cases": len(self.eval_cases)}


def columns_read(sql: str, dialect: str, snapshot: SchemaSnapshot) -> Read | None:
    """The tables a statement reads and its (table, column) pairs, named as the snapshot's diff names them (lower
    case); None when the guard refuses the statement."""
    try:
        tree = guard_sql(sql, dialect)
    except NL2SQLError:
        return None
    tables = [_resolved(snapshot, t.name, t.schema) for t in tables_read(tree)]
    aliases = {(node.alias_or_name or "").lower(): _resolved(snapshot, node.name, node.db or None)
               for node in tree.find_all(exp.Table)}
    had = {table_key(info.schema_name, info.name): {c.name.lower() for c in info.columns} for info in snapshot.tables}
    pairs: set[tuple[str, str]] = set()
    for column in tree.find_all(exp.Column):
        name = column.name.lower()
        if column.table:
            pairs.add((aliases.get(column.table.lower(), column.table.lower()), name))
        else:
            pairs |= {(t, name) for t in tables if name in had.get(t, ())}
    return tables, pairs


def verified_impact(queries: Sequence[VerifiedQueryConfig] | Sequence[ExampleQuestionConfig],
                    reads: Sequence[Read | None], diff: SchemaDiff) -> list[QueryImpact]:
    """The verified queries (or example questions) that read a table or column the diff drops or changes, with a
    reason for each (`reads`: each query's `columns_read`)."""
    # keyed in lower case (how statements are read), told in the diff's spelling (the table's own case)
    dropped_tables = {t.lower(): t for t in diff.removed_tables}
    renamed = {(r.table.lower(), r.before.lower()): f"{r.table}.{r.before}, which was renamed to {r.table}.{r.after}"
               for r in diff.renamed_columns}
    dropped = {key: f"{c}, which was dropped" for c in diff.removed_columns
               if (key := tuple(c.lower().rsplit(".", 1))) not in renamed}
    changed = {(c.table.lower(), c.column.lower()): f"{c.table}.{c.column}, whose type changed ({c.before} → {c.after})"
               for c in diff.changed_columns}
    out = []
    for position, (query, read) in enumerate(zip(queries, reads, strict=True)):
        if read is None:
            continue
        tables, pairs = read
        pairs = pairs | {tuple(p.column.lower().rsplit(".", 1)) for p in query.parameters.values()  # type: ignore[misc]
                         if p.column and "." in p.column}
        reasons = [f"reads table {dropped_tables[t]}, which was dropped" for t in tables if t in dropped_tables]
        for found in (renamed, dropped, changed):
            reasons += [f"reads {found[pair]}" for pair in sorted(pairs) if pair in found]
        if reasons:
            out.append(QueryImpact(position=position, question=query.question, tables=tables, reasons=reasons))
    return out


def stale_patterns(policies: PoliciesConfig, datasource_id: str, before: SchemaSnapshot,
                   after: SchemaSnapshot) -> list[PatternImpact]:
    """The allow and deny patterns naming tables of this datasource that matched a table of `before` and match
    none of `after` (a table renamed or dropped under a rule that still names it)."""
    def matches_any(pattern: str, snapshot: SchemaSnapshot) -> bool:
        return any(pattern_matches(pattern, datasource_id, t.name, t.schema_name) for t in snapshot.tables)

    out = []
    for role, rules in sorted(policies.roles.items()):
        for kind, patterns in (("allow", rules.allow), ("deny", rules.deny)):
            for pattern in patterns:
                if "." in pattern and matches_any(pattern, before) and not matches_any(pattern, after):
                    out.append(PatternImpact(role=role, kind=kind, pattern=pattern))  # type: ignore[arg-type]
    return out


def broken_cases(cases: Iterable[tuple[str, str]], diff: SchemaDiff, before: SchemaSnapshot, dialect: str,
                 run: RunCheck, readable: Callable[[str], bool] = lambda table: True) -> list[CaseImpact]:
    """The eval cases, given as (id, gold SQL), that read only `readable` tables, one the diff touches among them,
    and whose SQL no longer runs."""
    touched = {t.lower() for t in diff.changed_tables()}
    out = []
    for case_id, sql in cases:
        read = columns_read(sql, dialect, before)
        if read is None or not touched & set(read[0]) or not all(readable(t) for t in read[0]):
            continue
        if (why := run(sql)) is not None:
            out.append(CaseImpact(case_id=case_id, tables=read[0], reason=why))
    return out


def _resolved(snapshot: SchemaSnapshot, name: str, schema: str | None) -> str:
    """A table as the statement names it, as the snapshot's diff names it (its name as written when unknown)."""
    info = snapshot.table(name, schema)
    return table_key(info.schema_name, info.name) if info else table_key(schema, name)
