"""Every documented exit code, from the installed `nl2sql` executable in a subprocess (never `main()` in-process:
an in-process call once hid that every command exited 0).

0 success; 1 a refused, failed or stopped run, an eval regression, a failed index build; 2 a usage error (bad
arguments, configuration, unknown names, SQL the guard refuses) or an eval series break; 3 an eval's dollar cap.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from nl2sql.config import Config
from nl2sql.errors import GENERIC_REFUSAL
from nl2sql.evaluation.gold_llm import GoldModel
from nl2sql.evaluation.suite import load_suite, suite_digest
from nl2sql.llm.fake import FakeLLMServer

ROOT = Path(__file__).resolve().parents[2]
NL2SQL = Path(sys.executable).parent / "nl2sql"
CHINOOK_SUITE = ROOT / "suites" / "chinook.yaml"


def nl2sql(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
           timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the installed executable; returns the finished process (exit code, stdout, stderr)."""
    return subprocess.run([str(NL2SQL), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, "COLUMNS": "200", **(env or {})}, stdin=subprocess.DEVNULL)


def assert_exit(proc: subprocess.CompletedProcess[str], code: int) -> None:
    assert proc.returncode == code, f"exit {proc.returncode}, wanted {code}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stdout + proc.stderr


# --- commands that need no flow -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo(demo_dir: Path) -> str:
    return str(demo_dir / "nl2sql.yaml")


@pytest.mark.parametrize(("args", "code"), [
    (["sql", "SELECT Name FROM Genre", "-d", "chinook", "-r", "viewer"], 0),
    (["sql", "SELECT * FROM Invoice", "-d", "chinook", "-r", "viewer"], 1),
    (["sql", "SELECT 1 IN Employee", "-d", "chinook", "-r", "viewer"], 1),
    (["sql", "SELECT * FROM tickets", "-d", "support", "-r", "viewer"], 1),
    (["sql", "DELETE FROM Genre", "-d", "chinook", "-r", "admin"], 2),
    (["sql", "SELECT name FROM sqlite_master", "-d", "chinook", "-r", "admin"], 2),
    (["sql", "SELECT 1", "-d", "nosuch", "-r", "admin"], 2),
    (["sql", "SELECT 1", "-d", "chinook", "-r", "nosuch"], 2),
    (["sql", "SELECT 1", "-d", "chinook", "--limit", "-1"], 2),
    (["sql", "SELECT 1"], 2),
    (["schema", "chinook", "--role", "viewer"], 0),
    (["schema", "support", "--role", "viewer"], 1),
    (["schema", "chinook", "--role", "nosuch"], 2),
    (["datasources", "list"], 0),
    (["nosuchcommand"], 2),
    (["ask"], 2),
    (["ask", "How many tracks are there?", "--role", "nosuch"], 2),
    (["ask", "How many tracks are there?", "--datasource", "nosuch"], 2),
    (["eval", "run", "--mode", "nosuch"], 2),
    (["eval", "run", "--mode", "plans", "--suite", str(CHINOOK_SUITE), "--examples",
      str(CHINOOK_SUITE.parents[1] / "benchmarks" / "models" / "dev_questions.yaml")], 2),  # examples: mode full
    (["eval", "run", "--mode", "full", "--max-cost", "1", "--suite", str(CHINOOK_SUITE), "--examples",
      str(CHINOOK_SUITE)], 2),  # a suite's own cases are never its examples
])
def test_exit_codes_of_commands_without_a_flow(demo: str, args: list[str], code: int) -> None:
    proc = nl2sql("-c", demo, *args)
    assert_exit(proc, code)
    if code == 1 and args[0] in ("sql", "schema"):
        assert GENERIC_REFUSAL in proc.stderr
        assert "Employee" not in proc.stderr + proc.stdout


def test_a_missing_config_is_a_usage_error(tmp_path: Path) -> None:
    assert_exit(nl2sql("-c", str(tmp_path / "nl2sql.yaml"), "datasources", "list"), 2)


def test_a_hard_row_cap_no_flag_lifts(demo: str) -> None:
    proc = nl2sql("-c", demo, "sql", "SELECT t1.TrackId FROM Track t1 CROSS JOIN Track t2", "-d", "chinook", "-r", "viewer",
                  "--limit", "100000000", "--json")
    assert_exit(proc, 0)
    payload = json.loads(proc.stdout)
    assert len(payload["rows"]) == 100_000 and payload["truncated"]


# --- commands that run flows (ask, index build, eval run) ----------------------------------------------------


