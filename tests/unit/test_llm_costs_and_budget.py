"""Costs from the price table (and llm.prices), unknown costs kept apart, the run's caps on calls and
dollars, the start-up refusal of unpriced models under a dollar cap, and which model each node uses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nl2sql.config.models import LLMConfig, PriceConfig
from nl2sql.errors import ConfigError, UnknownNameError
from nl2sql.llm import (
    PRICES,
    Budget,
    CallRecord,
    LimitReached,
    LLMClient,
    Message,
    ModelNotConfigured,
    Usage,
    call_cost,
    price_for,
)
from nl2sql.llm.fake import FakeAnswer, FakeAnthropicServer, FakeLLMServer
from nl2sql.project import load_project
from tests.support.llm import running

MESSAGES = [Message("user", "How many invoices?")]


@pytest.fixture(scope="module")
def running_server() -> Iterator[FakeLLMServer]:
    yield from running(FakeLLMServer)


@pytest.fixture
def server(running_server: FakeLLMServer) -> FakeLLMServer:
    running_server.reset()
    return running_server


def make_client(server: FakeLLMServer | FakeAnthropicServer, model: str = "gpt-4o-mini", *,
                budget: Budget | None = None, prices: dict[str, PriceConfig] | None = None,
                **kwargs: Any) -> LLMClient:
    config = LLMConfig(models={"main": server.model_config(model)}, default="main", prices=prices or {})
    return LLMClient(config, budget=budget, backoff_s=0.01, **kwargs)


def usage(prompt: int, completion: int, cached: int | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                            "total_tokens": prompt + completion}
    if cached is not None:
        data["prompt_tokens_details"] = {"cached_tokens": cached}
    return data


# --- costs -----------------------------------------------------------------------------------------


def test_gpt_4o_mini_cost_by_hand(server: FakeLLMServer) -> None:
    assert PRICES["gpt-4o-mini"][:3] == (0.15, 0.60, 0.075)  # USD per 1M: input, output, cached input
    server.answer("text", FakeAnswer(content="42", usage=usage(2000, 500)))
    records: list[CallRecord] = []
    client = make_client(server, on_call=records.append)
    client.text("synthesizer", MESSAGES)
    # 2000 × 0.15 + 500 × 0.60 = 300 + 300 = 600 per million → $0.0006
    assert records[0].cost_usd == pytest.approx(0.0006)
    assert client.cost_usd() == pytest.approx(0.0006)
    assert client.summary() == {"calls": 1, "usage": Usage(input_tokens=2000, output_tokens=500).model_dump(),
                                "cost_usd": pytest.approx(0.0006), "unknown_cost_calls": 0}


def test_cached_tokens_at_the_cached_rate(server: FakeLLMServer) -> None:
    server.answer("text", FakeAnswer(content="42", usage=usage(1000, 500, cached=200)))
    client = make_client(server)
    client.text("synthesizer", MESSAGES)
    # 800 × 0.15 + 200 × 0.075 + 500 × 0.60 = 120 + 15 + 300 = 435 per million
    assert client.records[0].cost_usd == pytest.approx(435e-6)


def test_anthropic_cache_writes_at_the_write_rate() -> None:
    assert PRICES["claude-haiku-4-5"][:4] == (1.00, 5.00, 0.10, 1.25)
    with FakeAnthropicServer() as server:
        server.answer("text", FakeAnswer(content="ok", usage={
            "input_tokens": 100, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 2000,
            "output_tokens": 50}))
        client = make_client(server, "claude-haiku-4-5")
        client.text("synthesizer", MESSAGES)
    # 100 × 1.00 + 1000 × 0.10 + 2000 × 1.25 + 50 × 5.00 = 100 + 100 + 2500 + 250 = 2950 per million
    assert client.records[0].cost_usd == pytest.approx(2950e-6)


def test_llm_prices_override_wins(server: FakeLLMServer) -> None:
    server.answer("text", FakeAnswer(content="42", usage=usage(1000, 1000, cached=500)))
    prices = {"gpt-4o-mini": PriceConfig(input=1.0, output=2.0, cached_input=0.5)}
    client = make_client(server, prices=prices)
    client.text("synthesizer", MESSAGES)
    # 500 × 1.0 + 500 × 0.5 + 1000 × 2.0 = 2750 per million
    assert client.records[0].cost_usd == pytest.approx(2750e-6)
    assert price_for("gpt-4o-mini", prices).source == "config"


def test_zero_price_row_for_a_local_model(server: FakeLLMServer) -> None:
    server.answer("text", FakeAnswer(content="42", usage=usage(1000, 1000)))
    client = make_client(server, "my-local-model", prices={"my-local-model": PriceConfig(input=0, output=0)})
    client.text("synthesizer", MESSAGES)
    assert client.records[0].cost_usd == 0.0
    assert client.summary()["unknown_cost_calls"] == 0


def test_unknown_counts_make_an_unknown_cost_never_zero(server: FakeLLMServer) -> None:
    server.answer("text", FakeAnswer(content="a", usage=None), FakeAnswer(content="b", usage={"prompt_tokens": 10}),
                  FakeAnswer(content="c", usage=usage(1000, 1000)))
    budget = Budget()
    client = make_client(server, budget=budget)
    client.text("synthesizer", MESSAGES)
    client.text("synthesizer", MESSAGES)
    assert [r.cost_usd for r in client.records] == [None, None]
    assert client.cost_usd() is None
    assert client.summary()["unknown_cost_calls"] == 2
    assert budget.unknown_cost_calls == 2 and budget.spent_usd == 0.0

    client.text("synthesizer", MESSAGES)
    summary = client.summary()
    assert summary["calls"] == 3
    assert summary["cost_usd"] == pytest.approx(750e-6)  # only the call with a known cost
    assert summary["unknown_cost_calls"] == 2
    assert summary["usage"]["input_tokens"] == 1010 and summary["usage"]["output_tokens"] == 1000


def test_unknown_model_has_no_cost(server: FakeLLMServer) -> None:
    server.answer("text", FakeAnswer(content="a", usage=usage(10, 10)))
    client = make_client(server, "my-local-model")
    client.text("synthesizer", MESSAGES)
    assert client.records[0].cost_usd is None
    assert client.summary()["unknown_cost_calls"] == 1
    assert call_cost(None, Usage(input_tokens=1, output_tokens=1)) is None


# --- budget ----------------------------------------------------------------------------------------


def test_budget_stop_on_calls_before_any_request(server: FakeLLMServer) -> None:
    server.answer("text", "one", "two", "three")
    client = make_client(server, budget=Budget(max_llm_calls=2))
    client.text("synthesizer", MESSAGES)
    client.text("synthesizer", MESSAGES)
    with pytest.raises(LimitReached) as info:
        client.text("synthesizer", MESSAGES)
    assert server.calls() == 2  # the third call never reached the server
    assert info.value.code == "RUN_LIMIT_REACHED"
    assert info.value.limit == "max_llm_calls" and info.value.setting == "settings.pipeline.max_llm_calls"
    assert "limit of 2 model calls" in str(info.value)
    with pytest.raises(LimitReached):  # and it stays reached
        client.text("synthesizer", MESSAGES)
    assert server.calls() == 2
    assert len(client.records) == 2


def test_budget_stop_on_dollars(server: FakeLLMServer) -> None:
    # 1M input + 1M output tokens of gpt-4o-mini: $0.15 + $0.60 = $0.75, above the $0.50 cap
    server.answer("text", FakeAnswer(content="big", usage=usage(1_000_000, 1_000_000)), "never sent")
    budget = Budget(max_cost_usd=0.50)
    client = make_client(server, budget=budget)
    client.text("synthesizer", MESSAGES)
    assert budget.spent_usd == pytest.approx(0.75)
    with pytest.raises(LimitReached) as info:
        client.text("synthesizer", MESSAGES)
    assert server.calls() == 1
    assert info.value.limit == "max_cost_usd"
    assert "settings.pipeline.max_cost_usd" in str(info.value)
    assert "$0.50" in str(info.value)


def test_limit_reached_is_not_swallowed_by_parse_retries(server: FakeLLMServer) -> None:
    from nl2sql.plan.model import PlanModel

    server.answer("PlanModel", "{not json", "{not json either")
    retries: list[int] = []
    client = make_client(server, budget=Budget(max_llm_calls=1),
                         on_parse_retry=lambda node, attempt, errors: retries.append(attempt))
    with pytest.raises(LimitReached):
        client.structured("planner", MESSAGES, PlanModel)
    assert server.calls() == 1
    assert retries == [1]  # the retry was planned, then refused by the budget


# --- unpriced models refused at start-up -----------------------------------------------------------


def write_config(tmp_path: Path, llm: dict[str, Any], *, max_cost_usd: float | None = 1.0) -> Path:
    config: dict[str, Any] = {
        "datasources": [{"id": "chinook", "url": "sqlite:///chinook.sqlite"}],
        "policies": {"default_role": "admin", "roles": {"admin": {}}},
        "llm": llm,
    }
    if max_cost_usd is not None:
        config["settings"] = {"pipeline": {"max_cost_usd": max_cost_usd}}
    path = tmp_path / "nl2sql.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


LOCAL_LLM = {"models": {"local": {"provider": "openai", "model": "my-local-model",
                                  "base_url": "http://localhost:8080/v1"}},
             "default": "local"}


def test_unpriced_model_refused_at_start_up(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_project(write_config(tmp_path, LOCAL_LLM))
    (problem,) = info.value.problems
    assert problem.key == "llm.models.local.model"
    assert "my-local-model" in problem.message and "settings.pipeline.max_cost_usd" in problem.message
    assert "llm.prices.my-local-model" in (problem.fix or "")
    assert "llm.models.local.model" in str(info.value) and "llm.prices.my-local-model" in str(info.value)


def test_priced_local_model_loads(tmp_path: Path) -> None:
    llm = {**LOCAL_LLM, "prices": {"my-local-model": {"input": 0, "output": 0}}}
    config = load_project(write_config(tmp_path, llm))
    assert config.llm.prices["my-local-model"] == PriceConfig(input=0, output=0)
    assert config.settings.pipeline.max_cost_usd == 1.0


def test_unpriced_model_loads_without_a_dollar_cap(tmp_path: Path) -> None:
    config = load_project(write_config(tmp_path, LOCAL_LLM, max_cost_usd=None))
    assert config.llm.models["local"].model == "my-local-model"


def test_table_model_needs_no_price_row(tmp_path: Path) -> None:
    llm = {"models": {"main": {"provider": "openai", "model": "gpt-4o-mini"}}, "default": "main"}
    assert load_project(write_config(tmp_path, llm)).llm.default == "main"


# --- which model a node uses -----------------------------------------------------------------------


def test_nodes_override_the_default(server: FakeLLMServer) -> None:
    server.answer("text", "a", "b")
    config = LLMConfig(models={"small": server.model_config("small-model"), "big": server.model_config("big-model")},
                       default="small", nodes={"planner": "big"})
    client = LLMClient(config, backoff_s=0.01)
    assert client.model_name_for("planner") == "big"
    assert client.model_name_for("resolver") == "small"
    assert client.wire_for("planner").name == "big"
    client.text("planner", MESSAGES)
    client.text("resolver", MESSAGES)
    assert [r["model"] for r in server.requests] == ["big-model", "small-model"]
    assert [(r.node, r.model) for r in client.records] == [("planner", "big-model"), ("resolver", "small-model")]


def test_node_without_a_model(server: FakeLLMServer) -> None:
    client = LLMClient(LLMConfig(models={"big": server.model_config("big-model")}, nodes={"planner": "big"}))
    assert client.configured("planner") and not client.configured("synthesizer")
    with pytest.raises(ModelNotConfigured) as info:
        client.text("synthesizer", MESSAGES)
    err = info.value
    assert err.code == "LLM_NOT_CONFIGURED" and err.node == "synthesizer"
    assert "synthesizer" in str(err)
    fix = err.fix or ""
    # The YAML shows that `models:` and `default:` sit under `llm:`, and it parses as such.
    yaml_lines = [line for line in fix.splitlines() if line.startswith("  ")]
    section = yaml.safe_load("\n".join(yaml_lines))
    assert section["llm"]["default"] == "main" and section["llm"]["models"]["main"]["provider"] == "openai"
    assert "nodes: {synthesizer: main}" in fix and "docs/models.md" in fix
    assert "OPENAI_API_KEY" in fix and "ANTHROPIC_API_KEY" in fix and "NL2SQL_LLM_BASE_URL" in fix
    assert "nl2sql init --demo" in fix and "Verified questions are answered without a model" in fix
    assert server.calls() == 0


def test_no_models_at_all() -> None:
    with pytest.raises(ModelNotConfigured) as info:
        LLMClient(LLMConfig()).wire_for("planner")
    assert info.value.code == "LLM_NOT_CONFIGURED"


def test_unknown_node() -> None:
    client = LLMClient(LLMConfig())
    with pytest.raises(UnknownNameError) as info:
        client.wire_for("planer")
    assert "'planner'" in str(info.value)  # did you mean
    with pytest.raises(UnknownNameError):
        client.text("summariser", MESSAGES)


def test_a_runs_clock_stands_still_while_its_models_answer_and_overlapping_calls_count_once() -> None:
    import threading
    import time

    from nl2sql.pipeline.trace import RunTrace

    trace = RunTrace("t-model-time", timeout_s=60)
    left_before = trace.remaining_s()
    assert left_before is not None
    both_in = threading.Barrier(2)

    def call() -> None:
        with trace.waiting_for_a_model():
            both_in.wait()
            time.sleep(0.3)

    threads = [threading.Thread(target=call) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # two parallel sub-queries' calls: 0.3 s of the model's time, not 0.6 s, and none of it the run's own
    assert 0.3 <= trace.model_time_s() < 0.55
    assert left_before - trace.remaining_s() < 0.2  # type: ignore[operator]
