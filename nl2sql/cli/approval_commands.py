"""`nl2sql approvals list|token`, `nl2sql approve`, `nl2sql deny`, `nl2sql automations apply`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from nl2sql.cli.options import JsonOption, app, console, err_console, print_table
from nl2sql.config.models import PoliciesConfig
from nl2sql.errors import ConfigError, ConfigProblem, NL2SQLError
from nl2sql.policies.users import (
    TOKEN_ENV,
    acting_role,
    new_token,
    sign_answer,
    token_hash,
    token_public_key,
    users_configured,
)

if TYPE_CHECKING:
    from nl2sql.config import Config
    from nl2sql.hooks.approval import ApprovalRequest

approvals_app = typer.Typer(help="Statements waiting for an approver.", no_args_is_help=True)
app.add_typer(approvals_app, name="approvals")
automations_app = typer.Typer(help="Prefect automations of the project.", no_args_is_help=True)
app.add_typer(automations_app, name="automations")

RunId = Annotated[str, typer.Argument(help="The flow run (trace) id of the waiting question.")]
UserOption = Annotated[str, typer.Option("--user", help="Your user id (kept in the audit log).")]
ApproverRole = Annotated[str, typer.Option("--role", help="The role you approve in (one of the approver roles; with "
                                           "policies.users: default your first approver role).")]
TokenOption = Annotated[str, typer.Option("--token", envvar=TOKEN_ENV, show_envvar=True, help="Your approval token "
                                          "(needed when policies.users is configured).")]
CommentOption = Annotated[str, typer.Option("--comment", help="Why (kept in the audit log).")]


def may_approve(policies: PoliciesConfig, user: str | None, request: dict, allow_self_approval: bool) -> bool:
    """Whether `user` may approve a stored request: every request without policies.users; with it, those whose
    approver roles the user holds, not its own unless self-approval is allowed."""
    if policies.users is None:
        return True
    known = policies.users.get(user or "")
    if known is None or not set(known.roles) & set(request["approver_roles"]):
        return False
    return allow_self_approval or request.get("asker") != user


@approvals_app.command("list")
def approvals_list(ctx: typer.Context, user: Annotated[str | None, typer.Option(
        "--user", help="Your user id: only what you may approve is shown (required with policies.users).")] = None,
        as_json: JsonOption = False) -> None:
    """Statements waiting for an approver, oldest first (with policies.users: those --user may approve)."""
    from nl2sql.index.store import StateStore

    config = ctx.obj.config()
    if users_configured(config.policies):
        acting_role(config.policies, user, None)  # a known user, or IdentityError
    allow_self = config.settings.approvals.allow_self_approval
    pending = [item for item in StateStore(config.state_dir).approvals()
               if may_approve(config.policies, user, item["request"], allow_self)]
    if as_json:
        console.print_json(json.dumps(pending))
        return
    if not pending:
        console.print("No statement waits for an approver" + (" you may approve." if user else "."))
        return
    table = Table("run", "asked by", "reason", "datasource", "approver roles", "SQL")
    for item in pending:
        r = item["request"]
        table.add_row(item["trace_id"], r["asker"] or "", r["reason"], r["datasource_id"],
                      ", ".join(r["approver_roles"]), r["sql"])
    print_table(table)


@approvals_app.command("token")
def approvals_token(ctx: typer.Context, user: Annotated[str | None, typer.Option(
        "--user", help="The user the token is for (shown in the snippet to paste).")] = None) -> None:
    """Mint a personal approval token: give the token to the approver, paste its hash and public key into
    policies.users."""
    token = new_token()
    typer.echo(f"token: {token}\n(give it to the approver, and only to them: it is shown this once)\n")
    typer.echo(f"Paste under policies.users:\n  {user or 'USER'}:\n    roles: [...]\n"
               f"    token_sha256: {token_hash(token)}\n    token_public_key: {token_public_key(token)}\n")
    typer.echo(f"The approver passes it with --token or ${TOKEN_ENV} (`nl2sql approve` sends a signature made "
               "with it, never the token), or types it into the Resume form.")


def _not_paused(run_id: str, why: str) -> typer.Exit:
    err_console.print(f"[bold red]error[/]: {escape(f'run {run_id} {why}')}; nothing was sent.", soft_wrap=True)
    return typer.Exit(1)


def _answer(ctx: typer.Context, run_id: str, *, approve: bool, user: str, role: str, token: str,
            comment: str) -> None:
    from nl2sql.hooks.approval import ApprovalRequest, check_approver
    from nl2sql.index.store import StateStore

    config = ctx.obj.config()
    pending = StateStore(config.state_dir).approvals(trace_id=run_id)
    if not pending:
        raise NL2SQLError(f"No statement of run {run_id} waits for an approver.",
                          fix="See `nl2sql approvals list` for the runs that wait.")
    request = pending[0]["request"]
    waiting = ApprovalRequest.model_validate(request)
    acting = check_approver(waiting, approve=approve, approver=user, role=role, run_id=run_id,
                            token=token, approver_roles=request["approver_roles"], policies=config.policies,
                            allow_self_approval=config.settings.approvals.allow_self_approval)
    if approve and acting not in request["approver_roles"]:
        raise NL2SQLError(f"Role {acting!r} may not approve this statement.",
                          fix=f"Approve in one of these roles: {', '.join(request['approver_roles'])}.")
    proof = _proof(config, waiting, approve=approve, user=user.strip(), role=acting, token=token, run_id=run_id)
    from prefect import get_client
    from prefect.client.schemas.responses import SetStateStatus
    from prefect.exceptions import ObjectNotFound

    run_input = {"approve": approve, "approver": user.strip(), "role": acting, "token": proof, "comment": comment,
                 "request_id": request["id"], "sql_sha256": request["sql_sha256"]}
    with get_client(sync_client=True) as client:
        try:
            run = client.read_flow_run(run_id)  # type: ignore[arg-type]
        except ObjectNotFound:
            raise _not_paused(run_id, "is not known to the Prefect API") from None
        if run.state is None or not run.state.is_paused():
            state = run.state.name if run.state else "none"
            raise _not_paused(run_id, f"is not paused (state: {state}); it may be checking another answer, try "
                              "again in a few seconds" if state == "Running" else f"is not paused (state: {state})")
        response = client.resume_flow_run(run_id, run_input=run_input)  # type: ignore[arg-type]
    if response.status != SetStateStatus.ACCEPT:
        reason = getattr(response.details, "reason", None) or response.status.value
        raise _not_paused(run_id, f"did not take the answer ({reason})")
    verb = "Approved" if approve else "Denied"
    console.print(f"{verb}: run {escape(run_id)} goes on ({escape(str(request['reason']))}). The run checks your identity, role and the "
                  "SQL hash before running anything.")


def _proof(config: Config, request: ApprovalRequest, *, approve: bool, user: str, role: str, token: str,
           run_id: str) -> str:
    """What the answer carries in its token field: the token's signature of this answer (with policies.users;
    nothing without, where no token is checked), never the token: Prefect keeps a resume call's input in its
    database, and a signature is worth nothing for any other answer."""
    from nl2sql.hooks.approval import answer_message

    if config.policies.users is None:
        return ""
    known = config.policies.users[user]  # check_approver found the user
    if not known.token_public_key:
        key = f"policies.users.{user}.token_public_key"
        raise ConfigError(ConfigProblem(str(config.path), key, "is not set, and `nl2sql approve` sends a signature "
                                        "checked against it rather than the token itself",
                                        f"add `token_public_key: {token_public_key(token)}` under policies.users."
                                        f"{user} (derived from your token; it may be read by anyone)"))
    return sign_answer(token, answer_message(request, approve=approve, approver=user, role=role, run_id=run_id))


@app.command("approve")
def approve_command(ctx: typer.Context, run_id: RunId, user: UserOption, role: ApproverRole = "",
                    token: TokenOption = "", comment: CommentOption = "") -> None:
    """Approve the statement a paused question waits on (its SQL then runs)."""
    _answer(ctx, run_id, approve=True, user=user, role=role, token=token, comment=comment)


@app.command("deny")
def deny_command(ctx: typer.Context, run_id: RunId, user: UserOption, role: ApproverRole = "",
                 token: TokenOption = "", comment: CommentOption = "") -> None:
    """Deny the statement a paused question waits on (the run ends denied)."""
    _answer(ctx, run_id, approve=False, user=user, role=role, token=token, comment=comment)


@automations_app.command("apply")
def automations_apply(ctx: typer.Context) -> None:
    """Create (or update) the project's automations: approval.requested → settings.approvals.webhook_url;
    schema.drifted → a run of eval-retrieval; a failed eval or drift check → settings.prefect.failures_webhook_url."""
    config = ctx.obj.config()
    approvals = config.settings.approvals.webhook_url
    failures = config.settings.prefect.failures_webhook_url
    from nl2sql.events.prefect_automations import apply_automations

    applied = apply_automations(approvals.get_secret_value() if approvals else None,
                                failures.get_secret_value() if failures else None)
    for item in applied:
        if item.skipped:
            console.print(f"Skipped '{item.name}': {escape(item.skipped)}.")
        else:
            console.print(f"{'Created' if item.created else 'Updated'} the automation '{item.name}' "
                          f"({item.automation_id}).")
    if all(item.skipped for item in applied):
        raise ConfigError(ConfigProblem(str(config.path), "settings.approvals.webhook_url", "is not set, nor is "
                                        "settings.prefect.failures_webhook_url, and eval-retrieval is not deployed",
                                        "set a webhook URL, or deploy first (`prefect deploy --all`)"))
