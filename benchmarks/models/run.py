"""A real model on the question path: the engine (eval mode full) and the `direct` baseline, on the same cases.

- engine: `nl2sql eval run --mode full` on the suite (or a slice of it) with the model as its only config,
  through the installed CLI, in a fresh demo project (or `--project DIR`, one already indexed);
- direct: the same model asked for one SELECT with the whole schema the role may read (every table and column of
  the case's datasource, keys included; no retrieval, no plan, no examples, no refiner), the statement run
  read-only under the role's scope, scored like the engine's runs (strict execution match for an allowed case, a
  refusal for a refused one, "CANNOT ANSWER" for an unanswerable one);
- direct_ddl: the same, asked with the engine's own planner prompt of the `sql` format (the readable tables as
  CREATE TABLE statements with sample values, the same rules), so what separates it from the engine is only the
  engine's work on the statement: reading it into a plan, validation and repairs, the answer's columns, the
  refiner.

Both write, per case, whether it passed, the error code of a failure, latency and model calls; the engine's
also parse retries, refiner rounds and repairs (the eval report's records). The figures go to
benchmarks/models/<name>.json with the commit and the settings.

    .venv/bin/python benchmarks/models/run.py --base-url http://127.0.0.1:8765/v1 --model qwen2.5-coder-1.5b \
        [--suite suites/chinook.yaml] [--role analyst] [--case ID ...] [--tag TAG ...] [--limit N] \
        [--format plan|sql] [--examples N] [--answerability-check on|off] [--systems engine,direct,direct_ddl]
        [--name NAME]

Nothing in the tests or CI runs it: it needs a model server (see docs/models.md for the one used here).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from nl2sql.config.models import LLMConfig
from nl2sql.datasources.checked import run_checked_sql
from nl2sql.datasources.connect import DatasourceCatalog
from nl2sql.errors import NL2SQLError
from nl2sql.evaluation.compare import rows_match
from nl2sql.evaluation.run import select_cases
from nl2sql.evaluation.suite import EvalCase, load_suite
from nl2sql.index.service import IndexService
from nl2sql.llm.client import LLMClient
from nl2sql.llm.models import Message
from nl2sql.pipeline.prompts import CANNOT_ANSWER_WORDS, sql_answer, sql_planner_messages
from nl2sql.policies import scope
from nl2sql.project import load_project

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BIN = Path(sys.executable).parent

DIRECT_SYSTEM = """You write one {dialect} SELECT statement that answers the question from the tables below.
Answer with the statement only. If no table holds what the question asks about, answer """ + CANNOT_ANSWER_WORDS + "."


def main() -> None:
    """Run the systems asked for and write their figures."""
    args = _args()
    suite_path = (ROOT / args.suite).resolve() if not Path(args.suite).is_absolute() else Path(args.suite)
    suite = load_suite(suite_path)
    cases = select_cases(suite, ids=args.case, tags=args.tag, limit=args.limit)
    with tempfile.TemporaryDirectory(prefix="nl2sql-models-") as tmp:
        work = Path(tmp)
        project = Path(args.project) if args.project else _demo_project(work / "demo")
        config_path = _configured(project / "nl2sql.yaml", work / "nl2sql.yaml", args)
        llm_path = work / "llm.yaml"
        llm_path.write_text(yaml.safe_dump({"llm": _llm_section(args)}))
        out: dict[str, Any] = {"commit": _commit(), "model": args.model, "base_url": args.base_url,
                               "suite": str(suite_path.relative_to(ROOT)), "role": args.role,
                               "cases": [c.id for c in cases], "settings": _settings(args), "systems": {}}
        target = HERE / f"{args.name}.json"
        for system in args.systems.split(","):
            if system not in ("engine", "direct", "direct_ddl"):
                raise SystemExit(f"unknown system {system!r}: use engine, direct and/or direct_ddl")
            started, records = time.monotonic(), []
            # in batches, the file rewritten after each: a long run stopped early keeps what it measured
            for i in range(0, len(cases), args.batch):
                batch = cases[i:i + args.batch]
                records += (_engine(config_path, llm_path, suite_path, batch, args) if system == "engine"
                            else _direct(config_path, batch, args, ddl=system == "direct_ddl"))
                out["systems"][system] = {"figures": _figures(records, time.monotonic() - started),
                                          "complete": i + args.batch >= len(cases), "records": records}
                _write(target, out)
            _print(system, out["systems"][system]["figures"])
    baselines = [s for s in ("direct", "direct_ddl") if s in out["systems"]]
    if "engine" in out["systems"] and baselines:
        engine = out["systems"]["engine"]["figures"]["strict"]
        best = max(out["systems"][s]["figures"]["strict"] for s in baselines)  # the stronger baseline
        out["engine_minus_direct_points"] = round(100 * (engine - best), 1)
        print(f"engine − best direct: {out['engine_minus_direct_points']:+.1f} points")
        _write(target, out)
    print(f"wrote {target.relative_to(ROOT)}")


def _write(target: Path, out: dict[str, Any]) -> None:
    target.write_text(json.dumps(out, indent=2) + "\n")


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-url", required=True, help="An OpenAI-compatible endpoint, e.g. http://127.0.0.1:8765/v1")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--structured-output", default="json_object",
                        help="How the endpoint takes a schema: json_schema, json_object, tool or prompt.")
    parser.add_argument("--timeout-s", type=float, default=240.0, help="One model call's timeout.")
    parser.add_argument("--max-tokens", type=int, default=1536, help="An answer's cap (a plan needs a few hundred "
                        "tokens; the cap ends a decoder that loops before the call's timeout does).")
    parser.add_argument("--run-timeout-s", type=float, default=600.0, help="One question's (settings.pipeline).")
    parser.add_argument("--suite", default="suites/chinook.yaml")
    parser.add_argument("--role", default="analyst", help="The role the cases run as; all: each role a case names.")
    parser.add_argument("--case", action="append")
    parser.add_argument("--tag", action="append")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--format", choices=("plan", "sql"), default=None, help="settings.pipeline.planner.format "
                        "(default: the project's).")
    parser.add_argument("--examples", type=int, default=None, help="settings.pipeline.planner.examples.")
    parser.add_argument("--examples-from", default=None, help="A suite whose cases are the planner's worked examples "
                        "(eval run --examples), e.g. benchmarks/models/dev_questions.yaml; default: none.")
    parser.add_argument("--answerability-check", choices=("on", "off"), default=None)
    parser.add_argument("--synthesizer", choices=("on", "off"), default="off", help="Also have the model write the "
                        "answer's prose (not scored by strict; off keeps a local server's prompt cache on the planner).")
    parser.add_argument("--examples-chosen", choices=("nearest", "fixed"), default=None,
                        help="settings.pipeline.planner.examples_chosen.")
    parser.add_argument("--synthesizer-follows-planner", choices=("on", "off"), default=None,
                        help="settings.pipeline.synthesizer_follows_planner (with --synthesizer on).")
    parser.add_argument("--systems", default="engine,direct,direct_ddl")
    parser.add_argument("--batch", type=int, default=8, help="Cases per eval run (the output is written after each).")
    parser.add_argument("--project", help="A demo project already indexed (default: a fresh one).")
    parser.add_argument("--name", default="latest", help="Output: benchmarks/models/NAME.json")
    return parser.parse_args()


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    return {"format": args.format, "examples": args.examples, "examples_from": args.examples_from,
            "answerability_check": args.answerability_check,
            "structured_output": args.structured_output, "timeout_s": args.timeout_s, "max_tokens": args.max_tokens,
            "run_timeout_s": args.run_timeout_s, "synthesizer": args.synthesizer,
            "synthesizer_follows_planner": args.synthesizer_follows_planner, "examples_chosen": args.examples_chosen}


def _llm_section(args: argparse.Namespace) -> dict[str, Any]:
    model: dict[str, Any] = {"provider": "openai", "base_url": args.base_url, "model": args.model,
                             "structured_output": args.structured_output, "timeout_s": args.timeout_s,
                             "stream_all": True, "max_tokens": args.max_tokens, "max_concurrent": 1}
    if args.api_key:
        model["api_key"] = args.api_key
    section: dict[str, Any] = {"models": {"bench": model}, "prices": {args.model: {"input": 0, "output": 0}}}
    if args.synthesizer == "on":
        section["default"] = "bench"
    else:  # the answer's prose is not scored here: without it the planner's prompt stays in the server's cache
        section["nodes"] = {node: "bench" for node in ("resolver", "decomposer", "planner", "refiner")}
    return section


def _demo_project(target: Path) -> Path:
    _cli("init", "--demo", str(target), "--force")
    _cli("-c", str(target / "nl2sql.yaml"), "index", "build")
    return target


def _configured(source: Path, target: Path, args: argparse.Namespace) -> Path:
    """The project's config with the planner settings asked for, its paths still relative to the project."""
    raw = yaml.safe_load(source.read_text())
    raw.pop("llm", None)
    pipeline = raw.setdefault("settings", {}).setdefault("pipeline", {})
    pipeline["timeout_s"] = args.run_timeout_s
    planner = pipeline.setdefault("planner", {})
    if args.format:
        planner["format"] = args.format
    if args.examples is not None:
        planner["examples"] = args.examples
    if args.answerability_check:
        pipeline["answerability_check"] = args.answerability_check == "on"
    if args.examples_chosen:
        planner["examples_chosen"] = args.examples_chosen
    if args.synthesizer_follows_planner:
        pipeline["synthesizer_follows_planner"] = args.synthesizer_follows_planner == "on"
    target = source.parent / f".bench-{target.parent.name}.yaml"  # beside the project: its paths resolve
    target.write_text(yaml.safe_dump(raw, sort_keys=False))
    return target


