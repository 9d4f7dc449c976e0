"""Smoke test of benchmarks/perf/index_wide.py: a tiny run in-process, and every figure in its report."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "perf" / "index_wide.py"


def load_bench() -> ModuleType:
    name = "nl2sql_bench_index_wide"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BENCH)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.mark.slow
def test_quick_benchmark_reports_every_figure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_bench()
    tiny = bench.Sizes(tables=40, databases=3, tests_per_db=5, retrieval_questions=10, synthetic_vectors=1_500,
                       synthetic_hnsw_above=500, big_databases=(12,))
    out = tmp_path / "report.json"
    report = bench.main(["--quick", "--no-postgres", "--quiet", "--out", str(out)], sizes=tiny)

    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    printed = capsys.readouterr().out
    for label in ("SQLite full build", "incremental", "peak memory", "retrieval schema_for", "recall@20, wide build",
                  "recall@20, synthetic", "routing latency", "default routing", "best of the grid",
                  "embedding throughput", "float32 arithmetic floor"):
        assert label in printed

    wide = report["wide"]
    assert wide["schema"]["tables"] == 40 and 8 <= wide["schema"]["min_columns"] <= wide["schema"]["max_columns"] <= 20
    for build in ("sqlite_full", "sqlite_full_warm", "sqlite_unchanged", "sqlite_incremental"):
        figures = wide[build]
        assert set(figures["stages_s"]) == {"reflect", "profile", "relate", "entries", "embed", "commit"}
        assert figures["entries"] > 0 and figures["index_kind"] in ("flat", "hnsw")
    full, incremental = wide["sqlite_full"], wide["sqlite_incremental"]
    assert full["embedded"] == full["entries"] and full["cached"] == 0  # a fresh cache
    assert incremental["changed_tables"] == 1 and 0 < incremental["embedded"] <= 3  # table text + the new column
    assert incremental["cached"] == incremental["entries"] - incremental["embedded"]
    assert wide["sqlite_unchanged"]["embedded"] == 0 and wide["sqlite_unchanged"]["changed_tables"] == 0
    assert wide["postgresql"] == {"skipped": "--no-postgres"}

    assert report["memory"]["peak_rss_mb"] > 0 and report["memory"]["tracemalloc_peak_mb"] > 0
    assert wide["sqlite_full_traced"]["wall_s"] > 0
    for kind in ("end_to_end", "embed_only", "without_embedding"):
        latency = report["retrieval"][kind]
        assert 0 < latency["p50_ms"] <= latency["p95_ms"] and latency["n"] == 10
    recall = report["recall"]
    assert recall["synthetic"]["kind"] == "hnsw" and recall["synthetic"]["vectors"] == 1_500
    for value in (recall["wide"]["self_queries"], recall["wide"]["question_queries"],
                  recall["synthetic"]["self_queries"], recall["synthetic"]["held_out_queries"]):
        assert 0.9 <= value <= 1.0

    routing = report["routing"]
    assert routing["databases"] == 3 and routing["test_questions"] == 15
    assert {(r["strategy"], r["floor_ratio"]) for r in routing["results"]} == {
        (s, f) for s in bench.STRATEGIES for f in bench.FLOOR_RATIOS}
    assert all(0 <= r["top1"] <= r["shortlist_hit"] <= 1 for r in routing["results"] + routing["without_examples"])
    assert {(r["strategy"], r["floor_ratio"]) for r in routing["without_examples"]} == {
        (s, f) for s in bench.STRATEGIES for f in bench.ABLATION_FLOORS}
    assert routing["recommended"] in routing["results"] and routing["default"] in routing["results"]
    assert routing["default"]["strategy"] == "evidence"
    embedding = wide["embedding"]
    assert embedding["texts"] > 0 and embedding["texts_per_s"] > 0 and embedding["baseline_texts_per_s"] > 0
    assert embedding["fused_float_least_cosine_to_baseline"] > 0.9999  # the fused graph gives the same vectors
    assert embedding["precision"] == "int8" and embedding["float_texts_per_s"] > 0
    assert embedding["mean_cosine_to_float"] > 0.98 and embedding["least_cosine_to_float"] > 0.9
    assert embedding["build_tokens"] >= embedding["tokens"] and embedding["float_arithmetic_floor_s"] > 0
    assert routing["latency"]["p50_ms"] > 0
    assert set(report["checks"]) == {"full_build_le_60s", "incremental_le_3s", "retrieval_p95_le_50ms",
                                     "recall_at_20_ge_0_99", "routing_top1_ge_95pct"}
