"""Index cost against schema size: 1,200, 5,000 and 20,000 tables of the wide synthetic schema.

For each size, in a process of its own (so each peak RSS is that size's alone), from a fresh state folder:

- cold build (nothing cached), stage by stage; the index kind FAISS chose and its file size;
- a rebuild with nothing changed, and an incremental rebuild after ALTER TABLE … ADD COLUMN in one table;
- then, in a fresh process that loads the live build as an ask run does: retrieval (`Retriever.schema_for`,
  question embedding included) and routing (`route` over the schema's datasource) latency p50/p95 over the same
  questions (after a warm-up of 20), and that process's peak RSS (serving); the build's own peak RSS is reported beside it; then the
  same questions again with every entry scored exactly (the baseline where the build is an HNSW index, the
  caller's entries are more than `vectors.EXACT_UP_TO` and a question searches the graph instead): its latency,
  and how often it sends the same tables and the same dense evidence;
- the FAISS index file and the state folder's size.

Targets on 2 cores: cold build ≤ 60 s at 1,200 tables; incremental ≤ 3 s; retrieval p95 ≤ 20 ms at 1,200 and
≤ 50 ms at 20,000 tables; RSS ≤ 1.5 GB at 20,000 (checked on serving). Writes index_scale.json and a plot of each cost against the
number of tables (index_scale.png, needs matplotlib: `pip install -e '.[bench]'`).

    .venv/bin/python benchmarks/perf/index_scale.py [--sizes 1200,5000,20000] [--questions 200] [--seed 42]
        [--out FILE] [--plot FILE] [--replot]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from index_wide import build_figures, load_schemas, log, percentiles, rss_mb, timed  # noqa: E402

from nl2sql.config.models import ProfileSettings, RoutingSettings  # noqa: E402
from nl2sql.datasources import adapter_class  # noqa: E402
from nl2sql.index.build import build_datasource  # noqa: E402
from nl2sql.index.embed import Embedder  # noqa: E402
from nl2sql.index.retrieve import Retriever  # noqa: E402
from nl2sql.index.route import route  # noqa: E402
from nl2sql.index.store import StateStore  # noqa: E402
from nl2sql.index.vectors import (  # noqa: E402
    EXACT_UP_TO,
    SCORING_THREADS,
    SegmentedIndex,
    flat_index,
    similarities_of,
)

SIZES = (1200, 5000, 20_000)
#: Questions asked, untimed, before each timed pass.
WARM_UP = 20
TARGETS = {"cold_build_s@1200": 60.0, "incremental_s": 3.0, "retrieval_p95_ms@1200": 20.0,
           "retrieval_p95_ms@20000": 50.0, "peak_rss_mb@20000": 1536.0}


def folder_mb(path: Path) -> float:
    """Bytes under a folder, in MiB."""
    return round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20, 1)


def build_size(n_tables: int, seed: int, questions: int, threads: int, work: Path, quiet: bool) -> dict[str, Any]:
    """Cold, unchanged and incremental builds of one schema size into `work/state` (a process of its own); the
    questions the serving run times go to `work/questions.json`."""
    schemas = load_schemas()
    tables, gen_s = timed(lambda: schemas.wide_schema(n_tables, seed))
    path = schemas.write_sqlite(tables, work / "wide.sqlite")
    (work / "questions.json").write_text(json.dumps(schemas.question_pool(tables, seed, "wide")[:questions]))
    store = StateStore(work / "state")
    embedder = Embedder(threads=threads)
    embedder.embed(["warm up"])
    adapter = adapter_class("sqlite")("wide", f"sqlite:///{path}")
    profile = ProfileSettings()
    out: dict[str, Any] = {"tables": len(tables), "columns": sum(len(t.columns) for t in tables),
                           "generate_s": round(gen_s, 2)}
    log(quiet, f"{n_tables} tables: cold build")
    result, wall = timed(lambda: build_datasource(adapter, store, embedder, profile=profile))
    out["cold"] = build_figures(result, wall) | {"entries_per_s": round(sum(result.counts.values()) / wall, 1)}
    build = store.live_build("wide")
    assert build is not None
    out["index_file_mb"] = round(sum(store.index_path("wide", s.segment_id).stat().st_size
                                     for s in store.segments(build.build_id)) / 2**20, 1)
    out["segments"] = len(store.segments(build.build_id))
    log(quiet, f"{n_tables} tables: rebuild with nothing changed, then one table altered")
    result, wall = timed(lambda: build_datasource(adapter, store, embedder, profile=profile))
    out["unchanged"] = build_figures(result, wall)
    target = next(t for t in tables if t.phrases)
    with sqlite3.connect(path) as conn:
        conn.execute(f'ALTER TABLE "{target.name}" ADD COLUMN "loyalty_points" INTEGER')
    conn.close()
    result, wall = timed(lambda: build_datasource(adapter, store, embedder, profile=profile))
    out["incremental"] = build_figures(result, wall) | {"altered_table": target.name}
    adapter.close()
    store.close()
    return out | {"state_mb": folder_mb(work / "state"), "build_peak_rss_mb": rss_mb()}


def serve_size(threads: int, work: Path, quiet: bool) -> dict[str, Any]:
    """Retrieval and routing latency from the live build in `work/state`, in a fresh process (as an ask run
    loads it): its peak RSS is what serving this schema costs."""
    questions = json.loads((work / "questions.json").read_text())
    store = StateStore(work / "state")
    embedder = Embedder(threads=threads)
    retriever = Retriever(store, embedder)
    _, load_s = timed(lambda: retriever.live("wide"))
    defaults = RoutingSettings()

    def routed(question: str) -> Any:
        return route(retriever, question, ["wide"], every_entry, floor_ratio=defaults.floor_ratio,
                     limit=defaults.shortlist)

    log(quiet, "retrieval and routing latency")
    # the first question of a scope works out its view of the build (`ScopeView`); later ones reuse it
    _, first_retrieval_s = timed(lambda: retriever.schema_for(questions[0], "wide", every_table))
    _, first_routing_s = timed(lambda: routed(questions[0]))
    for question in questions[:WARM_UP]:  # the index's pages are read from its file as questions first touch them
        retriever.schema_for(question, "wide", every_table)
        routed(question)
    embedder.forget_recent()  # each timed retrieval embeds its question (routing then reuses the vector)
    retrieval, routing, sent, picked = [], [], [], []
    for question in questions:
        schema, took = timed(lambda q=question: retriever.schema_for(q, "wide", every_table))
        retrieval.append(took)
        sent.append(schema.table_names())
        routing_, took = timed(lambda q=question: routed(q))
        routing.append(took)
        picked.append(routing_.candidates[0].evidence.get("dense"))  # one datasource: its dense evidence
    peak = rss_mb()
    # the baseline, in this process: every entry of the caller's scored exactly, whatever the build's size
    exact_retrieval, exact_routing, same_sent, same_dense = [], [], 0, 0
    with scoring_every_entry():
        for question in questions[:WARM_UP]:
            retriever.schema_for(question, "wide", every_table)
            routed(question)
        embedder.forget_recent()
        for question, tables, picks in zip(questions, sent, picked, strict=True):
            schema, took = timed(lambda q=question: retriever.schema_for(q, "wide", every_table))
            exact_retrieval.append(took)
            same_sent += schema.table_names() == tables
            routing_, took = timed(lambda q=question: routed(q))
            exact_routing.append(took)
            same_dense += routing_.candidates[0].evidence.get("dense") == picks
    store.close()
    live = retriever.live("wide")
    assert live is not None
    return {"machine": machine_floor(), "index_load_s": round(load_s, 2), "first_retrieval_s": round(first_retrieval_s, 2),
            "first_routing_s": round(first_routing_s, 2), "questions": len(questions),
            "searched": live.graph and len(live.view(every_table).scored_ids) > EXACT_UP_TO,
            "retrieval": percentiles(retrieval), "routing": percentiles(routing), "peak_rss_mb": peak,
            "exact_retrieval": percentiles(exact_retrieval), "exact_routing": percentiles(exact_routing),
            "same_tables_as_exact": round(same_sent / len(questions), 4),
            "same_dense_evidence_as_exact": round(same_dense / len(questions), 4)}


def machine_floor(n: int = 200_000, repeats: int = 5) -> dict[str, float]:
    """What scoring costs on this machine whatever the schema: ms per 100,000 vectors (384 floats, in memory)
    scored for one query on one thread, and split over the scoring threads as a build's segments are (scoring
    reads every vector once, so this is how fast the machine's cores read memory; compare runs by it)."""
    data = np.random.default_rng(0).normal(size=(n, 384)).astype(np.float32)
    one = flat_index(data)
    split = SegmentedIndex([flat_index(part) for part in np.array_split(data, 8)])
    ids, query = np.arange(n), data[0] / np.linalg.norm(data[0])
    figures = {}
    for name, index in (("one_thread_ms_per_100k", one), ("segments_ms_per_100k", split)):
        took = [timed(lambda i=index: similarities_of(i, query, ids))[1] for _ in range(repeats)]
        figures[name] = round(min(took) * 1000 * 100_000 / n, 2)
    return figures | {"scoring_threads": SCORING_THREADS}