@pytest.fixture(scope="module")
def project(project: Config, fake: FakeLLMServer) -> Config:
    """The shared demo project, its fake server answering the Chinook suite's questions like the gold model."""
    GoldModel(fake, load_suite(CHINOOK_SUITE).cases)
    return project


@pytest.fixture(scope="module")
def flow_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A Prefect home of this module's own, CI unset (mode full refuses to run under CI)."""
    env = {"PREFECT_HOME": str(tmp_path_factory.mktemp("prefect-home"))}
    return env


def with_pipeline(project: Config, tmp_path: Path, **pipeline: object) -> str:
    """A copy of the project's config file (same data and state) with `settings.pipeline` values changed."""
    raw = yaml.safe_load(project.path.read_text())
    raw.setdefault("settings", {}).setdefault("pipeline", {}).update(pipeline)
    raw.setdefault("storage", {})["state_dir"] = str(project.state_dir)
    target = project.path.parent / f"{tmp_path.name}.yaml"
    target.write_text(yaml.safe_dump(raw, sort_keys=False))
    return str(target)


@pytest.mark.slow
@pytest.mark.prefect
def test_ask_prints_the_sql_and_rows_before_the_answer_in_words(project: Config, flow_env: dict[str, str]) -> None:
    from nl2sql.evaluation.gold_llm import FIXED_ANSWER

    proc = nl2sql("-c", str(project.path), "ask", "How much did we earn in each year?", "--role", "analyst",
                  "--no-desk", env=flow_env)
    assert_exit(proc, 0)
    out = proc.stdout
    # the statement and its rows as soon as they ran, then the sentence the model streams, each shown once
    assert out.index("chinook (verified query):") < out.index("2007") < out.index("5 rows") < out.index(FIXED_ANSWER)
    assert out.count("5 rows") == 1 and out.count("chinook (verified query):") == 1


@pytest.mark.slow
@pytest.mark.prefect
def test_ask_exit_codes(project: Config, flow_env: dict[str, str], tmp_path: Path) -> None:
    config = str(project.path)
    answered = nl2sql("-c", config, "ask", "How much did we earn in each year?", "--role", "analyst", "--json",
                      env=flow_env)
    assert_exit(answered, 0)
    assert json.loads(answered.stdout)["status"] == "success"
    # the command ends without the interpreter's teardown, after its own: the run's audit lines are written
    audit = tmp_path / "audit"
    raw = yaml.safe_load(project.path.read_text())
    raw["observers"] = [{"use": "audit", "options": {"folder": str(audit)}}]
    raw.setdefault("storage", {})["state_dir"] = str(project.state_dir)
    audited_config = project.path.parent / f"{tmp_path.name}-audit.yaml"
    audited_config.write_text(yaml.safe_dump(raw, sort_keys=False))
    audited_run = nl2sql("-c", str(audited_config), "ask", "How much did we earn in each year?", "--role", "analyst",
                         "--json", env=flow_env)
    assert_exit(audited_run, 0)
    trace_id = json.loads(audited_run.stdout)["trace_id"]
    events = [json.loads(line) for f in audit.glob("*.jsonl") for line in f.read_text().splitlines()]
    assert {"run.started", "run.finished"} <= {e["name"] for e in events if e["trace_id"] == trace_id}

    refused = nl2sql("-c", config, "ask", "Which customers live in Brazil?", "--role", "viewer", "--json",
                     env=flow_env)
    assert_exit(refused, 1)
    assert GENERIC_REFUSAL in refused.stdout

    planned = next(c.question for c in load_suite(CHINOOK_SUITE).cases
                   if c.plan and c.outcome.get("admin") == "allowed" and c.kind == "answer")
    stopped = nl2sql("-c", with_pipeline(project, tmp_path, max_llm_calls=1), "ask", planned, "--role", "admin",
                     "--json", env=flow_env)
    assert_exit(stopped, 1)
    assert json.loads(stopped.stdout)["status"] == "stopped"

    failed = nl2sql("-c", config, "ask", "What is the airspeed of an unladen swallow?", "--role", "admin",
                    "--json", env=flow_env)  # the model finds no database that answers it
    assert_exit(failed, 1)
    assert json.loads(failed.stdout)["status"] == "error"


@pytest.mark.slow
@pytest.mark.prefect
def test_a_question_about_no_data_is_refused_before_any_model(project: Config, fake: FakeLLMServer,
                                                             flow_env: dict[str, str]) -> None:
    """A question naming nothing of the data is refused by routing's evidence, with the fixed sentence, and no
    model is asked anything."""
    before = len(fake.requests)
    proc = nl2sql("-c", str(project.path), "ask", "What will the weather be like in Berlin tomorrow?", "--role",
                  "viewer", "--json", env=flow_env)
    assert_exit(proc, 1)
    result = json.loads(proc.stdout)
    assert [e["code"] for e in result["errors"]] == ["QUESTION_NOT_ANSWERABLE"]
    assert result["answer"]["summary"] == "None of the data you can reach answers this question."
    assert not result["sub_queries"] and len(fake.requests) == before


