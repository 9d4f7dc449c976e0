"""The typed state a question's steps read and write: the run's, and each sub-query's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from nl2sql.aggregate import Combined, CombineSpec
from nl2sql.datasources.models import ExecutionResult
from nl2sql.index.retrieve import RetrievedSchema
from nl2sql.pipeline.result import RunError, RunStatus, RunWarning
from nl2sql.plan import PlanModel
from nl2sql.verified.match import VerifiedMatch


@dataclass
class ExpectedColumn:
    """A column the decomposer expects a sub-query to return (a join key is named the same on both sides)."""

    name: str
    description: str = ""


@dataclass
class SubQuery:
    """One question for one datasource, and everything its steps produced."""

    id: str
    datasource_id: str
    question: str
    expected_columns: list[ExpectedColumn] = field(default_factory=list)
    verified: VerifiedMatch | None = None
    schema: RetrievedSchema | None = None
    plan: PlanModel | None = None
    plan_source: Literal["planner", "plan_cache", "verified"] | None = None
    schemas: dict[str, str] | None = None
    sql: str | None = None
    tables: list[str] = field(default_factory=list)
    result: ExecutionResult | None = None
    error: RunError | None = None
    attempts: int = 0
    timings_ms: dict[str, float] = field(default_factory=dict)
    prompt_chars: dict[str, int] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """Whether this sub-query ended with an error."""
        return self.error is not None


@dataclass
class RunState:
    """One question's run: what was asked, by whom, and what each step decided."""

    question: str
    roles: list[str]
    user_id: str | None = None
    datasource_id: str | None = None
    execute: bool = True
    datasource_ids: list[str] = field(default_factory=list)
    routing: dict[str, Any] | None = None
    answerability: dict[str, Any] | None = None
    sub_queries: list[SubQuery] = field(default_factory=list)
    combine: CombineSpec | None = None
    combined: Combined | None = None
    answer: str = ""
    summary: str = ""
    warnings: list[RunWarning] = field(default_factory=list)
    errors: list[RunError] = field(default_factory=list)
    status: RunStatus | None = None
    limit: dict[str, str] | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    prompt_chars: dict[str, int] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        """Whether the run already has its outcome (a refusal, an error, a stop): later steps are skipped."""
        return self.status is not None

    def end(self, status: RunStatus, error: RunError | None = None) -> None:
        """Give the run its outcome now (the first outcome wins)."""
        if self.status is None:
            self.status = status
        if error is not None:
            self.errors.append(error)
