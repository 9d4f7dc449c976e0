"""`nl2sql ask`: a question through the ask flow, its steps and answer shown as they happen."""

from __future__ import annotations

import json
import sys
import threading
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from nl2sql.cli.options import JsonOption, RoleOption, app, console, drain_prefect, err_console, print_table
from nl2sql.pipeline.words import ROWS_READY, SOURCE_WORDS, step_words

if TYPE_CHECKING:
    from nl2sql.config import Config
    from nl2sql.events import Event
    from nl2sql.pipeline.result import QueryResult


class LiveDisplay:
    """Prints finished steps (dim), the SQL and rows as soon as they exist, and the streamed answer, as events
    arrive."""

    def __init__(self) -> None:
        self.streaming = False
        self.rows_shown = False  # the SQL and rows were printed before the answer
        self._line_open = False  # the streamed answer's last line has no line break yet
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        with self._lock:
            if event.name == "node.finished" and self._line_open:  # the step's line below the answer, not after it
                sys.stdout.write("\n")
                sys.stdout.flush()
                self._line_open = False
            if event.name == "node.finished":
                data = event.data
                mark = "[green]✓[/]" if data["ok"] else "[red]✗[/]"
                sub = f" {data['sub_query_id']}" if data.get("sub_query_id") else ""
                err = f" [red]{escape(data['error_code'])}[/]" if data.get("error_code") else ""
                err_console.print(f"{mark} [dim]{escape(step_words(data['node']) + sub)} "
                                  f"{data['duration_ms']:.0f} ms[/]{err}")
            elif event.name == ROWS_READY:
                data = event.data
                print_statements([(q["datasource_id"], q["source"], q["sql"]) for q in data["sub_queries"]])
                print_rows(data["columns"], data["rows"], data["total_rows"])
                self.rows_shown = True
            elif event.name == "answer.delta":
                if not self.streaming:
                    console.print()
                    self.streaming = True
                sys.stdout.write(event.data["text"])
                sys.stdout.flush()
                self._line_open = not event.data["text"].endswith("\n")


def print_statements(statements: list[tuple[str, str | None, str]]) -> None:
    """Each sub-query's SQL: (datasource, source, statement)."""
    for datasource_id, source, sql in statements:
        words = SOURCE_WORDS.get(source or "", "generated")
        console.print(f"\n[dim]{escape(datasource_id)} ({words}):[/] [cyan]{escape(sql)}[/]")


def print_rows(columns: list[str], rows: list[list], total: int | None) -> None:
    """The rows as a table, and how many of how many."""
    if not columns:
        return
    table = Table(*columns)
    for row in rows:
        table.add_row(*["" if v is None else escape(str(v)) for v in row])
    print_table(table)  # in a pipe at its full width: values reach a script whole
    plural = "row" if (total or len(rows)) == 1 else "rows"
    shown = f"{len(rows)} of {total} rows" if total and total > len(rows) else f"{len(rows)} {plural}"
    console.print(f"[dim]{shown}[/]")


def print_result(result: QueryResult, *, streamed: bool, rows_shown: bool = False) -> None:
    """The answer (unless it streamed), the SQL and the rows as a table (unless they were shown before it)."""
    if streamed:
        console.print()
    elif result.answer.content and result.ok:
        console.print()
        console.print(result.answer.content, markup=False)
    if not rows_shown:
        print_statements([(sq.datasource_id, sq.source, sq.sql) for sq in result.sub_queries if sq.sql])
        columns, rows = result.columns_and_rows()
        total = result.combined.total_rows if result.combined else next(
            (sq.total_rows for sq in result.sub_queries if sq.columns), len(rows))
        print_rows(columns, rows, total)
    for w in result.warnings:
        fixed = " (a corrected query fixed this)" if w.detail.get("recovered") else ""
        console.print(f"[yellow]note[/] [dim]{w.code}[/]: {escape(w.message)}{fixed}")
    for e in result.errors:
        err_console.print(f"[bold red]error[/] [dim]{e.code}[/]: {escape(e.message)}" + (f"\n{escape(e.fix)}" if e.fix else ""),
                          soft_wrap=True)
    cost = f", ${result.cost_usd:.4f}" if result.cost_usd else ""
    console.print(f"[dim]{result.status} · trace {result.trace_id} · {result.llm_calls} model calls{cost} · "
                  f"{result.duration_ms:.0f} ms[/]")


