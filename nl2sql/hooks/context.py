"""What a hook sees (`HookContext`) and what it may answer (Allow, Modify, Deny, NeedsApproval)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from nl2sql.plan import PlanModel

HookPoint = Literal["run.before", "datasources.after", "plan.after", "execute.before", "execute.after",
                    "answer.after"]


class HookContext(BaseModel):
    """A point's view of the run, built from deep copies (a hook that mutates it changes nothing in the run).
    Fields beyond the point's are None."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    point: HookPoint
    trace_id: str
    question: str
    user_id: str | None = None
    roles: list[str] = Field(default_factory=list)
    datasource_id: str | None = None
    datasource_ids: list[str] | None = None
    sub_query_id: str | None = None
    sub_query: str | None = None
    plan: PlanModel | None = None
    sql: str | None = None
    tables: list[str] | None = Field(default=None, description="datasource.table, read by the SQL")
    result: dict[str, Any] | None = Field(default=None, description="columns, total_rows, truncated — no values")
    answer: str | None = None
    estimate_rows: Callable[[], int | None] | None = Field(
        default=None, exclude=True, description="The database's estimate of the rows the SQL reads (EXPLAIN)")


class Allow(BaseModel):
    """Go on."""

    model_config = ConfigDict(extra="forbid")


class Modify(BaseModel):
    """Change the question (run.before), the datasources (datasources.after) or the plan (plan.after)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    question: str | None = None
    datasource_ids: list[str] | None = None
    plan: PlanModel | None = None


class Deny(BaseModel):
    """Stop the run (or drop the sub-query) with a reason the asker reads."""

    model_config = ConfigDict(extra="forbid")

    reason: str
    scope: Literal["run", "sub_query"] = "run"


class NeedsApproval(BaseModel):
    """Hold the statement until an approver with one of the hook's roles approves it (execute.before only)."""

    model_config = ConfigDict(extra="forbid")

    reason: str


Decision = Allow | Modify | Deny | NeedsApproval


class Hook(Protocol):
    """A hook: built from its options, called at its points with the context, answering a decision."""

    options_model: ClassVar[type[BaseModel]]
    points: ClassVar[frozenset[str]]

    @classmethod
    def from_options(cls, options: BaseModel) -> Hook: ...

    def __call__(self, ctx: HookContext) -> Decision: ...
