"""The Anthropic messages wire against FakeAnthropicServer on loopback: forced tool use, streaming,
usage with cache reads and writes (retries and errors on both wires: test_llm_wire_errors.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from nl2sql.config.models import LLMConfig
from nl2sql.llm import AnswerAbandoned, LLMClient, Message, Usage
from nl2sql.llm.fake import FakeAnswer, FakeAnthropicServer
from nl2sql.llm.json_schema import anthropic_tool_violations, strict_json_schema
from nl2sql.plan.model import PlanModel
from tests.support.llm import running

MESSAGES = [Message("system", "You write query plans."), Message("system", "Schema: Artist(ArtistId, Name)."),
            Message("user", "How many artists are there?")]
PLAN: dict[str, Any] = {
    "select": [{"expr": {"kind": "aggregate", "func": "count", "arg": None, "distinct": False}, "alias": "artists"}],
    "from": {"table": "Artist", "alias": None},
    "where": {"kind": "like", "expr": {"kind": "column", "table": None, "column": "Name"}, "pattern": "The %",
              "case_insensitive": True, "negated": False},
}


class Route(BaseModel):
    """A small structured answer."""

    datasource: str
    confidence: float


@pytest.fixture(scope="module")
def running_server() -> Iterator[FakeAnthropicServer]:
    yield from running(FakeAnthropicServer)


@pytest.fixture
def server(running_server: FakeAnthropicServer) -> FakeAnthropicServer:
    running_server.reset()
    return running_server


def make_client(server: FakeAnthropicServer, *, http: httpx.Client | None = None, **model: Any) -> LLMClient:
    config = LLMConfig(models={"claude": server.model_config(**model)}, default="claude")
    return LLMClient(config, backoff_s=0.01, http=http)


def test_tool_use_round_trip_of_a_plan(server: FakeAnthropicServer) -> None:
    server.answer("PlanModel", PLAN)
    sent: list[httpx.Request] = []
    with httpx.Client(timeout=5, event_hooks={"request": [sent.append]}) as http:
        client = make_client(server, http=http, max_tokens=2048)
        plan = client.structured("planner", MESSAGES, PlanModel)

    assert plan == PlanModel.model_validate(PLAN)
    (body,) = server.requests
    assert body["model"] == "fake-claude"
    assert body["max_tokens"] == 2048
    assert body["system"] == "You write query plans.\n\nSchema: Artist(ArtistId, Name)."
    assert body["messages"] == [{"role": "user", "content": "How many artists are there?"}]
    (tool,) = body["tools"]
    assert tool["name"] == "PlanModel"
    assert tool["input_schema"] == strict_json_schema(PlanModel)
    assert anthropic_tool_violations(tool["input_schema"]) == []
    assert body["tool_choice"] == {"type": "tool", "name": "PlanModel"}
    assert "response_format" not in body
    (request,) = sent
    assert request.url.path == "/v1/messages"
    assert request.headers["x-api-key"] == "fake-key"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    (record,) = client.records
    assert record.ok and record.provider == "anthropic" and record.model == "fake-claude"


def test_tool_use_parse_retry(server: FakeAnthropicServer) -> None:
    server.answer("Route", {"datasource": "chinook"}, {"datasource": "chinook", "confidence": 0.9})
    retries: list[list[str]] = []
    client = make_client(server)
    client.on_parse_retry = lambda node, attempt, errors: retries.append(errors)
    assert client.structured("resolver", MESSAGES, Route) == Route(datasource="chinook", confidence=0.9)
    assert retries == [["confidence: Field required"]]
    retry = server.requests[1]
    assert [m["role"] for m in retry["messages"]] == ["user", "user"]
    assert "confidence: Field required" in retry["messages"][-1]["content"]


def test_streaming_text_deltas(server: FakeAnthropicServer) -> None:
    text = "There are 275 artists; 12 of them have names starting with 'The'."
    server.answer("text", FakeAnswer(content=text, usage={"input_tokens": 30, "output_tokens": 18}))
    deltas: list[str] = []
    client = make_client(server)
    assert client.text("synthesizer", MESSAGES, on_delta=deltas.append) == text
    assert len(deltas) > 1 and "".join(deltas) == text
    (body,) = server.requests
    assert body["stream"] is True and "tools" not in body
    # input from message_start, output from message_delta
    assert client.records[0].usage == Usage(input_tokens=30, output_tokens=18)


def test_a_tool_input_is_watched_as_it_streams_and_cut(server: FakeAnthropicServer) -> None:
    server.answer("Route", FakeAnswer(content={"datasource": "chinook", "confidence": 0.9}, pace_s=0.05))
    client = make_client(server)
    with pytest.raises(AnswerAbandoned):
        client.structured("resolver", MESSAGES, Route, abandon_when=lambda partial: partial.get("datasource")
                          == "chinook")
    (body,) = server.requests
    assert body["stream"] is True and body["tool_choice"] == {"type": "tool", "name": "Route"}
    assert server.wait_for_disconnects() and server.disconnects == ["Route"]
    server.answer("Route", {"datasource": "support", "confidence": 0.5})
    assert client.structured("resolver", MESSAGES, Route, abandon_when=lambda partial: partial.get("datasource")
                             == "chinook") == Route(datasource="support", confidence=0.5)


def test_usage_mapping_with_cache_reads_and_writes(server: FakeAnthropicServer) -> None:
    server.answer("text", FakeAnswer(content="ok", usage={
        "input_tokens": 100, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 2000,
        "output_tokens": 50}))
    client = make_client(server)
    client.text("synthesizer", MESSAGES)
    assert client.records[0].usage == Usage(input_tokens=3100, cached_input_tokens=1000, cache_write_tokens=2000,
                                            output_tokens=50)


def test_usage_mapping_when_streamed(server: FakeAnthropicServer) -> None:
    server.answer("text", FakeAnswer(content="streamed ok", usage={
        "input_tokens": 10, "cache_read_input_tokens": 500, "output_tokens": 7}))
    client = make_client(server)
    client.text("synthesizer", MESSAGES, on_delta=lambda piece: None)
    assert client.records[0].usage == Usage(input_tokens=510, cached_input_tokens=500, output_tokens=7)


def test_usage_absent_is_all_none(server: FakeAnthropicServer) -> None:
    server.answer("text", FakeAnswer(content="ok", usage=None))
    client = make_client(server)
    client.text("synthesizer", MESSAGES)
    assert client.records[0].usage == Usage()
    assert client.records[0].cost_usd is None


def test_the_shared_prefix_is_marked_for_the_cache_and_its_reads_are_priced_at_the_cached_rate(
        server: FakeAnthropicServer) -> None:
    from nl2sql.pipeline.prompts import planner_messages, shared_prefix

    prefix = shared_prefix("shop", "sql", "sqlite", "CREATE TABLE orders (id INTEGER PRIMARY KEY);")
    server.answer("text", FakeAnswer(content="SELECT COUNT(*) FROM orders", usage={
        "input_tokens": 40, "cache_read_input_tokens": 2000, "output_tokens": 10}))
    config = LLMConfig(models={"claude": server.model_config()}, default="claude",
                       prices={"fake-claude": {"input": 3.0, "output": 15.0, "cached_input": 0.3}})
    client = LLMClient(config, backoff_s=0.01)
    client.text("planner", planner_messages(prefix, "How many orders?"))
    (body,) = server.requests
    assert body["system"] == prefix.system  # the head's mark caches the system text before it
    head, tail = body["messages"][0]["content"]
    assert head == {"type": "text", "text": prefix.head, "cache_control": {"type": "ephemeral"}}
    assert "cache_control" not in tail and tail["text"].endswith("Question: How many orders?")
    # 40 read plainly at the input rate, 2000 from the cache at the cached rate, 10 written out
    assert client.records[0].cost_usd == pytest.approx((40 * 3.0 + 2000 * 0.3 + 10 * 15.0) / 1e6)

    server.reset()
    server.answer("text", FakeAnswer(content="SELECT 1", usage={"input_tokens": 5, "output_tokens": 1}))
    plain = make_client(server, cache_prefix=False)
    plain.text("planner", planner_messages(prefix, "How many orders?"))
    assert isinstance(server.requests[0]["messages"][0]["content"], str)  # off: sent as plain text
