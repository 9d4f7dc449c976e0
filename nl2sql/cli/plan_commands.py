"""`nl2sql plan render|run`: for people writing gold plans; `nl2sql plan forget`: the plan cache emptied."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from nl2sql.cli.data_commands import print_rows
from nl2sql.cli.options import JsonOption, RoleOption, UserOption, app, block_loader, console

if TYPE_CHECKING:
    from nl2sql.config import Config
    from nl2sql.datasources import Adapter
    from nl2sql.plan import PlanModel, ValidatedPlan

plan_app = typer.Typer(help="Typed query plans: render them as SQL, run them; forget cached ones.",
                        no_args_is_help=True)
app.add_typer(plan_app, name="plan")

PlanFile = Annotated[Path, typer.Argument(help="A plan as JSON or YAML (bare, or under a 'plan' key).")]


@plan_app.command("render")
def plan_render(
    ctx: typer.Context,
    file: PlanFile,
    dialect: Annotated[str, typer.Option("--dialect", help="sqlite, duckdb, postgres, mysql, snowflake or bigquery.")] = "sqlite",
    datasource: Annotated[str | None, typer.Option("--datasource", "-d", help="Validate against this datasource first.")] = None,
    role: RoleOption = None,
    user: UserOption = None,
) -> None:
    """Print the SQL a plan generates (validated against a datasource when one is named)."""
    from nl2sql.plan import generate_sql
    from nl2sql.plan.io import load_plan_file
    from nl2sql.policies.users import acting_role

    plan = load_plan_file(file)
    schemas = None
    if datasource:
        config = ctx.obj.config()
        validated = _validated(config, plan, datasource, acting_role(config.policies, user, role))
        plan, schemas = validated.plan, validated.schemas
    typer.echo(generate_sql(plan, dialect, schemas=schemas, pretty=True))


@plan_app.command("run")
def plan_run(
    ctx: typer.Context,
    file: PlanFile,
    datasource: Annotated[str, typer.Option("--datasource", "-d", help="Datasource id to run it on.")],
    role: RoleOption = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Row limit (default: settings.pipeline.row_limit).")] = None,
    user: UserOption = None,
    as_json: JsonOption = False,
) -> None:
    """Validate a plan for a role, generate its SQL for the datasource, and run it read-only."""
    from nl2sql.datasources import DatasourceCatalog, run_checked_sql
    from nl2sql.plan import generate_sql
    from nl2sql.plan.io import load_plan_file
    from nl2sql.policies import scope
    from nl2sql.policies.users import acting_role

    plan = load_plan_file(file)
    config = ctx.obj.config()
    role = acting_role(config.policies, user, role)
    with DatasourceCatalog(config, block_loader=block_loader) as catalog:
        adapter = catalog.get(datasource)
        validated = _validated(config, plan, datasource, role, adapter=adapter)
        sql = generate_sql(validated.plan, adapter.dialect, schemas=validated.schemas)
        limits = config.settings.pipeline
        result = run_checked_sql(adapter, sql, scope(config.policies, role, datasource),
                                 row_limit=limit or limits.row_limit, timeout_s=limits.statement_timeout_s)
    if as_json:
        frame = result.plain_frame()
        typer.echo(json.dumps({"sql": sql, "rows": frame.to_dict(orient="records"), "truncated": result.truncated},
                              default=str, indent=2))
        return
    console.print(f"[dim]{escape(sql)}[/]")
    print_rows(result)


@plan_app.command("forget")
def plan_forget(
    ctx: typer.Context,
    datasource: Annotated[str | None, typer.Option("--datasource", "-d", help="Only this datasource's plans.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Drop the plans the question path cached (settings.pipeline.plan_cache): the next question asks the planner."""
    from nl2sql.index.store import StateStore

    config = ctx.obj.config()
    if datasource is not None:
        config.datasource(datasource)  # an unknown id is an error naming the known ones
    forgotten = StateStore(config.state_dir).forget_plans(datasource)
    if as_json:
        typer.echo(json.dumps({"forgotten": forgotten, "datasource": datasource}))
        return
    console.print(f"Forgot {forgotten} cached plan{'' if forgotten == 1 else 's'}"
                  f"{f' of {datasource}' if datasource else ''}.")


def _validated(config: Config, plan: PlanModel, datasource: str, role: str | None,
               adapter: Adapter | None = None) -> ValidatedPlan:
    """The plan validated against the datasource's live schema for the role (config loaded once by the caller)."""
    from nl2sql.datasources import DatasourceCatalog
    from nl2sql.plan import validate_plan
    from nl2sql.policies import scope

    caller = scope(config.policies, role, datasource)
    if adapter is None:
        with DatasourceCatalog(config, block_loader=block_loader) as catalog:
            snapshot = catalog.get(datasource).reflect()
    else:
        snapshot = adapter.reflect()
    return validate_plan(plan, snapshot, caller, max_limit=config.settings.resources.max_rows)
