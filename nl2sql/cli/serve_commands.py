"""`nl2sql serve`: every deployment served from one process, for a single machine (no work pool)."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from nl2sql.cli.options import app, console


@app.command("serve")
def serve_command(
    ctx: typer.Context,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Flow runs at once (default: no limit).")] = None,
) -> None:
    """Serve every deployment (ask, index-build, drift-check, the evals) from this process until Ctrl-C: the
    nightly schedules run, and runs started from the Prefect UI or `prefect deployment run` run here."""
    from nl2sql.errors import NL2SQLError

    config = ctx.obj.config()
    if not os.environ.get("PREFECT_API_URL"):
        raise NL2SQLError("Serving needs a Prefect server that the UI and `prefect deployment run` reach too.",
                          fix="Start one (`prefect server start`) and export PREFECT_API_URL="
                          "http://127.0.0.1:4200/api, then run `nl2sql serve` again.")
    from nl2sql.flows.deployments import DEPLOYMENTS, serve_deployments, take_over_from_work_pools

    for name in take_over_from_work_pools():
        console.print(f"{name} was a work pool's deployment: served here now (`prefect deploy --all` hands it back).")
    from nl2sql.flows.desk import QuestionDesk

    desk = QuestionDesk(config.path, config.state_dir)
    desk.start()  # `nl2sql ask` on this project hands its questions to this warm process
    console.print(f"Serving {len(DEPLOYMENTS)} deployments on {config.path}: "
                  + ", ".join(spec.name for spec in DEPLOYMENTS) + "; `nl2sql ask` hands its questions here.")
    try:
        serve_deployments(config.path, limit=limit)
    finally:
        desk.close()
