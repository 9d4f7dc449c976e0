"""The event catalog: one strict pydantic model per event name, with `stream` and `audit` flags.

Events carry no rows and no secrets: a result is described by its shape (columns, row count),
never its values, and a refusal never names the refused table. `stream` events reach a caller
watching a question (the CLI, an MCP client); `audit` events are written by the audit observer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from nl2sql.errors import UnknownNameError


class EventData(BaseModel):
    """Base of every event's data: strict, so a stray field fails loudly."""

    model_config = ConfigDict(extra="forbid")


class IndexStarted(EventData):
    """A datasource's index build began."""

    datasource_id: str
    full: bool = False


class IndexSwapped(EventData):
    """A new build is live (the previous one, if any, is replaced)."""

    datasource_id: str
    build_id: str
    replaced_build_id: str | None
    counts: dict[str, int]
    embedded: int
    cached: int
    changed_tables: int


class IndexFailed(EventData):
    """A build failed; the previous build (if any) stays live."""

    datasource_id: str
    message: str


class IndexColumnFailed(EventData):
    """One column could not be profiled; the message never quotes a value."""

    datasource_id: str
    table: str
    column: str
    stage: str
    message: str


class DatasourceFailed(EventData):
    """A datasource could not be reached or reflected."""

    datasource_id: str
    message: str
    fix: str | None = None


# --- a question's run ---------------------------------------------------------------------------


RunStatusName = Literal["success", "plan_only", "error", "needs_approval", "stopped"]


class RunStarted(EventData):
    """A question's run began."""

    question: str
    user_id: str | None = None
    roles: list[str]
    datasource_id: str | None = None
    execute: bool = True


class RunFinished(EventData):
    """A question's run ended with a result (its status may still be error, refused or stopped)."""

    status: RunStatusName
    error_codes: list[str] = Field(default_factory=list)
    warning_codes: list[str] = Field(default_factory=list)
    datasources: list[str] = Field(default_factory=list)
    tables: list[str] = Field(default_factory=list)
    llm_calls: int = 0
    cost_usd: float | None = None
    duration_ms: float


class RunFailed(EventData):
    """A question's run ended by an engine fault (no result could be built)."""

    message: str
    code: str
    user_id: str | None = None
    roles: list[str] = Field(default_factory=list)


class NodeStarted(EventData):
    """A step of the run began."""

    node: str
    sub_query_id: str | None = None


class NodeFinished(EventData):
    """A step of the run finished (ok, or with an error code)."""

    node: str
    sub_query_id: str | None = None
    ok: bool = True
    error_code: str | None = None
    duration_ms: float


class ResultManifest(EventData):
    """The shape of a sub-query's (or the combined) result: columns and counts, never values."""

    sub_query_id: str | None = None
    datasource_id: str | None = None
    columns: list[str]
    total_rows: int
    truncated: bool


class AnswerDelta(EventData):
    """A piece of the streamed answer."""

    text: str


class LLMCall(EventData):
    """One model call finished (or failed)."""

    node: str
    model: str
    provider: str
    ok: bool
    error_code: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    latency_ms: float


class LLMParseRetry(EventData):
    """A structured answer did not validate and is asked again (errors are paths and messages, never the answer)."""

    node: str
    attempt: int
    errors: list[str]


class LLMChanged(EventData):
    """The models in use changed."""

    nodes: dict[str, str | None]


class PlanCacheLookup(EventData):
    """The plan cache was asked for a sub-query's plan."""

    sub_query_id: str | None = None
    datasource_id: str
    hit: bool


class PlannerCandidates(EventData):
    """The planner's candidates for a sub-query were run and one chosen by agreement of results (no rows, no SQL)."""

    sub_query_id: str | None = None
    datasource_id: str
    drawn: int
    ran: int
    groups: list[int]  # how many candidates agree on each result, largest first
    chosen: int  # 0: the planner's first answer; then its samples, in the order drawn
    failures: dict[str, int] = {}  # error code → candidates that did not read, validate or run


class RunLimitReached(EventData):
    """A question reached one of its limits (time, model calls, dollars)."""

    limit: Literal["timeout_s", "max_llm_calls", "max_cost_usd"]
    setting: str
    message: str


class PolicyDecision(EventData):
    """The role check refused something; `table` is set only in admin-visible contexts, never for the asker."""

    decision: Literal["allow", "deny"]
    step: str
    datasource_id: str | None = None
    roles: list[str]
    rule: str


class HookDecision(EventData):
    """A hook decided at one of the six points."""

    hook: str
    point: str
    decision: Literal["allow", "modify", "deny", "needs_approval", "approved", "error"]
    reason: str | None = None
    sub_query_id: str | None = None


class ApprovalRequested(EventData):
    """A statement waits for an approver."""

    request_id: str
    hook: str
    datasource_id: str
    reason: str
    sql_sha256: str
    approver_roles: list[str]
    asker: str | None = None