def _engine(config: Path, llm: Path, suite: Path, cases: list[EvalCase], args: argparse.Namespace) -> list[dict]:
    report_path = config.with_suffix(".report.json")
    command = ["-c", str(config), "eval", "run", "--mode", "full", "--suite", str(suite),
               "--llm", f"bench={llm}", "--max-cost", "1", "--out", str(report_path)]
    if args.role != "all":
        command += ["--role", args.role]
    for case in cases:
        command += ["--case", case.id]
    if args.examples_from:
        command += ["--examples", str((ROOT / args.examples_from).resolve())]
    _cli(*command, check=False)
    report = json.loads(report_path.read_text())
    board = next(iter(report["boards"].values()))
    records = []
    for r in board["records"]:
        verdicts = [s["passed"] for n, s in r["scores"].items() if n != "faithfulness" and s["passed"] is not None]
        strict = bool(verdicts) and all(verdicts)
        lenient = [s["detail"].get("lenient", s["passed"]) if n == "result_match" else s["passed"]
                   for n, s in r["scores"].items() if n != "faithfulness" and s["passed"] is not None]
        records.append({"case_id": r["case_id"], "role": r["role"], "passed": strict, "lenient": bool(lenient) and all(lenient),
                        "outcome": r["outcome"], "status": r["status"], "error_code": r.get("error_code"),
                        "error_details": r.get("error_details", []),
                        "latency_s": r["latency_s"], "llm_calls": r.get("llm_calls"),
                        "parse_retries": r.get("parse_retries"), "refiner_rounds": r.get("refiner_rounds"),
                        "repairs": r.get("repairs"), "warnings": r.get("warnings", []), "sql": r.get("sql", []),
                        "error": r.get("error")})
    return records