@pytest.mark.slow
@pytest.mark.prefect
def test_a_failed_index_build_exits_1(tmp_path: Path, flow_env: dict[str, str]) -> None:
    nl2sql("init", "--demo", str(tmp_path / "p"))
    (tmp_path / "p" / "data" / "support.sqlite").write_bytes(b"this is not a database" * 100)
    proc = nl2sql("-c", str(tmp_path / "p" / "nl2sql.yaml"), "index", "build", "--datasource", "support",
                  env=flow_env)
    assert_exit(proc, 1)
    assert "INDEX_BUILD_FAILED" in proc.stderr and "support" in proc.stderr


def broken_copy(tmp_path: Path) -> tuple[Path, Path]:
    """The chinook suite with one gold row changed, and a copy of benchmarks/ whose plans record is made
    comparable with it (its suite digest set to the broken suite's): a run that got worse, not a new series."""
    suite = yaml.safe_load(CHINOOK_SUITE.read_text())
    case = next(c for c in suite["cases"] if c.get("rows") and c.get("plan") and c["outcome"].get("admin") == "allowed")
    row = case["rows"][0]
    column = next(k for k, v in row.items() if isinstance(v, int | float))
    row[column] = row[column] + 1000
    broken = tmp_path / "chinook.yaml"
    broken.write_text(yaml.safe_dump(suite, sort_keys=False, allow_unicode=True))
    records = tmp_path / "benchmarks"
    shutil.copytree(ROOT / "benchmarks" / "plans", records / "plans")
    for path in (records / "plans").rglob("*.json"):
        record = json.loads(path.read_text())
        record["dataset"]["digest"] = suite_digest(broken)
        path.write_text(json.dumps(record))
    return broken, records


@pytest.mark.slow
@pytest.mark.prefect
def test_the_eval_gate_fails_ci_when_a_gold_row_breaks(project: Config, flow_env: dict[str, str],
                                                       tmp_path: Path) -> None:
    broken, records = broken_copy(tmp_path)
    proc = nl2sql("-c", str(project.path), "eval", "run", "--mode", "plans", "--suite", str(broken), "--role",
                  "admin", "--baseline", str(records), env=flow_env)
    assert_exit(proc, 1)
    assert "gate" in proc.stdout

    (tmp_path / "no-records").mkdir()
    series_break = nl2sql("-c", str(project.path), "eval", "run", "--mode", "retrieval", "--suite",
                          str(CHINOOK_SUITE), "--baseline", str(tmp_path / "no-records"), env=flow_env)
    assert_exit(series_break, 2)
    assert "series break" in series_break.stderr
    assert_exit(nl2sql("-c", str(project.path), "eval", "run", "--mode", "retrieval", "--baseline",
                       str(tmp_path / "nowhere"), env=flow_env), 2)


@pytest.mark.slow
@pytest.mark.prefect
def test_an_eval_stopped_by_its_dollar_cap_exits_3(project: Config, flow_env: dict[str, str], fake: FakeLLMServer,
                                                    tmp_path: Path) -> None:
    llm = tmp_path / "fake.yaml"
    llm.write_text(yaml.safe_dump({"models": {"m": {"provider": "openai", "model": "fake-model",
                                                     "base_url": fake.base_url, "api_key": "k"}},
                                   "default": "m", "prices": {"fake-model": {"input": 1000.0, "output": 1000.0}}}))
    env = {**flow_env, "CI": ""}
    proc = nl2sql("-c", str(project.path), "eval", "run", "--mode", "full", "--suite", str(CHINOOK_SUITE),
                  "--role", "admin", "--llm", f"fake={llm}", "--max-cost", "0.01", env=env)
    assert_exit(proc, 3)
    assert "max_cost" in proc.stderr

    uncapped = nl2sql("-c", str(project.path), "eval", "run", "--mode", "full", "--suite", str(CHINOOK_SUITE),
                      "--llm", f"fake={llm}", env=env)
    assert_exit(uncapped, 2)


