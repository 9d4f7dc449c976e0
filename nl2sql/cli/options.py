"""What every command shares: the Typer app, the consoles, the common options, and the Prefect set-up."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

app = typer.Typer(
    name="nl2sql",
    help="nl2sql: ask your databases questions in plain language, safely.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
datasources_app = typer.Typer(help="Registered datasources.", no_args_is_help=True)
app.add_typer(datasources_app, name="datasources")

err_console = Console(stderr=True, highlight=False)
console = Console(highlight=False)
#: The widest a table printed into a pipe or a file may grow (its rows are then never cut or folded).
PIPE_TABLE_WIDTH = 100_000


def print_table(table: Table, to: Console | None = None) -> None:
    """Print a table; into a pipe or a file at its full width, so ids and values reach a script whole (a terminal
    gets the table fitted to its width, as usual)."""
    out = to or console
    if out.is_terminal:
        out.print(table)
        return
    natural = Measurement.get(out, out.options.update_width(PIPE_TABLE_WIDTH), table).maximum
    fitted = out.width
    out.width = max(fitted, natural)  # print's own width= is capped at the console's width, so widen the console
    try:
        out.print(table)
    finally:
        out.width = fitted

RoleOption = Annotated[str | None, typer.Option("--role", "-r", help="The asker's role (default: policies.default_role).")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
UserOption = Annotated[str | None, typer.Option("--user", help="Your user id (required when policies.users is "
                                                "configured; --role must then be one of its roles).")]


class State:
    """Options shared by every command."""

    def __init__(self, config: Path | None) -> None:
        self.config_option = config

    def config(self):  # -> Config; imported lazily to keep `--help` fast
        """Load the configuration and point Prefect's home into its state folder."""
        from nl2sql.config import config_path
        from nl2sql.prefect_env import prepare_prefect_env
        from nl2sql.project import load_project

        config = load_project(config_path(self.config_option))
        prepare_prefect_env(config.state_dir)
        quiet_prefect()
        return config


def quiet_prefect() -> None:
    """The CLI shows its own progress: Prefect's client logs warnings only, and an embedded server (started by
    this process, its logs on this terminal) only what is critical — its shutdown races are noise here."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    # but a run's own log lines (each step in words, how it ended) go to its Logs tab in the Prefect UI
    os.environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL", "INFO")
    os.environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL", "INFO")
    # a failed task or flow is reported by the command itself, in one line: no traceback on the terminal (the
    # Prefect UI's logs keep it)
    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "CRITICAL")
    os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")


@app.callback()
def _root(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Path to nl2sql.yaml (default: $NL2SQL_CONFIG or ./nl2sql.yaml)."),
    ] = None,
) -> None:
    ctx.obj = State(config)


def block_loader(name: str) -> str:
    """Load a DatasourceBlock's URL (imports Prefect only when a config names a block)."""
    from nl2sql.blocks import load_datasource_url

    return load_datasource_url(name)


def drain_prefect() -> None:
    """Deliver the events and logs still queued before the process (and an embedded server) stops."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all()
    EventsWorker.drain_all()
