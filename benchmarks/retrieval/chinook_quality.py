"""Schema retrieval and routing quality on the demo: Chinook recall, columns sent, routing top-1, latency.

Builds the demo index in a temporary folder, then for each Chinook question (the 68 plan
questions of tests/data/plans/chinook, gold derived from their plans, plus the hand-written
paraphrases of chinook_questions.yaml) asks `Retriever.schema_for` what the planner would see:

- table recall: gold tables sent / gold tables;
- column recall: gold columns whose table and column are both sent / gold columns;
- tables and columns sent, on average;
- routing: every question (Chinook, support and webanalytics ones) is routed across the three
  datasources; top-1 is the first pick being the question's datasource, shortlist-hit is it
  being among the picks (a Chinook question none of whose gold tables the role may read is not
  routed for that role);
- latency: schema_for on a warm index, question embedding included, p50 and p95.

Each role (admin and analyst) is measured; for a role that cannot read a gold table, the gold is
what the role can read. Prints a report and writes chinook_quality.json beside this file.

    .venv/bin/python benchmarks/retrieval/chinook_quality.py [--set table_k=8 ...] [--state DIR] [--quiet]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from nl2sql.demo import init_demo
from nl2sql.index.embed import shared_embedder
from nl2sql.index.retrieve import Retriever
from nl2sql.index.route import route
from nl2sql.index.service import build_configured
from nl2sql.index.store import StateStore
from nl2sql.plan import PlanModel
from nl2sql.plan import model as m
from nl2sql.policies import scope
from nl2sql.project import load_project

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PLANS = ROOT / "tests" / "data" / "plans" / "chinook"
QUESTIONS = HERE / "chinook_questions.yaml"
OUTPUT = HERE / "chinook_quality.json"
ROLES = ("admin", "analyst")


@dataclass
class Question:
    """One benchmark question with its datasource and (for Chinook) gold tables and columns."""

    text: str
    datasource: str
    source: str
    tables: set[str] = field(default_factory=set)
    columns: set[str] = field(default_factory=set)


# --- gold from plans ---------------------------------------------------------------------------


def plan_gold(plan: PlanModel, columns_of: dict[str, set[str]]) -> tuple[set[str], set[str]]:
    """Every table and column (as Table.Column) a plan reads, aliases resolved, sub-plans included."""
    tables: set[str] = set()
    columns: set[str] = set()

    def visit(node: m.Node, aliases: dict[str, str], local: list[str]) -> None:
        if isinstance(node, m.PlanModel):
            inner = dict(aliases)
            for ref in node.tables():
                inner[ref.name_in_scope] = ref.table
                tables.add(ref.table)
            for child in children(node):
                visit(child, inner, [ref.table for ref in node.tables()])
            return
        if isinstance(node, m.ColumnRef):
            if node.table is not None:
                columns.add(f"{aliases[node.table]}.{node.column}")
            else:  # a bare name: a column of the one table in scope that has it, else a SELECT alias
                owners = [t for t in local if node.column in columns_of.get(t, set())]
                if len(owners) == 1:
                    columns.add(f"{owners[0]}.{node.column}")
        for child in children(node):
            visit(child, aliases, local)

    visit(plan, {}, [])
    return tables, columns


def children(node: m.Node) -> list[m.Node]:
    out = []
    for name in type(node).model_fields:
        value = getattr(node, name)
        out += [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, m.Node)]
    return out


def load_questions(columns_of: dict[str, set[str]]) -> list[Question]:
    """The plan questions, then the hand-written ones."""
    out = []
    for path in sorted(PLANS.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        tables, columns = plan_gold(PlanModel.model_validate(data["plan"]), columns_of)
        out.append(Question(data["question"], "chinook", f"plan:{path.stem}", tables, columns))
    extra = yaml.safe_load(QUESTIONS.read_text(encoding="utf-8"))
    for item in extra["chinook"]:
        q = Question(item["question"], "chinook", "paraphrase", set(item["tables"]), set(item["columns"]))
        unknown = [c for c in q.columns if c.split(".")[1] not in columns_of.get(c.split(".")[0], set())]
        if unknown or not {c.split(".")[0] for c in q.columns} <= q.tables:
            raise SystemExit(f"bad gold in {QUESTIONS.name}: {q.text!r}: {unknown or q.columns}")
        out.append(q)
    for ds in ("support", "webanalytics"):
        out += [Question(text, ds, "routing") for text in extra[ds]]
    return out


# --- measuring ---------------------------------------------------------------------------------


def build(workdir: Path):
    """The demo project with every datasource indexed; (config, retriever)."""
    config_path = workdir / "nl2sql.yaml"
    if not config_path.exists():
        init_demo(workdir, env={})
    config = load_project(config_path)
    store = StateStore(config.state_dir)
    embedder = shared_embedder()  # NL2SQL_EMBED_PRECISION picks int8 (default) or float32
    build_configured(config, store, embedder)
    return config, Retriever(store, embedder)


def measure(config, retriever: Retriever, questions: list[Question], role: str, overrides: dict) -> dict:
    """Recall, sizes, misses and routing for one role."""
    policies = config.policies
    ids = [ds.id for ds in config.datasources]
    chinook_scope = scope(policies, role, "chinook")
    # the pruning is what is measured: a schema too wide to send whole (whole_schema_columns off)
    settings = {**config.settings.retrieval.model_dump(), "whole_schema_columns": 0, **overrides}
    routing = config.settings.routing

    def allows_route(ds: str, table: str) -> bool:
        return scope(policies, role, ds).allows(table)

    gold_tables = hit_tables = gold_columns = hit_columns = 0
    per_source: dict[str, list[int]] = {}
    per_question_col: list[float] = []
    sent_tables: list[int] = []
    sent_columns: list[int] = []
    misses = []
    restricted = 0
    for q in (q for q in questions if q.datasource == "chinook"):
        tables = {t for t in q.tables if chinook_scope.allows(t)}
        columns = {c for c in q.columns if c.split(".")[0] in tables}
        restricted += tables != q.tables
        schema = retriever.schema_for(q.text, "chinook", chinook_scope.allows, **settings)
        got_tables = set(schema.table_names())
        got_columns = {f"{t.name}.{c.name}" for t in schema.tables for c in t.columns}
        missing_tables = sorted(tables - got_tables)
        missing_columns = sorted(columns - got_columns)
        gold_tables += len(tables)
        hit_tables += len(tables) - len(missing_tables)
        gold_columns += len(columns)
        hit_columns += len(columns) - len(missing_columns)
        counts = per_source.setdefault(q.source.split(":")[0], [0, 0, 0, 0, 0, 0])
        for i, n in enumerate((len(tables), len(tables) - len(missing_tables), len(columns),
                               len(columns) - len(missing_columns), 1, schema.column_count)):
            counts[i] += n
        if columns:
            per_question_col.append(1 - len(missing_columns) / len(columns))
        sent_tables.append(len(got_tables))
        sent_columns.append(schema.column_count)
        if missing_tables or missing_columns:
            misses.append({"question": q.text, "source": q.source, "missing_tables": missing_tables,
                           "missing_columns": missing_columns, "sent": sorted(got_tables),
                           "columns_sent": schema.column_count})

    top1 = shortlist = 0
    route_misses = []
    # a question is routed for a role that can read some of its gold (all of it for routing-only questions)
    routed = [q for q in questions if scope(policies, role, q.datasource).reachable
              and (not q.tables or any(scope(policies, role, q.datasource).allows(t) for t in q.tables))]
    for q in routed:
        result = route(retriever, q.text, ids, allows_route, vote_k=routing.vote_k, rrf_k=routing.rrf_k,
                       floor_ratio=routing.floor_ratio, limit=routing.shortlist)
        first = result.picks[0] if result.picks else None
        top1 += first == q.datasource
        shortlist += q.datasource in result.picks
        if first != q.datasource:
            route_misses.append({"question": q.text, "expected": q.datasource, "picks": result.picks})

    latencies = []
    chinook = [q for q in questions if q.datasource == "chinook"]
    for q in chinook[:10]:  # warm-up: the index is loaded, the model session is hot
        retriever.schema_for(q.text, "chinook", chinook_scope.allows, **settings)
    for q in chinook:
        start = time.perf_counter()
        retriever.schema_for(q.text, "chinook", chinook_scope.allows, **settings)
        latencies.append((time.perf_counter() - start) * 1000)
    search_only = []
    for q in chinook:
        vector = retriever.embed(q.text)
        start = time.perf_counter()
        retriever.schema_for(q.text, "chinook", chinook_scope.allows, query=vector, **settings)
        search_only.append((time.perf_counter() - start) * 1000)

    by_source = {source: {"questions": n, "table_recall": round(ht / max(gt, 1), 4),
                          "column_recall": round(hc / max(gc, 1), 4), "avg_columns_sent": round(cols / max(n, 1), 2)}
                 for source, (gt, ht, gc, hc, n, cols) in per_source.items()}
    return {
        "role": role,
        "settings": settings,
        "questions": {"chinook": len(chinook), "plan": by_source["plan"]["questions"],
                      "paraphrase": by_source["paraphrase"]["questions"], "routing": len(routed),
                      "gold_restricted_by_role": restricted},
        "by_source": by_source,
        "table_recall": round(hit_tables / max(gold_tables, 1), 4),
        "column_recall": round(hit_columns / max(gold_columns, 1), 4),
        "column_recall_per_question": round(float(np.mean(per_question_col)), 4),
        "avg_tables_sent": round(float(np.mean(sent_tables)), 2),
        "avg_columns_sent": round(float(np.mean(sent_columns)), 2),
        "max_columns_sent": int(max(sent_columns)),
        "routing_top1": round(top1 / max(len(routed), 1), 4),
        "routing_shortlist_hit": round(shortlist / max(len(routed), 1), 4),
        "latency_ms": {"p50": round(float(np.percentile(latencies, 50)), 2),
                       "p95": round(float(np.percentile(latencies, 95)), 2),
                       "search_only_p95": round(float(np.percentile(search_only, 95)), 2)},
        "misses": misses,
        "routing_misses": route_misses,
    }


def report(result: dict, quiet: bool) -> None:
    q = result["questions"]
    print(f"\n== role {result['role']}: {q['chinook']} Chinook questions ({q['plan']} from plans, "
          f"{q['paraphrase']} paraphrases; gold cut by the role in {q['gold_restricted_by_role']}), "
          f"{q['routing']} routed")
    print(f"table recall        {result['table_recall']:.2%}")
    print(f"column recall       {result['column_recall']:.2%}  (per question {result['column_recall_per_question']:.2%})")
    for source, part in result["by_source"].items():
        print(f"  {source:<17} {part['questions']} questions: tables {part['table_recall']:.2%}, "
              f"columns {part['column_recall']:.2%}, {part['avg_columns_sent']} columns sent")
    print(f"sent on average     {result['avg_tables_sent']} tables, {result['avg_columns_sent']} columns "
          f"(max {result['max_columns_sent']})")
    print(f"routing             top-1 {result['routing_top1']:.2%}, shortlist-hit {result['routing_shortlist_hit']:.2%}")
    lat = result["latency_ms"]
    print(f"latency (warm)      p50 {lat['p50']} ms, p95 {lat['p95']} ms (search only p95 {lat['search_only_p95']} ms)")
    if quiet:
        return
    if result["misses"]:
        print("misses:")
    for miss in result["misses"]:
        bits = []
        if miss["missing_tables"]:
            bits.append("tables " + ", ".join(miss["missing_tables"]))
        if miss["missing_columns"]:
            bits.append("columns " + ", ".join(miss["missing_columns"]))
        print(f"  - {miss['question']}\n      missing {'; '.join(bits)}  (sent {', '.join(miss['sent'])})")
    if result["routing_misses"]:
        print("routing misses:")
    for miss in result["routing_misses"]:
        print(f"  - {miss['question']}  expected {miss['expected']}, got {miss['picks']}")


def parse_overrides(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        out[key] = float(value) if "." in value else int(value)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="schema_for keyword arguments over the configured retrieval settings")
    parser.add_argument("--state", type=Path, help="reuse (or create) the demo project in this folder")
    parser.add_argument("--quiet", action="store_true", help="numbers only, no per-question misses")
    parser.add_argument("--no-write", action="store_true", help="do not write chinook_quality.json")
    args = parser.parse_args(argv)
    overrides = parse_overrides(args.set)
    with tempfile.TemporaryDirectory(prefix="nl2sql-bench-") as tmp:
        workdir = args.state or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        config, retriever = build(workdir)
        print(f"index built in {time.perf_counter() - started:.1f} s")
        snapshot = retriever.live("chinook").snapshot
        columns_of = {t.name: {c.name for c in t.columns} for t in snapshot.tables}
        questions = load_questions(columns_of)
        results = [measure(config, retriever, questions, role, overrides) for role in ROLES]
    for result in results:
        report(result, args.quiet)
    if not args.no_write:
        OUTPUT.write_text(json.dumps({"results": results}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"\nwrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
