"""Routing with the answerability check's model as a second stage: where routing's evidence is a close call, does a
real model pick the right database?

Routes as the engine does (its defaults); where more than one database scores within `routing.close_call` of the
best (the only questions on which the check can move the first pick), asks the model as the ask flow's resolver
step asks it: the same prompt (`prompts.resolver_messages`: the first shortlisted database's shared prefix, its
tables as CREATE TABLE statements, then each shortlisted database's description and its first eight retrieved tables), the same shortlist (`answerability_shortlist`), the same rule for what its answer leaves
(`narrowed_picks`). A question with one close call keeps routing's first pick (the check can only keep it there, or
add a second datasource for the decomposer to split over).

The questions: the generated ones of the wide test bed of a seed (as wide_bed.py builds it), its frozen suite
(`--frozen`), or an eval suite's routing cases over a project (`--suite suites/routing.yaml`: the demo, indexed
afresh, unless `--project`), each routed for the first role the case names, as the eval's retrieval mode routes.
Top-1 is counted as the eval's routing scorer counts it, before and after the model, with each asked question's
picks, the model's choice and its latency. Writes benchmarks/routing/model_check[.seed<N>|.frozen|.<suite>].json.

    .venv/bin/python benchmarks/routing/model_check.py --base-url http://127.0.0.1:8765/v1 \
        --model qwen2.5-coder-1.5b [--seed 42] [--frozen | --suite suites/routing.yaml [--project DIR]] [--limit N]

It needs a model server (docs/models.md names the one used here); the tests check its second stage against the
fake one.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "perf"))

from index_wide import log  # noqa: E402
from wide_bed import FROZEN_SEED, SUITE, build_bed, commit, first_right, route_on_bed  # noqa: E402

from nl2sql.config.models import LLMConfig, RetrievalSettings, RoutingSettings  # noqa: E402
from nl2sql.evaluation.suite import load_suite  # noqa: E402
from nl2sql.index.embed import Embedder  # noqa: E402
from nl2sql.index.retrieve import RetrievedSchema, Retriever  # noqa: E402
from nl2sql.index.route import Routing, backed_by_routing  # noqa: E402
from nl2sql.index.service import IndexService  # noqa: E402
from nl2sql.index.store import StateStore  # noqa: E402
from nl2sql.llm.client import LLMClient  # noqa: E402
from nl2sql.llm.models import LLMParseError  # noqa: E402
from nl2sql.pipeline import prompts  # noqa: E402
from nl2sql.pipeline.steps import answerability_shortlist, narrowed_picks  # noqa: E402
from nl2sql.project import load_project  # noqa: E402


def every_table(_table: str) -> bool:
    """Schema retrieval's scope on the bed: every table."""
    return True


def model_section(args: argparse.Namespace) -> dict[str, Any]:
    """The llm section of a config with the benchmarked model on the resolver node."""
    model = {"provider": "openai", "base_url": args.base_url, "model": args.model, "structured_output": "json_object",
             "timeout_s": args.timeout_s, "stream_all": True, "max_tokens": 512, "max_concurrent": 1}
    return {"models": {"bench": model}, "prices": {args.model: {"input": 0, "output": 0}},
            "nodes": {"resolver": "bench"}}


Described = Callable[[str, str], tuple[str, str, list[str]]]
#: (question, datasource) → its dialect and its tables as CREATE TABLE statements, as the planner is shown them
TablesOf = Callable[[str, str], tuple[str, str]]


