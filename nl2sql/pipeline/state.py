"""The typed state a question's steps read and write: the run's, and each sub-query's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from nl2sql.aggregate import Combined, CombineSpec
from nl2sql.datasources.models import ExecutionResult
from nl2sql.hooks.approval import ApprovalRequest
from nl2sql.index.retrieve import RetrievedSchema
from nl2sql.llm.models import Message
from nl2sql.pipeline.result import RunError, RunStatus, RunWarning
from nl2sql.plan import PlanModel
from nl2sql.verified.match import VerifiedMatch


@dataclass
class ExpectedColumn:
    """A column the decomposer expects a sub-query to return (a join key is named the same on both sides)."""

    name: str
    description: str = ""


@dataclass
class Flagged:
    """A result a check sent back to the refiner, with what produced it: it stands again, with its findings as
    warnings, when no corrected plan runs."""

    plan: PlanModel | None
    plan_source: Literal["planner", "plan_cache", "verified", "seeded"] | None
    sql: str | None
    written_sql: str | None
    schemas: dict[str, str] | None
    tables: list[str]
    result: ExecutionResult
    warnings: list[RunWarning]


@dataclass
class SubQuery:
    """One question for one datasource, and everything its steps produced."""

    id: str
    datasource_id: str
    question: str
    expected_columns: list[ExpectedColumn] = field(default_factory=list)
    verified: VerifiedMatch | None = None
    retrieved: RetrievedSchema | None = None
    plan: PlanModel | None = None
    plan_source: Literal["planner", "plan_cache", "verified", "seeded"] | None = None
    schemas: dict[str, str] | None = None
    sql: str | None = None
    tables: list[str] = field(default_factory=list)
    result: ExecutionResult | None = None
    error: RunError | None = None
    attempts: int = 0
    #: In the `sql` planner format: the statement the model wrote (the one that runs is generated from the plan).
    written_sql: str | None = None
    #: The plans the refiner was shown or returned (canonical JSON): one it returns again ends the refining.
    tried_plans: set[str] = field(default_factory=set)
    #: In the `sql` planner format: the planner's prompt, which the refiner and the planner's samples continue.
    planner_messages: list[Message] = field(default_factory=list)
    #: The planner's samples drawn so far (each the seed of the next: see `steps.resampled_sql`).
    samples: int = 0
    timings_ms: dict[str, float] = field(default_factory=dict)
    prompt_chars: dict[str, int] = field(default_factory=dict)
    #: The codes of the result checks' findings sent to the refiner (each retries once), and the result the last one
    #: was found in (see `Flagged`).
    sanity_retried: set[str] = field(default_factory=set)
    #: a plan.after hook changed the plan: what the hook wrote stands (no reading against the question undoes it)
    plan_hooked: bool = False
    flagged: Flagged | None = None
    dropped: bool = False  # a hook denied it with scope sub_query; the run goes on without it
    approval: ApprovalRequest | None = None  # waiting for an approver at execute.before

    @property
    def failed(self) -> bool:
        """Whether this sub-query ended with an error (a dropped one does not fail the run)."""
        return self.error is not None and not self.dropped

    def pinned(self) -> dict[str, Any]:
        """What a resumed run needs to go on without asking any model again: the question, the plan or SQL."""
        return {"id": self.id, "datasource_id": self.datasource_id, "question": self.question,
                "expected_columns": [vars(c) for c in self.expected_columns],
                "plan": self.plan.model_dump(mode="json") if self.plan else None, "plan_source": self.plan_source,
                "sql": self.sql if self.verified else None,
                "verified": vars(self.verified) if self.verified else None}

    @classmethod
    def from_pinned(cls, data: dict[str, Any]) -> SubQuery:
        """A sub-query restored from `pinned()`."""
        return cls(id=data["id"], datasource_id=data["datasource_id"], question=data["question"],
                   expected_columns=[ExpectedColumn(**c) for c in data["expected_columns"]],
                   plan=PlanModel.model_validate(data["plan"]) if data["plan"] else None,
                   plan_source=data["plan_source"], sql=data["sql"],
                   verified=VerifiedMatch(**data["verified"]) if data["verified"] else None)


@dataclass
class RunState:
    """One question's run: what was asked, by whom, and what each step decided."""

    question: str
    roles: list[str]
    user_id: str | None = None
    datasource_id: str | None = None
    execute: bool = True
    in_words: bool = True  # the answer in words from the synthesizer model (off: a plain summary of the rows)
    sanity_checks: bool = True  # settings.pipeline.sanity_checks
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
    #: when the run's SQL, rows and answer were last ready, in ms on the run's clock (`MILESTONES`)
    milestones_ms: dict[str, float] = field(default_factory=dict)
    prompt_chars: dict[str, int] = field(default_factory=dict)
    approved: set[str] = field(default_factory=set)  # ids of approval requests an approver approved
    pending: list[ApprovalRequest] = field(default_factory=list)  # requests no approver answered in time
    resumed: bool = False  # restored from a pinned state after a suspension

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


def pin_state(state: RunState) -> dict[str, Any]:
    """The run's decisions so far (question, datasources, sub-queries with their plans, combination), for a run
    that resumes after a suspension without calling the model again."""
    return {"question": state.question, "datasource_ids": state.datasource_ids, "routing": state.routing,
            "answerability": state.answerability, "sub_queries": [sq.pinned() for sq in state.sub_queries],
            "combine": state.combine.model_dump() if state.combine else None}


def restore_state(state: RunState, pinned: dict[str, Any]) -> None:
    """Put pinned decisions back on a fresh state (the steps they came from are then skipped)."""
    state.question = pinned["question"]
    state.datasource_ids = list(pinned["datasource_ids"])
    state.routing, state.answerability = pinned["routing"], pinned["answerability"]
    state.sub_queries = [SubQuery.from_pinned(sq) for sq in pinned["sub_queries"]]
    state.combine = CombineSpec.model_validate(pinned["combine"]) if pinned["combine"] else None
    state.resumed = True
