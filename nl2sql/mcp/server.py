"""The MCP server: the engine's questions, datasources, tables and verified queries as MCP tools, for one caller.

Over stdio the caller is fixed when the server starts (`nl2sql mcp --user U` or `--role R`); over streamable HTTP
each request names its user by a bearer token (`policies.users.<id>.mcp_token_sha256`), and a request without a
valid one is refused with 401 before any tool runs. Every tool answers a JSON object (its structured content) and
decides what to show for that caller alone, through `nl2sql.Engine`.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.fastmcp import Context, FastMCP

from nl2sql.config.models import PoliciesConfig
from nl2sql.datasources.models import TableInfo
from nl2sql.engine import Engine
from nl2sql.errors import GENERIC_REFUSAL, NL2SQLError, SecurityViolation
from nl2sql.pipeline.result import QueryResult
from nl2sql.pipeline.words import ROWS_READY
from nl2sql.policies.users import token_hash

log = logging.getLogger("nl2sql.mcp")

#: Rows of each sub-query an `ask` answer carries.
PREVIEW_ROWS = 20
#: Codes whose messages are written for the asker (refusals, hooks, limits, the answer checks…): any other
#: message may carry an exception's or a database's text, so the tool shows its code and the trace id instead.
ASKER_CODES = frozenset({
    "SECURITY_VIOLATION", "QUESTION_NOT_ANSWERABLE", "QUESTION_TOO_BROAD", "HOOK_DENIED", "HOOK_FAILED",
    "RUN_LIMIT_REACHED", "INDEX_NOT_BUILT", "LLM_NOT_CONFIGURED", "LLM_TIMEOUT", "LLM_RATE_LIMITED",
    "QUERY_TIMEOUT", "RESULT_TOO_LARGE", "RESULT_TRUNCATED", "VALUE_NOT_FOUND", "JOIN_FAN_OUT", "ALL_NULL_COLUMN",
    "ANSWER_SHAPED", "PLAN_REPAIRED", "SUB_QUERY_DROPPED", "SUB_QUERY_REROUTED", "DECOMPOSITION_DISCARDED",
    "ANSWERABILITY_CHECK_UNREAD", "REFINER_REPEATED", "PLANNER_RESAMPLED",
    "JOIN_KEY_UNCONVERTED", "DATASOURCE_NOT_FOUND"})
#: The events an `ask` reports as progress: its steps as they finish.
PROGRESS_EVENTS = frozenset({"node.finished"})


@dataclass(frozen=True)
class Caller:
    """Who asks: a user id (None without `policies.users`) and the role it acts in."""

    user: str | None
    role: str


def shown_message(code: str, message: str, trace_id: str | None) -> str:
    """A message as the tool shows it: the asker's own codes keep theirs, any other is its code (and trace id)."""
    if code == "SECURITY_VIOLATION":
        return GENERIC_REFUSAL
    if code in ASKER_CODES:
        return message
    return f"{code} (trace {trace_id})" if trace_id else code


def rows_message(data: Mapping[str, Any]) -> dict[str, Any]:
    """What an `ask` logs to its caller as soon as the rows exist (before the answer in words): each sub-query's
    SQL, the columns, the first rows and how many there are."""
    return {"rows_ready": True, "sql": [{"datasource_id": q["datasource_id"], "sql": q["sql"]}
                                        for q in data["sub_queries"]],
            "columns": data["columns"], "rows": data["rows"][:PREVIEW_ROWS], "total_rows": data["total_rows"]}


def ask_answer(result: QueryResult) -> dict[str, Any]:
    """What the `ask` tool answers for a QueryResult."""
    trace = result.trace_id
    subs = [{"id": sq.id, "datasource_id": sq.datasource_id, "source": sq.source, "sql": sq.sql,
             "columns": sq.columns, "rows": sq.rows[:PREVIEW_ROWS], "total_rows": sq.total_rows,
             "truncated": sq.truncated or (sq.total_rows or 0) > PREVIEW_ROWS,
             "error": None if sq.error is None else {"code": sq.error.code, "message": shown_message(
                 sq.error.code, sq.error.message, trace)}}
            for sq in result.sub_queries]
    answer: dict[str, Any] = {
        "status": result.status, "trace_id": trace,
        "answer": {"summary": result.answer.summary, "content": result.answer.content},
        "sub_queries": subs,
        "truncated": any(s["truncated"] for s in subs),
        "warnings": [{"code": w.code, "step": w.step, "message": shown_message(w.code, w.message, trace)}
                     for w in result.warnings],
        "errors": [{"code": e.code, "step": e.node, "message": shown_message(e.code, e.message, trace)}
                   for e in result.errors],
        "approvals_needed": [{"request_id": a.id, "datasource_id": a.datasource_id, "reason": a.reason,
                              "approver_roles": list(a.approver_roles), "sql_sha256": a.sql_sha256}
                             for a in result.approvals]}
    if result.status in ("error", "stopped") and result.errors:  # the answer is the first error's message
        first = answer["errors"][0]["message"]
        answer["answer"] = {"summary": first, "content": first}
    if result.combined is not None:
        answer["combined"] = {"kind": result.combined.kind, "columns": result.combined.columns,
                              "rows": result.combined.rows[:PREVIEW_ROWS], "total_rows": result.combined.total_rows,
                              "truncated": result.combined.truncated}
    return answer


