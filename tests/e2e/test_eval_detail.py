"""A run read and sliced on the demo: a failing case's error code, parse retries and refiner rounds in the report,
and --case / --tag / --limit / --llm through the installed `nl2sql` executable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nl2sql.config import Config
from nl2sql.config.models import LLMConfig, ModelConfig, PriceConfig
from nl2sql.evaluation.gold_llm import GoldModel
from nl2sql.evaluation.records import build_record
from nl2sql.evaluation.run import evaluate
from nl2sql.evaluation.suite import load_suite
from nl2sql.llm.fake import FakeLLMServer

ROOT = Path(__file__).resolve().parents[2]
NL2SQL = Path(sys.executable).parent / "nl2sql"
CHINOOK = ROOT / "suites" / "chinook.yaml"
#: A plan naming a column Customer does not have: the validator refuses it (PLAN_INVALID), the refiner is asked.
BROKEN_PLAN = {"select": [{"expr": {"kind": "column", "table": "c", "column": "NoSuchColumn"}, "alias": "x"}],
               "from": {"table": "Customer", "alias": "c"}}


def nl2sql(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(NL2SQL), *args], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={**os.environ, "COLUMNS": "200", **(env or {})}, stdin=subprocess.DEVNULL)


def assert_exit(proc: subprocess.CompletedProcess[str], code: int) -> None:
    assert proc.returncode == code, f"exit {proc.returncode}, wanted {code}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stdout + proc.stderr


def fake_llm(server: FakeLLMServer) -> LLMConfig:
    return LLMConfig(models={"m": ModelConfig(provider="openai", model="fake-model", base_url=server.base_url,
                                              api_key="k")},  # type: ignore[arg-type]
                     default="m", prices={"fake-model": PriceConfig(input=1.0, output=2.0)})


def test_a_failing_case_reports_its_error_code_parse_retries_and_refiner_rounds(
        project: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    suite = load_suite(CHINOOK)
    broken, fine = "chinook_001", "chinook_005"
    with FakeLLMServer() as server:
        GoldModel(server, suite.cases, plans={broken: BROKEN_PLAN})
        server.answer("PlanModel", {"select": "not a list"})  # the first plan does not validate: one parse retry
        report = evaluate("full", project, str(CHINOOK), llm={"fake": fake_llm(server)}, max_cost_usd=5.0,
                          ids=[broken, fine], roles=["admin"])
    board = report.boards["fake"]
    assert report.suite["selection"] == {"ids": [broken, fine], "tags": None, "limit": None, "cases": 2, "of": 66}
    by_case = {r["case_id"]: r for r in board.records}
    failed = by_case[broken]
    assert failed["status"] == "error" and failed["error_code"] == "PLAN_INVALID"
    assert failed["error_details"] == ["UNKNOWN_COLUMN"]  # what exactly failed, as codes
    assert failed["parse_retries"] == 1 and failed["refiner_rounds"] >= 1
    assert failed["llm_calls"] >= 3 and failed["latency_s"] > 0  # the planner twice, the refiner
    passed = by_case[fine]
    assert passed["error_code"] is None and passed["parse_retries"] == 0 and passed["refiner_rounds"] == 0
    assert 1 <= passed["llm_calls"] < failed["llm_calls"]

    failure = next(f for f in board.failures if f["case_id"] == broken)
    assert failure["error_code"] == "PLAN_INVALID" and "got error PLAN_INVALID" in failure["why"]
    table = report.markdown().split("## Failures (fake)")[1]
    assert f"| {broken} | admin |" in table and "| PLAN_INVALID (UNKNOWN_COLUMN) | 1 |" in table

    verdicts = {v["case"]: v for v in build_record(report.model_dump(mode="json"), "fake")["verdicts"]}
    kept = verdicts[f"{broken}/admin"]
    assert kept["passed"] is False and kept["error_code"] == "PLAN_INVALID" and kept["parse_retries"] == 1
    assert kept["error_details"] == ["UNKNOWN_COLUMN"]
    assert kept["refiner_rounds"] >= 1 and "rows" not in kept and "answer" not in kept and "sql" not in kept


def test_an_unknown_case_or_a_bad_llm_file_is_a_usage_error(demo_dir: Path, tmp_path: Path) -> None:
    demo = str(demo_dir / "nl2sql.yaml")
    proc = nl2sql("-c", demo, "eval", "run", "--mode", "plans", "--suite", str(CHINOOK), "--case", "chinook_001",
                  "--case", "chinok_002")
    assert_exit(proc, 2)
    assert "unknown case 'chinok_002'" in proc.stderr and "did you mean 'chinook_002'?" in proc.stderr

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"llm": {"models": {"m": {"provider": "openai"}}, "default": "m"}}))
    proc = nl2sql("-c", demo, "eval", "run", "--mode", "full", "--suite", str(CHINOOK), "--llm", f"x={bad}",
                  "--max-cost", "1", env={"CI": ""})
    assert_exit(proc, 2)
    assert "llm.models.m.model" in proc.stderr and str(bad) in proc.stderr.replace("\n", "")
    assert "validation error" not in proc.stderr


@pytest.mark.slow
@pytest.mark.prefect
def test_a_slice_runs_through_the_flow_is_gated_on_its_cases_and_is_not_recorded(
        project: Config, fake: FakeLLMServer, tmp_path: Path) -> None:
    suite = load_suite(CHINOOK)
    GoldModel(fake, suite.cases)
    env = {"PREFECT_HOME": str(tmp_path / "prefect"), "CI": ""}
    wrapped = tmp_path / "models.yaml"  # the llm block as a configuration has it
    wrapped.write_text(yaml.safe_dump({"llm": {
        "models": {"m": {"provider": "openai", "model": "fake-model", "base_url": fake.base_url, "api_key": "k"}},
        "default": "m", "prices": {"fake-model": {"input": 1.0, "output": 2.0}}}}))
    out = tmp_path / "full.json"
    proc = nl2sql("-c", str(project.path), "eval", "run", "--mode", "full", "--suite", str(CHINOOK), "--llm",
                  f"fake={wrapped}", "--max-cost", "1", "--case", "chinook_005", "--case", "chinook_001", "--role",
                  "admin", "--out", str(out), env=env)
    assert_exit(proc, 0)
    report = json.loads(out.read_text())
    records = report["boards"]["fake"]["records"]
    assert [r["case_id"] for r in records] == ["chinook_001", "chinook_005"]
    assert all(r["llm_calls"] >= 1 and r["parse_retries"] == 0 and r["error_code"] is None for r in records)

    window = [c.id for c in suite.select(tags=["window"])][:2]
    out = tmp_path / "plans.json"
    proc = nl2sql("-c", str(project.path), "eval", "run", "--mode", "plans", "--suite", str(CHINOOK), "--tag",
                  "window", "--limit", "2", "--baseline", str(ROOT / "benchmarks"), "--out", str(out), env=env)
    assert_exit(proc, 0)
    report = json.loads(out.read_text())
    assert sorted({r["case_id"] for r in report["boards"]["default"]["records"]}) == sorted(window)
    assert "a slice:" in proc.stdout and "no regression" in proc.stdout

    proc = nl2sql("eval", "publish", str(out), "--root", str(tmp_path / "records"), cwd=tmp_path, env=env)
    assert_exit(proc, 2)
    assert "a sliced run" in proc.stderr and not (tmp_path / "records").exists()
