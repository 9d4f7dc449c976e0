"""The six hook points applied to the run: what each point's hooks see, and what their decisions do.

Every change a hook makes goes back through the engine's checks: a modified question is routed
like any question, modified datasources are cut to those the caller reaches, and a modified plan
reaches the validator (plan.after sits before it), so no hook can widen a caller's scope.
"""

from __future__ import annotations

from typing import Any

from nl2sql.hooks import ApprovalRequest, Deny, NeedsApproval
from nl2sql.pipeline.result import RunError, RunWarning
from nl2sql.pipeline.runtime import RunContext
from nl2sql.pipeline.state import RunState, SubQuery
from nl2sql.policies import reachable_datasources, scope


def tables_of(sq: SubQuery) -> list[str]:
    """The tables a sub-query's SQL reads, as `datasource.table` (the validator's, or the verified SQL's)."""
    return [f"{sq.datasource_id}.{t}" for t in sq.tables]


def _fields(ctx: RunContext, state: RunState, point: str, sq: SubQuery | None) -> dict[str, Any]:
    fields: dict[str, Any] = {"trace_id": ctx.trace.trace_id, "question": state.question, "user_id": state.user_id,
                              "roles": state.roles, "datasource_id": state.datasource_id}
    if point != "run.before":
        fields["datasource_ids"] = state.datasource_ids
    if sq is not None:
        fields.update(datasource_id=sq.datasource_id, sub_query_id=sq.id, sub_query=sq.question, plan=sq.plan)
        if point in ("execute.before", "execute.after"):
            adapter = ctx.catalog.get(sq.datasource_id)
            fields.update(sql=sq.sql, tables=tables_of(sq))
            if sq.sql:
                sql = sq.sql
                caller = scope(ctx.config.policies, state.roles, sq.datasource_id)
                fields["estimate_rows"] = lambda: adapter.estimate_rows(sql, scope=caller)
        if point == "execute.after" and sq.result is not None:
            fields["result"] = {"columns": [c.name for c in sq.result.columns], "total_rows": sq.result.row_count,
                                "truncated": sq.result.truncated}
    if point == "answer.after":
        fields["answer"] = state.answer
    return fields


def run_hook_point(ctx: RunContext, state: RunState, point: str, sq: SubQuery | None = None) -> None:
    """Call the point's hooks and apply their verdict to the run (or the sub-query)."""
    runner = ctx.hooks
    if not runner.at(point):
        return

    def on_decision(hook: str, at: str, decision: str, reason: str | None, sub_id: str | None) -> None:
        ctx.trace.publish("hook.decision", hook=hook, point=at, decision=decision, reason=reason, sub_query_id=sub_id)

    def approved(hook: str, decision: NeedsApproval) -> bool:
        return sq is not None and _request(ctx, state, sq, hook, decision).id in state.approved

    verdict = runner.run(point, on_decision=on_decision, approved=approved, **_fields(ctx, state, point, sq))
    sub_id = sq.id if sq else None
    if verdict.error is not None:
        state.end("error", RunError(code="HOOK_FAILED", message=verdict.error, node=point, sub_query_id=sub_id,
                                    fix="See the hook's log lines; set its on_error: open to let runs go on."))
        return
    if "question" in verdict.modified:
        state.question = verdict.context.question
    if "datasource_ids" in verdict.modified:
        reachable = reachable_datasources(ctx.config.policies, state.roles, verdict.context.datasource_ids or [])
        state.datasource_ids = [ds for ds in reachable if ds in {d.id for d in ctx.config.datasources}]
        if not state.datasource_ids:
            state.end("error", RunError(code="HOOK_DENIED", message="No datasource was left to answer from.",
                                        node=point))
            return
    if "plan" in verdict.modified and sq is not None:
        sq.plan = verdict.context.plan  # the validator checks it next, against the caller's scope
        sq.plan_hooked = True
    stop = verdict.stop
    if isinstance(stop, Deny):
        error = RunError(code="HOOK_DENIED", message=stop.reason, node=point, sub_query_id=sub_id)
        if stop.scope == "sub_query" and sq is not None:
            sq.error, sq.dropped = error, True
            state.warnings.append(RunWarning(code="HOOK_DENIED", step=point, sub_query_id=sq.id,
                                             message=f"A part of the question was left out: {stop.reason}"))
        else:
            state.end("error", error)
    elif isinstance(stop, NeedsApproval) and sq is not None and verdict.hook is not None:
        sq.approval = _request(ctx, state, sq, verdict.hook, stop)
        ctx.trace.publish("approval.requested", request_id=sq.approval.id, hook=verdict.hook,
                          datasource_id=sq.datasource_id, reason=stop.reason, sql_sha256=sq.approval.sql_sha256,
                          approver_roles=sq.approval.approver_roles, asker=state.user_id)


def _request(ctx: RunContext, state: RunState, sq: SubQuery, hook: str, decision: NeedsApproval) -> ApprovalRequest:
    return ApprovalRequest.build(question=state.question, asker=state.user_id, hook=hook,
                                 datasource_id=sq.datasource_id, sub_query_id=sq.id, sql=sq.sql or "",
                                 reason=decision.reason,
                                 approver_roles=list(ctx.hooks.binding(hook).approver_roles))
