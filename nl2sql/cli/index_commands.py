"""`nl2sql index build|versions|check|diff` and `nl2sql retrieve`."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn
from rich.table import Table

from nl2sql.cli.options import JsonOption, RoleOption, UserOption, app, console, err_console, print_table

index_app = typer.Typer(help="The schema index: build it, list its versions, check it for drift.", no_args_is_help=True)
app.add_typer(index_app, name="index")


@index_app.command("build")
def index_build_command(
    ctx: typer.Context,
    datasource: Annotated[list[str] | None, typer.Option("--datasource", "-d", help="Only these datasources.")] = None,
    full: Annotated[bool, typer.Option("--full", help="Profile and embed every table again.")] = False,
    dask_workers: Annotated[int | None, typer.Option("--dask-workers", min=1, help="Build the datasources on a local "
                                                     "Dask cluster of N processes (the dask extra; needs "
                                                     "PREFECT_API_URL).")] = None,
) -> None:
    """Build the index (a Prefect flow run): reflect, profile, embed, and switch each datasource's live build."""
    config = ctx.obj.config()
    for ds in datasource or []:
        config.datasource(ds)
    from nl2sql.flows.index import PROGRESS_LISTENERS, index_build, on_dask

    building = on_dask(dask_workers) if dask_workers else index_build

    with Progress(TextColumn("{task.description:<28}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  console=console, transient=True) as bar:
        tasks: dict[tuple[str, str], TaskID] = {}

        def show(ds: str, stage: str, done: int, total: int) -> None:
            key = (ds, stage)
            if key not in tasks:
                tasks[key] = bar.add_task(f"{ds}: {stage}", total=total)
            bar.update(tasks[key], completed=done, total=total)

        PROGRESS_LISTENERS.append(show)
        try:
            outcome = building(datasource_ids=datasource or None, config=str(config.path), full=full)
        finally:
            PROGRESS_LISTENERS.remove(show)
    table = Table("datasource", "tables", "entries", "embedded", "cached", "index", "seconds", "changes",
                  title="Index builds")
    for b in outcome["builds"]:
        table.add_row(b["datasource_id"], str(b["tables"]), str(sum(b["counts"].values())), str(b["embedded"]),
                      str(b["cached"]), b["index_kind"], f"{sum(b['seconds'].values()):.1f}", b["changes"])
    print_table(table)
    for ds, message in outcome["failures"].items():
        console.print(f"[bold red]{escape(ds)} failed[/]: {escape(str(message))}")
    if outcome["failures"]:
        raise typer.Exit(1)


@index_app.command("versions")
def index_versions(ctx: typer.Context, datasource: Annotated[str, typer.Argument(help="Datasource id.")],
                   as_json: JsonOption = False) -> None:
    """The builds of a datasource's index, newest first (the live one marked)."""
    import datetime as dt

    from nl2sql.index.store import StateStore

    config = ctx.obj.config()
    config.datasource(datasource)
    store = StateStore(config.state_dir)
    live = store.live_build(datasource)
    builds = store.builds(datasource)
    if as_json:
        typer.echo(json.dumps([{**vars(b), "live": live is not None and b.build_id == live.build_id} for b in builds],
                              default=str, indent=2))
        return
    table = Table("build", "status", "started", "entries", "index", "fingerprint", "", title=f"Index builds of {datasource}")
    for b in builds:
        started = dt.datetime.fromtimestamp(b.started_at).strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(b.build_id, b.status, started, str(b.entry_count or ""), b.index_kind or "", b.fingerprint or "",
                      "live" if live and b.build_id == live.build_id else "")
    print_table(table)
    if not builds:
        console.print(f"No builds yet: run `nl2sql index build --datasource {datasource}`.")


@index_app.command("check")
def index_check_command(
    ctx: typer.Context,
    datasource: Annotated[list[str] | None, typer.Option("--datasource", "-d", help="Only these datasources.")] = None,
    role: Annotated[str | None, typer.Option("--role", "-r", help="Show only what this role may see (default: "
                                             "everything, as the nightly check sees it).")] = None,
    suite: Annotated[list[str] | None, typer.Option("--suite", help="Eval suites whose gold SQL is checked (default: "
                                                    "evals.suites).")] = None,
    no_expectations: Annotated[bool, typer.Option("--no-expectations", help="Skip the data expectations.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Check the live schema and data against the live index build (a Prefect flow run): exit 0 unchanged,
    1 drifted, 2 failed."""
    from rich.markdown import Markdown

    from nl2sql.policies import role_rules

    config = ctx.obj.config()
    for ds in datasource or []:
        config.datasource(ds)
    if role:
        role_rules(config.policies, role)
    from nl2sql.flows.drift import drift_check

    outcome = drift_check(datasource_ids=datasource or None, config=str(config.path), role=role,
                          suites=suite or None, expectations=not no_expectations)
    if as_json:
        typer.echo(json.dumps(outcome["reports"], indent=2))
        raise typer.Exit(outcome["exit_code"])
    from nl2sql.index.drift import DriftReport

    colours = {"unchanged": "green", "not_indexed": "yellow", "drifted": "bold red", "failed": "bold red"}
    for data in outcome["reports"]:
        report = DriftReport.model_validate(data)
        console.print(f"[{colours[report.status]}]{escape(report.datasource_id)}: {report.status}[/]"
                      + (f" ({escape(report.diff.summary())})" if not report.diff.empty else ""))
        if report.status in ("drifted", "failed"):
            console.print(Markdown(report.markdown(heading=False)))
        elif report.message:
            console.print(escape(report.message))
    raise typer.Exit(outcome["exit_code"])


@index_app.command("diff")
def index_diff_command(
    ctx: typer.Context,
    datasource: Annotated[str, typer.Argument(help="Datasource id.")],
    version: Annotated[str | None, typer.Option("--version", help="A build id (`nl2sql index versions`; default: "
                                                "the live build).")] = None,
    role: RoleOption = None,
    user: UserOption = None,
    as_json: JsonOption = False,
) -> None:
    """What a build of the index changed in the schema, against the build before it: only the tables the role
    may read (default: policies.default_role)."""
    from nl2sql.errors import NL2SQLError, SecurityViolation, did_you_mean
    from nl2sql.index.store import StateStore
    from nl2sql.policies import role_rules, scope
    from nl2sql.policies.users import acting_role
    from nl2sql.verified.scope import allows_table

    config = ctx.obj.config()
    acting = acting_role(config.policies, user, role) or config.policies.default_role  # the caller, checked first
    role_rules(config.policies, acting)  # an unknown role is a usage error
    config.datasource(datasource)
    caller = scope(config.policies, acting, datasource)
    if not caller.reachable:
        raise SecurityViolation(datasource=datasource)
    store = StateStore(config.state_dir)
    builds = {b.build_id: b for b in store.builds(datasource) if b.status == "committed"}
    build = store.live_build(datasource) if version is None else builds.get(version)
    if build is None:
        if version is None:
            raise NL2SQLError(f"{datasource} has no live build.", fix=f"Run `nl2sql index build -d {datasource}`.")
        guess = did_you_mean(version, list(builds))
        raise NL2SQLError(f"{datasource} has no build {version}." + (f" Did you mean {guess}?" if guess else ""),
                          fix=f"See `nl2sql index versions {datasource}`.")
    found = [(old, new, at, diff) for old, new, at, diff in store.diffs(datasource) if new == build.fingerprint]
    if not found:
        raise NL2SQLError(f"No schema diff is recorded for build {build.build_id}.",
                          fix=f"See `nl2sql index versions {datasource}`.")
    old, new, _, recorded = found[-1]
    diff = recorded.scoped(lambda table: allows_table(caller, table))  # denied tables and columns are not named
    if as_json:
        typer.echo(json.dumps({"build_id": build.build_id, "role": acting, "from_fingerprint": old,
                               "to_fingerprint": new, **diff.model_dump(mode="json")}, indent=2))
        return
    from nl2sql.index.drift import diff_lines

    console.print(f"Build {build.build_id} of {datasource}: {diff.summary()}"
                  + ("" if old else " (the first build: every table added)"))
    for line in diff_lines(diff):
        console.print(escape(line))


@app.command("retrieve")
def retrieve_command(
    ctx: typer.Context,
    question: Annotated[str, typer.Argument(help="A question in plain language.")],
    role: RoleOption = None,
    user: UserOption = None,
    datasource: Annotated[str | None, typer.Option("--datasource", "-d", help="Skip routing: use this datasource.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Show how a question routes across datasources and the schema the planner would get."""
    from nl2sql.engine import Engine

    with Engine(ctx.obj.config()) as engine:
        result = engine.retrieve(question, user=user, role=role, datasource=datasource)  # checks the caller first
        missing = engine.unindexed([datasource] if datasource else None)
    if missing:
        err_console.print(f"[yellow]Not indexed yet, so not routed to[/]: {', '.join(missing)} "
                          "(run `nl2sql index build`).")
    if as_json:
        payload = {"routing": result.routing.explanation(),
                   "schema": None if result.retrieved is None else {
                       "datasource": result.retrieved.datasource_id, "tables": result.retrieved.table_names(),
                       "columns": {t.name: [c.name for c in t.columns] for t in result.retrieved.tables},
                       "foreign_keys": result.retrieved.foreign_keys}}
        typer.echo(json.dumps(payload, indent=2))
        return
    routing = result.routing
    if routing.strategy == "evidence":
        table = Table("datasource", "score", "similarity (3 best)", "lexical", "names", "BM25", "",
                      title="Routing (evidence)")
        for c in routing.candidates:
            verdict = "picked" if c.datasource_id in routing.picks else routing.dropped.get(c.datasource_id, "")
            table.add_row(c.datasource_id, f"{c.score:.4f}", f"{c.evidence.get('dense', 0.0):.3f}",
                          f"{c.evidence.get('lexical', 0.0):g}", f"{c.evidence.get('names', 0.0):g}",
                          f"{c.evidence.get('bm25', 0.0):.2f}", verdict)
    else:
        table = Table("datasource", "fused score", "best similarity",
                      "votes (table/column/example/verified/description)", "", title=f"Routing ({routing.strategy})")
        for c in routing.candidates:
            votes = "/".join(str(c.votes.get(s, 0)) for s in ("table", "column", "example", "verified", "description"))
            verdict = "picked" if c.datasource_id in routing.picks else routing.dropped.get(c.datasource_id, "")
            table.add_row(c.datasource_id, f"{c.score:.4f}", f"{c.similarity:.3f}", votes, verdict)
    print_table(table)
    if routing.pair:
        console.print(f"The question asks about two things: its parts went to {routing.pair[0]} and "
                      f"{routing.pair[1]}, which lead the picks.")
    if result.retrieved is not None:
        console.print(f"[bold]Schema for the planner[/] ({result.retrieved.datasource_id}, "
                      f"{len(result.retrieved.tables)} tables, {result.retrieved.column_count} columns):")
        console.print(result.retrieved.render(), highlight=False, markup=False)
        for fk in result.retrieved.foreign_keys:
            console.print(f"  {fk}", markup=False)
