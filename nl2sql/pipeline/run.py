"""Running the declaration: one driver for both executors, and the run's start and finish.

An executor supplies `call` (how one step runs: directly, or as a Prefect task run) and
`parallel` (how the sub-queries run side by side); everything else, from the order of steps to
the refiner loop, the error rules and the result, is here once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from nl2sql.errors import GENERIC_REFUSAL, NL2SQLError, SecurityViolation
from nl2sql.hooks import ApprovalAnswer, ApprovalRequest, approval_problem
from nl2sql.llm.models import LimitReached
from nl2sql.pipeline.declaration import ASK, Pipeline, Step
from nl2sql.pipeline.hooking import run_hook_point
from nl2sql.pipeline.result import Answer, CombinedResult, QueryResult, RunError, SubQueryResult
from nl2sql.pipeline.runtime import RunContext, Runtime, timeout_stop
from nl2sql.pipeline.state import RunState, SubQuery
from nl2sql.pipeline.steps import restore_flagged, result_rows
from nl2sql.policies.scope import role_rules

StepCall = Callable[[Step, RunContext, RunState, "SubQuery | None"], None]
#: How an executor runs the sub-queries side by side: (label, job) pairs, the label `sq1 (chinook)`.
Parallel = Callable[[Sequence[tuple[str, Callable[[], None]]]], None]
#: How an executor gets approvers' answers for waiting requests: request id → answer, or None (not in time).
Approve = Callable[[RunContext, RunState, list[ApprovalRequest]], dict[str, "ApprovalAnswer | None"]]


def no_approvers(ctx: RunContext, state: RunState, requests: list[ApprovalRequest]) -> dict[str, None]:
    """The inline executor cannot wait: every request stays pending (status needs_approval)."""
    return {r.id: None for r in requests}


def _error(exc: NL2SQLError, step: Step, sq: SubQuery | None) -> RunError:
    if isinstance(exc, SecurityViolation):  # the generic sentence, nothing else
        return RunError(code=exc.code, message=GENERIC_REFUSAL, node=step.name, sub_query_id=sq.id if sq else None)
    return RunError(code=exc.code, message=exc.message, node=exc.node or step.name, fix=exc.fix,
                    sub_query_id=sq.id if sq else None, details=exc.details)


def _stop(ctx: RunContext, state: RunState, stop: LimitReached) -> None:
    if state.limit is None:
        state.limit = {"limit": stop.limit, "setting": stop.setting, "message": stop.message}
        ctx.trace.publish("run.limit_reached", limit=stop.limit, setting=stop.setting, message=stop.message)
    state.end("stopped", RunError(code=stop.code, message=stop.message, node="limits"))


#: The moments a person waits for, by the step that reaches them: the SQL written (a verified query's, which no
#: generator writes, when it runs), the rows read, the answer in words.
MILESTONES = {"generator": ("sql",), "executor": ("sql", "rows"), "aggregator": ("rows",), "synthesizer": ("answer",)}


def invoke_step(step: Step, ctx: RunContext, state: RunState, sq: SubQuery | None = None) -> None:
    """Run one step: node events, the time limit, and its errors recorded on the state (never raised)."""
    if step.is_hook_point:
        run_hook_point(ctx, state, step.name, sq)
        return
    sub_id = sq.id if sq else None
    ctx.trace.publish("node.started", node=step.name, sub_query_id=sub_id)
    started = time.perf_counter()
    error: RunError | None = None
    try:
        remaining = ctx.trace.remaining_s()
        if remaining is not None and remaining <= 0:
            raise timeout_stop(ctx.trace.timeout_s or 0)
        step.fn(ctx, state, sq) if step.per_sub_query else step.fn(ctx, state)  # type: ignore[misc]
    except LimitReached as exc:
        error = RunError(code=exc.code, message=exc.message, node=step.name, sub_query_id=sub_id)
        _stop(ctx, state, exc)
    except NL2SQLError as exc:
        error = _error(exc, step, sq)
        if isinstance(exc, SecurityViolation):
            if step.name != "resolver":  # the resolver published its own decision
                ctx.trace.publish("policy.decision", decision="deny", step=step.name,
                                  datasource_id=sq.datasource_id if sq else None, roles=state.roles,
                                  rule="a table outside the caller's roles")
            if sq is not None:  # nothing of a refused plan is kept: it may name what the caller may not see
                sq.plan = None
                sq.sql = None
                sq.tables = []
            state.end("error", error)
        elif sq is not None:
            sq.error = error
        else:
            state.end("error", error)
    finally:
        elapsed = (time.perf_counter() - started) * 1000
        timings = sq.timings_ms if sq else state.timings_ms
        timings[step.name] = round(timings.get(step.name, 0.0) + elapsed, 2)
        if error is None and step.name in MILESTONES:  # the last time wins: a refined plan's rows are the answer's
            now = round(ctx.trace.elapsed_ms(), 2)
            for mark in MILESTONES[step.name]:
                if step.name != "executor" or mark == "rows" or mark not in state.milestones_ms:
                    state.milestones_ms[mark] = now
        ctx.trace.publish("node.finished", node=step.name, sub_query_id=sub_id, ok=error is None,
                          error_code=error.code if error else None, duration_ms=round(elapsed, 2))


def _waiting(state: RunState, sq: SubQuery) -> bool:
    return sq.approval is not None and sq.approval.id not in state.approved


def run_sub_query(pipeline: Pipeline, ctx: RunContext, state: RunState, sq: SubQuery, call: StepCall,
                  start: str | None = None) -> None:
    """One sub-query's steps in order (from `start`); a refinable error goes to the refiner, then again from
    `retry_from`; a statement waiting for an approver stops here."""
    names = [s.name for s in pipeline.sub_query]
    i = names.index(start) if start else 0
    max_retries = ctx.config.settings.pipeline.max_retries
    while i < len(pipeline.sub_query) and not state.finished:
        if pipeline.sub_query[i].applies(state, sq):
            call(pipeline.sub_query[i], ctx, state, sq)
        if _waiting(state, sq) or sq.dropped:
            return
        if sq.error is None:
            i += 1
            continue
        # a refined plan that the plan language cannot hold is refined again (the error is the refiner's to fix)
        while (sq.error is not None and sq.error.code in pipeline.refinable and sq.verified is None
               and sq.attempts < max_retries and sq.retrieved is not None and ctx.llm.configured("refiner")):
            sq.attempts += 1
            call(pipeline.refiner, ctx, state, sq)
        if sq.error is None:
            i = names.index(pipeline.retry_from)
            continue
        if sq.flagged is not None and not state.finished:  # no corrected plan ran: the checked result stands
            restore_flagged(state, sq)
        return


def settle_approvals(pipeline: Pipeline, ctx: RunContext, state: RunState, call: StepCall, parallel: Parallel,
                     approve: Approve) -> None:
    """Ask for approvers' answers to waiting statements; go on with the approved ones, end the run on a denial
    or an answer that cannot stand, leave it needs_approval when none came in time."""
    waiting = [sq for sq in state.sub_queries if _waiting(state, sq)]
    if not waiting or state.finished:
        return
    with ctx.trace.waiting_for_a_person():
        answers = approve(ctx, state, [sq.approval for sq in waiting])  # type: ignore[misc]
    go_on = []
    for sq in waiting:
        request = sq.approval
        assert request is not None
        answer = answers.get(request.id)
        if answer is None:
            state.pending.append(request)
            ctx.trace.publish("approval.resolved", request_id=request.id, outcome="timed_out")
            continue
        problem = approval_problem(request, answer, list(ctx.hooks.binding(request.hook).approver_roles))
        if problem is None and answer.approve:
            state.approved.add(request.id)
            ctx.trace.publish("approval.resolved", request_id=request.id, outcome="approved", approver=answer.approver,
                              role=answer.role, reason=answer.comment or None)
            go_on.append(sq)
            continue
        reason = problem or (f"denied by {answer.approver}" + (f": {answer.comment}" if answer.comment else ""))
        ctx.trace.publish("approval.resolved", request_id=request.id, outcome="denied", approver=answer.approver,
                          role=answer.role, reason=reason)
        state.end("error", RunError(code="HOOK_DENIED", message=f"The statement was not approved: {reason}.",
                                    node="execute.before", sub_query_id=sq.id))
    if state.pending and not state.finished:
        state.end("needs_approval")
    if go_on and not state.finished:
        parallel([(sub_query_label(sq), partial(run_sub_query, pipeline, ctx, state, sq, call, "execute.before"))
                  for sq in go_on])


def sub_query_label(sq: SubQuery) -> str:
    """How a sub-query is named in task runs and logs: `sq1 (chinook)`."""
    return f"{sq.id} ({sq.datasource_id})"


def drive(ctx: RunContext, state: RunState, call: StepCall, parallel: Parallel, pipeline: Pipeline = ASK,
          approve: Approve = no_approvers) -> None:
    """Run the whole declaration over the state."""
    for step in pipeline.before:
        if state.finished:
            return
        if step.applies(state):
            call(step, ctx, state, None)
    if state.finished:
        return
    parallel([(sub_query_label(sq), partial(run_sub_query, pipeline, ctx, state, sq, call))
              for sq in state.sub_queries])
    settle_approvals(pipeline, ctx, state, call, parallel, approve)
    if state.finished:
        return
    if state.sub_queries and all(sq.dropped for sq in state.sub_queries):
        state.end("error", next(sq.error for sq in state.sub_queries if sq.error))
        return
    failed = [sq for sq in state.sub_queries if sq.failed]
    if failed and not state.finished:
        for sq in failed:
            state.errors.append(sq.error)  # type: ignore[arg-type]
        state.end("error")
    for step in pipeline.after:
        if state.finished:
            return
        if step.applies(state):
            call(step, ctx, state, None)


def check_roles(runtime: Runtime, roles: Sequence[str]) -> list[str]:
    """The caller's roles (the default role when none), each known (UnknownNameError otherwise)."""
    names = list(roles) or [runtime.config.policies.default_role]
    for name in names:
        role_rules(runtime.config.policies, name)
    return names


