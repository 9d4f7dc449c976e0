"""The MCP server as its clients see it: the installed `nl2sql mcp`, driven by the MCP SDK's own client over stdio
(started as docs/mcp.md's desktop configuration says) and over streamable HTTP with bearer tokens."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from nl2sql.config import Config
from nl2sql.engine import Engine
from nl2sql.mcp.server import Caller, UserTokens, ask_answer, describe, user_token_hashes
from nl2sql.policies.users import token_hash
from tests.support.ask import ModelScript
from tests.support.prefect_server import free_port

ROOT = Path(__file__).resolve().parents[2]
NL2SQL = str(Path(sys.executable).parent / "nl2sql")
DOC = (ROOT / "docs" / "mcp.md").read_text()
#: Columns only Chinook's Customer table has: a viewer may never read any of them.
CUSTOMER_ONLY = ("SupportRepId", "PostalCode", "Company", "FirstName", "LastName", "Email", "Fax")
ANN_TOKEN, BOB_TOKEN = "ann-s3cret-token", "bob-s3cret-token"

Session = Callable[[ClientSession], Awaitable[Any]]


def documented_client() -> dict[str, Any]:
    """The desktop client configuration of docs/mcp.md."""
    block = DOC.split("## A desktop client", 1)[1].split("```json\n", 1)[1].split("```", 1)[0]
    return json.loads(block)["mcpServers"]["nl2sql"]


def documented_tools() -> dict[str, tuple[list[str], list[str], str]]:
    """Each documented tool: its arguments, the optional ones, and its answer's text."""
    section = DOC.split("## Tools", 1)[1]
    tools = {}
    for name, arguments, answer in re.findall(r"^\| `(\w+)` \| (.+?) \| (.+?) \|$", section, flags=re.M):
        parts = [] if arguments == "none" else [p.strip() for p in re.split(r",(?![^(]*\))", arguments)]
        names = [re.match(r"`(\w+)`", p).group(1) for p in parts]  # type: ignore[union-attr]
        tools[name] = (names, [n for n, p in zip(names, parts, strict=True) if "(optional)" in p], answer)
    return tools


def stdio_params(config: Config, role: str) -> StdioServerParameters:
    """The documented client configuration, with this machine's paths and the role under test."""
    client = documented_client()
    args = [str(config.path) if a.endswith("nl2sql.yaml") else a for a in client["args"]]
    args[args.index("--role") + 1] = role
    return StdioServerParameters(command=NL2SQL if client["command"].endswith("/nl2sql") else client["command"],
                                 args=args)


def over_stdio(config: Config, role: str, session: Session, logged: list[Any] | None = None) -> Any:
    async def heard(params: Any) -> None:
        if logged is not None:
            logged.append(params)

    async def run() -> Any:
        async with stdio_client(stdio_params(config, role)) as (read, write), ClientSession(
                read, write, logging_callback=heard) as client:
            await client.initialize()
            return await session(client)

    return asyncio.run(run())