class ApprovalResolved(EventData):
    """An approver (or the timeout) resolved an approval request."""

    request_id: str
    outcome: Literal["approved", "denied", "timed_out"]
    approver: str | None = None
    role: str | None = None
    reason: str | None = None


class SanityFlagged(EventData):
    """A result check flagged something worth a look: its code and how many (never a value, table or column)."""

    sub_query_id: str | None = None
    code: str
    count: int = 1
    retry: bool = Field(default=False, description="The finding sent the sub-query back to the refiner.")


class SchemaDrifted(EventData):
    """A datasource's live schema or data differs from its live index build: counts only, never a table, column
    or value (the drift check's report, cut to the caller's scope, names them)."""

    datasource_id: str
    changes: dict[str, int] = Field(default_factory=dict, description="Schema changes by kind.")
    impact: dict[str, int] = Field(default_factory=dict, description="What the change breaks, by kind.")
    failed_expectations: int = 0


class RetentionPurged(EventData):
    """Old state was deleted by retention rules."""

    counts: dict[str, int]


@dataclass(frozen=True)
class EventSpec:
    """A catalog entry: the event's model, whether it streams to callers, whether it is audited."""

    name: str
    model: type[EventData]
    stream: bool = False
    audit: bool = False
    description: str = ""


CATALOG: dict[str, EventSpec] = {
    spec.name: spec
    for spec in (
        EventSpec("run.started", RunStarted, stream=True, audit=True, description="A question's run began."),
        EventSpec("run.finished", RunFinished, stream=True, audit=True, description="A question's run ended."),
        EventSpec("run.failed", RunFailed, stream=True, audit=True, description="A run ended by an engine fault."),
        EventSpec("node.started", NodeStarted, stream=True, description="A step began."),
        EventSpec("node.finished", NodeFinished, stream=True, description="A step finished."),
        EventSpec("result.manifest", ResultManifest, stream=True, description="A result's shape (no values)."),
        EventSpec("answer.delta", AnswerDelta, stream=True, description="A piece of the streamed answer."),
        EventSpec("llm.call", LLMCall, description="A model call finished."),
        EventSpec("llm.parse_retry", LLMParseRetry, description="A structured answer is asked again."),
        EventSpec("llm.changed", LLMChanged, audit=True, description="The models in use changed."),
        EventSpec("plan_cache.lookup", PlanCacheLookup, description="The plan cache was asked."),
        EventSpec("planner.candidates", PlannerCandidates,
                  description="The planner's candidates ran and one was chosen."),
        EventSpec("run.limit_reached", RunLimitReached, stream=True, audit=True, description="A limit stopped a run."),
        EventSpec("policy.decision", PolicyDecision, audit=True, description="The role check refused something."),
        EventSpec("hook.decision", HookDecision, stream=True, audit=True, description="A hook decided."),
        EventSpec("approval.requested", ApprovalRequested, stream=True, audit=True,
                  description="A statement waits for an approver."),
        EventSpec("approval.resolved", ApprovalResolved, stream=True, audit=True,
                  description="An approval request was resolved."),
        EventSpec("sanity.flagged", SanityFlagged, stream=True, description="A result check flagged something."),
        EventSpec("index.started", IndexStarted, description="A datasource's index build began."),
        EventSpec("index.swapped", IndexSwapped, audit=True, description="A new index build is live."),
        EventSpec("index.failed", IndexFailed, audit=True, description="An index build failed."),
        EventSpec("index.column_failed", IndexColumnFailed, description="A column could not be profiled."),
        EventSpec("datasource.failed", DatasourceFailed, audit=True, description="A datasource failed."),
        EventSpec("schema.drifted", SchemaDrifted, audit=True, description="A live schema drifted from its index."),
        EventSpec("retention.purged", RetentionPurged, audit=True, description="Old state was deleted."),
    )
}
#: The names a caller watching a question receives, and the names the audit observer writes.
STREAM_EVENTS = frozenset(name for name, s in CATALOG.items() if s.stream)
AUDIT_EVENTS = frozenset(name for name, s in CATALOG.items() if s.audit)
#: Events that end a question's run: exactly one of them is published per run.
TERMINAL_EVENTS = frozenset({"run.finished", "run.failed"})


class Event(BaseModel):
    """One published event: its name, validated data, and the run it belongs to."""

    name: str
    data: dict
    trace_id: str | None = None
    timestamp: float = Field(description="Seconds since the epoch.")

    def sse(self) -> str:
        """The event as one server-sent-events message (its data line is the whole event as JSON)."""
        return f"event: {self.name}\ndata: {json.dumps(self.model_dump(mode='json'), default=str)}\n\n"


def spec(name: str) -> EventSpec:
    """The catalog entry of an event name (UnknownNameError for a name not in the catalog)."""
    if name not in CATALOG:
        raise UnknownNameError("event", name, CATALOG)
    return CATALOG[name]
