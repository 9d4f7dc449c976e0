"""`nl2sql desk`: the question desk that keeps the engine and Prefect warm between questions (the one a first
`nl2sql ask` starts in the background, or `nl2sql serve`'s): its status, a start by hand, a stop."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from nl2sql.cli.options import JsonOption, app, console

desk_app = typer.Typer(help="The question desk: the engine kept warm between questions.", no_args_is_help=True)
app.add_typer(desk_app, name="desk")


@desk_app.command("status")
def status_command(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Whether a desk takes this project's questions, and whose (exit 1 when none does)."""
    import json

    config, desk = _project_desk(ctx)
    if as_json:
        typer.echo(json.dumps(None if desk is None else {
            "kind": desk.kind, "pid": desk.pid, "port": desk.port, "prefect_api_url": desk.prefect_api_url or None,
            "started": desk.started, "idle_stop_s": config.settings.desk.idle_stop_s}, indent=2))
    elif desk is None:
        console.print("No question desk: the next `nl2sql ask` starts one in the background" if
                      config.settings.desk.background else "No question desk (settings.desk.background is off).")
    else:
        since = f", up {_duration(time.time() - desk.started)}" if desk.started else ""
        whose = ("started by `nl2sql ask`; it stops after "
                 f"{_duration(config.settings.desk.idle_stop_s)} without a question" if desk.kind == "background"
                 else "`nl2sql serve`'s")
        console.print(f"The question desk takes this project's questions (process {desk.pid}{since}): {whose}.",
                      soft_wrap=True)
    if desk is None:
        raise typer.Exit(1)


@desk_app.command("start")
def start_command(ctx: typer.Context) -> None:
    """Start a background desk now (the first `nl2sql ask` would), and wait until it takes questions."""
    from nl2sql.cli.handover import DESK_LOG, start_background_desk
    from nl2sql.errors import NL2SQLError

    config, desk = _project_desk(ctx)
    if desk is None:
        console.print("Starting the question desk (Prefect and the engine: about 10 s)…")
        desk = start_background_desk(config.path, config.state_dir)
    if desk is None:
        raise NL2SQLError("The question desk did not start.", fix=f"See {config.state_dir / DESK_LOG}.")
    console.print(f"The question desk takes this project's questions (process {desk.pid}).")


@desk_app.command("stop")
def stop_command(ctx: typer.Context) -> None:
    """Stop the background desk (questions under way may finish first; `nl2sql serve`'s desk stops with serve)."""
    from nl2sql.errors import NL2SQLError

    _, desk = _project_desk(ctx)
    if desk is None:
        console.print("No question desk runs on this project.")
        return
    if desk.kind != "background":
        raise NL2SQLError(f"The desk is `nl2sql serve`'s (process {desk.pid}).", fix="Stop `nl2sql serve` (Ctrl-C "
                          "or SIGTERM) to stop it.")
    from nl2sql.flows.desk import QUESTIONS_FINISH_S, stop_process

    if not stop_process(desk.pid, wait_s=QUESTIONS_FINISH_S + 5):
        raise NL2SQLError(f"The question desk (process {desk.pid}) did not stop.", fix=f"kill {desk.pid}")
    console.print(f"Stopped the question desk (process {desk.pid}).")


@desk_app.command("run", hidden=True)
def run_command(
    ctx: typer.Context,
    idle_stop_s: Annotated[float | None, typer.Option("--idle-stop-s", help="Stop after this many seconds without "
                                                      "a question (default: settings.desk.idle_stop_s).")] = None,
) -> None:
    """Run a background desk in this process (what `nl2sql ask` starts)."""
    import logging

    config = ctx.obj.config()  # Prefect's environment (its home, its quiet logs) before Prefect is imported
    import sys

    from nl2sql.flows.desk import run_background_desk

    told = logging.StreamHandler(sys.stderr)  # its own lines into desk.log, whatever Prefect did to the root logger
    told.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    desk_log = logging.getLogger("nl2sql.desk")
    desk_log.addHandler(told)
    desk_log.setLevel(logging.INFO)
    desk_log.propagate = False
    run_background_desk(config.path, config.state_dir, idle_stop_s or config.settings.desk.idle_stop_s)


def _project_desk(ctx: typer.Context):  # -> tuple[Config, Desk | None]
    """The project's configuration (the file alone: no engine, no Prefect) and the desk running on it, if any."""
    from nl2sql.cli.handover import find_desk
    from nl2sql.config import config_path, load_config

    config = load_config(config_path(ctx.obj.config_option))
    return config, find_desk(config.state_dir)


def _duration(seconds: float) -> str:
    """'15 min', '40 s', '2 h 5 min'."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"