@pytest.mark.slow
@pytest.mark.prefect
def test_index_check_exits_by_what_it_found(tmp_path: Path, flow_env: dict[str, str]) -> None:
    import sqlite3

    nl2sql("init", "--demo", str(tmp_path / "p"))
    config, data = str(tmp_path / "p" / "nl2sql.yaml"), tmp_path / "p" / "data"
    assert_exit(nl2sql("-c", config, "index", "build", "-d", "support", "-d", "chinook", env=flow_env), 0)
    assert_exit(nl2sql("-c", config, "index", "check", "-d", "support", env=flow_env), 0)

    with sqlite3.connect(data / "support.sqlite") as conn:
        conn.execute("ALTER TABLE tickets RENAME COLUMN status TO state")
    drifted = nl2sql("-c", config, "index", "check", "-d", "support", env=flow_env)
    assert_exit(drifted, 1)
    assert "tickets.status" in drifted.stdout and "How many {priority} tickets are still open?" in drifted.stdout

    with sqlite3.connect(data / "chinook.sqlite") as conn:
        conn.execute("ALTER TABLE Employee ADD COLUMN Salary REAL")
    viewer = nl2sql("-c", config, "index", "check", "-d", "chinook", "--role", "viewer", "--json", env=flow_env)
    assert_exit(viewer, 0)
    assert json.loads(viewer.stdout)[0]["status"] == "unchanged" and "Employee" not in viewer.stdout
    assert_exit(nl2sql("-c", config, "index", "check", "-d", "chinook", "--no-expectations", env=flow_env), 1)

    (data / "support.sqlite").write_bytes(b"this is not a database" * 100)
    assert_exit(nl2sql("-c", config, "index", "check", "-d", "support", env=flow_env), 2)
    assert_exit(nl2sql("-c", config, "index", "check", "-d", "nosuch", env=flow_env), 2)


def first_tracks() -> Callable[[dict], dict]:
    """The seeder (plan format) proposing five new cases a call: the names of the first n tracks."""
    numbers = itertools.count(1)

    def answer(body: dict) -> dict:
        return {"cases": [{"question": f"What are the names of the first {n} tracks?", "difficulty": "easy",
                           "plan": {"select": [{"expr": {"kind": "column", "table": "t", "column": "Name"},
                                                "alias": "name"}],
                                    "from": {"table": "Track", "alias": "t"},
                                    "order_by": [{"expr": {"kind": "column", "table": "t", "column": "TrackId"},
                                                  "direction": "asc"}], "limit": n}}
                          for n in itertools.islice(numbers, 5)]}

    return answer


def test_eval_seed_refuses_before_any_call(project: Config, fake: FakeLLMServer, tmp_path: Path) -> None:
    fake.reset()
    config = str(project.path)
    seed = ("-c", config, "eval", "seed", "chinook", "--count", "3", "--max-cost", "1")
    in_ci = nl2sql(*seed, "--out", str(tmp_path / "d.yaml"), env={"CI": "1"})
    assert_exit(in_ci, 2)
    assert "never runs in CI" in in_ci.stderr
    into_suite = nl2sql(*seed, "--out", str(CHINOOK_SUITE), env={"CI": ""})
    assert_exit(into_suite, 2)
    assert "holds approved cases" in into_suite.stderr
    nowhere = nl2sql("-c", config, "eval", "seed", "webanalytics", "--role", "viewer", "--count", "3", "--max-cost",
                     "1", "--out", str(tmp_path / "d.yaml"), env={"CI": ""})
    assert_exit(nowhere, 2)
    assert GENERIC_REFUSAL in nowhere.stderr
    assert fake.calls() == 0 and not (tmp_path / "d.yaml").exists()


@pytest.mark.slow
@pytest.mark.prefect
def test_eval_seed_exit_codes(project: Config, fake: FakeLLMServer, flow_env: dict[str, str], tmp_path: Path) -> None:
    fake.reset()
    fake.respond_with("SeedBatch", first_tracks())
    config = str(project.path)
    out = tmp_path / "drafts.yaml"
    written = nl2sql("-c", config, "eval", "seed", "chinook", "--role", "viewer", "--count", "4", "--max-cost", "1",
                     "--out", str(out), "--json", env={**flow_env, "CI": ""})
    assert_exit(written, 0)
    assert json.loads(written.stdout)["written"] == 4
    assert [c.status for c in load_suite(out).cases] == ["draft"] * 4

    fake.reset()
    fake.respond_with("SeedBatch", lambda body: {"cases": []})
    nothing = nl2sql("-c", config, "eval", "seed", "chinook", "--count", "4", "--max-cost", "1", "--out",
                     str(tmp_path / "none.yaml"), env={**flow_env, "CI": ""})
    assert_exit(nothing, 3)
    assert "nothing usable" in nothing.stdout
