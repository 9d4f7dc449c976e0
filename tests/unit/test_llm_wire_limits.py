"""Limits on the model wires, against the fake servers on loopback: the answer cap sent on every call, a call past
its timeout cancelled (the server sees its client leave, and the next call is not held up behind it), and usage
counted on streamed answers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from nl2sql.config.models import DEFAULT_MAX_STRUCTURED_TOKENS, DEFAULT_MAX_TOKENS, LLMConfig, ModelConfig
from nl2sql.llm import LLMClient, LLMProviderError, LLMTimeout, Message, Usage
from nl2sql.llm.fake import FakeAnswer, FakeAnthropicServer, FakeLLMServer
from nl2sql.llm.wires import ChatRequest, OpenAIWire

MESSAGES = [Message("system", "You route questions."), Message("user", "How many artists are there?")]
LONG_TEXT = "Frank Harris spent the most in 2011. " * 12  # 37 streamed pieces


class Route(BaseModel):
    """A small structured answer."""

    datasource: str
    confidence: float


ROUTE = {"datasource": "chinook", "confidence": 0.9}
Server = FakeLLMServer | FakeAnthropicServer


@pytest.fixture(params=[FakeLLMServer, FakeAnthropicServer], ids=["openai", "anthropic"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    with request.param(one_at_a_time=True) as fake:
        yield fake


def make_client(server: Server, **model: Any) -> LLMClient:
    config = LLMConfig(models={"main": server.model_config(**model)}, default="main")
    return LLMClient(config, backoff_s=0.01)


# --- max_tokens -------------------------------------------------------------------------------------


def test_max_tokens_is_sent_on_every_call_with_defaults_per_kind(server: Server) -> None:
    server.answer("text", "There are 275 artists.", "streamed")
    server.answer("Route", ROUTE)
    client = make_client(server)
    client.text("synthesizer", MESSAGES)
    client.structured("resolver", MESSAGES, Route)
    client.text("synthesizer", MESSAGES, on_delta=lambda _: None)
    text, structured, streamed = server.requests
    assert text["max_tokens"] == DEFAULT_MAX_TOKENS == 1024
    assert structured["max_tokens"] == DEFAULT_MAX_STRUCTURED_TOKENS == 4096
    assert streamed["stream"] is True and streamed["max_tokens"] == DEFAULT_MAX_TOKENS
    client.close()


def test_a_configured_max_tokens_holds_for_every_call(server: Server) -> None:
    server.answer("text", "There are 275 artists.")
    server.answer("Route", ROUTE)
    client = make_client(server, max_tokens=300)
    client.text("synthesizer", MESSAGES)
    client.structured("resolver", MESSAGES, Route)
    assert [r["max_tokens"] for r in server.requests] == [300, 300]
    client.close()


def test_a_sampled_call_sends_its_temperature_and_seed_over_the_models(server: Server) -> None:
    server.answer("text", "one", "two", "three")
    client = make_client(server)
    client.text("planner", MESSAGES)
    client.text("planner", MESSAGES, temperature=0.7, seed=3)
    plain, sampled = server.requests
    assert plain["temperature"] == 0.0 and "seed" not in plain
    assert sampled["temperature"] == 0.7
    assert sampled.get("seed") == (3 if isinstance(server, FakeLLMServer) else None)  # Anthropic takes no seed
    client.close()
    with FakeLLMServer() as fake:  # a model that rejects the parameter is sent none, sampled or not
        fake.answer("text", "one")
        client = make_client(fake, temperature="none")
        client.text("planner", MESSAGES, temperature=0.7, seed=1)
        assert "temperature" not in fake.requests[0]
        client.close()


def test_max_completion_tokens_for_models_that_take_only_that() -> None:
    with FakeLLMServer() as server:
        server.answer("text", "ok")
        client = make_client(server, max_tokens=500, max_tokens_param="max_completion_tokens")
        client.text("synthesizer", MESSAGES)
        (body,) = server.requests
        assert body["max_completion_tokens"] == 500 and "max_tokens" not in body
        client.close()


def test_max_tokens_must_be_positive() -> None:
    with pytest.raises(ValueError, match="greater than 0"):
        ModelConfig(provider="openai", model="m", max_tokens=0)


# --- timeouts cancel the call -----------------------------------------------------------------------


def test_a_call_past_its_timeout_is_cancelled_and_the_next_is_not_held_up(server: Server) -> None:
    server.answer("Route", FakeAnswer(content=ROUTE, delay_s=30), ROUTE)
    client = make_client(server, timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(LLMTimeout) as info:
        client.structured("resolver", MESSAGES, Route)
    assert time.monotonic() - started < 3
    assert server.wait_for_disconnects(1, timeout=5), "the server never saw the client leave"
    assert server.disconnects == ["Route"]
    err = info.value
    assert err.code == "LLM_TIMEOUT" and err.node == "resolver"
    assert "0.5 s" in str(err) and "cancelled" in str(err)
    assert "llm.models.main.timeout_s" in (err.fix or "") and "llm.models.main.max_tokens" in (err.fix or "")
    assert client.records[-1].ok is False and client.records[-1].error_code == "LLM_TIMEOUT"

    # the server serves one request at a time: the second answers only because the first was given up
    started = time.monotonic()
    assert client.structured("resolver", MESSAGES, Route) == Route(**ROUTE)
    assert time.monotonic() - started < 2
    assert server.calls("Route") == 2  # a timeout is not retried
    client.close()


def test_the_timeout_is_a_deadline_on_the_whole_stream(server: Server) -> None:
    # every piece comes well within timeout_s of the last one: only a deadline on the whole call stops it
    server.answer("text", FakeAnswer(content=LONG_TEXT, pace_s=0.1), "next answer")
    client = make_client(server, timeout_s=0.6)
    deltas: list[str] = []
    started = time.monotonic()
    with pytest.raises(LLMTimeout):
        client.text("synthesizer", MESSAGES, on_delta=deltas.append)
    assert time.monotonic() - started < 2
    assert deltas and "".join(deltas) != LONG_TEXT  # it streamed for a while, then was cut
    assert server.wait_for_disconnects(1, timeout=5)
    started = time.monotonic()
    assert client.text("synthesizer", MESSAGES, on_delta=lambda _: None) == "next answer"
    assert time.monotonic() - started < 2
    client.close()


def test_stream_all_streams_structured_calls_so_they_can_be_cut(server: Server) -> None:
    server.answer("Route", FakeAnswer(content=ROUTE, pace_s=0.05), FakeAnswer(content=ROUTE, delay_s=30))
    client = make_client(server, stream_all=True, timeout_s=1)
    assert client.structured("resolver", MESSAGES, Route) == Route(**ROUTE)
    assert server.requests[0]["stream"] is True
    assert client.records[0].usage.output_tokens is not None
    with pytest.raises(LLMTimeout):
        client.structured("resolver", MESSAGES, Route)
    assert server.wait_for_disconnects(1, timeout=5)
    client.close()


def test_the_deadline_holds_where_no_socket_can_be_watched() -> None:
    class Slow(httpx.SyncByteStream):
        def __iter__(self) -> Iterator[bytes]:
            for _ in range(50):
                time.sleep(0.05)
                yield b'data: {"choices": [{"index": 0, "delta": {"content": "word "}}]}\n\n'

    transport = httpx.MockTransport(lambda request: httpx.Response(200, stream=Slow()))
    with httpx.Client(transport=transport) as http:
        config = ModelConfig(provider="openai", model="m", base_url="http://model.invalid/v1", timeout_s=0.5)
        wire = OpenAIWire("main", config, http=http)
        started = time.monotonic()
        with pytest.raises(LLMTimeout):
            wire.complete(ChatRequest(node="synthesizer", messages=MESSAGES), on_delta=lambda _: None)
        assert time.monotonic() - started < 1.5


def test_a_connection_dropped_mid_answer_is_a_provider_error() -> None:
    class Dropped(httpx.SyncByteStream):
        def __iter__(self) -> Iterator[bytes]:
            yield b'data: {"choices": [{"index": 0, "delta": {"content": "half"}}]}\n\n'
            raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")

    transport = httpx.MockTransport(lambda request: httpx.Response(200, stream=Dropped()))
    with httpx.Client(transport=transport) as http:
        config = ModelConfig(provider="openai", model="m", base_url="http://model.invalid/v1")
        with pytest.raises(LLMProviderError, match="dropped the connection mid-answer"):
            OpenAIWire("main", config, http=http).complete(ChatRequest(node="synthesizer", messages=MESSAGES),
                                                            on_delta=lambda _: None)


# --- usage of streamed answers ----------------------------------------------------------------------


def test_openai_streamed_usage_is_asked_for_and_counted() -> None:
    with FakeLLMServer() as server:
        usage = {"prompt_tokens": 40, "completion_tokens": 21, "total_tokens": 61,
                 "prompt_tokens_details": {"cached_tokens": 32}, "completion_tokens_details": {"reasoning_tokens": 5}}
        server.answer("text", FakeAnswer(content=LONG_TEXT, usage=usage), FakeAnswer(content="short", usage=None))
        client = make_client(server)
        assert client.text("synthesizer", MESSAGES, on_delta=lambda _: None) == LONG_TEXT
        assert server.requests[0]["stream_options"] == {"include_usage": True}
        assert client.records[0].usage == Usage(input_tokens=40, cached_input_tokens=32, output_tokens=21,
                                                reasoning_tokens=5)
        # a server that sends no usage chunk: the counts stay unknown, never 0
        client.text("synthesizer", MESSAGES, on_delta=lambda _: None)
        assert client.records[1].usage == Usage()
        assert client.records[1].cost_usd is None
        client.close()


def test_anthropic_streamed_usage_from_message_start_and_message_delta() -> None:
    with FakeAnthropicServer() as server:
        usage = {"input_tokens": 12, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 8,
                 "output_tokens": 30}
        server.answer("text", FakeAnswer(content=LONG_TEXT, usage=usage), FakeAnswer(content="short", usage=None))
        client = make_client(server)
        assert client.text("synthesizer", MESSAGES, on_delta=lambda _: None) == LONG_TEXT
        assert client.records[0].usage == Usage(input_tokens=120, cached_input_tokens=100, cache_write_tokens=8,
                                                output_tokens=30)
        client.text("synthesizer", MESSAGES, on_delta=lambda _: None)
        assert client.records[1].usage == Usage()
        client.close()


def test_a_streamed_answer_cut_at_max_tokens_says_so(server: Server) -> None:
    server.answer("text", FakeAnswer(content=LONG_TEXT, finish_reason="length"))
    client = make_client(server, max_tokens=20)
    with pytest.raises(LLMProviderError, match="length limit") as info:
        client.text("synthesizer", MESSAGES, on_delta=lambda _: None)
    assert "llm.models.main.max_tokens" in (info.value.fix or "")
    client.close()


# --- max_concurrent ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("limit", "most"), [(1, 1), (None, 2)])
def test_max_concurrent_holds_calls_to_one_model_back(limit: int | None, most: int) -> None:
    """Sub-queries plan in parallel; a server with one slot that drops the answer in progress when the next
    request arrives (llama-cpp-python's) must get them one at a time."""
    import threading

    active, seen, lock = [0], [0], threading.Lock()

    def slow(body: dict) -> str:
        with lock:
            active[0] += 1
            seen[0] = max(seen[0], active[0])
        time.sleep(0.3)
        with lock:
            active[0] -= 1
        return "ok"

    with FakeLLMServer() as fake:
        fake.respond_with("text", slow)
        clients = [make_client(fake, max_concurrent=limit) for _ in range(2)]  # separate clients share the slot
        threads = [threading.Thread(target=c.text, args=("planner", MESSAGES)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(fake.requests) == 2 and seen[0] == most
        for c in clients:
            c.close()
