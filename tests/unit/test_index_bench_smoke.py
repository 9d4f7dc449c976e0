"""Smoke test of benchmarks/perf/index_wide.py: a tiny run in-process, and every figure in its report."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.benchmarks import load_benchmark


def load_bench() -> ModuleType:
    return load_benchmark("perf/index_wide.py")


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


def test_the_wide_schema_grows_by_regional_copies_of_the_domains() -> None:
    schemas = load_bench().load_schemas()
    small, large = schemas.wide_schema(1200, seed=7), schemas.wide_schema(2600, seed=7)
    assert len({t.name for t in large}) == len(large) == 2600
    assert not any("_emea_" in t.name for t in small)
    copies = [t for t in large if t.name.startswith("sales_emea_")]
    assert copies and all(any(c.ref == "sales_emea_customer" for c in t.columns if c.kind == "fk")
                          for t in copies if t.name == "sales_emea_sales_order")


def test_the_extended_bed_adds_siblings_and_databases_without_keys(tmp_path: Path) -> None:
    import sqlite3

    schemas = load_bench().load_schemas()
    bed = {db.name: db for db in schemas.make_extended_bed(seed=7, tests_per_db=3)}
    assert len(bed) == len(schemas.DOMAINS) + len(schemas.SIBLINGS) and set(schemas.SIBLING_OF) <= set(bed)
    for sibling, domain in schemas.SIBLING_OF.items():  # the same subject, other names
        assert not {t.name for t in bed[sibling].tables} & {t.name for t in bed[domain].tables}
        assert len(bed[sibling].test_questions) == 3
    assert {name for name, db in bed.items() if not db.keys} == set(schemas.KEYLESS)
    keyless = bed["podcast_network"]
    path = schemas.write_sqlite(keyless.tables, tmp_path / "pod.sqlite", keys=keyless.keys)
    with sqlite3.connect(path) as conn:
        for table in keyless.tables:
            assert not any(row[5] for row in conn.execute(f'PRAGMA table_info("{table.name}")'))
            assert not list(conn.execute(f'PRAGMA foreign_key_list("{table.name}")'))
            assert conn.execute(f'SELECT COUNT(*) FROM "{table.name}"').fetchone()[0] == len(table.rows)
    conn.close()


def test_each_generated_question_knows_what_a_query_answering_it_reads() -> None:
    schemas = load_bench().load_schemas()
    for db in schemas.make_extended_bed(seed=7, tests_per_db=3)[:12]:
        written = {w.text: w for w in schemas.written_pool(db.tables, 7, db.name)}
        assert [w.text for w in written.values()] == schemas.question_pool(db.tables, 7, db.name)
        columns = {f"{t.name}.{c.name}" for t in db.tables for c in t.columns}
        for question in [*db.sample_questions, *db.test_questions]:
            gold = written[question]
            assert gold.tables <= {t.name for t in db.tables} and gold.columns <= columns
            assert {c.split(".")[0] for c in gold.columns} <= gold.tables
    # a question about an entity's parent reads both tables and the key that joins them
    db = schemas.make_extended_bed(seed=7, tests_per_db=3)[0]
    by_name = {t.name: t for t in db.tables}
    about_parents = [w for w in schemas.written_pool(db.tables, 7, db.name) if len(w.tables) == 2]
    assert about_parents
    for gold in about_parents:
        joins = [(t.name, c.name, c.ref) for t in db.tables if t.name in gold.tables for c in t.columns
                 if c.kind == "fk" and c.ref in gold.tables]
        assert any({f"{child}.{key}", f"{ref}.{by_name[ref].pk}"} <= gold.columns for child, key, ref in joins), gold


@pytest.mark.slow
def test_the_scale_benchmark_reports_each_size_and_plots_them(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    scale = load_benchmark("perf/index_scale.py")
    out, plot = tmp_path / "scale.json", tmp_path / "scale.png"
    report = scale.main(["--sizes", "20,40", "--questions", "5", "--quiet", "--out", str(out), "--plot", str(plot)])
    assert json.loads(out.read_text()) == report and set(report["sizes"]) == {"20", "40"}
    for figures in report["sizes"].values():
        assert figures["cold"]["embedded"] == figures["cold"]["entries"] > 0
        assert figures["incremental"]["changed_tables"] == 1 and figures["unchanged"]["embedded"] == 0
        assert 0 < figures["retrieval"]["p50_ms"] <= figures["retrieval"]["p95_ms"]
        assert figures["routing"]["n"] == 5 and figures["peak_rss_mb"] > 0 and figures["index_file_mb"] > 0
    assert report["checks"]["incremental_le_3s_every_size"] is True
    assert report["checks"]["retrieval_p95_le_50ms_at_20000"] is None  # not run at that size
    assert "tables" in capsys.readouterr().out
    if importlib.util.find_spec("matplotlib"):
        assert plot.read_bytes()[:4] == b"\x89PNG"


def test_each_routing_ablation_takes_its_signal_out_of_the_evidence_score(demo_index) -> None:
    bed = load_benchmark("routing/wide_bed.py")
    question = "Are Jazz tracks in more playlists than Blues ones?"  # names tables and two values of one column
    two_things = "Playlists next to the browsers visitors use"  # its parts go to two databases

    def candidates() -> dict[str, object]:
        return {c.datasource_id: c for c in demo_index.route(question, "admin").candidates}

    full = candidates()
    paired = demo_index.route(two_things, "admin").pair
    assert all(c.evidence["dense"] > 0 and c.score > c.evidence["dense"] for c in full.values() if c.evidence["lexical"])
    changed = {}
    for name in bed.ABLATIONS:
        with bed.ablated(name):  # a patch of something routing no longer has fails here
            ablated = candidates()
            pair = demo_index.route(two_things, "admin").pair
        changed[name] = any(ablated[ds].score != full[ds].score for ds in full) or pair != paired
        if name == "dense only":
            assert all(c.score == pytest.approx(c.evidence["dense"], abs=1e-4) for c in ablated.values())
        if name == "no dense (lexical and BM25 only)":
            assert all(c.score == pytest.approx(0.02 * (c.evidence["lexical"] + c.evidence["names"])
                                                + 0.02 * c.evidence["bm25"], abs=1e-4) for c in ablated.values())
    assert all(changed.values()), changed  # each one moves some score on the first question, or the second's pair


def test_the_model_check_asks_only_on_close_calls_and_keeps_what_the_flow_keeps() -> None:
    from nl2sql.config.models import LLMConfig, RoutingSettings
    from nl2sql.index.route import RouteCandidate, Routing
    from nl2sql.llm.client import LLMClient
    from nl2sql.llm.fake import FakeLLMServer

    check = load_benchmark("routing/model_check.py")
    settings = RoutingSettings()

    def routing(scores: dict[str, float]) -> Routing:
        ranked = sorted(scores, key=lambda ds: -scores[ds])
        return Routing([ds for ds in ranked if scores[ds] >= 0.6 * scores[ranked[0]]],
                       [RouteCandidate(ds, scores[ds], scores[ds], {}, {}) for ds in ranked], {}, "evidence", {})

    def described(question: str, ds: str) -> tuple[str, str, list[str]]:
        return ds, f"The {ds} database.", [f"{ds}_table"]

    with FakeLLMServer() as fake:
        args = type("Args", (), {"base_url": fake.base_url, "model": "fake-model", "timeout_s": 10.0})()
        section = check.model_section(args)
        section["models"]["bench"]["api_key"] = "fake-key"
        client = LLMClient(LLMConfig.model_validate(section))
        fake.answer("Answerability",
                    '{"reason": "sessions are web data", "answerable": true, "datasource_ids": ["WEBANALYTICS"]}',
                    '{"reason": "tickets", "answerable": true, "datasource_ids": ["support"]}')
        close = routing({"chinook": 0.60, "webanalytics": 0.56, "support": 0.40})
        moved = check.second_stage("Sessions per day?", ["webanalytics"], close, described, client, settings)
        assert moved["asked"] and moved["after"] == ["webanalytics"]
        assert (moved["top1_before"], moved["top1_after"]) == (False, True)
        shown = fake.requests[-1]["messages"][-1]["content"]
        assert "The support database." in shown and "Sessions per day?" in shown  # the whole shortlist is shown
        # a model naming only a datasource well below the best leaves routing's first pick (SUB_QUERY_REROUTED)
        kept = check.second_stage("Tracks per genre?", ["chinook"], close, described, client, settings)
        assert kept["chosen"] == ["support"] and kept["after"] == ["chinook"] and kept["top1_after"]
        # one close call: the check could not move the first pick, and no model is asked
        clear = check.second_stage("Tracks per genre?", ["chinook"], routing({"chinook": 0.6, "support": 0.4}),
                                   described, client, settings)
        assert not clear["asked"] and clear["after"] == ["chinook", "support"] and fake.calls("Answerability") == 2


def test_the_name_values_memory_benchmark_indexes_every_value_and_reports_its_cost() -> None:
    bench = load_benchmark("perf/name_values_memory.py")
    report = bench.measure([f"Name {i} Surname" for i in range(1_000)])  # (it checks every value is indexed)
    assert report["values"] == 1_000 and report["tables"] == 2 and report["bytes_per_value"] > 0


def test_the_compared_values_benchmark_tells_where_its_rule_gives_points(demo_index) -> None:
    check = load_benchmark("routing/compared_values.py")
    cases = [("Are tablet visitors more loyal than mobile ones?", ["webanalytics"]),  # two devices: the rule
             ("Are tablet visitors more loyal than mobile ones?", ["support"]),  # the same points, a wrong database
             ("Which album has the most tracks?", ["chinook"])]  # no two values of one column
    report = check.where_it_fires(cases, lambda question: demo_index.route(question, "admin"))
    assert report["fires"] == {"right only": 1, "wrong only": 1, "both": 0, "none": 1}
    assert report["top1_with"] == report["top1_without"] == pytest.approx(2 / 3, abs=1e-4) and not report["changed"]
    right = check.where_it_fires(cases[:1], lambda question: demo_index.route(question, "admin"))
    assert right["margin_with"] == pytest.approx(right["margin_without"] + 0.02, abs=1e-3)  # 1 point, at 0.02
