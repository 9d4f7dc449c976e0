"""The ask flow: a question's declared steps (`pipeline/declaration.py`), each run as a Prefect task.

The flow run is the run's scope: its id is the trace id, and every event is forwarded to
Prefect as `nl2sql.<name>` related to it. Its final state: Completed whenever a QueryResult
was built — including refused, failed, unanswerable and stopped questions, whose status is on the
result — and Failed only for an engine fault (an exception no step could turn into a result).
Follow a question's path from `ask` below: start_run → drive (the declaration) → finish_run.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import math
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.exceptions import FlowPauseTimeout, Pause
from prefect.flow_runs import pause_flow_run, suspend_flow_run
from prefect.input import RunInput
from prefect.logging import get_run_logger
from prefect.runtime import deployment, flow_run
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
from pydantic import Field, SecretStr, ValidationError

from nl2sql.blocks import load_datasource_url, load_llm_block
from nl2sql.config import Config, config_path
from nl2sql.errors import EngineFault, NL2SQLError
from nl2sql.events import Event
from nl2sql.events.prefect_events import forward_to_prefect
from nl2sql.events.prefect_logs import guard_prefect_logs
from nl2sql.hooks import ApprovalAnswer, ApprovalRequest
from nl2sql.hooks.approval import ApprovalRejected, check_approver
from nl2sql.pipeline.result import QueryResult
from nl2sql.pipeline.run import drive, fail_run, finish_run, start_run
from nl2sql.pipeline.runtime import RunContext, Runtime
from nl2sql.pipeline.state import RunState, pin_state, restore_state
from nl2sql.pipeline.words import ROWS_READY, SOURCE_WORDS, step_words
from nl2sql.plan.generate import readable_sql
from nl2sql.policies.users import acting_role
from nl2sql.project import load_project
from nl2sql.tasks.ask import call_step_task, submit_sub_queries

#: Process-local listeners of every question's events (the CLI's live display).
ASK_LISTENERS: list[Callable[[Event], None]] = []
_runtimes: dict[tuple[str, float], Runtime] = {}
_runtimes_lock = threading.Lock()
NAME_CHARS = 80
log = logging.getLogger("nl2sql.flows.ask")


def runtime_for(config: str | None, loaded: Config | None = None) -> Runtime:
    """The process's runtime for a configuration file (rebuilt when the file changes); `loaded` is that file
    already loaded and checked by the caller (the CLI), so it is not read a second time."""
    path = Path(config_path(config)).resolve()
    key = (str(path), path.stat().st_mtime if path.exists() else 0.0)
    with _runtimes_lock:
        if key not in _runtimes:
            for old in [k for k in _runtimes if k[0] == key[0]]:
                _runtimes.pop(old).close()
            runtime = Runtime(loaded or load_project(path), block_loader=load_datasource_url,
                              llm_block_loader=load_llm_block, forward=forward_to_prefect)
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


def artifact_key(kind: str, run_id: object) -> str:
    """A run's own artifact key, in the characters Prefect allows (lowercase letters, digits, dashes)."""
    return re.sub(r"[^a-z0-9-]+", "-", f"{kind}-{run_id}".lower()).strip("-")


