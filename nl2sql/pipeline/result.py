"""What a question's run returns: `QueryResult`, with its sub-queries, warnings, errors, usage and trace id."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nl2sql.hooks.approval import ApprovalRequest

RunStatus = Literal["success", "plan_only", "error", "needs_approval", "stopped"]


class RunWarning(BaseModel):
    """Something the asker should know about a result that is still given (a truncation, unjoined keys, a value
    the column does not hold…): its code, the step that found it, and a sentence for the asker."""

    model_config = ConfigDict(extra="forbid")

    code: str
    step: str
    message: str
    sub_query_id: str | None = None
    #: What exactly: a finding's table and column, a repair's path… `recovered: true` on a finding a retry fixed
    #: (the answer's data notes leave it out).
    detail: dict[str, Any] = Field(default_factory=dict)


class RunError(BaseModel):
    """Why a run (or one of its sub-queries) gave no answer: a code, a message a person can act on, the step."""

    model_config = ConfigDict(extra="forbid")

    code: str
    message: str
    node: str | None = None
    fix: str | None = None
    sub_query_id: str | None = None
    #: What exactly failed, as codes: a plan's problem codes (PLAN_INVALID) or the construct the plan language
    #: lacks (PLAN_UNSUPPORTED); empty for other errors.
    details: list[str] = Field(default_factory=list)


class SubQueryResult(BaseModel):
    """One sub-query: where it ran, its SQL, and the first rows of its result."""

    model_config = ConfigDict(extra="forbid")

    id: str
    datasource_id: str
    question: str
    source: Literal["planner", "plan_cache", "verified", "seeded"] | None = None
    sql: str | None = None
    plan: dict[str, Any] | None = None
    columns: list[str] = Field(default_factory=list)
    rows: list[list[Any]] = Field(default_factory=list, description="The first rows (settings.pipeline.preview_rows).")
    total_rows: int | None = None
    truncated: bool = False
    attempts: int = 0
    error: RunError | None = None


class Answer(BaseModel):
    """The answer in words: a one-line summary and the full text."""

    model_config = ConfigDict(extra="forbid")

    summary: str = ""
    content: str = ""


class CombinedResult(BaseModel):
    """Sub-query results combined across databases (join, compare or union)."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    columns: list[str]
    rows: list[list[Any]]
    total_rows: int
    truncated: bool


class QueryResult(BaseModel):
    """The result of asking a question."""

    model_config = ConfigDict(extra="forbid")

    trace_id: str
    question: str
    status: RunStatus
    answer: Answer = Field(default_factory=Answer)
    sub_queries: list[SubQueryResult] = Field(default_factory=list)
    combined: CombinedResult | None = None
    warnings: list[RunWarning] = Field(default_factory=list)
    errors: list[RunError] = Field(default_factory=list)
    approvals: list[ApprovalRequest] = Field(default_factory=list, description="Requests waiting for an approver.")
    usage: dict[str, Any] = Field(default_factory=dict)
    cost_usd: float | None = None
    llm_calls: int = 0
    duration_ms: float = 0.0
    model_ms: float = Field(default=0.0, description="How long the run waited for its models (a call in flight; "
                            "settings.pipeline.timeout_s does not count it).")
    time_to_sql_ms: float | None = Field(default=None, description="When the SQL that answered was written (the "
                                         "run's clock; an approver's wait not counted).")
    time_to_rows_ms: float | None = Field(default=None, description="When its rows were read.")
    time_to_answer_ms: float | None = Field(default=None, description="When the answer in words was written.")

    @property
    def ok(self) -> bool:
        """Whether the question was answered (or planned, with execute off)."""
        return self.status in ("success", "plan_only")

    def columns_and_rows(self) -> tuple[list[str], list[list[Any]]]:
        """The rows to show: the combined result, else the only (or first answered) sub-query's."""
        if self.combined is not None:
            return self.combined.columns, self.combined.rows
        for sq in self.sub_queries:
            if sq.error is None and sq.columns:
                return sq.columns, sq.rows
        return [], []
