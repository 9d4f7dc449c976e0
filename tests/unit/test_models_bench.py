"""The model benchmark's parts that need no model: Spider dev as a project and a seeded suite, and the prompt tokens
a llama-cpp-python server read and reused per question, from its log."""

from __future__ import annotations

from pathlib import Path

from nl2sql.evaluation.suite import load_suite
from nl2sql.project import load_project
from tests.support.benchmarks import load_benchmark


def test_the_spider_draw_is_seeded_and_spread_and_its_gold_rows_come_from_the_databases(tmp_path: Path) -> None:
    spider = load_benchmark("models/spider.py")
    drawn = spider.sample(100, 0)
    assert [q["id"] for q in drawn] == [q["id"] for q in spider.sample(100, 0)]  # the same draw every time
    assert [q["id"] for q in drawn] != [q["id"] for q in spider.sample(100, 1)]
    assert len({q["db_id"] for q in drawn}) >= 15  # across the databases, not a run of one
    suite = load_suite(spider.spider_suite(tmp_path / "suite.yaml", 100, 0))
    assert [c.id for c in suite.cases] == [f"spider_{q['id']:04d}" for q in drawn]
    singers = load_suite(spider.spider_suite(tmp_path / "first.yaml", 972, 0)).cases[0]
    assert singers.question == "How many singers do we have?" and singers.rows == [{"col1": 6}]
    assert not singers.order_matters and singers.outcome == {"admin": "allowed"}


def test_the_spider_project_is_one_datasource_per_database_with_nothing_written_for_them(tmp_path: Path) -> None:
    spider = load_benchmark("models/spider.py")
    config = load_project(spider.spider_project(tmp_path / "spider"))
    assert [d.id for d in config.datasources] == [db.lower() for db in spider.databases()]
    assert len(config.datasources) == 19
    assert all(not d.description and not d.verified_queries and not d.sample_questions for d in config.datasources)


def test_the_prompt_tokens_each_question_read_and_reused_come_from_the_servers_log(tmp_path: Path) -> None:
    run = load_benchmark("models/run.py")
    log = tmp_path / "server.log"
    log.write_text("before\nLlama.generate: 4 prefix-match hit, remaining 900 prompt tokens to eval\n")
    start = log.stat().st_size
    with log.open("a") as handle:
        for hit, read in ((4, 1600), (1590, 30), (1620, 12), (1600, 25)):
            handle.write(f"INFO: noise\nLlama.generate: {hit} prefix-match hit, remaining {read} prompt tokens to eval\n")
    records = [{"datasource": "chinook", "llm_calls": 2}, {"datasource": "chinook", "llm_calls": 2}]
    run._prompt_tokens(records, log, start)
    assert [(r["prompt_tokens_read"], r["prompt_tokens_reused"]) for r in records] == [(1630, 1594), (37, 3220)]
    figures = run._figures([{**r, "passed": True, "latency_s": 1.0} for r in records], 2.0)
    assert figures["prompt_tokens_read_mean"] == 37  # after the first question on a datasource