@app.command("ask")
def ask_command(
    ctx: typer.Context,
    question: Annotated[str, typer.Argument(help="The question, in plain language.")],
    role: RoleOption = None,
    user: Annotated[str | None, typer.Option("--user", help="The asker's user id (for the audit log; required, "
                                              "with --role one of its roles, when policies.users is configured).")]
    = None,
    datasource: Annotated[str | None, typer.Option("--datasource", "-d", help="Ask this datasource only.")] = None,
    no_execute: Annotated[bool, typer.Option("--no-execute", help="Write the SQL, do not run it.")] = False,
    no_summary: Annotated[bool, typer.Option("--no-summary", help="No answer in words from the model: the SQL, the "
                                             "rows and a plain summary of them, without waiting for a sentence.")]
    = False,
    no_desk: Annotated[bool, typer.Option("--no-desk", help="Ask in this process: hand the question to no desk "
                                          "and start none (for scripts that should leave nothing running).")] = False,
    as_json: JsonOption = False,
) -> None:
    """Ask a question: the steps tick by, the SQL and rows print when they exist, the answer streams (exit 1 if
    refused/failed). The question runs at the project's question desk (`nl2sql serve`'s, or one the first question
    starts in the background and that stops after settings.desk.idle_stop_s without a question), warm; else in this
    process."""
    from nl2sql.cli.handover import background_desk_wanted, find_desk, hand_over, serves_this_shell
    from nl2sql.config import config_path, load_config

    config = load_config(config_path(ctx.obj.config_option))  # the file alone: enough to check names, find a desk
    desk = None if no_desk else find_desk(config.state_dir)
    if desk is not None and not serves_this_shell(desk):
        desk = None  # a background desk on another Prefect server: asked here (`nl2sql desk stop` ends that one)
        no_desk = True
    from nl2sql.policies.scope import role_rules

    for name in [role] if role else []:
        role_rules(config.policies, name)  # an unknown role is a usage error (exit 2)
    from nl2sql.policies.users import acting_role

    role = acting_role(config.policies, user, role)  # with policies.users: the user's own roles only (exit 2)
    if datasource:
        config.datasource(datasource)
    if desk is None and not no_desk and background_desk_wanted(config.settings.desk.background):
        desk = _start_desk(config, quiet=as_json)
    if desk is None:
        if not as_json:  # never silent: say what the first seconds go to
            err_console.print(f"[dim]{escape(waiting_line())}[/]", soft_wrap=True)
        config = ctx.obj.config()  # every check of the engine, and Prefect's environment, for a run here
    display = LiveDisplay()
    parameters = {"question": question, "role": role, "user_id": user, "datasource_id": datasource,
                  "execute": not no_execute, "in_words": not no_summary}
    result = hand_over(desk, parameters, None if as_json else display) if desk else None
    if result is None:  # no desk, or it did not answer
        here = config if desk is None else ctx.obj.config()
        result = _ask_here(parameters, here, None if as_json else display)
    if as_json:
        typer.echo(json.dumps(result.model_dump(mode="json"), default=str, indent=2))
    else:
        print_result(result, streamed=display.streaming, rows_shown=display.rows_shown)
    if not result.ok:
        raise typer.Exit(1)


def _start_desk(config: Config, *, quiet: bool):  # -> Desk | None
    """Start the project's background desk for this question and the next ones, saying so first; None (and one
    line why) when it did not start: the question is then asked here."""
    from nl2sql.cli.handover import DESK_LOG, start_background_desk

    minutes = max(1, round(config.settings.desk.idle_stop_s / 60))
    if not quiet:
        err_console.print(f"[dim]Starting the question desk in the background (about 10 s, once: it keeps the engine "
                          f"and Prefect warm for the next questions, and stops after {minutes} min without one; "
                          "`--no-desk` asks in this process)…[/]", soft_wrap=True)
    desk = start_background_desk(config.path, config.state_dir)
    if desk is None and not quiet:
        err_console.print(f"[yellow]note[/] the question desk did not start (see "
                          f"{escape(str(config.state_dir / DESK_LOG))}): asking here.", soft_wrap=True)
    return desk


def waiting_line() -> str:
    """What a question asked in this process waits for first: the engine's start, and Prefect's local server when no
    server is set (`PREFECT_API_URL`)."""
    import os

    if os.environ.get("PREFECT_API_URL"):
        return "Starting the engine here (a few seconds; `nl2sql serve` keeps one warm for the next questions)…"
    return ("Starting the engine and Prefect's local server here (about 10 s; `nl2sql serve`, or a Prefect server "
            "in PREFECT_API_URL, makes the next questions quick)…")


def _ask_here(parameters: dict, config: Config, display: LiveDisplay | None) -> QueryResult:
    """The question as a flow run of this process (Prefect and the engine started here, on the configuration
    the command loaded), through the library's facade."""
    from nl2sql.engine import Engine

    result = Engine(config).ask(parameters["question"], user=parameters["user_id"], role=parameters["role"],
                                datasource=parameters["datasource_id"], execute=parameters["execute"],
                                executor="prefect", on_event=display, in_words=parameters["in_words"])
    drain_prefect()
    return result
