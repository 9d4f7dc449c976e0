"""The OpenAI-compatible wire against FakeLLMServer on loopback: structured output in its three modes,
parse retries, streaming, usage as reported and the request's shape (HTTP failures, timeouts and cut
answers on both wires: test_llm_wire_errors.py).

Every call goes over real HTTP; no key and no network beyond 127.0.0.1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from nl2sql.config.models import LLMConfig
from nl2sql.llm import (
    AnswerAbandoned,
    LLMClient,
    LLMParseError,
    LLMProviderError,
    Message,
    Usage,
)
from nl2sql.llm.fake import FakeAnswer, FakeLLMServer
from nl2sql.llm.json_schema import strict_json_schema
from nl2sql.plan.model import PlanModel
from tests.support.llm import running

MESSAGES = [Message("system", "You write query plans."), Message("user", "Top customers by spend in 2011?")]

#: A plan that touches most of PlanModel: joins, a correlated EXISTS, GROUP BY/HAVING, a window, CASE,
#: date parts, ORDER BY with NULLS, LIMIT/OFFSET.
PLAN: dict[str, Any] = {
    "select": [
        {"expr": {"kind": "column", "table": "c", "column": "CustomerId"}, "alias": None},
        {"expr": {"kind": "function", "name": "concat", "args": [
            {"kind": "column", "table": "c", "column": "FirstName"}, {"kind": "literal", "value": " "},
            {"kind": "column", "table": "c", "column": "LastName"}]}, "alias": "name"},
        {"expr": {"kind": "aggregate", "func": "sum", "arg": {"kind": "column", "table": "i", "column": "Total"},
                  "distinct": False}, "alias": "spend"},
        {"expr": {"kind": "window", "func": "rank", "arg": None, "partition_by": [],
                  "order_by": [{"expr": {"kind": "aggregate", "func": "sum",
                                         "arg": {"kind": "column", "table": "i", "column": "Total"},
                                         "distinct": False},
                                "direction": "desc", "nulls": None}]}, "alias": "spend_rank"},
        {"expr": {"kind": "case", "whens": [
            {"condition": {"kind": "compare", "op": ">",
                           "left": {"kind": "aggregate", "func": "sum",
                                    "arg": {"kind": "column", "table": "i", "column": "Total"}, "distinct": False},
                           "right": {"kind": "literal", "value": 40}},
             "then": {"kind": "literal", "value": "big"}}],
            "otherwise": {"kind": "literal", "value": "small"}}, "alias": "tier"},
    ],
    "from": {"table": "Customer", "alias": "c"},
    "joins": [{"type": "inner", "table": {"table": "Invoice", "alias": "i"},
               "on": [{"left": {"kind": "column", "table": "i", "column": "CustomerId"},
                       "right": {"kind": "column", "table": "c", "column": "CustomerId"}}]}],
    "where": {"kind": "and", "conditions": [
        {"kind": "compare", "op": "=",
         "left": {"kind": "date_part", "part": "year", "arg": {"kind": "column", "table": "i", "column": "InvoiceDate"}},
         "right": {"kind": "literal", "value": 2011}},
        {"kind": "exists", "negated": False, "plan": {
            "select": [{"expr": {"kind": "literal", "value": 1}, "alias": None}],
            "from": {"table": "Employee", "alias": "e"},
            "where": {"kind": "compare", "op": "=",
                      "left": {"kind": "column", "table": "e", "column": "EmployeeId"},
                      "right": {"kind": "column", "table": "c", "column": "SupportRepId"}}}},
        {"kind": "not", "condition": {"kind": "is_null", "expr": {"kind": "column", "table": "c", "column": "Email"},
                                      "negated": False}},
    ]},
    "group_by": [{"kind": "column", "table": "c", "column": "CustomerId"},
                 {"kind": "column", "table": "c", "column": "FirstName"},
                 {"kind": "column", "table": "c", "column": "LastName"}],
    "having": {"kind": "compare", "op": ">=", "left": {"kind": "column", "table": None, "column": "spend"},
               "right": {"kind": "literal", "value": 10}},
    "order_by": [{"expr": {"kind": "column", "table": None, "column": "spend"}, "direction": "desc", "nulls": "last"}],
    "limit": 10,
    "offset": 0,
    "distinct": False,
}


@pytest.fixture(scope="module")
def running_server() -> Iterator[FakeLLMServer]:
    yield from running(FakeLLMServer)


@pytest.fixture
def server(running_server: FakeLLMServer) -> FakeLLMServer:
    """One server per module (stopping one takes half a second), its script and log fresh per test."""
    running_server.reset()
    return running_server


class Sent:
    """The headers of every request the client sent (an httpx request hook)."""

    def __init__(self) -> None:
        self.headers: list[httpx.Headers] = []

    def __call__(self, request: httpx.Request) -> None:
        self.headers.append(request.headers)


def make_client(server: FakeLLMServer, *, http: httpx.Client | None = None, **model: Any) -> LLMClient:
    """A client whose only model ('main', the default) is the fake server."""
    config = LLMConfig(models={"main": server.model_config(**model)}, default="main")
    return LLMClient(config, backoff_s=0.01, http=http)


def last_user_text(body: dict[str, Any]) -> str:
    return body["messages"][-1]["content"]


# --- structured output -----------------------------------------------------------------------------


def test_json_schema_round_trip_of_a_plan(server: FakeLLMServer) -> None:
    server.answer("PlanModel", PLAN)
    client = make_client(server)
    plan = client.structured("planner", MESSAGES, PlanModel)

    assert plan == PlanModel.model_validate(PLAN)
    (body,) = server.requests
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "PlanModel"
    assert fmt["json_schema"]["strict"] is True
    assert fmt["json_schema"]["schema"] == strict_json_schema(PlanModel)
    assert set(fmt["json_schema"]["schema"]["$defs"]) >= {"Expr", "Condition", "PlanModel"}
    assert body["model"] == "fake-model"
    assert body["messages"] == [{"role": "system", "content": "You write query plans."},
                                {"role": "user", "content": "Top customers by spend in 2011?"}]
    assert body["temperature"] == 0.0
    assert "tools" not in body and "stream" not in body
    (record,) = client.records
    assert record.ok and record.node == "planner" and record.model == "fake-model" and record.provider == "openai"


def test_json_object_mode_for_llama_cpp(server: FakeLLMServer) -> None:
    server.answer("PlanModel", PLAN)
    client = make_client(server, structured_output="json_object")
    assert client.structured("planner", MESSAGES, PlanModel) == PlanModel.model_validate(PLAN)
    (body,) = server.requests
    fmt = body["response_format"]
    assert fmt["type"] == "json_object"
    assert "json_schema" not in fmt
    assert {k: v for k, v in fmt["schema"].items() if k != "title"} == strict_json_schema(PlanModel)
    assert fmt["schema"]["title"] == "PlanModel"


#: What llama-cpp-python's server answers (HTTP 500) to `response_format: json_schema`.
LLAMA_CPP_REFUSAL = ("1 validation error: {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
                     "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}")


def test_a_server_that_refuses_json_schema_is_asked_in_json_object_from_then_on(server: FakeLLMServer) -> None:
    refused = FakeAnswer(status=500, error=LLAMA_CPP_REFUSAL)
    server.answer("PlanModel", refused, refused, refused, PLAN, PLAN)  # the 500 is retried before it is read
    client = make_client(server)  # structured_output not set: json_schema first
    assert client.structured("planner", MESSAGES, PlanModel) == PlanModel.model_validate(PLAN)
    assert client.structured("planner", MESSAGES, PlanModel) == PlanModel.model_validate(PLAN)
    kinds = [body["response_format"]["type"] for body in server.requests]
    assert kinds == ["json_schema"] * 3 + ["json_object", "json_object"]


def test_a_mode_set_in_the_configuration_is_kept_when_refused(server: FakeLLMServer) -> None:
    refused = FakeAnswer(status=500, error=LLAMA_CPP_REFUSAL)
    server.answer("PlanModel", refused, refused, refused)
    client = make_client(server, structured_output="json_schema")
    with pytest.raises(LLMProviderError, match="response_format"):
        client.structured("planner", MESSAGES, PlanModel)
    assert len(server.requests) == 3


def test_tools_mode_forces_a_function_call(server: FakeLLMServer) -> None:
    server.answer("PlanModel", PLAN)
    client = make_client(server, structured_output="tools")
    assert client.structured("planner", MESSAGES, PlanModel) == PlanModel.model_validate(PLAN)
    (body,) = server.requests
    assert "response_format" not in body
    (tool,) = body["tools"]
    assert tool["type"] == "function"
    assert tool["function"]["name"] == "PlanModel"
    assert tool["function"]["parameters"] == strict_json_schema(PlanModel)
    assert body["tool_choice"] == {"type": "function", "function": {"name": "PlanModel"}}


# --- parse retries ---------------------------------------------------------------------------------


def test_parse_retry_then_success(server: FakeLLMServer) -> None:
    malformed = '{"select": [ MALFORMED_MARKER'
    violating = {"from": {"table": "VIOLATING_MARKER", "alias": None}, "limit": "TEN_MARKER"}  # no select; bad limit
    server.answer("PlanModel", malformed, violating, PLAN)
    retries: list[tuple[str, int, list[str]]] = []
    client = make_client(server)
    client.on_parse_retry = lambda node, attempt, errors: retries.append((node, attempt, errors))

    assert client.structured("planner", MESSAGES, PlanModel) == PlanModel.model_validate(PLAN)
    assert server.calls("PlanModel") == 3
    assert [(node, attempt) for node, attempt, _ in retries] == [("planner", 1), ("planner", 2)]
    first, second = retries[0][2], retries[1][2]
    assert first and first[0].startswith("(top): not valid JSON")
    assert "select: Field required" in second
    assert any(line.startswith("limit: ") for line in second)
    assert all(": " in line for line in first + second)

    retry_1, retry_2 = server.requests[1], server.requests[2]
    for retry, errors in ((retry_1, first), (retry_2, second)):
        # the original messages, then one feedback message: no assistant turn echoing the bad answer
        assert [m["role"] for m in retry["messages"]] == ["system", "user", "user"]
        assert retry["messages"][:2] == server.requests[0]["messages"]
        feedback = last_user_text(retry)
        assert all(line in feedback for line in errors)
        assert retry["response_format"] == server.requests[0]["response_format"]
    whole = json.dumps(server.requests[1:])
    assert "MALFORMED_MARKER" not in whole and "VIOLATING_MARKER" not in whole and "TEN_MARKER" not in whole
    assert len(client.records) == 3 and all(r.ok for r in client.records)


def test_parse_retry_exhausted(server: FakeLLMServer) -> None:
    server.answer("PlanModel", "not json", {"select": []}, "still not json")
    client = make_client(server)
    with pytest.raises(LLMParseError) as info:
        client.structured("planner", MESSAGES, PlanModel, max_parse_retries=2)
    err = info.value
    assert err.code == "LLM_PARSE_FAILED"
    assert err.node == "planner"
    assert "planner" in str(err) and "PlanModel" in str(err) and "3 attempts" in str(err)
    assert "llm.models.main.structured_output" in (err.fix or "")
    assert server.calls("PlanModel") == 3


# --- streaming -------------------------------------------------------------------------------------


def test_streaming_text_deltas(server: FakeLLMServer) -> None:
    text = "Frank Harris spent the most in 2011, followed by Helena Holý and Richard Cunningham."
    server.answer("text", FakeAnswer(content=text, usage={"prompt_tokens": 40, "completion_tokens": 21,
                                                          "total_tokens": 61}))
    deltas: list[str] = []
    client = make_client(server)
    assert client.text("synthesizer", MESSAGES, on_delta=deltas.append) == text
    assert len(deltas) > 1 and "".join(deltas) == text
    (body,) = server.requests
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert client.records[0].usage == Usage(input_tokens=40, output_tokens=21)


def test_a_structured_answer_is_cut_as_soon_as_the_caller_would_set_it_aside(server: FakeLLMServer) -> None:
    server.answer("PlanModel", FakeAnswer(content=PLAN, pace_s=0.005))
    client = make_client(server)
    seen: list[Any] = []

    def has_from(partial: Any) -> bool:
        seen.append(partial)
        return "from" in partial

    with pytest.raises(AnswerAbandoned) as caught:
        client.structured("planner", MESSAGES, PlanModel, abandon_when=has_from)
    assert caught.value.node == "planner"
    (body,) = server.requests
    assert body["stream"] is True
    assert server.wait_for_disconnects() and server.disconnects == ["PlanModel"]  # the rest was never sent
    assert seen[-1]["select"] == PLAN["select"] and "joins" not in seen[-1]  # read as far as it went, no further
    (record,) = client.records
    assert record.ok and record.usage == Usage() and record.cost_usd is None
    # an answer the caller keeps is read whole, as when it is not watched
    server.answer("PlanModel", PLAN)
    assert client.structured("planner", MESSAGES, PlanModel, abandon_when=lambda partial: False) == \
        PlanModel.model_validate(PLAN)


def test_streaming_without_usage_chunk(server: FakeLLMServer) -> None:
    server.answer("text", FakeAnswer(content="short answer", usage=None))
    client = make_client(server)
    deltas: list[str] = []
    assert client.text("synthesizer", MESSAGES, on_delta=deltas.append) == "short answer"
    assert client.records[0].usage == Usage()
    assert client.records[0].cost_usd is None


# --- usage ---------------------------------------------------------------------------------------


def test_usage_absent_is_all_none(server: FakeLLMServer) -> None:
    server.answer("text", FakeAnswer(content="hi", usage=None))
    client = make_client(server)
    client.text("synthesizer", MESSAGES)
    usage = client.records[0].usage
    assert usage == Usage()
    assert all(value is None for value in usage.model_dump().values())
    assert client.usage() == Usage()


def test_usage_partial_sets_only_reported_counts(server: FakeLLMServer) -> None:
    server.answer("text", FakeAnswer(content="hi", usage={"prompt_tokens": 12}))
    client = make_client(server)
    client.text("synthesizer", MESSAGES)
    assert client.records[0].usage == Usage(input_tokens=12)
    assert client.records[0].usage.output_tokens is None


def test_usage_cached_and_reasoning_tokens(server: FakeLLMServer) -> None:
    server.answer("text", FakeAnswer(content="hi", usage={
        "prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500,
        "prompt_tokens_details": {"cached_tokens": 1024},
        "completion_tokens_details": {"reasoning_tokens": 256}}))
    server.answer("text", FakeAnswer(content="hi", usage=None))
    client = make_client(server)
    client.text("synthesizer", MESSAGES)
    client.text("synthesizer", MESSAGES)
    expected = Usage(input_tokens=1200, cached_input_tokens=1024, output_tokens=300, reasoning_tokens=256)
    assert client.records[0].usage == expected
    assert client.usage() == expected  # an unreported call adds nothing, and does not turn counts into 0


# --- request shape -------------------------------------------------------------------------------


def test_temperature_none_omits_the_field(server: FakeLLMServer) -> None:
    server.answer("text", "a", "b")
    make_client(server, temperature="none").text("planner", MESSAGES)
    make_client(server, temperature=0.7).text("planner", MESSAGES)
    assert "temperature" not in server.requests[0]
    assert server.requests[1]["temperature"] == 0.7


def test_authorization_header_only_with_a_key(server: FakeLLMServer) -> None:
    server.answer("text", "a", "b")
    sent = Sent()
    with httpx.Client(timeout=5, event_hooks={"request": [sent]}) as http:
        make_client(server, http=http, api_key=None).text("planner", MESSAGES)
        make_client(server, http=http).text("planner", MESSAGES)
    no_key, with_key = sent.headers
    assert "authorization" not in no_key
    assert with_key["authorization"] == "Bearer fake-key"