@contextmanager
def scoring_every_entry() -> Iterator[None]:
    """Retrieval and routing score every entry of the caller's exactly (no search of the index), for the baseline."""
    modules = [sys.modules["nl2sql.index.retrieve"], sys.modules["nl2sql.index.route"]]
    saved = [m.EXACT_UP_TO for m in modules]
    for m in modules:
        m.EXACT_UP_TO = 2**62
    try:
        yield
    finally:
        for m, value in zip(modules, saved, strict=True):
            m.EXACT_UP_TO = value


def every_table(_table: str) -> bool:
    """The scope of a caller who may read every table (one object: a build keeps its view of it)."""
    return True


def every_entry(_datasource_id: str, _table: str) -> bool:
    """Routing's form of `every_table`."""
    return True


def worker(*args: str) -> dict[str, Any]:
    """This script run as a worker (its own process, so each peak RSS is its own); its JSON answer."""
    done = subprocess.run([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:  # its traceback went to stderr above
        sys.exit(f"the worker {' '.join(args)} failed (exit {done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def checks(report: dict[str, Any]) -> dict[str, bool | None]:
    """Each target met, or None where its size was not run."""
    by_size = {int(k): v for k, v in report["sizes"].items()}

    def at(n: int, key: str, *path: str) -> float | None:
        value: Any = by_size.get(n)
        for part in (key, *path):
            value = None if value is None else value.get(part)
        return value

    def within(value: float | None, limit: float) -> bool | None:
        return None if value is None else value <= limit

    incremental = [v["incremental"]["wall_s"] for v in by_size.values()]
    return {"cold_build_le_60s_at_1200": within(at(1200, "cold", "wall_s"), TARGETS["cold_build_s@1200"]),
            "incremental_le_3s_every_size": all(v <= TARGETS["incremental_s"] for v in incremental)
            if incremental else None,
            "retrieval_p95_le_20ms_at_1200": within(at(1200, "retrieval", "p95_ms"),
                                                     TARGETS["retrieval_p95_ms@1200"]),
            "retrieval_p95_le_50ms_at_20000": within(at(20_000, "retrieval", "p95_ms"),
                                                      TARGETS["retrieval_p95_ms@20000"]),
            "serving_rss_le_1_5gb_at_20000": within(at(20_000, "peak_rss_mb"), TARGETS["peak_rss_mb@20000"])}


def plot(report: dict[str, Any], path: Path) -> None:
    """Build time, latency, memory and index size against tables (log-scaled tables), targets dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(int(k) for k in report["sizes"])
    rows = [report["sizes"][str(n)] for n in sizes]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    panels = [
        (axes[0][0], "build (s)", [("cold", [r["cold"]["wall_s"] for r in rows]),
                                   ("incremental", [r["incremental"]["wall_s"] for r in rows])],
         [(1200, TARGETS["cold_build_s@1200"]), (None, TARGETS["incremental_s"])]),
        (axes[0][1], "latency (ms)", [("retrieval p50", [r["retrieval"]["p50_ms"] for r in rows]),
                                      ("retrieval p95", [r["retrieval"]["p95_ms"] for r in rows]),
                                      ("routing p95", [r["routing"]["p95_ms"] for r in rows])],
         [(1200, TARGETS["retrieval_p95_ms@1200"]), (20_000, TARGETS["retrieval_p95_ms@20000"])]),
        (axes[1][0], "peak RSS (MB)", [("serving", [r["peak_rss_mb"] for r in rows]),
                                       ("building", [r["build_peak_rss_mb"] for r in rows])],
         [(20_000, TARGETS["peak_rss_mb@20000"])]),
        (axes[1][1], "on disk (MB)", [("FAISS index", [r["index_file_mb"] for r in rows]),
                                      ("state folder", [r["state_mb"] for r in rows])], []),
    ]
    for ax in (axes[0][0], axes[0][1]):  # seconds to a thousand, milliseconds to a second: a log scale reads both
        ax.set_yscale("log")
    for ax, label, series, targets in panels:
        for name, values in series:
            ax.plot(sizes, values, marker="o", label=name)
        for at, value in targets:
            ax.axhline(value, linestyle="--", linewidth=0.8, color="grey")
            ax.annotate(f"target{'' if at is None else f' @{at:,}'}: {value:g}", (sizes[0], value),
                        textcoords="offset points", xytext=(2, 3), fontsize=7, color="grey")
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
        ax.set_xlabel("tables")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.suptitle(f"Index cost against schema size ({report['cpus']} CPUs, commit {report['commit']})")
    fig.savefig(path, dpi=110)


def commit() -> str:
    """The checkout's commit, with +changes when the tree differs from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run each size in its own process, print a table, write the JSON and the plot; the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="table counts, comma-separated")
    parser.add_argument("--questions", type=int, default=200, help="questions timed per size")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=2, help="embedder threads")
    parser.add_argument("--out", type=Path, default=HERE / "index_scale.json")
    parser.add_argument("--plot", type=Path, default=HERE / "index_scale.png")
    parser.add_argument("--build", type=int, help=argparse.SUPPRESS)  # a worker: build one size into --work
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # a worker: serve from --work
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--replot", action="store_true", help="only draw the plot again from --out's report")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.replot:
        report = json.loads(args.out.read_text())
        plot(report, args.plot)
        return report
    if args.build or args.serve:
        figures = (build_size(args.build, args.seed, args.questions, args.threads, args.work, args.quiet)
                   if args.build else serve_size(args.threads, args.work, args.quiet))
        print(json.dumps(figures))
        return {}
    report: dict[str, Any] = {"commit": commit(), "seed": args.seed, "cpus": os.cpu_count(), "threads": args.threads,
                              "questions": args.questions, "targets": TARGETS, "sizes": {}}
    common = ["--seed", str(args.seed), "--questions", str(args.questions), "--threads", str(args.threads),
              *(["--quiet"] if args.quiet else [])]
    for n in (int(s) for s in args.sizes.split(",")):
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="nl2sql-scale-") as tmp:
            built = worker("--build", str(n), "--work", tmp, *common)
            report["sizes"][str(n)] = built | worker("--serve", "--work", tmp, *common)
        log(args.quiet, f"{n} tables done in {time.perf_counter() - started:.0f} s")
    report["checks"] = checks(report)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'tables':>8} {'cold s':>8} {'incr s':>7} {'entries':>8} {'index':>6} {'retr p50':>9} {'retr p95':>9} "
          f"{'route p95':>9} {'RSS MB':>7} {'build MB':>8} {'idx MB':>7} {'vs exact':>9} {'same':>5}")
    for n, r in report["sizes"].items():
        ratio = r["retrieval"]["p95_ms"] / r["exact_retrieval"]["p95_ms"]
        print(f"{int(n):>8,} {r['cold']['wall_s']:>8} {r['incremental']['wall_s']:>7} {r['cold']['entries']:>8} "
              f"{r['cold']['index_kind']:>6} {r['retrieval']['p50_ms']:>9} {r['retrieval']['p95_ms']:>9} "
              f"{r['routing']['p95_ms']:>9} {r['peak_rss_mb']:>7} {r['build_peak_rss_mb']:>8} {r['index_file_mb']:>7} "
              f"{ratio:>8.2f}× {r['same_tables_as_exact']:>5}")
    print(json.dumps(report["checks"], indent=1))
    try:
        plot(report, args.plot)
    except ImportError:
        print("no plot: matplotlib is not installed (pip install -e '.[bench]')", file=sys.stderr)
    return report


if __name__ == "__main__":
    main()