async def call(client: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.isError, result.content
    assert json.loads(result.content[0].text) == result.structuredContent  # type: ignore[union-attr]
    return result.structuredContent  # type: ignore[return-value]


def keys_in(answer: Any) -> set[str]:
    """Every key of a JSON answer, at any depth."""
    if isinstance(answer, dict):
        return set(answer) | {k for v in answer.values() for k in keys_in(v)}
    if isinstance(answer, list):
        return {k for v in answer for k in keys_in(v)}
    return set()


def test_the_tools_and_their_answers_are_the_documented_ones(project: Config, model: ModelScript) -> None:
    documented = documented_tools()

    async def session(client: ClientSession) -> tuple[list, dict]:
        listed = (await client.list_tools()).tools
        answers = {
            "ask": await call(client, "ask", question="How much did we earn in each year?"),
            "list_datasources": await call(client, "list_datasources"),
            "describe_table": [await call(client, "describe_table", table=t) for t in ("Invoice", "Nowhere")],
            "list_verified_queries": await call(client, "list_verified_queries", datasource="chinook"),
        }
        return listed, answers

    listed, answers = over_stdio(project, "analyst", session)
    assert [t.name for t in listed] == list(documented)
    for tool in listed:
        arguments, optional, answer_text = documented[tool.name]
        assert list(tool.inputSchema["properties"]) == arguments, tool.name
        assert sorted(tool.inputSchema.get("required", [])) == sorted(set(arguments) - set(optional)), tool.name
        got = keys_in(answers[tool.name])
        said = set(re.findall(r"`(\w+)`", answer_text))
        assert got <= said, f"{tool.name} answers keys the docs do not name: {got - said}"
    ask = answers["ask"]
    assert ask["status"] == "success", ask
    assert ask["sub_queries"][0]["rows"][0] == [2007, 83, 449.46]
    # every documented key of an answer is there (combined only when sub-queries were combined)
    assert {"status", "trace_id", "answer", "sub_queries", "truncated", "warnings", "errors",
            "approvals_needed"} == set(ask)
    described = answers["describe_table"][0]
    assert described["status"] == "ok" and "BillingCountry" in [c["name"] for c in described["columns"]]
    assert answers["describe_table"][1]["status"] == "not_found"
    assert [d["id"] for d in answers["list_datasources"]["datasources"]] == ["chinook", "support", "webanalytics"]


def test_a_question_reports_its_steps_as_progress_and_at_most_twenty_rows(project: Config, model: ModelScript) -> None:
    progress: list[tuple[float, str | None]] = []

    async def heard(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, message))

    async def session(client: ClientSession) -> dict:
        result = await client.call_tool("ask", {"question": "How many tracks are there in each genre?"},
                                        progress_callback=heard)
        return result.structuredContent  # type: ignore[return-value]

    logged: list = []
    answer = over_stdio(project, "viewer", session, logged)
    assert answer["status"] == "success"
    [sq] = answer["sub_queries"]
    assert len(sq["rows"]) == 20 and sq["total_rows"] == 25 and sq["truncated"] and answer["truncated"]
    # the SQL and rows as soon as they exist, before the answer in words is written
    assert [m for _, m in progress] == ["curated_matcher: done", "executor sq1: done", "sanity sq1: done",
                                        "rows ready: 25; the answer follows", "synthesizer: done"]
    assert [d for d, _ in progress] == [1, 2, 3, 4, 5]
    [rows] = [json.loads(p.data) for p in logged if "rows_ready" in str(p.data)]
    assert rows["sql"] == [{"datasource_id": "chinook", "sql": sq["sql"]}] and rows["total_rows"] == 25
    assert rows["rows"] == sq["rows"] and rows["columns"] == sq["columns"]


def test_a_denied_a_missing_and_an_unreachable_table_get_the_same_answer(project: Config) -> None:
    async def session(client: ClientSession) -> list[dict]:
        return [await call(client, "describe_table", table="Invoice"),
                await call(client, "describe_table", table="NoSuchTable"),
                await call(client, "describe_table", table="Customer", datasource="chinook"),
                await call(client, "describe_table", table="tickets", datasource="support"),
                await call(client, "describe_table", table="tickets", datasource="nowhere")]

    answers = over_stdio(project, "viewer", session)
    assert all(a == answers[0] for a in answers)
    assert answers[0] == {"status": "not_found", "message": "No such table among those you may read.",
                          "tables": ["Album", "Artist", "Genre", "MediaType", "Playlist", "PlaylistTrack", "Track"]}


def test_a_viewer_never_sees_a_customer_column(project: Config, model: ModelScript) -> None:
    async def session(client: ClientSession) -> list[dict]:
        return [await call(client, "list_datasources"),
                await call(client, "list_verified_queries"),
                await call(client, "describe_table", table="Customer"),
                await call(client, "describe_table", table="Genre"),
                await call(client, "ask", question="Which customers live in brazil?"),
                await call(client, "ask", question="Which customers live in brazil?", datasource="support")]

    answers = over_stdio(project, "viewer", session)
    text = json.dumps(answers)
    assert not [c for c in CUSTOMER_ONLY if c in text], text
    refused, elsewhere = answers[4], answers[5]
    assert refused["status"] == "error" and refused["errors"][0]["code"] == "SECURITY_VIOLATION"
    assert refused["answer"]["content"] == "You do not have access to the data needed to answer this question."
    assert elsewhere["errors"][0]["code"] == "DATASOURCE_NOT_FOUND" and "support" not in \
        elsewhere["errors"][0]["message"].split("yours:")[1]
    assert [q["question"] for q in answers[1]["verified_queries"]] == [
        "How many tracks are there in each genre?", "Which tracks are in the {genre} genre?",
        "Which albums did {artist} release?"]