def _direct(config_path: Path, cases: list[EvalCase], args: argparse.Namespace, *, ddl: bool = False) -> list[dict]:
    config = load_project(config_path)
    whole = config.settings.model_copy(update={"retrieval": config.settings.retrieval.model_copy(
        update={"whole_schema_columns": 1_000_000})})  # every readable table and column, whatever the size
    config = config.model_copy(update={"settings": whole})
    llm = LLMConfig.model_validate(_llm_section(args))
    index = IndexService(config)
    records = []
    with DatasourceCatalog(config) as catalog:
        for case, role in ((c, r) for c in cases for r in (list(c.outcome) if args.role == "all" else [args.role])):
            client = LLMClient(llm)
            ds = case.datasources[0] if case.datasources else config.datasources[0].id
            caller = scope(config.policies, [role], ds)
            live = index.live(ds)
            assert live is not None and live.snapshot is not None, f"{ds} has no index build"
            dialect = live.snapshot.dialect
            tables = [t for t in live.snapshot.tables if caller.allows(t.name, t.schema_name)]
            if ddl:
                schema = index.retrieve_schema(case.question, [role], ds).render_ddl(dialect)
                messages = sql_planner_messages(case.question, schema, dialect)
            else:
                messages = [Message("system", DIRECT_SYSTEM.format(dialect=dialect)),
                            Message("user", f"Tables:\n{_schema_text(tables)}\n\nQuestion: {case.question}")]
            started = time.monotonic()
            got, code, sql, rows = "error", None, "", None
            try:
                text = client.text("planner", messages)
                written = sql_answer(text)  # read as the engine's `sql` format reads its planner's answer
                sql = written.sql
                if written.cannot_answer:
                    got = "unanswerable"
                else:
                    result = run_checked_sql(catalog.get(ds), sql, caller, row_limit=config.settings.pipeline.row_limit)
                    rows, got = [list(r) for r in result.plain_frame().values.tolist()], "allowed"
            except NL2SQLError as exc:
                code = exc.code
                got = "refused" if exc.code == "SECURITY_VIOLATION" else "error"
            expected = case.outcome.get(role, "allowed" if case.answerable else "unanswerable")
            passed = got == expected and (expected != "allowed" or any(
                rows_match([list(r.values()) for r in gold], rows or [], order_matters=case.order_matters)
                for gold in case.gold_rows()))
            records.append({"case_id": case.id, "role": role, "passed": passed, "outcome": got, "expected": expected,
                            "error_code": code, "latency_s": round(time.monotonic() - started, 2),
                            "llm_calls": len(client.records), "sql": [sql] if sql else []})
            print(f"  direct {case.id}: {'pass' if passed else 'fail'} ({got}{', ' + code if code else ''})",
                  flush=True)
    return records


