"""The ask flow: a question's declared steps (`pipeline/declaration.py`), each run as a Prefect task.

The flow run is the run's scope: its id is the trace id, and every event is forwarded to
Prefect as `nl2sql.<name>` related to it. Its final state: Completed whenever a QueryResult
was built — including refused, failed, unanswerable and stopped questions, whose status is on the
result — and Failed only for an engine fault (an exception no step could turn into a result).
Follow a question's path from `ask` below: start_run → drive (the declaration) → finish_run.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.exceptions import FlowPauseTimeout, Pause
from prefect.flow_runs import pause_flow_run, suspend_flow_run
from prefect.input import RunInput
from prefect.runtime import deployment, flow_run
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
from pydantic import Field

from nl2sql.blocks import load_datasource_url, load_llm_block
from nl2sql.config import config_path, load_config
from nl2sql.events import Event
from nl2sql.events.prefect_events import forward_to_prefect
from nl2sql.hooks import ApprovalAnswer, ApprovalRequest
from nl2sql.pipeline.inline import run_parallel
from nl2sql.pipeline.result import QueryResult
from nl2sql.pipeline.run import drive, fail_run, finish_run, start_run
from nl2sql.pipeline.runtime import RunContext, Runtime
from nl2sql.pipeline.state import RunState, pin_state, restore_state
from nl2sql.tasks.ask import call_step_task

#: Process-local listeners of every question's events (the CLI's live display).
ASK_LISTENERS: list[Callable[[Event], None]] = []
_runtimes: dict[tuple[str, float], Runtime] = {}
_runtimes_lock = threading.Lock()
NAME_CHARS = 80


def runtime_for(config: str | None) -> Runtime:
    """The process's runtime for a configuration file (rebuilt when the file changes)."""
    path = Path(config_path(config)).resolve()
    key = (str(path), path.stat().st_mtime if path.exists() else 0.0)
    with _runtimes_lock:
        if key not in _runtimes:
            for old in [k for k in _runtimes if k[0] == key[0]]:
                _runtimes.pop(old).close()
            runtime = Runtime(load_config(path), block_loader=load_datasource_url, llm_block_loader=load_llm_block,
                              forward=forward_to_prefect)
            runtime.listeners = ASK_LISTENERS
            _runtimes[key] = runtime
        return _runtimes[key]


def close_runtimes() -> None:
    """Close the process's runtimes (observers flushed, connections closed)."""
    with _runtimes_lock:
        while _runtimes:
            _runtimes.popitem()[1].close()


def ask_here(question: str, **parameters: Any) -> QueryResult:
    """Run the ask flow in this process (the CLI, library callers): no heartbeat thread, whose shutdown costs
    a second per run; deployment runs keep theirs, which is how crashed runs are detected."""
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        return ask(question, **parameters)


def _run_name() -> str:
    question = " ".join(str(flow_run.get_parameters().get("question", "")).split())
    return question if len(question) <= NAME_CHARS else question[: NAME_CHARS - 1] + "…"


def result_markdown(result: QueryResult) -> str:
    """The run's answer, SQL and first rows, for the flow run's artifact."""
    lines = [f"# {result.question}", "", f"**Status:** {result.status}", "", result.answer.content or "", ""]
    for sq in result.sub_queries:
        lines += [f"## {sq.id} · {sq.datasource_id}", ""]
        if sq.sql:
            lines += ["```sql", sq.sql, "```", ""]
        if sq.columns:
            lines += ["| " + " | ".join(sq.columns) + " |", "|" + "---|" * len(sq.columns)]
            lines += ["| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in sq.rows[:10]]
            more = f"{sq.total_rows} rows" + (" (truncated)" if sq.truncated else "")
            lines += ["", more, ""]
    for w in result.warnings:
        lines.append(f"- ⚠ {w.code}: {w.message}")
    return "\n".join(lines)


class ApprovalInput(RunInput):
    """An approver's answer: approve (run the SQL) or not, who approves, in which role."""

    approve: bool = Field(default=False, description="Approve: run this SQL. Leave off to deny it.")
    approver: str = Field(description="Your user id.")
    role: str = Field(description="The role you approve in: one of the approver roles above.")
    comment: str = Field(default="", description="Why (kept in the audit log).")
    request_id: str = Field(description="The request approved (filled in; do not change).")
    sql_sha256: str = Field(description="The SHA-256 of the SQL approved (filled in; do not change).")


def approval_key(request: ApprovalRequest) -> str:
    """The pause key of a request: the same on a resumed run, so its answer is found again."""
    return f"approval-{request.id[:32]}"


def wait_for_approvers(ctx: RunContext, state: RunState, requests: list[ApprovalRequest]) -> dict[str, Any]:
    """Pause the flow run for each request (suspend it when a deployment runs it, freeing the worker), with a
    Resume form showing the request; the engine then checks the answer."""
    settings = ctx.config.settings.approvals
    store = ctx.runtime.store
    answers: dict[str, ApprovalAnswer | None] = {}
    for request in requests:
        store.save_approval(ctx.scope.trace_id, request.id, request.model_dump())
        form = ApprovalInput.with_initial_data(description=request.markdown(), request_id=request.id,
                                               sql_sha256=request.sql_sha256)
        try:
            if deployment.get_id():
                store.pin_run(ctx.scope.trace_id, pin_state(state))
                given = suspend_flow_run(wait_for_input=form, timeout=settings.timeout_s, key=approval_key(request))
            else:
                given = pause_flow_run(wait_for_input=form, timeout=settings.timeout_s,
                                       poll_interval=settings.poll_interval_s, key=approval_key(request))
        except FlowPauseTimeout:
            store.resolve_approval(ctx.scope.trace_id, request.id, "timed_out")
            answers[request.id] = None
            continue
        answer = ApprovalAnswer(**given.model_dump(include=set(ApprovalAnswer.model_fields)))
        store.resolve_approval(ctx.scope.trace_id, request.id, "approved" if answer.approve else "denied",
                               approver=answer.approver, role=answer.role, reason=answer.comment or None)
        answers[request.id] = answer
    return answers


@flow(name="ask", flow_run_name=_run_name, log_prints=False)
def ask(question: str, role: str | None = None, user_id: str | None = None, datasource_id: str | None = None,
        execute: bool = True, config: str | None = None, artifact: bool = True) -> QueryResult:
    """Answer a question for a role: every step a task run, the answer and SQL as an artifact."""
    runtime = runtime_for(config)
    trace_id = str(flow_run.get_id())
    ctx, state = start_run(runtime, question, roles=[role] if role else [], user_id=user_id,
                           datasource_id=datasource_id, execute=execute, trace_id=trace_id)
    pinned = runtime.store.pinned_run(trace_id)
    if pinned is not None:  # resumed after a suspension: the decisions made before it stand
        restore_state(state, pinned)
    try:
        with ctx.scope.entered():
            drive(ctx, state, call_step_task, run_parallel, approve=wait_for_approvers)
            result = finish_run(ctx, state)
    except Pause:  # suspended for an approver: the run goes on in a later process, from its pinned state
        raise
    except BaseException as exc:
        fail_run(ctx, state, exc)
        raise
    if artifact:
        create_markdown_artifact(result_markdown(result), key="answer", description="The answer, SQL and rows")
    return result


atexit.register(close_runtimes)
