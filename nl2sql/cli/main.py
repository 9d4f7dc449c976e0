"""The `nl2sql` command line: thin over the configuration, the adapters and (later) the flows.

Exit codes: 0 success; 1 a refused or failed run (SECURITY_VIOLATION, a database error, a
timeout); 2 a usage error (bad arguments, configuration, unknown names, SQL the guard refuses).
"""

from __future__ import annotations

import sys

import typer
from rich.markup import escape

from nl2sql.cli.options import app, err_console
from nl2sql.errors import NL2SQLError, exit_code_of


def register_commands() -> None:
    """Attach the command modules (kept in their own files, one concern each)."""
    from nl2sql.cli import (  # noqa: F401  (register on import)
        approval_commands,
        ask_commands,
        data_commands,
        eval_commands,
        index_commands,
        plan_commands,
        serve_commands,
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
        sys.exit(exit_code_of(exc))
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
