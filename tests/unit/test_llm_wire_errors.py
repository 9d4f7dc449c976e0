"""Failures on both wires, each test run once against FakeLLMServer (OpenAI) and once against FakeAnthropicServer:
retries on 429/5xx, the error and its fix for every status given up on, timeouts, an unreachable endpoint
and an answer cut at the length limit.

Every call goes over real HTTP; no key and no network beyond 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from nl2sql.config.models import LLMConfig
from nl2sql.llm import (
    LLMAuthError,
    LLMClient,
    LLMError,
    LLMModelNotFound,
    LLMProviderError,
    LLMRateLimited,
    LLMTimeout,
    Message,
)
from nl2sql.llm.fake import FakeAnswer, FakeAnthropicServer, FakeLLMServer
from nl2sql.plan.model import PlanModel
from tests.support.llm import running

FakeServer = FakeLLMServer | FakeAnthropicServer

MESSAGES = [Message("system", "You write query plans."), Message("user", "How many artists are there?")]
PLAN: dict[str, Any] = {
    "select": [{"expr": {"kind": "aggregate", "func": "count", "arg": None, "distinct": False}, "alias": "artists"}],
    "from": {"table": "Artist", "alias": None},
}


@dataclass(frozen=True)
class Wire:
    """One provider's wire: its fake server, and the environment variable its API key fix names."""

    name: str
    server_class: type[FakeLLMServer] | type[FakeAnthropicServer]
    key_variable: str


WIRES = [Wire("openai", FakeLLMServer, "OPENAI_API_KEY"), Wire("anthropic", FakeAnthropicServer, "ANTHROPIC_API_KEY")]


@pytest.fixture(scope="module", params=WIRES, ids=lambda wire: wire.name)
def wire(request: pytest.FixtureRequest) -> Wire:
    return request.param


@pytest.fixture(scope="module")
def running_server(wire: Wire) -> Iterator[FakeServer]:
    yield from running(wire.server_class)


@pytest.fixture
def server(running_server: FakeServer) -> FakeServer:
    """One server per wire (stopping one takes half a second), its script and log fresh per test."""
    running_server.reset()
    return running_server


def make_client(server: FakeServer, *, http: httpx.Client | None = None, **model: Any) -> LLMClient:
    """A client whose only model ('main', the default) is the fake server."""
    config = LLMConfig(models={"main": server.model_config(**model)}, default="main")
    return LLMClient(config, backoff_s=0.01, http=http)


# --- retries ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "times"), [pytest.param(429, 2, id="429"), pytest.param(500, 1, id="500")])
def test_a_retried_status_then_the_answer(server: FakeServer, status: int, times: int) -> None:
    server.fail("PlanModel", status, times=times, retry_after="0")
    server.answer("PlanModel", PLAN)
    client = make_client(server)
    assert client.structured("planner", MESSAGES, PlanModel) == PlanModel.model_validate(PLAN)
    assert server.calls("PlanModel") == times + 1
    (record,) = client.records  # one logical call, its retries inside the wire
    assert record.ok


# --- statuses given up on ----------------------------------------------------------------------------


@dataclass(frozen=True)
class GivenUp:
    """A status the wire gives up on: how often it is served, the retries allowed, and the error it becomes."""

    status: int
    times: int
    max_retries: int
    error: type[LLMError]
    says: tuple[str, ...]  # in the message
    fix_says: tuple[str, ...] = ()  # in the fix; {key} is the wire's API key variable


GIVEN_UP = {
    "429-exhausted": GivenUp(429, 3, 2, LLMRateLimited, ("is rate limiting", "HTTP 429 after 3 attempts"), ("retry",)),
    "503-exhausted": GivenUp(503, 2, 1, LLMProviderError, ("HTTP 503 after 2 attempts", "scripted failure")),
    "401-bad-key": GivenUp(401, 1, 2, LLMAuthError, ("refused the API key", "HTTP 401"),
                           ("llm.models.main.api_key", "${{env:{key}}}")),
    "404-no-model": GivenUp(404, 1, 2, LLMModelNotFound, ("does not serve that model", "HTTP 404"),
                            ("llm.models.main.model",)),
}


@pytest.mark.parametrize("case", [pytest.param(case, id=name) for name, case in GIVEN_UP.items()])
def test_a_status_given_up_on_is_one_error_with_a_fix(server: FakeServer, wire: Wire, case: GivenUp) -> None:
    server.fail("text", case.status, times=case.times, retry_after="0")
    client = make_client(server, max_retries=case.max_retries)
    with pytest.raises(case.error) as info:
        client.text("synthesizer", MESSAGES)
    err = info.value
    message, fix = str(err), err.fix or ""
    assert type(err) is case.error and err.code == case.error.code and err.node == "synthesizer"
    model = server.model_config().model
    assert "synthesizer" in message and f"'{model}'" in message and "llm.models.main" in message
    assert all(fragment in message for fragment in case.says), message
    assert all(fragment.format(key=wire.key_variable) in fix for fragment in case.fix_says), fix
    assert "fake-key" not in message + fix
    assert server.calls() == case.times  # 401 and 404 are not retried
    (record,) = client.records
    assert not record.ok and record.error_code == case.error.code and record.cost_usd is None


# --- timeouts, an endpoint gone, an answer cut short ------------------------------------------------


def test_a_timeout_is_not_retried_and_names_timeout_s(server: FakeServer) -> None:
    server.answer("PlanModel", FakeAnswer(content=PLAN, delay_s=1))
    client = make_client(server, timeout_s=0.3)
    with pytest.raises(LLMTimeout) as info:
        client.structured("planner", MESSAGES, PlanModel)
    err = info.value
    assert err.code == "LLM_TIMEOUT" and err.node == "planner"
    assert "planner" in str(err) and "0.3 s" in str(err) and "timeout_s" in str(err)
    assert "llm.models.main.timeout_s" in (err.fix or "")
    assert server.calls() == 1
    client.close()


def test_timeout_s_holds_with_a_shared_http_client(server: FakeServer) -> None:
    server.answer("text", FakeAnswer(content="late", delay_s=1))
    with httpx.Client(timeout=30) as http:
        client = make_client(server, http=http, timeout_s=0.3)
        with pytest.raises(LLMTimeout):
            client.text("synthesizer", MESSAGES)


def test_an_unreachable_endpoint_names_base_url(wire: Wire) -> None:
    with wire.server_class() as gone:
        model = gone.model_config(max_retries=0)
    config = LLMConfig(models={"main": model}, default="main")
    with pytest.raises(LLMProviderError) as info:
        LLMClient(config, backoff_s=0.01).text("planner", MESSAGES)
    assert "cannot be reached" in str(info.value) and "base_url" in (info.value.fix or "")


def test_an_answer_cut_at_the_length_limit_says_to_raise_max_tokens(server: FakeServer) -> None:
    server.answer("text", FakeAnswer(content="The top genre is", finish_reason="length"))
    client = make_client(server)
    with pytest.raises(LLMProviderError, match="length limit") as info:
        client.text("synthesizer", MESSAGES)
    assert "max_tokens" in str(info.value)
