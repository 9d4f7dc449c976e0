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
        [--suite suites/chinook.yaml | --spider N [--seed S]] [--role analyst] [--case ID ...] [--tag TAG ...] \
        [--limit N] [--format plan|sql] [--examples N] [--example-questions on|off] \
        [--answerability-check on|off] [--synthesizer on|off] \
        [--systems engine,direct,direct_ddl] [--server-log PATH] [--engine-checkout DIR] [--name NAME]

Latency per question is the time to the answer; with the engine's records, also the time to its rows (the SQL
ran) as `rows_p50_s`/`rows_p95_s`. With `--server-log` (a verbose llama-cpp-python server's log), the prompt
tokens each question made the server read and those it reused from its cache, the mean taken after the first
question on each datasource. `--spider N` runs Spider 1.0 dev (benchmarks/models/spider.py: a dev set, never a
test set). `--engine-checkout DIR` runs the engine of another checkout (e.g. a `git worktree` at the commit before
a change) on the same machine, for a before/after pair.

Nothing in the tests or CI runs it: it needs a model server (see docs/models.md for the one used here).
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
from nl2sql.evaluation.run import select_cases
from nl2sql.evaluation.scorers import strict_rows_match
from nl2sql.evaluation.suite import EvalCase, load_suite
from nl2sql.index.service import IndexService
from nl2sql.llm.client import LLMClient
from nl2sql.llm.models import Message
from nl2sql.pipeline.prompts import CANNOT_ANSWER_WORDS, planner_messages, shared_prefix, sql_answer
from nl2sql.policies import scope
from nl2sql.project import load_project

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spider import spider_project, spider_suite  # beside this script

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BIN = Path(sys.executable).parent

DIRECT_SYSTEM = """You write one {dialect} SELECT statement that answers the question from the tables below.
Answer with the statement only. If no table holds what the question asks about, answer """ + CANNOT_ANSWER_WORDS + "."


def main() -> None:
    """Run the systems asked for and write their figures."""
    args = _args()
    with tempfile.TemporaryDirectory(prefix="nl2sql-models-") as tmp:
        work = Path(tmp)
        if args.spider:
            suite_path = spider_suite(work / "spider_suite.yaml", args.spider, args.seed)
            args.role = "admin"
        else:
            suite_path = (ROOT / args.suite).resolve() if not Path(args.suite).is_absolute() else Path(args.suite)
        suite = load_suite(suite_path)
        cases = select_cases(suite, ids=args.case, tags=args.tag, limit=args.limit)
        if args.project:
            project = Path(args.project)
        elif args.spider:
            project = spider_project(work / "spider").parent
            _cli("-c", str(project / "nl2sql.yaml"), "index", "build", engine=args.engine_checkout)
        else:
            project = _demo_project(work / "demo", args.engine_checkout)
        config_path = _configured(project / "nl2sql.yaml", work / "nl2sql.yaml", args)
        llm_path = work / "llm.yaml"
        llm_path.write_text(yaml.safe_dump({"llm": _llm_section(args)}))
        out: dict[str, Any] = {"commit": _commit(args.engine_checkout), "model": args.model,
                               "base_url": args.base_url, "role": args.role,
                               "suite": f"spider dev, {args.spider} drawn with seed {args.seed}" if args.spider
                               else str(suite_path.relative_to(ROOT)),
                               "cases": [c.id for c in cases], "settings": _settings(args), "systems": {}}
        target = HERE / f"{args.name}.json"
        for system in args.systems.split(","):
            if system not in ("engine", "direct", "direct_ddl"):
                raise SystemExit(f"unknown system {system!r}: use engine, direct and/or direct_ddl")
            started, records = time.monotonic(), []
            # in batches, the file rewritten after each: a long run stopped early keeps what it measured
            for i in range(0, len(cases), args.batch):
                batch = cases[i:i + args.batch]
                log_start = _log_size(args.server_log)
                done = (_engine(config_path, llm_path, suite_path, batch, args) if system == "engine"
                        else _direct(config_path, batch, args, ddl=system == "direct_ddl"))
                if args.server_log:
                    _prompt_tokens(done, Path(args.server_log), log_start)
                records += done
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
    parser.add_argument("--run-timeout-s", type=float, default=None, help="One question's (settings.pipeline."
                        "timeout_s; default: the project's, 120 s as init writes it).")
    parser.add_argument("--suite", default="suites/chinook.yaml")
    parser.add_argument("--spider", type=int, default=None, metavar="N", help="Spider 1.0 dev instead of a suite: "
                        "a project of its 19 databases and N questions drawn across them with --seed "
                        "(benchmarks/models/spider.py), as admin.")
    parser.add_argument("--seed", type=int, default=0, help="The Spider draw's seed.")
    parser.add_argument("--server-log", default=None, help="A llama-cpp-python server's log (verbose, as "
                        "../shared/tools/local_model.sh writes it): the prompt tokens each call read and reused "
                        "from the server's cache are counted per question.")
    parser.add_argument("--engine-checkout", default=None, help="Run the engine's CLI from another checkout of the "
                        "repository (its nl2sql package first on PYTHONPATH): before and after on the same machine.")
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
    parser.add_argument("--whole-schema-columns", type=int, default=None,
                        help="settings.retrieval.whole_schema_columns (a schema of at most this many readable "
                        "columns is sent whole, the same for every question).")
    parser.add_argument("--synthesizer", choices=("on", "off"), default="off", help="Also have the model write the "
                        "answer's prose (not scored by strict; off keeps a local server's prompt cache on the planner).")
    parser.add_argument("--example-questions", choices=("on", "off"), default="on", help="off: the project's "
                        "datasources[].example_questions removed (the ablation of the demo's example questions).")
    parser.add_argument("--examples-chosen", choices=("nearest", "fixed"), default=None,
                        help="settings.pipeline.planner.examples_chosen.")
    parser.add_argument("--synthesizer-follows-planner", choices=("on", "off"), default=None,
                        help="settings.pipeline.synthesizer_follows_planner (with --synthesizer on).")
    parser.add_argument("--answer-shape", default=None, help="settings.pipeline.planner.answer_shape, comma-separated "
                        "(measure,groups,key,ties); none: the plan as the model wrote it (default: the project's).")
    parser.add_argument("--candidates", type=int, default=None, help="settings.pipeline.planner.candidates (default: "
                        "the project's).")
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
            "synthesizer_follows_planner": args.synthesizer_follows_planner, "examples_chosen": args.examples_chosen,
            "whole_schema_columns": args.whole_schema_columns, "spider": args.spider, "seed": args.seed if args.spider else None,
            "engine_checkout": args.engine_checkout, "answer_shape": args.answer_shape,
            "candidates": args.candidates, "example_questions": args.example_questions}


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


