"""Commands over the data itself: `init --demo`, `datasources list|save-block`, `schema`, `sql`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from nl2sql.cli.options import JsonOption, RoleOption, UserOption, app, console, datasources_app, print_table
from nl2sql.errors import ConfigError, ConfigProblem

if TYPE_CHECKING:  # pandas and SQLAlchemy load only for the commands that read data: `--help` stays fast
    from nl2sql.datasources.models import ExecutionResult

@app.command("init")
def init_command(
    directory: Annotated[Path, typer.Argument(help="Folder to create the project in.")],
    demo: Annotated[bool, typer.Option("--demo", help="Create the demo project (chinook, support, webanalytics).")] = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing demo project.")] = False,
) -> None:
    """Create a project. With --demo: three local databases, four roles, ready to query."""
    from nl2sql.demo import init_demo

    if not demo:
        raise ConfigError(ConfigProblem("", "", "only the demo project can be created so far", "pass --demo"))
    config = init_demo(directory, force=force)
    console.print(f"Created the demo project in [bold]{escape(str(directory))}[/]: {escape(config.name)} and data/ "
                  "(chinook.sqlite, support.sqlite, webanalytics.duckdb).")
    console.print(f"Next: [bold]nl2sql -c {escape(str(config))} sql \"SELECT Name FROM Genre\" --datasource chinook --role viewer[/]")


@datasources_app.command("list")
def datasources_list(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """List the configured datasources (passwords hidden)."""
    import sqlalchemy as sa

    config = ctx.obj.config()
    records = []
    for ds in config.datasources:
        where = (f"block:{ds.block}" if ds.block
                 else sa.make_url(ds.url.get_secret_value()).render_as_string(hide_password=True))
        records.append({"id": ds.id, "dialect": ds.dialect or "(from block)", "location": where,
                        "description": ds.description, "sample_questions": len(ds.sample_questions)})
    if as_json:
        console.print_json(json.dumps(records))
        return
    table = Table("id", "dialect", "location", "description", title="Datasources")
    for r in records:
        table.add_row(*(escape(str(r[k])) for k in ("id", "dialect", "location", "description")))
    print_table(table)


@datasources_app.command("save-block")
def datasources_save_block(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Block name to save under (then `block: NAME` in nl2sql.yaml).")],
    url_env: Annotated[str, typer.Option("--url-env", help="Environment variable holding the SQLAlchemy URL.")],
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing block.")] = False,
) -> None:
    """Save a datasource URL as a Prefect DatasourceBlock, so nl2sql.yaml need not hold the password."""
    ctx.obj.config()
    url = os.environ.get(url_env)
    if not url:
        raise ConfigError(ConfigProblem("", "--url-env", f"environment variable {url_env} is not set",
                                        f"export {url_env}=postgresql+psycopg://user:pass@host/db first"))
    from nl2sql.blocks import save_datasource_block

    save_datasource_block(name, url, overwrite=overwrite)
    console.print(f"Saved DatasourceBlock '{escape(name)}'. Use it with `block: {escape(name)}` under a datasource.")


@app.command("schema")
def schema_command(
    ctx: typer.Context,
    datasource: Annotated[str, typer.Argument(help="Datasource id.")],
    role: RoleOption = None,
    user: UserOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show the tables and columns a role may read in a datasource."""
    from nl2sql.engine import Engine

    with Engine(ctx.obj.config()) as engine:
        role_name = engine.role_of(user, role)
        snapshot = engine.schema(datasource, user=user, role=role)
    tables = snapshot.tables
    if as_json:
        console.print_json(json.dumps([t.model_dump(mode="json") for t in tables]))
        return
    console.print(f"[bold]{escape(datasource)}[/] ({snapshot.dialect}) as role [bold]{escape(role_name)}[/]: {len(tables)} tables")
    for t in tables:
        grid = Table("column", "type", "null", "key", title=f"{escape(t.name)}  ({t.row_count if t.row_count is not None else '?'} rows)",
                     title_justify="left")
        refs = {c: f"→ {fk.ref_table}.{fk.ref_columns[i]}" for fk in t.foreign_keys for i, c in enumerate(fk.columns)}
        for c in t.columns:
            key = " ".join(k for k in ("PK" if c.primary_key else "", refs.get(c.name, "")) if k)
            grid.add_row(escape(c.name), escape(c.type), "yes" if c.nullable else "", escape(key))
        print_table(grid)


@app.command("sql")
def sql_command(
    ctx: typer.Context,
    statement: Annotated[str, typer.Argument(help="One read-only SELECT statement. One that starts with '-' (a "
                                             "leading '--' comment) goes after `--`, every option before it: "
                                             "nl2sql sql -d chinook -- \"-- note …\".")],
    datasource: Annotated[str, typer.Option("--datasource", "-d", help="Datasource id to run it on.")],
    role: RoleOption = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Row limit (default: settings.pipeline.row_limit; "
                                              "never above settings.resources.max_rows).")] = None,
    user: UserOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run one SELECT on a datasource: guard, scope check for the role, read-only execution."""
    from nl2sql.engine import Engine

    with Engine(ctx.obj.config()) as engine:
        result = engine.sql(statement, datasource=datasource, user=user, role=role, limit=limit)
    if as_json:
        frame = result.plain_frame()
        payload = {"columns": [c.model_dump() for c in result.columns],
                   "rows": frame.to_dict(orient="records"), "truncated": result.truncated}
        typer.echo(json.dumps(payload, default=str, indent=2))
        return
    print_rows(result)


#: Rows drawn as a terminal table (a table of 100,000 rows took minutes and gigabytes to draw); --json gives all.
TABLE_ROWS = 500


def print_rows(result: ExecutionResult) -> None:
    """Rows as a table (the first TABLE_ROWS), then the count (and whether the row limit cut them)."""
    frame = result.plain_frame()
    table = Table(*[c.name for c in result.columns])
    for row in frame.head(TABLE_ROWS).itertuples(index=False):
        table.add_row(*["" if v is None else escape(str(v)) for v in row])
    print_table(table)
    note = f" (truncated at {len(frame)}; raise --limit for more)" if result.truncated else ""
    shown = f", the first {TABLE_ROWS} shown (--json prints every row)" if len(frame) > TABLE_ROWS else ""
    console.print(f"{len(frame)} row{'s' if len(frame) != 1 else ''}{note} in {result.elapsed_ms:.0f} ms{shown}")
