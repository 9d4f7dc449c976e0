"""The `nl2sql` command line: thin over the configuration, the adapters and (later) the flows.

Exit codes: 0 success; 1 a refused or failed run (SECURITY_VIOLATION, a database error, a
timeout); 2 a usage error (bad arguments, configuration, unknown names, SQL the guard refuses).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading

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
        desk_commands,
        eval_commands,
        index_commands,
        mcp_commands,
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
        option = getattr(exc, "option_name", None)
        if isinstance(option, str) and any(c.isspace() for c in option):  # a statement read as an option
            err_console.print("An argument that starts with '-' (a statement's leading '--' comment) goes after "
                              "`--`, every option before it: nl2sql sql -d DATASOURCE -- \"-- note …\"",
                              soft_wrap=True, markup=False)
        sys.exit(2)
    except NL2SQLError as exc:
        err_console.print(f"[bold red]error[/] [dim]{exc.code}[/]: {escape(str(exc))}", soft_wrap=True)
        sys.exit(exit_code_of(exc))
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


def run() -> None:
    """The installed `nl2sql` command: `main`, then a prompt exit. The command's own shutdown runs as usual (threads
    joined, exit handlers: the audit log flushed, connections and Prefect's clients closed, output flushed), but not
    the interpreter's teardown of every module it imported, which took 0.6–0.8 s after a question."""
    try:
        main()
        code: int | str | None = 0
    except SystemExit as exc:
        code = exc.code
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    if code is not None and not isinstance(code, int):  # sys.exit("message"): printed, exit status 1
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (`nl2sql … | head`): nothing more to write
            stream.flush()
    os._exit(code or 0)
