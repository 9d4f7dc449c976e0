"""The `nl2sql` command line: thin over the configuration, the adapters and (later) the flows.

Exit codes: 0 success; 1 a refused or failed run (SECURITY_VIOLATION, a database error, a
timeout); 2 a usage error (bad arguments, configuration, unknown names, SQL the guard refuses).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from nl2sql.errors import DatasourceError, EngineFault, IndexBuildFailed, NL2SQLError, SecurityViolation

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

#: Errors that mean "the run was refused or failed" (exit 1) rather than "the command was wrong" (exit 2).
RUN_FAILURES: tuple[type[NL2SQLError], ...] = (SecurityViolation, DatasourceError, IndexBuildFailed, EngineFault)


class State:
    """Options shared by every command."""

    def __init__(self, config: Path | None) -> None:
        self.config_option = config

    def config(self):  # -> Config; imported lazily to keep `--help` fast
        """Load the configuration and point Prefect's home into its state folder."""
        from nl2sql.config import config_path, load_config
        from nl2sql.runtime import prepare_prefect_env

        config = load_config(config_path(self.config_option))
        prepare_prefect_env(config.state_dir)
        quiet_prefect()
        return config


def quiet_prefect() -> None:
    """The CLI shows its own progress: Prefect's client logs warnings only, and an embedded server (started by
    this process, its logs on this terminal) only what is critical — its shutdown races are noise here."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
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


def register_commands() -> None:
    """Attach the command modules (kept in their own files, one concern each)."""
    from nl2sql.cli import (  # noqa: F401  (register on import)
        approval_commands,
        ask_commands,
        data_commands,
        eval_commands,
        index_commands,
        plan_commands,
    )


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the app, turning every known error into one message and an exit code."""
    register_commands()
    command = typer.main.get_command(app)
    try:
        # With standalone_mode off, click catches `typer.Exit` itself and *returns* its code: keep it.
        code = command.main(args=argv, prog_name="nl2sql", standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err_console.print("Aborted.")
        sys.exit(1)
    except typer.TyperException as exc:  # typer's (vendored click's) usage errors
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            err_console.print(f"[bold red]error[/]: {escape(str(exc))}")
        sys.exit(2)
    except NL2SQLError as exc:
        err_console.print(f"[bold red]error[/] [dim]{exc.code}[/]: {escape(str(exc))}", soft_wrap=True)
        sys.exit(1 if isinstance(exc, RUN_FAILURES) else 2)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