def start_run(runtime: Runtime, question: str, *, roles: Sequence[str], user_id: str | None = None,
              datasource_id: str | None = None, execute: bool = True, in_words: bool = True,
              trace_id: str | None = None) -> tuple[RunContext, RunState]:
    """Open the run's trace and model client, and publish run.started."""
    roles = check_roles(runtime, roles)
    if datasource_id is not None:
        runtime.config.datasource(datasource_id)
    trace = runtime.open_trace(trace_id)
    ctx = RunContext(runtime, trace, runtime.llm_client(trace))
    state = RunState(question=question, roles=list(roles), user_id=user_id, datasource_id=datasource_id,
                     execute=execute, in_words=in_words,
                     sanity_checks=runtime.config.settings.pipeline.sanity_checks)
    trace.publish("run.started", question=question, user_id=user_id, roles=list(roles), datasource_id=datasource_id,
                  execute=execute)
    return ctx, state


def build_result(ctx: RunContext, state: RunState) -> QueryResult:
    """The QueryResult of a finished state."""
    status = state.status or ("plan_only" if not state.execute else "success")
    preview = ctx.config.settings.pipeline.preview_rows
    denied = any(e.code in ("HOOK_DENIED", "HOOK_FAILED") for e in state.errors)  # dropped parts are warnings
    if denied:  # a run a hook ended gives no rows, whatever ran before the hook decided
        preview = 0
    subs = []
    for sq in state.sub_queries:
        columns, rows = result_rows(sq)
        subs.append(SubQueryResult(
            id=sq.id, datasource_id=sq.datasource_id, question=sq.question, source=sq.plan_source, sql=sq.sql,
            plan=sq.plan.model_dump(mode="json", exclude_none=True) if sq.plan else None, columns=columns,
            rows=rows[:preview], total_rows=len(rows) if sq.result is not None else None,
            truncated=bool(sq.result and sq.result.truncated), attempts=sq.attempts, error=sq.error))
    combined = None
    if state.combined is not None and state.combine is not None and not denied:
        combined = CombinedResult(kind=state.combine.kind, columns=state.combined.columns,
                                  rows=[list(r) for r in state.combined.rows[:preview]],
                                  total_rows=state.combined.total_rows, truncated=state.combined.truncated)
    answer = Answer(summary=state.summary, content=state.answer)
    if status == "needs_approval" and state.pending:
        first = state.pending[0]
        text = (f"This question waits for an approver ({', '.join(first.approver_roles)}): its SQL {first.reason}. "
                f"Approve it with `nl2sql approve {ctx.trace.trace_id} --user USER --role ROLE`.")
        answer = Answer(summary="Waiting for approval.", content=text)
    elif status in ("error", "stopped") and state.errors:
        first = state.errors[0]
        text = first.message + (f" {first.fix}" if first.fix else "")
        answer = Answer(summary=first.message, content=text)
    usage = ctx.llm.usage()
    return QueryResult(trace_id=ctx.trace.trace_id, question=state.question, status=status, answer=answer,
                       sub_queries=subs, combined=combined, warnings=state.warnings, errors=state.errors,
                       approvals=state.pending,
                       usage=usage.model_dump(), cost_usd=ctx.llm.cost_usd(), llm_calls=len(ctx.llm.records),
                       duration_ms=round(ctx.trace.elapsed_ms(), 2), model_ms=round(ctx.trace.model_time_s() * 1000, 2),
                       time_to_sql_ms=state.milestones_ms.get("sql"), time_to_rows_ms=state.milestones_ms.get("rows"),
                       time_to_answer_ms=state.milestones_ms.get("answer"))