def _table(columns: list[str], rows: list[list[Any]]) -> list[str]:
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
            *["| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in rows]]


def _count(total: int, truncated: bool) -> str:
    return f"{total} row{'' if total == 1 else 's'}" + (" (truncated)" if truncated else "")


#: What the artifact says where the project keeps answers and rows out of Prefect.
ROWS_KEPT_OUT = ("_The answer and the rows are kept out of Prefect on this project (`settings.prefect.artifact_rows` "
                 "is off): ask with `nl2sql ask`, or see docs/security.md before turning it on._")


def result_markdown(result: QueryResult, *, rows: bool = False, dialects: dict[str, str] | None = None) -> str:
    """The flow run's artifact, for a person: the question, the answer, the SQL laid out on short lines, columns and
    row counts, and codes of errors and warnings. The answer, the first rows and the messages (which may quote
    values) only with `rows` (settings.prefect.artifact_rows); the rows are a table artifact of their own too."""
    dialects = dialects or {}
    lines = [f"# {result.question}", ""]
    if rows and result.answer.content:
        lines += [f"**Answer:** {result.answer.content}", ""]
    elif not rows:
        lines += [ROWS_KEPT_OUT, ""]
    lines += [f"**Status:** {result.status}", ""]
    for sq in result.sub_queries:
        source = f" · {SOURCE_WORDS.get(sq.source or '', 'generated')}" if sq.sql else ""
        lines += [f"## {sq.id} · {sq.datasource_id}{source}", ""]
        if sq.question and len(result.sub_queries) > 1:
            lines += [f"_{sq.question}_", ""]
        if sq.sql:
            lines += ["```sql", readable_sql(sq.sql, dialects.get(sq.datasource_id)), "```", ""]
        if sq.columns:
            lines += [*_table(sq.columns, sq.rows[:10]), ""] if rows else [f"Columns: {', '.join(sq.columns)}", ""]
        if sq.total_rows is not None:
            lines += [_count(sq.total_rows, sq.truncated), ""]
        if sq.error:
            lines += [f"**Error:** {sq.error.code}" + (f": {sq.error.message}" if rows else ""), ""]
    if result.combined is not None:
        lines += [f"## Combined ({result.combined.kind})", ""]
        if rows:
            lines += [*_table(result.combined.columns, result.combined.rows[:10]), ""]
        lines += [_count(result.combined.total_rows, result.combined.truncated), ""]
    lines += [f"- ✗ {e.code}" + (f": {e.message}" if rows else "") for e in result.errors]
    lines += [f"- ⚠ {w.code}" + (f": {w.message}" if rows else "") for w in result.warnings]
    return "\n".join(lines)


def result_table(result: QueryResult) -> tuple[list[dict[str, Any]], str] | None:
    """The rows a person asked for as a table artifact's records (the combined result, else the one sub-query's
    preview rows), values as JSON takes them; and what they are. None when there are no rows to show."""
    from pydantic_core import to_jsonable_python

    if result.combined is not None:
        columns, found, total = result.combined.columns, result.combined.rows, result.combined.total_rows
    elif len(result.sub_queries) == 1 and result.sub_queries[0].columns:
        sq = result.sub_queries[0]
        columns, found, total = sq.columns, sq.rows, sq.total_rows or len(sq.rows)
    else:
        return None
    return table_records(columns, [[to_jsonable_python(v, fallback=str) for v in row] for row in found], total)


def table_records(columns: list[str], rows: list[list[Any]], total: int) -> tuple[list[dict[str, Any]], str]:
    """Rows as a table artifact's records, and what they are ("The first 20 of 347 rows")."""
    records = [dict(zip(columns, row, strict=False)) for row in rows]
    return records, f"The first {len(rows)} of {_count(total, False)}" if total > len(rows) else _count(total, False)


def create_rows_artifact(records: list[dict[str, Any]], description: str, flow_run_id: str) -> None:
    """The rows' table artifact, of the flow run itself even when the answer's task run makes it: the run's
    Artifacts tab shows it beside the answer, under "Flow run", as a person looks for it."""
    from prefect.artifacts import TableArtifact
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import ArtifactCreate

    key = artifact_key("rows", flow_run_id)
    data = TableArtifact(key=key, table=records).format(_sync=True)  # type: ignore[call-arg]  # as Prefect's own create
    with get_client(sync_client=True) as client:
        client.create_artifact(ArtifactCreate(key=key, type="table", description=description, data=data,
                                              flow_run_id=UUID(flow_run_id)))


def _rows_ready(logger: Any, event: Event, trace_id: str, with_rows: bool, shown: list[str]) -> None:
    """The SQL in the run's log, and (with settings.prefect.artifact_rows) the rows' table artifact, as soon as the
    rows exist: a person watching the run sees them before the answer in words is written."""
    if event.name != ROWS_READY:
        return
    data = event.data
    for sq in data["sub_queries"]:
        logger.info("SQL on %s: %s", sq["datasource_id"], sq["sql"])
    logger.info("Rows ready: %s; the answer in words follows.", _count(int(data["total_rows"]), False))
    if with_rows and data["columns"] and data["rows"]:
        create_rows_artifact(*table_records(data["columns"], data["rows"], int(data["total_rows"])), trace_id)
        shown.append(trace_id)


def _log_step(logger: Any, event: Event) -> None:
    """A finished step as a line of the run's log, in the CLI's words; an error by its code only (messages may
    quote values, and the run's logs go to Prefect's API)."""
    data = event.data
    words = step_words(str(data["node"]), data.get("sub_query_id"))
    if data.get("ok"):
        logger.info("✓ %s (%.0f ms)", words, data.get("duration_ms") or 0)
    else:
        logger.warning("✗ %s: %s", words, data.get("error_code") or "failed")


class ApprovalInput(RunInput):
    """An approver's answer: approve (run the SQL) or not, who approves, the approval token, in which role.

    Every field may be left empty here: the engine, not the form, decides whether an answer counts, and one that
    does not leaves the run waiting for another."""

    approve: bool = Field(default=False, description="Approve: run this SQL. Leave off to deny it.")
    approver: str = Field(default="", description="Your user id.")
    token: SecretStr = Field(default=SecretStr(""), description="Your approval token (needed when policies.users "
                             "is configured; checked against its hash, never kept).")
    role: str = Field(default="", description="The role you approve in: one of the approver roles above (empty: "
                      "your first approver role, when policies.users is configured).")
    comment: str = Field(default="", description="Why (kept in the audit log).")
    request_id: str = Field(default="", description="The request approved (filled in; do not change).")
    sql_sha256: str = Field(default="", description="The SHA-256 of the SQL approved (filled in; do not change).")


def approval_form(request: ApprovalRequest) -> type[ApprovalInput]:
    """The Resume form of one request. The request (who asked, the question, the reason, the SQL, the approver
    roles) is the first field's description: the UI shows field descriptions inside the form, above the fields,
    where the form's own description is squeezed out of the dialog once the fields fill it."""
    from pydantic import create_model

    described = create_model(  # type: ignore[call-overload]
        "ApprovalInput", __base__=ApprovalInput,
        approve=(bool, Field(default=False, description=f"{request.markdown()}\n\n**Approve** runs this SQL; "
                             "leave it off to deny it.")))
    return described.with_initial_data(description=f"### Approval needed: {request.reason}",
                                       request_id=request.id, sql_sha256=request.sql_sha256)


def approval_key(request: ApprovalRequest, attempt: int = 0) -> str:
    """The pause key of a request's `attempt`-th wait: the same on a resumed run, so its answers are found again
    in order, and a new one after each answer that did not count."""
    return f"approval-{request.id[:32]}" + (f"-{attempt}" if attempt else "")


def _forget_answer(flow_run_id: str, state_name: str, key: str) -> None:
    """Delete an answer from the Prefect API once read: it holds the approver's token."""
    from prefect import get_client
    from prefect.input.run_input import keyset_from_base_key

    try:
        with get_client(sync_client=True) as client:
            client.delete_flow_run_input(flow_run_id, keyset_from_base_key(f"{state_name}-{key}")["response"])
    except Exception as exc:  # best effort: an answer already gone is fine
        log.debug("could not delete the answer under %s: %s", key, exc)


def wait_for_answer(ctx: RunContext, state: RunState, request: ApprovalRequest) -> ApprovalAnswer | None:
    """Pause (or, under a deployment, suspend) until an answer that counts comes, or the timeout: each answer is
    read, deleted from the API and checked (`check_approver`); one that does not count is logged and the run
    pauses again under the next key."""
    settings = ctx.config.settings.approvals
    store, trace_id = ctx.store, ctx.trace.trace_id
    approver_roles = list(ctx.hooks.binding(request.hook).approver_roles)
    form = approval_form(request)
    suspending = bool(deployment.get_id())
    deadline = time.monotonic() + settings.timeout_s
    for attempt in itertools.count():
        key = approval_key(request, attempt)
        remaining = math.ceil(deadline - time.monotonic())
        try:
            if remaining <= 0:
                raise FlowPauseTimeout("no answer in time")
            if suspending:
                store.pin_run(trace_id, pin_state(state))
                given = suspend_flow_run(wait_for_input=form, timeout=settings.timeout_s, key=key)
            else:
                given = pause_flow_run(wait_for_input=form, timeout=remaining, poll_interval=settings.poll_interval_s,
                                       key=key)
        except FlowPauseTimeout:
            store.resolve_approval(trace_id, request.id, "timed_out")
            return None
        except ValidationError:
            given, why = None, "it does not fit the form"
        _forget_answer(trace_id, "suspended" if suspending else "paused", key)
        if given is not None:
            try:
                role = check_approver(request, approve=given.approve, approver=given.approver, role=given.role,
                                      run_id=trace_id, token=given.token.get_secret_value(),
                                      approver_roles=approver_roles,
                                      policies=ctx.config.policies,
                                      allow_self_approval=settings.allow_self_approval)
            except ApprovalRejected as exc:
                why = exc.message
            else:
                answer = ApprovalAnswer(approve=given.approve, approver=given.approver.strip(), role=role,
                                        comment=given.comment, request_id=given.request_id,
                                        sql_sha256=given.sql_sha256)
                store.resolve_approval(trace_id, request.id, "approved" if answer.approve else "denied",
                                       approver=answer.approver, role=answer.role, reason=answer.comment or None)
                return answer
        get_run_logger().warning("An answer to approval request %s… did not count (%s); the run waits for "
                                 "another.", request.id[:16], why)
    return None  # pragma: no cover  (the loop ends by returning)


def wait_for_approvers(ctx: RunContext, state: RunState, requests: list[ApprovalRequest]) -> dict[str, Any]:
    """Wait for an answer to each request (`wait_for_answer`); the engine then checks the request id and SQL
    hash of each one that counted."""
    answers: dict[str, ApprovalAnswer | None] = {}
    for request in requests:
        ctx.store.save_approval(ctx.trace.trace_id, request.id, request.model_dump())
        answers[request.id] = wait_for_answer(ctx, state, request)
    return answers


@flow(name="ask", flow_run_name=_run_name, log_prints=False)
def ask(question: str, role: str | None = None, user_id: str | None = None, datasource_id: str | None = None,
        execute: bool = True, config: str | None = None, artifact: bool = True, in_words: bool = True) -> QueryResult:
    """Answer a question for a role: every step a task run, the SQL and row counts as the run's artifact (the
    answer and rows too with settings.prefect.artifact_rows)."""
    guard_prefect_logs()
    role, user_id, datasource_id = role or None, user_id or None, datasource_id or None  # the run form's empty ""
    runtime = runtime_for(config)
    role = acting_role(runtime.config.policies, user_id, role)  # with policies.users: the user's own role only
    trace_id = str(flow_run.get_id())
    ctx, state = start_run(runtime, question, roles=[role] if role else [], user_id=user_id,
                           datasource_id=datasource_id, execute=execute, in_words=in_words, trace_id=trace_id)
    pinned = runtime.store.pinned_run(trace_id)
    if pinned is not None:  # resumed after a suspension: the decisions made before it stand
        restore_state(state, pinned)
    logger = get_run_logger()
    logger.info("Asked by %s as %s: %s", user_id or "(no user)", role or "(default role)", question)
    ctx.trace.follow(lambda event: _log_step(logger, event), names=["node.finished"])
    with_rows = runtime.config.settings.prefect.artifact_rows
    shown: list[str] = []  # the rows' table artifact, once made before the answer in words
    if artifact:
        ctx.trace.askers.append(lambda event: _rows_ready(logger, event, trace_id, with_rows, shown))
    try:
        with ctx.trace.entered():
            drive(ctx, state, call_step_task, submit_sub_queries, approve=wait_for_approvers)
            result = finish_run(ctx, state)
    except Pause:  # suspended for an approver: the run goes on in a later process, from its pinned state
        raise
    except BaseException as exc:
        fail_run(ctx, state, exc)
        if isinstance(exc, NL2SQLError) or not isinstance(exc, Exception):
            raise
        raise EngineFault(exc) from exc  # what Prefect keeps as the run's state message names the type only
    logger.info("Finished: %s%s", result.status, f". {result.answer.content}" if with_rows and result.answer.content
                else "")
    if artifact:
        dialects = {sq.datasource_id: runtime.catalog.get(sq.datasource_id).dialect for sq in result.sub_queries
                    if sq.sql and sq.datasource_id in runtime.catalog.ids}
        create_markdown_artifact(result_markdown(result, rows=with_rows, dialects=dialects),
                                 key=artifact_key("answer", trace_id),
                                 description="The answer, SQL and rows" if with_rows else "The question's SQL and "
                                 "row counts (rows only with settings.prefect.artifact_rows)")
        table = result_table(result) if with_rows and not shown else None
        if table is not None and table[0]:
            create_rows_artifact(*table, trace_id)
    return result


atexit.register(close_runtimes)