def _demo_project(target: Path, engine: str | None) -> Path:
    _cli("init", "--demo", str(target), "--force", engine=engine)
    _cli("-c", str(target / "nl2sql.yaml"), "index", "build", engine=engine)
    return target


def _configured(source: Path, target: Path, args: argparse.Namespace) -> Path:
    """The project's config with the planner settings asked for, its paths still relative to the project."""
    raw = yaml.safe_load(source.read_text())
    raw.pop("llm", None)
    pipeline = raw.setdefault("settings", {}).setdefault("pipeline", {})
    if args.run_timeout_s is not None:
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
    if args.candidates is not None:
        planner["candidates"] = args.candidates
    if args.answer_shape is not None:
        planner["answer_shape"] = [] if args.answer_shape == "none" else args.answer_shape.split(",")
    if args.synthesizer_follows_planner:
        pipeline["synthesizer_follows_planner"] = args.synthesizer_follows_planner == "on"
    if args.example_questions == "off":
        for datasource in raw.get("datasources", []):
            datasource.pop("example_questions", None)
    if args.whole_schema_columns is not None:
        raw["settings"].setdefault("retrieval", {})["whole_schema_columns"] = args.whole_schema_columns
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
    _cli(*command, check=False, engine=args.engine_checkout)
    report = json.loads(report_path.read_text())
    board = next(iter(report["boards"].values()))
    datasource = {c.id: c.datasources[0] for c in cases}
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
                        "datasource": datasource.get(r["case_id"]), "time_to_sql_s": r.get("time_to_sql_s"),
                        "time_to_rows_s": r.get("time_to_rows_s"), "model_s": r.get("model_s"),
                        "tokens": r.get("tokens"),
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
                messages = planner_messages(shared_prefix(ds, "sql", dialect, schema), case.question)
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
            passed = got == expected and (expected != "allowed" or strict_rows_match(case, rows or []))
            records.append({"case_id": case.id, "role": role, "passed": passed, "outcome": got, "expected": expected,
                            "error_code": code, "latency_s": round(time.monotonic() - started, 2), "datasource": ds,
                            "time_to_rows_s": round(time.monotonic() - started, 2) if rows is not None else None,
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


#: what a verbose llama-cpp-python server logs for each call: the prompt tokens found in its cache, and those read
PREFIX_MATCH = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")


def _log_size(path: str | None) -> int:
    return Path(path).stat().st_size if path and Path(path).exists() else 0


def _prompt_tokens(records: list[dict], log: Path, start: int) -> None:
    """Each record's prompt tokens read and reused, from the server's log lines since `start`, handed out in order
    by the record's model calls (a batch's calls are sequential)."""
    with log.open("rb") as handle:
        handle.seek(start)
        calls = [(int(hit), int(read)) for hit, read in PREFIX_MATCH.findall(handle.read().decode(errors="replace"))]
    for record in records:
        mine, calls = calls[: record.get("llm_calls") or 0], calls[record.get("llm_calls") or 0:]
        record["prompt_tokens_reused"] = sum(hit for hit, _ in mine)
        record["prompt_tokens_read"] = sum(read for _, read in mine)


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
    rows = sorted(r["time_to_rows_s"] for r in records if r.get("time_to_rows_s") is not None)
    if rows:
        figures |= {"rows_p50_s": round(statistics.median(rows), 2),
                    "rows_p95_s": round(rows[min(len(rows) - 1, int(0.95 * len(rows)))], 2)}
    # what settings.pipeline.timeout_s counts: the run's time less the time it waited for its models
    own = sorted(r["latency_s"] - r["model_s"] for r in records if r.get("model_s") is not None)
    if own:
        figures |= {"own_time_p50_s": round(statistics.median(own), 2),
                    "own_time_p95_s": round(own[min(len(own) - 1, int(0.95 * len(own)))], 2),
                    "own_time_max_s": round(own[-1], 2)}
    seen: set[str] = set()
    later = []  # after the first question on each datasource: what a warm server reads
    for r in records:
        if "prompt_tokens_read" in r:
            if r.get("datasource") in seen:
                later.append(r)
            seen.add(r.get("datasource"))
    if later:
        figures["prompt_tokens_read_mean"] = round(sum(r["prompt_tokens_read"] for r in later) / len(later), 1)
        figures["prompt_tokens_reused_mean"] = round(sum(r["prompt_tokens_reused"] for r in later) / len(later), 1)
    if records and "lenient" in records[0]:
        figures["lenient"] = round(sum(r["lenient"] for r in records) / len(records), 4)
    for key in ("parse_retries", "refiner_rounds", "repairs"):
        values = [r[key] for r in records if r.get(key) is not None]
        if values:
            figures[key] = sum(values)
    return figures


def _print(system: str, figures: dict[str, Any]) -> None:
    rows = f"rows p50 {figures['rows_p50_s']} s, p95 {figures['rows_p95_s']} s; " if "rows_p50_s" in figures else ""
    tokens = (f"prompt tokens per question read {figures['prompt_tokens_read_mean']}, reused "
              f"{figures['prompt_tokens_reused_mean']}; " if "prompt_tokens_read_mean" in figures else "")
    print(f"{system}: {figures['passed']}/{figures['cases']} strict ({100 * figures['strict']:.1f}%), "
          f"answer p50 {figures['latency_p50_s']} s, p95 {figures['latency_p95_s']} s; {rows}{tokens}"
          f"{figures['calls_per_question']} calls/question, failures {figures['failures']}", flush=True)


def _cli(*args: str, check: bool = True, engine: str | None = None) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(engine).resolve())} if engine else None
    done = subprocess.run([str(BIN / "nl2sql"), *args], cwd=ROOT, check=False, env=env)
    if check and done.returncode != 0:
        raise SystemExit(f"nl2sql {' '.join(args)} exited {done.returncode}")


def _commit(checkout: str | None = None) -> str:
    where = Path(checkout) if checkout else ROOT
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, check=False)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where, capture_output=True,
                           text=True, check=False).stdout.strip()
    return done.stdout.strip() + ("+changes" if dirty else "")


if __name__ == "__main__":
    main()
