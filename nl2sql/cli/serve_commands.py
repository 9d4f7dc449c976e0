"""`nl2sql serve`: every deployment served from one process, for a single machine (no work pool); `nl2sql
deployments write`: the same deployments in a project's `prefect.yaml`, for a work pool."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from nl2sql.cli.options import app, console, err_console

deployments_app = typer.Typer(help="The project's Prefect deployments, for a work pool.", no_args_is_help=True)
app.add_typer(deployments_app, name="deployments")


@app.command("serve")
def serve_command(
    ctx: typer.Context,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Flow runs at once (default: no limit).")] = None,
    take_over: Annotated[bool, typer.Option(
        "--take-over", help="Serve deployments of the same names that a work pool runs (`prefect deploy`): they "
        "are deleted and served here under new ids; their past runs stay.")] = False,
) -> None:
    """Serve every deployment (ask, index-build, drift-check, storage-purge, and the evals where `evals.suites`
    names a suite) from this process until Ctrl-C or SIGTERM: the nightly schedules run, and runs started from the
    Prefect UI or `prefect deployment run` run here."""
    from nl2sql.errors import NL2SQLError

    config = ctx.obj.config()
    if not os.environ.get("PREFECT_API_URL"):
        raise NL2SQLError("Serving needs a Prefect server that the UI and `prefect deployment run` reach too.",
                          fix="Start one (`prefect server start`) and export PREFECT_API_URL="
                          "http://127.0.0.1:4200/api, then run `nl2sql serve` again.")
    from nl2sql.flows.deployments import (
        held_by_work_pools,
        project_deployments,
        serve_deployments,
        take_over_from_work_pools,
    )

    specs = project_deployments(config)
    held = held_by_work_pools(specs)
    if held and not take_over:
        listed = ", ".join(f"{name} (work pool {pool})" for name, pool in held.items())
        raise NL2SQLError(f"A work pool runs deployments of the names this would serve: {listed}.",
                          fix="Run `nl2sql serve --take-over` to serve them here instead (they are deleted and "
                          "re-created under new ids, so links to them stop working; their past runs stay; "
                          "`prefect deploy --all` hands them back), or keep the work pool and its workers.")
    if held:
        take_over_from_work_pools(list(held))
        for name, pool in held.items():
            console.print(f"{name} was work pool {pool}'s deployment: served here now, under a new id "
                          "(`prefect deploy --all` hands it back).")
    from nl2sql.flows.desk import QuestionDesk

    desk = QuestionDesk(config.path, config.state_dir)
    desk.start()  # `nl2sql ask` on this project hands its questions to this warm process

    def forced_stop() -> None:
        desk.close()
        err_console.print("Stopped before the Prefect server confirmed the shutdown (it did not answer in time): "
                          "the schedules may still be active and runs started here may show as Running.")

    def ready() -> None:
        console.print(f"Serving {len(specs)} deployments on {config.path}: " + ", ".join(s.name for s in specs)
                      + " (deployments are being served from this process until Ctrl-C or SIGTERM); `nl2sql ask` "
                      "hands its questions here.", soft_wrap=True)
        if not any(spec.name.startswith("eval-") for spec in specs):
            console.print("No eval deployments: the configuration names no suite (evals.suites).")

    try:
        serve_deployments(config.path, specs, limit=limit, on_ready=ready, on_forced_stop=forced_stop)
        console.print("Stopped.")
    finally:
        desk.close()


@deployments_app.command("write")
def write_command(
    ctx: typer.Context,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="The file to write (default: prefect.yaml beside "
                                             "the configuration file).")] = None,
    work_pool: Annotated[str, typer.Option("--work-pool", help="The process work pool the deployments run "
                                           "on.")] = "nl2sql",
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write the project's deployments (module entrypoints, its configuration, the nightly schedules, the evals
    of `evals.suites`) into a prefect.yaml for `prefect deploy --all` and a process work pool."""
    from nl2sql.errors import NL2SQLError
    from nl2sql.flows.deployments import prefect_yaml, project_deployments

    config = ctx.obj.config()
    target = out if out is not None else config.base_dir / "prefect.yaml"
    if target.exists() and not force:
        raise NL2SQLError(f"{target} already exists.", fix="Pass --force to overwrite it, or --out another file.")
    target.write_text(prefect_yaml(config, target.parent, work_pool=work_pool), encoding="utf-8")
    names = [spec.name for spec in project_deployments(config)]
    console.print(f"Wrote {target}: {len(names)} deployments ({', '.join(names)}) on work pool {work_pool}. From "
                  f"{target.parent}: `prefect --no-prompt deploy --all`, `nl2sql deployments forms` (the ask run "
                  f"form's lists of roles and datasources), then `prefect worker start --pool {work_pool}`.",
                  soft_wrap=True)


@deployments_app.command("forms")
def forms_command(ctx: typer.Context) -> None:
    """Give the deployed `ask` its run form for people (the project's roles and datasources as choices, nothing
    internal): run after `prefect deploy --all`, which takes the form from the flow's signature."""
    from nl2sql.flows.deployments import apply_ask_run_form

    name = apply_ask_run_form(ctx.obj.config())
    console.print(f"{name}: its run form lists this project's roles and datasources.")
