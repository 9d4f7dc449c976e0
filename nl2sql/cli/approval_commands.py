"""`nl2sql approvals list`, `nl2sql approve`, `nl2sql deny`, `nl2sql automations apply`."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from nl2sql.cli.data_commands import JsonOption, console
from nl2sql.cli.main import app
from nl2sql.errors import ConfigError, ConfigProblem, NL2SQLError

approvals_app = typer.Typer(help="Statements waiting for an approver.", no_args_is_help=True)
app.add_typer(approvals_app, name="approvals")
automations_app = typer.Typer(help="Prefect automations of the project.", no_args_is_help=True)
app.add_typer(automations_app, name="automations")

RunId = Annotated[str, typer.Argument(help="The flow run (trace) id of the waiting question.")]
UserOption = Annotated[str, typer.Option("--user", help="Your user id (kept in the audit log).")]
ApproverRole = Annotated[str, typer.Option("--role", help="The role you approve in (one of the approver roles).")]
CommentOption = Annotated[str, typer.Option("--comment", help="Why (kept in the audit log).")]


@approvals_app.command("list")
def approvals_list(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Statements waiting for an approver, oldest first."""
    from nl2sql.index.store import StateStore

    pending = StateStore(ctx.obj.config().state_dir).approvals()
    if as_json:
        console.print_json(json.dumps(pending))
        return
    if not pending:
        console.print("No statement waits for an approver.")
        return
    table = Table("run", "asked by", "reason", "datasource", "approver roles", "SQL")
    for item in pending:
        r = item["request"]
        table.add_row(item["trace_id"], r["asker"] or "", r["reason"], r["datasource_id"],
                      ", ".join(r["approver_roles"]), r["sql"])
    console.print(table)


def _answer(ctx: typer.Context, run_id: str, *, approve: bool, user: str, role: str, comment: str) -> None:
    from nl2sql.index.store import StateStore

    pending = StateStore(ctx.obj.config().state_dir).approvals(trace_id=run_id)
    if not pending:
        raise NL2SQLError(f"No statement of run {run_id} waits for an approver.",
                          fix="See `nl2sql approvals list` for the runs that wait.")
    request = pending[0]["request"]
    if approve and role not in request["approver_roles"]:
        raise NL2SQLError(f"Role {role!r} may not approve this statement.",
                          fix=f"Approve in one of these roles: {', '.join(request['approver_roles'])}.")
    from prefect.flow_runs import resume_flow_run

    resume_flow_run(run_id, run_input={"approve": approve, "approver": user, "role": role, "comment": comment,
                                       "request_id": request["id"], "sql_sha256": request["sql_sha256"]})
    verb = "Approved" if approve else "Denied"
    console.print(f"{verb}: run {run_id} goes on ({request['reason']}). The run checks your role and the SQL "
                  "hash before running anything.")


@app.command("approve")
def approve_command(ctx: typer.Context, run_id: RunId, user: UserOption, role: ApproverRole,
                    comment: CommentOption = "") -> None:
    """Approve the statement a paused question waits on (its SQL then runs)."""
    _answer(ctx, run_id, approve=True, user=user, role=role, comment=comment)


@app.command("deny")
def deny_command(ctx: typer.Context, run_id: RunId, user: UserOption, role: ApproverRole,
                 comment: CommentOption = "") -> None:
    """Deny the statement a paused question waits on (the run ends denied)."""
    _answer(ctx, run_id, approve=False, user=user, role=role, comment=comment)


@automations_app.command("apply")
def automations_apply(ctx: typer.Context) -> None:
    """Create (or update) the automation that calls settings.approvals.webhook_url on approval.requested."""
    config = ctx.obj.config()
    url = config.settings.approvals.webhook_url
    if url is None:
        raise ConfigError(ConfigProblem(str(config.path), "settings.approvals.webhook_url", "is not set",
                                        "set it to the URL approvers' tools listen on (e.g. a chat webhook)"))
    from nl2sql.events.prefect_automations import AUTOMATION_NAME, apply_approval_automation

    automation_id, created = apply_approval_automation(url.get_secret_value())
    console.print(f"{'Created' if created else 'Updated'} the automation '{AUTOMATION_NAME}' ({automation_id}).")