def second_stage(question: str, wanted: Sequence[str], routing: Routing, described: Described, client: LLMClient,
                 settings: RoutingSettings, tables_of: TablesOf | None = None) -> dict[str, Any]:
    """One question: routing's picks, and where more than one database is a close call, what the answerability
    check's model chose and what the flow keeps of the picks; top-1 before and after."""
    picks = routing.picks
    close = backed_by_routing({c.datasource_id: c.score for c in routing.candidates}, routing.pair, settings.close_call)
    record: dict[str, Any] = {"question": question, "wanted": list(wanted), "picks": picks, "close": close,
                              "asked": False, "after": picks}
    if len(picks) > 1 and len(close) > 1:
        shortlist = answerability_shortlist(routing, picks, settings.shortlist)
        started = time.monotonic()
        try:
            dialect, tables = tables_of(question, shortlist[0]) if tables_of else ("sqlite", "")
            prefix = prompts.shared_prefix(shortlist[0], "sql", dialect, tables)
            answer = client.structured("resolver", prompts.resolver_messages(prefix, question, [
                described(question, ds) for ds in shortlist]), prompts.answerability_for(tuple(shortlist)))
            chosen = prompts.same_ids(answer.datasource_ids, shortlist) if answer.answerable else []
            record["model_answer"] = answer.model_dump()
        except LLMParseError:  # the flow leaves routing's picks standing (ANSWERABILITY_CHECK_UNREAD)
            chosen, record["model_answer"] = [], None
        record |= {"asked": True, "shortlist": shortlist, "chosen": chosen, "after": narrowed_picks(chosen, picks, close),
                   "latency_s": round(time.monotonic() - started, 2)}
    record["top1_before"] = first_right(wanted, picks)
    record["top1_after"] = first_right(wanted, record["after"])
    return record


def on_bed(args: argparse.Namespace, client: LLMClient) -> list[dict[str, Any]]:
    """The wide test bed of the seed: its generated questions, or the frozen suite."""
    settings, retrieval = RoutingSettings(), RetrievalSettings()
    with tempfile.TemporaryDirectory(prefix="nl2sql-model-check-") as tmp:
        work = Path(tmp)
        store = StateStore(work / "state")
        embedder = Embedder(threads=2)
        bed, _ = build_bed(store, embedder, work, args.quiet, args.seed)
        ids = [db.name for db in bed]
        descriptions = {db.name: db.description for db in bed}
        retriever = Retriever(store, embedder)

        def schema(question: str, ds: str) -> RetrievedSchema:
            return retriever.schema_for(question, ds, every_table, table_k=retrieval.table_k,
                                        planning_k=retrieval.planning_k, wide_table_columns=retrieval.wide_table_columns,
                                        mmr_lambda=retrieval.mmr_lambda,
                                        whole_schema_columns=retrieval.whole_schema_columns)

        def described(question: str, ds: str) -> tuple[str, str, list[str]]:
            return ds, descriptions[ds], schema(question, ds).table_names()[:8]

        def tables_of(question: str, ds: str) -> tuple[str, str]:
            return "sqlite", schema(question, ds).render_ddl("sqlite")

        if args.frozen:
            cases = [(c["id"], c["question"], c["databases"]) for c in yaml.safe_load(SUITE.read_text())["cases"]]
        else:
            cases = [(f"{db.name}:{i}", q, [db.name]) for db in bed for i, q in enumerate(db.test_questions)]
        records = []
        for n, (case_id, question, wanted) in enumerate(cases[: args.limit] if args.limit else cases, start=1):
            routing = route_on_bed(retriever, question, ids)
            records.append({"id": case_id} | second_stage(question, wanted, routing, described, client, settings,
                                                          tables_of))
            progress(args, n, len(cases), records[-1])
        store.close()
    return records


def on_suite(args: argparse.Namespace, client: LLMClient) -> list[dict[str, Any]]:
    """An eval suite's routing cases over a project's datasources (the demo's, indexed here, unless --project),
    routed as the eval's retrieval mode routes them, for the first role each case names."""
    with tempfile.TemporaryDirectory(prefix="nl2sql-model-check-") as tmp:
        project = args.project or demo_project(Path(tmp) / "demo")
        config = load_project(project / "nl2sql.yaml")
        index = IndexService(config)

        def described_by(role: str) -> Described:
            def described(question: str, ds: str) -> tuple[str, str, list[str]]:
                return (ds, config.datasource(ds).description,
                        index.retrieve_schema(question, [role], ds).table_names()[:8])
            return described

        def tables_by(role: str) -> TablesOf:
            def tables_of(question: str, ds: str) -> tuple[str, str]:
                live = index.live(ds)
                dialect = live.snapshot.dialect if live is not None and live.snapshot is not None else "sqlite"
                return dialect, index.retrieve_schema(question, [role], ds).render_ddl(dialect)
            return tables_of

        cases = [c for c in load_suite(args.suite).cases if c.kind == "routing"]
        records = []
        for n, case in enumerate(cases[: args.limit] if args.limit else cases, start=1):
            role = next(iter(case.outcome))
            routing = index.route(case.question, [role])
            records.append({"id": case.id, "role": role} | second_stage(
                case.question, case.datasources, routing, described_by(role), client, config.settings.routing,
                tables_by(role)))
            progress(args, n, len(cases), records[-1])
    return records