def table_answer(datasource: str, table: TableInfo) -> dict[str, Any]:
    """What `describe_table` answers for a table the caller may read."""
    return {"status": "ok", "datasource_id": datasource, "schema": table.schema_name, "table": table.name,
            "kind": table.kind, "row_count": table.row_count, "primary_key": table.primary_key,
            "columns": [{"name": c.name, "type": c.type, "nullable": c.nullable, "primary_key": c.primary_key}
                        for c in table.columns],
            "foreign_keys": [{"columns": fk.columns, "ref_table": fk.ref_table, "ref_columns": fk.ref_columns}
                             for fk in table.foreign_keys]}


def _named(table: TableInfo, default_schema: str | None) -> TableInfo:
    """A table with its schema named even in the default schema (`main.orders` beside `archive.orders`)."""
    return table if table.schema_name or not default_schema else table.model_copy(
        update={"schema_name": default_schema})


def _qualified(datasource: str, table: TableInfo, with_datasource: bool) -> str:
    name = f"{table.schema_name}.{table.name}" if table.schema_name else table.name
    return f"{datasource}.{name}" if with_datasource else name


def describe(engine: Engine, caller: Caller, table: str, datasource: str | None = None) -> dict[str, Any]:
    """`describe_table`: the caller-visible table, `not_found` (a denied, a missing table and an unreachable
    datasource alike) with the tables the caller may read, or `ambiguous` with the names that match."""
    reachable = [d.id for d in engine.datasources(user=caller.user, role=caller.role)]
    searched = [datasource] if datasource in reachable else reachable
    snapshots = {ds: engine.schema(ds, user=caller.user, role=caller.role) for ds in searched}
    schemas = {ds: snapshot.tables for ds, snapshot in snapshots.items()}
    wanted_schema, _, wanted = table.rpartition(".")
    # a table of the default schema has no schema name: it answers to the default's name too (`main.orders`)
    matches = [(ds, t) for ds, tables in schemas.items() for t in tables
               if t.name.lower() == wanted.lower()
               and (not wanted_schema or (t.schema_name or snapshots[ds].default_schema or "").lower()
                    == wanted_schema.lower())]
    several = len(searched) > 1
    if datasource is not None and datasource not in reachable:
        matches = []  # a datasource the caller cannot reach is a table not found, whatever it holds
    if len(matches) == 1:
        return table_answer(*matches[0])
    if len(matches) > 1:
        return {"status": "ambiguous", "matches": sorted(
            _qualified(ds, _named(t, snapshots[ds].default_schema), several) for ds, t in matches)}
    return {"status": "not_found", "message": "No such table among those you may read.",
            "tables": sorted(_qualified(ds, t, several) for ds, tables in schemas.items() for t in tables)}


def user_token_hashes(policies: PoliciesConfig) -> dict[str, str]:
    """Each user's bearer-token hash (`mcp_token_sha256`), for the users that have one. Read from the configuration
    only, never from a Prefect block: whoever reaches the Prefect API may write blocks, and could make a token of
    their own any user's (the same reason `policies.users` is never read from a block)."""
    return {user_id: user.mcp_token_sha256 for user_id, user in (policies.users or {}).items()
            if user.mcp_token_sha256}


class UserTokens:
    """Bearer tokens of the users that may reach the HTTP server: each user's `mcp_token_sha256`."""

    def __init__(self, hashes: Mapping[str, str]) -> None:
        self.hashes = dict(hashes)

    async def verify_token(self, token: str) -> AccessToken | None:
        """The user whose token this is (every hash compared, in constant time), or None."""
        presented = token_hash(token)
        found = None
        for user, expected in self.hashes.items():
            if hmac.compare_digest(presented, expected) and found is None:
                found = user
        return None if found is None else AccessToken(token=token, client_id=found, subject=found, scopes=[])