def _schema_text(tables: list) -> str:
    """Every table as `Name(column TYPE, …)` with its primary key and foreign keys."""
    lines = []
    for t in tables:
        columns = ", ".join(f"{c.name} {c.type}" for c in t.columns)
        keys = "".join(f"; {', '.join(fk.columns)} → {fk.ref_table}({', '.join(fk.ref_columns)})"
                       for fk in t.foreign_keys)
        primary = f"; primary key {', '.join(t.primary_key)}" if t.primary_key else ""
        lines.append(f"{t.name}({columns}{primary}{keys})")
    return "\n".join(lines)


def _figures(records: list[dict], wall_s: float) -> dict[str, Any]:
    latencies = sorted(r["latency_s"] for r in records)
    calls = [r["llm_calls"] for r in records if r.get("llm_calls") is not None]
    failures: dict[str, int] = {}
    for r in records:
        if not r["passed"]:
            key = r.get("error_code") or f"wrong {r['outcome']}"
            failures[key] = failures.get(key, 0) + 1
    figures = {"cases": len(records), "passed": sum(r["passed"] for r in records),
               "strict": round(sum(r["passed"] for r in records) / len(records), 4) if records else 0.0,
               "latency_p50_s": round(statistics.median(latencies), 2) if latencies else None,
               "latency_p95_s": round(latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))], 2)
               if latencies else None,
               "calls_per_question": round(sum(calls) / len(calls), 2) if calls else None,
               "failures": dict(sorted(failures.items(), key=lambda kv: -kv[1])), "wall_s": round(wall_s, 1)}
    if records and "lenient" in records[0]:
        figures["lenient"] = round(sum(r["lenient"] for r in records) / len(records), 4)
    for key in ("parse_retries", "refiner_rounds", "repairs"):
        values = [r[key] for r in records if r.get(key) is not None]
        if values:
            figures[key] = sum(values)
    return figures


def _print(system: str, figures: dict[str, Any]) -> None:
    print(f"{system}: {figures['passed']}/{figures['cases']} strict ({100 * figures['strict']:.1f}%), "
          f"p50 {figures['latency_p50_s']} s, p95 {figures['latency_p95_s']} s, "
          f"{figures['calls_per_question']} calls/question, failures {figures['failures']}", flush=True)


def _cli(*args: str, check: bool = True) -> None:
    done = subprocess.run([str(BIN / "nl2sql"), *args], cwd=ROOT, check=False)
    if check and done.returncode != 0:
        raise SystemExit(f"nl2sql {' '.join(args)} exited {done.returncode}")


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                           text=True, check=False).stdout.strip()
    return done.stdout.strip() + ("+changes" if dirty else "")


if __name__ == "__main__":
    main()