def demo_project(target: Path) -> Path:
    """A fresh demo project, indexed, through the installed CLI."""
    for command in (["init", "--demo", str(target), "--force"], ["-c", str(target / "nl2sql.yaml"), "index", "build"]):
        if subprocess.run([str(Path(sys.executable).parent / "nl2sql"), *command], check=False).returncode:
            raise SystemExit(f"nl2sql {' '.join(command)} failed")
    return target


def progress(args: argparse.Namespace, n: int, total: int, record: dict[str, Any]) -> None:
    """A line for each question the model was asked."""
    if record["asked"]:
        log(args.quiet, f"{n}/{total} {record['id']}: {record['picks'][:3]} → {record['after'][:2]} "
                        f"({'right' if record['top1_after'] else 'wrong'}, {record['latency_s']} s)")


def summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Top-1 before and after the model, what it gained and lost, its latency."""
    asked = [r for r in records if r["asked"]]
    return {
        "questions": len(records), "asked": len(asked),
        "top1_before": round(sum(r["top1_before"] for r in records) / len(records), 4),
        "top1_after": round(sum(r["top1_after"] for r in records) / len(records), 4),
        "asked_right_before": sum(r["top1_before"] for r in asked),
        "asked_right_after": sum(r["top1_after"] for r in asked),
        "gained": [r["id"] for r in asked if r["top1_after"] and not r["top1_before"]],
        "lost": [r["id"] for r in asked if r["top1_before"] and not r["top1_after"]],
        "model_latency_s_mean": round(sum(r["latency_s"] for r in asked) / len(asked), 2) if asked else None,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Parse, run, write the JSON, print the figures; the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--seed", type=int, default=FROZEN_SEED)
    parser.add_argument("--frozen", action="store_true", help="the frozen suite (seed 42 only) instead of the "
                                                               "generated questions")
    parser.add_argument("--suite", type=Path, help="an eval suite's routing cases (suites/routing.yaml) instead of "
                                                   "the bed")
    parser.add_argument("--project", type=Path, help="with --suite: an indexed project (default: a fresh demo)")
    parser.add_argument("--limit", type=int, help="the first N questions only")
    parser.add_argument("--timeout-s", type=float, default=240.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.frozen and args.seed != FROZEN_SEED:
        parser.error(f"the frozen suite is written for seed {FROZEN_SEED}")
    client = LLMClient(LLMConfig.model_validate(model_section(args)))
    records = on_suite(args, client) if args.suite else on_bed(args, client)
    report = {"commit": commit(), "model": args.model,
              "source": str(args.suite) if args.suite else ("frozen" if args.frozen else f"generated, seed {args.seed}"),
              **summary(records), "records": records}
    suffix = f".{args.suite.stem}" if args.suite else (
        ".frozen" if args.frozen else ("" if args.seed == FROZEN_SEED else f".seed{args.seed}"))
    out = args.out or HERE / f"model_check{suffix}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{report['questions']} questions, {report['asked']} asked: top-1 {report['top1_before']:.1%} → "
          f"{report['top1_after']:.1%} (of the asked: {report['asked_right_before']} → {report['asked_right_after']} "
          f"right; gained {len(report['gained'])}, lost {len(report['lost'])}); model {report['model_latency_s_mean']} s "
          "a question")
    return report


if __name__ == "__main__":
    main()
