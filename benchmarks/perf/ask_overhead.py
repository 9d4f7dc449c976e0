"""What the Prefect flow adds to a question, and what the inline executor itself costs.

Runs the same single-sub-query questions (Chinook gold plans, answered by the fake model server
over the real wire, plan cache off) through the inline executor and the `ask` flow, alternating,
and prints p50/p95 of each, the flow's added time (flow − inline, per question), and the inline
executor's own overhead (its time minus the time spent waiting on the model server).

Targets: the flow adds ≤ 250 ms p50; the inline executor's own overhead ≤ 50 ms p50.

The Prefect server runs on loopback with PostgreSQL as its database (SQLite-backed servers stall
for seconds after runs with many task runs on 2 cores); `--sqlite` uses Prefect's temporary
SQLite-backed server instead, for comparison.

    .venv/bin/python benchmarks/perf/ask_overhead.py [--questions N] [--sqlite] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the loopback Prefect server of tests/support
PLANS = ROOT / "tests" / "data" / "plans" / "chinook"
PG_SERVER_URL = os.environ.get("NL2SQL_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


@contextmanager
def prefect_server(home: Path, postgres: bool):
    """A `prefect server start` on loopback (PostgreSQL-backed unless told otherwise); yields its API URL."""
    import sqlalchemy as sa

    from tests.support.prefect_server import prefect_server_process

    name = f"nl2sql_bench_prefect_{os.getpid()}"
    extra = {"PREFECT_UI_ENABLED": "false"}
    admin = None
    if postgres:
        admin = sa.create_engine(PG_SERVER_URL, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        url = sa.make_url(PG_SERVER_URL).set(drivername="postgresql+asyncpg", database=name)
        extra["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = url.render_as_string(hide_password=False)
    home.mkdir(parents=True, exist_ok=True)
    try:
        with prefect_server_process(home, extra_env=extra, services=False) as (api, _env):
            yield api
    finally:
        if admin is not None:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.dispose()


def write_project(target: Path, base_url: str) -> Path:
    """The demo project with the fake server as its model (writing plans), the plan cache off, its index built."""
    from nl2sql.demo import init_demo
    from nl2sql.index import StateStore
    from nl2sql.index.service import build_configured
    from nl2sql.project import load_project

    path = init_demo(target, env={})
    raw = yaml.safe_load(path.read_text())
    raw["llm"] = {"models": {"fake": {"provider": "openai", "model": "fake-model", "base_url": base_url,
                                      "api_key": "fake"}}, "default": "fake"}
    raw["observers"] = []
    # the fake model answers with the gold plans: the planner writes plans (the default format is `sql`)
    raw["settings"] = {"pipeline": {"plan_cache": False, "planner": {"format": "plan"}}}
    path.write_text(yaml.safe_dump(raw, sort_keys=False, allow_unicode=True))
    config = load_project(path)
    build_configured(config, StateStore(config.state_dir))
    return path


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--sqlite", action="store_true", help="Prefect's temporary SQLite-backed server")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_suffix(".json"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="nl2sql-ask-bench-"))
    with (prefect_server(work / "prefect", postgres=True) if not args.sqlite else _no_server()) as api:
        os.environ["PREFECT_HOME"] = str(work / "prefect-client")
        os.environ["PREFECT_LOGGING_LEVEL"] = "WARNING"
        os.environ.setdefault("DO_NOT_TRACK", "1")
        if api:
            os.environ["PREFECT_API_URL"] = api
        report = run(work, args.questions, "postgresql" if api else "sqlite (temporary server)")
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


@contextmanager
def _no_server():
    yield None


def run(work: Path, count: int, server: str) -> dict[str, Any]:
    from nl2sql.flows.ask import ask_here, runtime_for
    from nl2sql.llm.fake import FakeLLMServer
    from nl2sql.pipeline import Runtime, ask_inline
    from nl2sql.project import load_project

    plans = {}
    for path in sorted(PLANS.glob("*.json")):
        record = json.loads(path.read_text())
        plans[record["question"]] = record["plan"]
    questions = list(plans)[:count]
    with FakeLLMServer() as fake:
        fake.respond_with("Answerability", lambda b: {"answerable": True, "datasource_ids": ["chinook"],
                                                      "reason": "the music store"})
        fake.respond_with("PlanModel", lambda b: plans[_asked(b)])
        fake.respond_with("text", lambda b: "The answer is in the rows below.")
        config_path = write_project(work / "demo", fake.base_url)
        runtime = Runtime(load_project(config_path), observers=[])
        ask_inline(runtime, questions[0], roles=["admin"])  # warm: model files, connections
        ask_here(questions[0], role="admin", config=str(config_path))  # warm: the flow's runtime, the client
        flow_runtime = runtime_for(str(config_path))
        inline_ms, flow_ms, added_ms, own_ms, statuses = [], [], [], [], []
        for question in questions:
            started = time.perf_counter()
            inline = ask_inline(runtime, question, roles=["admin"])
            inline_ms.append((time.perf_counter() - started) * 1000)
            model_ms = _model_ms(runtime, inline.trace_id)
            own_ms.append(inline_ms[-1] - model_ms)
            started = time.perf_counter()
            flowed = ask_here(question, role="admin", config=str(config_path))
            flow_ms.append((time.perf_counter() - started) * 1000)
            added_ms.append(flow_ms[-1] - inline_ms[-1])
            statuses.append((inline.status, flowed.status))
        runtime.close()
        flow_runtime.close()
    return {
        "questions": len(questions), "server": server, "answered": sum(a == b == "success" for a, b in statuses),
        "inline_ms": {"p50": pct(inline_ms, 0.5), "p95": pct(inline_ms, 0.95)},
        "flow_ms": {"p50": pct(flow_ms, 0.5), "p95": pct(flow_ms, 0.95)},
        "flow_added_ms": {"p50": pct(added_ms, 0.5), "p95": pct(added_ms, 0.95), "target_p50": 250},
        "inline_own_ms": {"p50": pct(own_ms, 0.5), "p95": pct(own_ms, 0.95), "target_p50": 50},
        "flow_over_inline_ratio_p50": round(statistics.median(flow_ms) / statistics.median(inline_ms), 2),
    }


def _asked(body: dict) -> str:
    for message in body["messages"]:
        if message["role"] == "user" and "Question: " in message["content"]:
            return message["content"].split("Question: ", 1)[1].split("\n")[0].strip()
    raise KeyError("no question")


def _model_ms(runtime: Any, trace_id: str) -> float:
    trace = runtime.store.trace(trace_id) or {}
    return sum(call["latency_ms"] for call in trace.get("llm_calls", []))


if __name__ == "__main__":
    main()
