"""`nl2sql mcp` (the MCP server, over stdio or streamable HTTP on loopback) and `nl2sql mcp token`."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from nl2sql.cli.options import RoleOption, UserOption, app, err_console
from nl2sql.policies.users import new_token, token_hash

mcp_app = typer.Typer(help="The MCP server: questions, datasources, tables and verified queries as MCP tools.")
app.add_typer(mcp_app, name="mcp")


@mcp_app.callback(invoke_without_command=True)
def mcp_command(
    ctx: typer.Context,
    transport: Annotated[str, typer.Option("--transport", "-t", help="stdio (one caller: --user, or --role "
                                           "without policies.users) or http (streamable HTTP on 127.0.0.1, a "
                                           "bearer token per user).")] = "stdio",
    user: UserOption = None,
    role: RoleOption = None,
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="The HTTP port on 127.0.0.1.")] = 8765,
    executor: Annotated[str, typer.Option("--executor", help="inline (questions run in this process) or prefect "
                                          "(each question a run of the ask flow).")] = "inline",
) -> None:
    """Serve the MCP tools (ask, list_datasources, describe_table, list_verified_queries) until the client goes
    (stdio) or Ctrl-C (http). See docs/mcp.md for a client configuration."""
    if ctx.invoked_subcommand is not None:
        return
    from nl2sql.errors import ConfigError, ConfigProblem

    if transport not in ("stdio", "http"):
        raise typer.BadParameter("stdio or http", param_hint="--transport")
    if executor not in ("inline", "prefect"):
        raise typer.BadParameter("inline or prefect", param_hint="--executor")
    try:
        from nl2sql.mcp.server import Caller, UserTokens, build_server, http_caller
    except ImportError as exc:
        raise ConfigError(ConfigProblem("", "mcp", "the MCP server needs the `mcp` extra",
                                        "pip install 'nl2sql[mcp]'")) from exc
    from nl2sql.engine import Engine

    engine = Engine(ctx.obj.config())
    chosen: Literal["inline", "prefect"] = "prefect" if executor == "prefect" else "inline"
    if transport == "stdio":
        caller = Caller(user, engine.role_of(user, role))  # an unknown user or role: exit 2 before serving
        err_console.print(f"nl2sql MCP server on stdio, as {caller.user or 'role'} {caller.role}.")
        build_server(engine, caller, executor=chosen).run("stdio")
        return
    if user or role:
        raise typer.BadParameter("over http each request names its user by its bearer token",
                                 param_hint="--user/--role")
    from nl2sql.mcp.server import user_token_hashes

    hashes = user_token_hashes(engine.config.policies)
    if not hashes:
        raise ConfigError(ConfigProblem(str(engine.config.path), "policies.users", "no user has an "
                                        "mcp_token_sha256, so no one could reach the HTTP server",
                                        "mint one with `nl2sql mcp token --user ID` and paste its line under "
                                        "that user"))
    server = build_server(engine, lambda: http_caller(engine), executor=chosen, tokens=UserTokens(hashes),
                          port=port)
    err_console.print(f"nl2sql MCP server on http://127.0.0.1:{port}/mcp for {len(hashes)} users (bearer tokens).")
    server.run("streamable-http")


@mcp_app.command("token")
def mcp_token(user: Annotated[str | None, typer.Option(
        "--user", help="The user the token is for (shown in the snippet to paste).")] = None) -> None:
    """Mint a bearer token for the HTTP MCP server: give it to the user, paste its hash into policies.users."""
    token = new_token()
    typer.echo(f"token: {token}\n(give it to the user, and only to them: it is shown this once)\n")
    typer.echo(f"Paste under policies.users:\n  {user or 'USER'}:\n    roles: [...]\n"
               f"    mcp_token_sha256: {token_hash(token)}\n")
    typer.echo("The MCP client sends it as `Authorization: Bearer <token>`.")