def trace_document(ctx: RunContext, state: RunState, result: QueryResult) -> dict[str, Any]:
    """What the state store keeps of a run: steps, sizes, explanations, SQL and timings (rows only as previewed)."""
    subs = []
    for sq, out in zip(state.sub_queries, result.sub_queries, strict=True):
        subs.append({
            "id": sq.id, "datasource_id": sq.datasource_id, "question": sq.question, "source": sq.plan_source,
            "verified": None if sq.verified is None else {"question": sq.verified.question,
                                                          "similarity": sq.verified.similarity,
                                                          "parameters": sq.verified.parameters},
            "retrieval": None if sq.retrieved is None or (out.error and out.error.code == "SECURITY_VIOLATION") else {
                "tables": sq.retrieved.table_names(), "columns_sent": sq.retrieved.column_count},
            "sql": out.sql, "columns": out.columns, "total_rows": out.total_rows, "truncated": out.truncated,
            "attempts": sq.attempts, "error": out.error.model_dump() if out.error else None,
            "timings_ms": sq.timings_ms, "prompt_chars": sq.prompt_chars})
    return {
        "trace_id": result.trace_id, "question": state.question, "roles": state.roles, "user_id": state.user_id,
        "status": result.status, "routing": state.routing, "answerability": state.answerability,
        "datasource_ids": state.datasource_ids, "sub_queries": subs,
        "combine": state.combine.model_dump() if state.combine else None,
        "steps": [e.data for e in ctx.trace.events if e.name == "node.finished"],
        "llm_calls": [{"node": r.node, "model": r.model, "prompt_chars": r.prompt_chars, "ok": r.ok,
                       "input_tokens": r.usage.input_tokens, "output_tokens": r.usage.output_tokens,
                       "cost_usd": r.cost_usd, "latency_ms": round(r.latency_ms, 1)} for r in ctx.llm.records],
        "prompt_chars": state.prompt_chars, "timings_ms": state.timings_ms,
        "warnings": [w.model_dump() for w in result.warnings], "errors": [e.model_dump() for e in result.errors],
        "events": [e.name for e in ctx.trace.events if e.name != "answer.delta"],
        "usage": result.usage, "cost_usd": result.cost_usd, "duration_ms": result.duration_ms,
        "milestones_ms": state.milestones_ms,
    }


def finish_run(ctx: RunContext, state: RunState) -> QueryResult:
    """Build the result, store the trace, publish run.finished (the run's last event)."""
    result = build_result(ctx, state)
    ctx.store.save_trace(result.trace_id, state.question, result.status, trace_document(ctx, state, result))
    tables = sorted({f"{sq.datasource_id}.{t}" for sq in state.sub_queries for t in sq.tables})
    ctx.trace.publish("run.finished", status=result.status, error_codes=[e.code for e in result.errors],
                      warning_codes=[w.code for w in result.warnings],
                      datasources=sorted({sq.datasource_id for sq in state.sub_queries}), tables=tables,
                      llm_calls=result.llm_calls, cost_usd=result.cost_usd, duration_ms=result.duration_ms)
    ctx.llm.close()
    return result


def fail_run(ctx: RunContext, state: RunState, exc: BaseException) -> None:
    """Publish run.failed for a run that ended by an engine fault (or an interrupt)."""
    code = exc.code if isinstance(exc, NL2SQLError) else type(exc).__name__
    ctx.trace.publish("run.failed", message=str(exc)[:500] or type(exc).__name__, code=code, user_id=state.user_id,
                      roles=state.roles)
    ctx.llm.close()
