"""The typed plan's coverage of real gold SQL: Spider dev's 972 gold statements read into plans, validated,
generated for SQLite and run (benchmarks/plan/coverage.py); coverage must not fall below the recorded figures."""

from __future__ import annotations

import json
import warnings
from decimal import Decimal
from types import ModuleType

import pytest

from tests.support.benchmarks import load_benchmark


@pytest.fixture(scope="module")
def coverage() -> ModuleType:
    return load_benchmark("plan/coverage.py")


def test_coverage_of_spider_gold_does_not_drop(coverage: ModuleType) -> None:
    recorded = json.loads(coverage.default_out("sqlite").read_text())
    report = coverage.figures(coverage.RoundTrip("sqlite").run(coverage.load_gold()), "sqlite")
    now, then = report["totals"], recorded["totals"]
    assert now["statements"] == then["statements"] == 972

    before = {s["id"]: s for s in recorded["statements"]}
    lost = [f"#{s['id']} {s['outcome']} {s['kind'] or ''}".rstrip() for s in report["statements"]
            if before[s["id"]]["outcome"] == "same" and s["outcome"] != "same"]
    for name in ("same", "read"):
        assert now[name] >= then[name], (
            f"{name}: {now[name]} of 972, recorded {then[name]} (benchmarks/plan/coverage.json); were same, now: "
            + ", ".join(lost[:30]) + "\n" + coverage.summary(report))
    if (now["same"], now["read"]) != (then["same"], then["read"]):
        warnings.warn(f"Spider coverage rose (same {then['same']} → {now['same']}, read {then['read']} → "
                      f"{now['read']}): re-record with `.venv/bin/python benchmarks/plan/coverage.py`.",
                      stacklevel=1)


def test_results_compare_as_multisets_unless_the_gold_orders(coverage: ModuleType) -> None:
    result = coverage.Result
    gold = result(2, [(1, 2.5), (2, 1 / 3)])
    assert coverage.compare(gold, result(2, [(2, 0.333333333), (1.0, 2.5)]), ordered=False) is None
    assert coverage.compare(gold, result(2, [(2, 0.333333333), (1.0, 2.5)]), ordered=True) == "order"
    assert coverage.compare(gold, result(2, [(1, 2.5), (3, 1 / 3)]), ordered=False) == "values"
    assert coverage.compare(gold, result(2, [(1, 2.5)]), ordered=False) == "row count"
    assert coverage.compare(gold, result(1, [(1,), (2,)]), ordered=False) == "columns"
    # an exact integer from PostgreSQL's SUM is not rounded: 3705025700 and 3705025701 differ
    assert coverage.normalize(Decimal("3705025700")) == 3705025700
    assert coverage.has_top_level_order("SELECT a FROM t ORDER BY a")
    assert not coverage.has_top_level_order("SELECT a FROM (SELECT a FROM t ORDER BY a LIMIT 3)")
