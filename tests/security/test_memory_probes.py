"""The memory corpus (benchmarks/perf/memory_probes.yaml) through the installed `nl2sql sql`: every probe, on SQLite
and DuckDB, ends with its process tree under 1 GiB of resident memory and within the statement timeout + 5 s of a
plain `SELECT 1` run the same way, with no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.benchmarks import load_benchmark

BENCHMARK = load_benchmark("perf/memory_probes.py")
CORPUS = BENCHMARK.load_corpus()


@pytest.fixture(scope="module")
def probe_project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """A demo project with the corpus's statement timeout; the floor's seconds (a `SELECT 1` run the same way)."""
    config = BENCHMARK.make_project(tmp_path_factory.mktemp("probes"), CORPUS["timeout_s"])
    floor = BENCHMARK.run_probe(config, "chinook", "admin", "SELECT 1")
    assert floor["exit"] == 0, floor
    return config, floor["seconds"]


def test_the_corpus_covers_each_engine_and_kind() -> None:
    for engine in ("chinook", "webanalytics"):
        probes = [p for p in CORPUS["probes"] if p["datasource"] == engine]
        assert len(probes) >= 20
        assert {"string", "list", "blob", "recursive", "regex"} <= {p["kind"] for p in probes}


@pytest.mark.slow
@pytest.mark.parametrize("probe", CORPUS["probes"], ids=[p["id"] for p in CORPUS["probes"]])
def test_a_probe_ends_bounded(probe: dict, probe_project: tuple[Path, float]) -> None:
    config, floor_s = probe_project
    result = BENCHMARK.run_probe(config, probe["datasource"], "admin", probe["sql"], probe.get("args", []))
    assert not result["traceback"], result
    assert result["exit"] in ((2,) if probe["kind"] == "usage" else (0, 1)), result
    assert result["rss_mib"] < BENCHMARK.LIMIT_MIB, result
    assert result["seconds"] - floor_s <= CORPUS["timeout_s"] + BENCHMARK.SLACK_S, result