def build_server(engine: Engine, caller: Caller | Callable[[], Caller], *, executor: str = "inline",
                 tokens: UserTokens | None = None, port: int = 8765) -> FastMCP:
    """The MCP server over an engine: `caller` fixed (stdio) or resolved per request (HTTP, from the bearer token
    `tokens` verified)."""
    url = f"http://127.0.0.1:{port}"
    auth = AuthSettings(issuer_url=url, resource_server_url=None) if tokens is not None else None  # type: ignore[arg-type]
    server = FastMCP("nl2sql", instructions="Ask questions of the databases you may read, in plain language; list "
                     "them, describe their tables and their verified queries.", host="127.0.0.1", port=port,
                     token_verifier=tokens, auth=auth, log_level="WARNING")

    def who() -> Caller:
        return caller() if callable(caller) else caller

    @server.tool(description="Answer a question from the databases you may read: the answer, each sub-query's "
                 f"SQL, columns and first {PREVIEW_ROWS} rows, warnings, errors, approvals needed and the trace id. "
                 "The steps are reported as progress.")
    async def ask(question: str, ctx: Context, datasource: str | None = None) -> dict[str, Any]:
        return await guarded(lambda c: _ask(engine, c, question, datasource, executor, ctx), who)

    @server.tool(description="The datasources you may ask about: id, description, SQL dialect.")
    async def list_datasources() -> dict[str, Any]:
        return await guarded(lambda c: _threaded(lambda: {"datasources": [
            {"id": d.id, "description": d.description, "dialect": d.dialect}
            for d in engine.datasources(user=c.user, role=c.role)]}), who)

    @server.tool(description="A table you may read: its columns, types, keys and row count. `table` may be "
                 "`schema.table`; `not_found` lists the tables you may read, `ambiguous` the names that match.")
    async def describe_table(table: str, datasource: str | None = None) -> dict[str, Any]:
        return await guarded(lambda c: _threaded(lambda: describe(engine, c, table, datasource)), who)

    @server.tool(description="The verified queries you may run: their datasource, question, SQL and parameters.")
    async def list_verified_queries(datasource: str | None = None) -> dict[str, Any]:
        return await guarded(lambda c: _threaded(lambda: {"verified_queries": [
            {"datasource_id": q.datasource_id, "question": q.question, "sql": q.sql, "parameters": q.parameters}
            for q in engine.verified_queries(user=c.user, role=c.role)
            if datasource is None or q.datasource_id == datasource]}), who)

    return server


async def _threaded(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    return await asyncio.get_running_loop().run_in_executor(None, fn)


async def guarded(tool: Callable[[Caller], Any], who: Callable[[], Caller]) -> dict[str, Any]:
    """Run a tool for the request's caller: an engine error is its code (and, for the asker's codes, its message);
    anything else is INTERNAL_ERROR, logged here and never shown."""
    try:
        return await tool(who())
    except SecurityViolation:
        return {"status": "error", "errors": [{"code": "SECURITY_VIOLATION", "message": GENERIC_REFUSAL}]}
    except NL2SQLError as exc:
        return {"status": "error", "errors": [{"code": exc.code, "message": shown_message(exc.code, str(exc), None)}]}
    except Exception:
        log.exception("an MCP tool failed")
        return {"status": "error", "errors": [{"code": "INTERNAL_ERROR", "message": "INTERNAL_ERROR"}]}


def http_caller(engine: Engine) -> Caller:
    """The caller of the HTTP request being served: the user its bearer token names, in that user's first role."""
    token = get_access_token()
    if token is None:  # the auth middleware refuses such a request before any tool runs
        raise SecurityViolation()
    return Caller(token.client_id, engine.role_of(token.client_id, None))


async def _ask(engine: Engine, caller: Caller, question: str, datasource: str | None, executor: str,
               ctx: Context | None) -> dict[str, Any]:
    reachable = [d.id for d in engine.datasources(user=caller.user, role=caller.role)]
    if datasource is not None and datasource not in reachable:
        return {"status": "error", "errors": [{"code": "DATASOURCE_NOT_FOUND", "message": f"No datasource "
                                               f"{datasource!r} that you may ask about (yours: "
                                               f"{', '.join(reachable)})."}]}
    loop = asyncio.get_running_loop()
    steps: asyncio.Queue[Any] = asyncio.Queue()

    def heard(event: Any) -> None:  # on the run's threads: handed to the loop in order
        if event.name in PROGRESS_EVENTS or event.name == ROWS_READY:
            loop.call_soon_threadsafe(steps.put_nowait, event)

    run = loop.run_in_executor(None, functools.partial(engine.ask, question, user=caller.user, role=caller.role,
                                                       datasource=datasource, executor=executor, on_event=heard))
    run.add_done_callback(lambda _: steps.put_nowait(None))
    done = 0
    while (event := await steps.get()) is not None:
        done += 1
        if ctx is not None and event.name == ROWS_READY:  # the SQL and rows now, the answer in words after
            await ctx.info(json.dumps(rows_message(event.data), default=str))
            await ctx.report_progress(done, None, f"rows ready: {event.data['total_rows']}; the answer follows")
        elif ctx is not None:
            data = event.data
            sub = f" {data['sub_query_id']}" if data.get("sub_query_id") else ""
            await ctx.report_progress(done, None, f"{data['node']}{sub}: {'done' if data['ok'] else 'failed'}")
    return ask_answer(await run)