def test_the_server_refuses_a_role_the_policies_do_not_define(project: Config) -> None:
    done = subprocess.run([NL2SQL, "-c", str(project.path), "mcp", "--role", "superuser"], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "UNKNOWN_NAME" in done.stderr and "superuser" in done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def http_server(project: Config) -> Iterator[str]:
    """`nl2sql mcp --transport http` on a project whose users ann (viewer) and bob (analyst) hold MCP tokens."""
    raw = yaml.safe_load(project.path.read_text())
    raw["policies"]["users"] = {"ann": {"roles": ["viewer"], "mcp_token_sha256": token_hash(ANN_TOKEN)},
                                "bob": {"roles": ["analyst"], "mcp_token_sha256": token_hash(BOB_TOKEN)},
                                "cid": {"roles": ["admin"]}}
    config = project.path.with_name("nl2sql-users.yaml")
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    port = free_port()
    server = subprocess.Popen([NL2SQL, "-c", str(config), "mcp", "--transport", "http", "--port", str(port)],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            break
        except httpx.TransportError:
            assert server.poll() is None, server.communicate()
            time.sleep(0.2)
    try:
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def over_http(url: str, token: str, session: Session) -> Any:
    async def run() -> Any:
        async with (httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
                    streamable_http_client(url, http_client=http) as (read, write, _),
                    ClientSession(read, write) as client):
            await client.initialize()
            return await session(client)

    return asyncio.run(run())


def test_http_refuses_a_request_without_a_valid_token(http_server: str) -> None:
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    for auth in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {ANN_TOKEN}x"},
                 {"Authorization": ANN_TOKEN}, {"Authorization": "Bearer é-not-ascii".encode()},
                 {"Authorization": b"Bearer \xff\xfe\x80"}):
        response = httpx.post(http_server, json=hello, headers={**headers, **auth}, timeout=10)
        assert response.status_code == 401, (auth, response.text)
        assert "ann" not in response.text
    assert httpx.post(http_server, json=hello, headers={**headers, "Authorization": f"Bearer {ANN_TOKEN}"},
                      timeout=10).status_code == 200


def test_http_serves_each_token_as_its_user(http_server: str, model: ModelScript) -> None:
    progress: list[str | None] = []

    async def heard(done: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    async def session(client: ClientSession) -> list:
        tools = [t.name for t in (await client.list_tools()).tools]
        earned = await client.call_tool("ask", {"question": "How much did we earn in each year?"},
                                        progress_callback=heard)
        return [tools, await call(client, "describe_table", table="Invoice"), earned.structuredContent]

    tools, invoice, earned = over_http(http_server, ANN_TOKEN, session)
    assert tools == list(documented_tools())
    assert invoice["status"] == "not_found" and earned["errors"][0]["code"] == "SECURITY_VIOLATION"  # ann: viewer
    assert progress == ["curated_matcher: failed"]  # refused at the verified queries: nothing after
    progress.clear()
    _, invoice, earned = over_http(http_server, BOB_TOKEN, session)
    assert invoice["status"] == "ok" and earned["status"] == "success"  # bob: analyst
    assert progress == ["curated_matcher: done", "executor sq1: done", "sanity sq1: done",
                        "rows ready: 5; the answer follows", "synthesizer: done"]


def test_a_token_names_the_one_user_whose_hash_it_matches() -> None:
    from nl2sql.config.models import PoliciesConfig

    policies = PoliciesConfig.model_validate({"roles": {"viewer": {}}, "default_role": "viewer", "users": {
        "ann": {"roles": ["viewer"], "mcp_token_sha256": token_hash(ANN_TOKEN)},
        "cid": {"roles": ["viewer"], "token_sha256": token_hash("cid-approval-token")}}})
    tokens = UserTokens(user_token_hashes(policies))
    assert tokens.hashes == {"ann": token_hash(ANN_TOKEN)}  # cid has an approval token only
    ann = asyncio.run(tokens.verify_token(ANN_TOKEN))
    assert ann is not None and (ann.client_id, ann.subject) == ("ann", "ann")
    for wrong in ("", "cid-approval-token", ANN_TOKEN.upper(), token_hash(ANN_TOKEN), "é" * 40, "\udcff\udc80",
                  ANN_TOKEN + "\x00"):
        assert asyncio.run(tokens.verify_token(wrong)) is None


def test_only_the_askers_own_codes_keep_their_messages() -> None:
    from nl2sql.pipeline.result import QueryResult, RunError, RunWarning, SubQueryResult

    leak = "no such column: salary_band"
    result = QueryResult(
        trace_id="t-1", question="q", status="error",
        errors=[RunError(code="DATASOURCE_ERROR", message=leak, node="executor", sub_query_id="sq1")],
        warnings=[RunWarning(code="VALUE_NOT_FOUND", step="sanity", message="'rok' is not a Genre.Name; closest: "
                             "'Rock'."), RunWarning(code="SOMETHING_ELSE", step="aggregator", message=leak)],
        sub_queries=[SubQueryResult(id="sq1", datasource_id="chinook", question="q",
                                    error=RunError(code="DATASOURCE_ERROR", message=leak))])
    answer = ask_answer(result)
    assert leak not in json.dumps(answer)
    assert answer["errors"] == [{"code": "DATASOURCE_ERROR", "step": "executor",
                                 "message": "DATASOURCE_ERROR (trace t-1)"}]
    assert answer["answer"] == {"summary": "DATASOURCE_ERROR (trace t-1)", "content": "DATASOURCE_ERROR (trace t-1)"}
    assert [w["message"] for w in answer["warnings"]] == ["'rok' is not a Genre.Name; closest: 'Rock'.",
                                                          "SOMETHING_ELSE (trace t-1)"]
    refused = QueryResult(trace_id="t-2", question="q", status="error",
                          errors=[RunError(code="SECURITY_VIOLATION", message="anything at all")])
    assert ask_answer(refused)["answer"]["content"] == "You do not have access to the data needed to answer this " \
        "question."


def test_a_bare_name_in_two_schemas_is_ambiguous(tmp_path: Path) -> None:
    import duckdb

    path = tmp_path / "shop.duckdb"
    with duckdb.connect(str(path)) as db:
        db.execute("CREATE SCHEMA archive; CREATE TABLE main.orders (id INTEGER PRIMARY KEY, total DOUBLE); "
                   "CREATE TABLE archive.orders (id INTEGER PRIMARY KEY, total DOUBLE)")
    config = tmp_path / "nl2sql.yaml"
    config.write_text(yaml.safe_dump({
        "version": 1, "datasources": [{"id": "shop", "url": f"duckdb:///{path}", "schemas": ["main", "archive"]}],
        "policies": {"roles": {"admin": {}}, "default_role": "admin"}}))
    with Engine.from_config(config) as engine:
        caller = Caller(None, "admin")
        assert describe(engine, caller, "orders") == {"status": "ambiguous",
                                                      "matches": ["archive.orders", "main.orders"]}
        exact = describe(engine, caller, "archive.orders")
        assert exact["status"] == "ok" and exact["schema"] == "archive"
        default = describe(engine, caller, "main.orders")  # the default schema's table, by the default's name
        assert default["status"] == "ok" and default["schema"] is None and default["table"] == "orders"


@pytest.mark.slow
def test_questions_may_run_as_flow_runs_of_the_ask_flow(project: Config, model: ModelScript) -> None:
    """`--executor prefect`: each question a run of the ask flow (Prefect's temporary server in the project's
    state folder), the protocol on stdout untouched by Prefect's own output."""
    progress: list[str | None] = []

    async def heard(done: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    params = stdio_params(project, "analyst")
    params = StdioServerParameters(command=params.command, args=[*params.args, "--executor", "prefect"])

    async def run() -> list[dict]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            answers = []
            for _ in range(2):
                result = await client.call_tool("ask", {"question": "How much did we earn in each year?"},
                                                progress_callback=heard)
                answers.append(result.structuredContent)
            return answers

    first, second = asyncio.run(run())
    assert first["status"] == second["status"] == "success" and first["trace_id"] != second["trace_id"]
    assert progress == ["curated_matcher: done", "executor sq1: done", "sanity sq1: done",
                        "rows ready: 5; the answer follows",
                        "synthesizer: done"] * 2
