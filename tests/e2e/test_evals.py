"""The eval harness end to end on the demo: mode plans, mode retrieval and its gate, mode full on fake models."""

from __future__ import annotations

from pathlib import Path

import pytest

from nl2sql.config import Config
from nl2sql.config.models import LLMConfig, ModelConfig, PriceConfig
from nl2sql.errors import ConfigError
from nl2sql.evaluation.gate import EXIT_OK, EXIT_REGRESSION, run_gate
from nl2sql.evaluation.gold_llm import GoldModel
from nl2sql.evaluation.run import eval_jobs, evaluate
from nl2sql.evaluation.suite import load_suite
from nl2sql.llm.fake import FakeLLMServer

ROOT = Path(__file__).resolve().parents[2]
CHINOOK = ROOT / "suites" / "chinook.yaml"
ROUTING = ROOT / "suites" / "routing.yaml"


def test_mode_plans_passes_every_case_for_every_role(project: Config) -> None:
    report = evaluate("plans", project, str(CHINOOK))
    board = report.boards["default"]
    suite = load_suite(CHINOOK)
    assert board.runs == board.planned_runs == len(eval_jobs(suite.select(), "plans"))
    assert board.failures == [] and report.metrics["execution_accuracy"] == 1.0
    outcomes = {r["outcome"] for r in board.records}
    assert outcomes == {"allowed", "refused", "unanswerable"}


def test_mode_retrieval_measures_recall_and_routing(project: Config) -> None:
    chinook = evaluate("retrieval", project, str(CHINOOK))
    routing = evaluate("retrieval", project, str(ROUTING))
    for key in ("table_recall", "column_recall", "tables_sent", "columns_sent", "routing_top1"):
        assert chinook.metrics[key] is not None
    assert routing.metrics["routing_top1"] is not None and routing.metrics["table_recall"] is None
    assert chinook.metrics["table_recall"] >= 0.95


def test_a_broken_retriever_trips_the_gate(project: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    baseline = evaluate("retrieval", project, str(CHINOOK)).model_dump(mode="json")
    assert run_gate(evaluate("retrieval", project, str(CHINOOK)).model_dump(mode="json"), baseline).exit_code == \
        EXIT_OK
    from nl2sql.index.retrieve import Retriever

    original = Retriever.schema_for

    def forgetful(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        schema = original(self, *args, **kwargs)
        schema.tables = schema.tables[:1]  # every table but the best one is lost
        return schema

    monkeypatch.setattr(Retriever, "schema_for", forgetful)
    broken = evaluate("retrieval", project, str(CHINOOK)).model_dump(mode="json")
    result = run_gate(broken, baseline)
    assert result.exit_code == EXIT_REGRESSION and result.configs["default"].lost


def two_models(good: FakeLLMServer, bad: FakeLLMServer, *, priced: bool = True) -> dict[str, LLMConfig]:
    prices = {"good-model": PriceConfig(input=1.0, output=2.0), "bad-model": PriceConfig(input=1.0, output=2.0)}
    return {name: LLMConfig(models={"m": ModelConfig(provider="openai", model=f"{name}-model", base_url=server.base_url,
                                                     api_key="k")},  # type: ignore[arg-type]
                            default="m", prices=prices if priced else {})
            for name, server in (("good", good), ("bad", bad))}


USAGE = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}
CALL_COST = (1000 * 1.0 + 100 * 2.0) / 1_000_000


def test_mode_full_on_two_fake_models_scores_costs_and_keeps_its_cap(project: Config,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    suite = load_suite(CHINOOK)
    cases = [c for c in suite.select() if c.answerable and "viewer" in c.outcome][:4]
    ids = [c.id for c in cases]
    wrong = next(c for c in cases if c.outcome.get("admin") == "allowed")
    other = next(c for c in suite.select() if c.plan and c.id != wrong.id and c.plan != wrong.plan)
    with FakeLLMServer() as good, FakeLLMServer() as bad:
        GoldModel(good, suite.cases, usage=USAGE)
        GoldModel(bad, suite.cases, usage=USAGE, plans={wrong.id: other.plan})
        report = evaluate("full", project, str(CHINOOK), llm=two_models(good, bad), max_cost_usd=10.0, ids=ids,
                          roles=["admin"])
        calls = good.calls() + bad.calls()
    assert set(report.boards) == {"good", "bad"}
    assert report.boards["good"].execution_accuracy == 1.0
    assert report.boards["bad"].execution_accuracy < 1.0
    assert f"{wrong.id}/admin" in {f"{f['case_id']}/{f['role']}" for f in report.boards["bad"].failures}
    total = sum(b.cost_usd or 0 for b in report.boards.values())
    assert total == pytest.approx(calls * CALL_COST)
    good_vs_bad = run_gate({**report.model_dump(mode="json"), "boards": {"good": report.boards["bad"].model_dump()}},
                           {**report.model_dump(mode="json"), "boards": {"good": report.boards["good"].model_dump()}},
                           max_regressions=0)
    assert good_vs_bad.exit_code == EXIT_REGRESSION

    with FakeLLMServer() as good, FakeLLMServer() as bad:
        GoldModel(good, suite.cases, usage=USAGE)
        GoldModel(bad, suite.cases, usage=USAGE)
        capped = evaluate("full", project, str(CHINOOK), llm=two_models(good, bad), max_cost_usd=CALL_COST * 5,
                          ids=ids, roles=["admin"])
    assert capped.stopped and capped.stopped.startswith("max_cost")
    assert sum(b.runs for b in capped.boards.values()) < sum(b.planned_runs for b in capped.boards.values())

    with FakeLLMServer() as good, FakeLLMServer() as bad:
        with pytest.raises(ConfigError, match="has no price"):
            evaluate("full", project, str(CHINOOK), llm=two_models(good, bad, priced=False), max_cost_usd=1.0)
        assert good.calls() == bad.calls() == 0


def test_mode_full_never_runs_in_ci_or_without_a_cap(project: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(ConfigError, match="never runs in CI"):
        evaluate("full", project, str(CHINOOK), max_cost_usd=1.0)
    monkeypatch.delenv("CI")
    with pytest.raises(ConfigError, match="dollar cap"):
        evaluate("full", project, str(CHINOOK))
