"""The gate, the records and the published pages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nl2sql.evaluation.gate import EXIT_COST_CAP, EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, run_gate
from nl2sql.evaluation.records import (
    README_END,
    README_START,
    benchmarks_page,
    newest_comparable,
    publish,
    record_path,
    record_verdicts,
)


def report(mode: str, passed: dict[str, bool], *, digest: str = "d1", fingerprint: str = "f1",
           stopped: str | None = None) -> dict:
    records = [{"case_id": key.split("/")[0], "role": key.split("/")[1],
                "scores": {"outcome": {"passed": ok, "detail": {}}, "faithfulness": {"passed": False, "detail": {}}}}
               for key, ok in passed.items()]
    return {"mode": mode, "suite": {"name": "s.yaml", "digest": digest}, "stopped": stopped,
            "database": {"datasource_id": "chinook", "schema_fingerprint": fingerprint},
            "boards": {"default": {"records": records}}}


def cases(n: int, failing: set[int]) -> dict[str, bool]:
    return {f"c{i:02d}/admin": i not in failing for i in range(n)}


def test_no_change_passes_and_a_faithfulness_miss_alone_is_no_regression() -> None:
    result = run_gate(report("plans", cases(5, set())), report("plans", cases(5, set())))
    assert result.exit_code == EXIT_OK and result.configs["default"].lost == []


def test_modes_plans_and_retrieval_allow_no_flip() -> None:
    for mode in ("plans", "retrieval"):
        result = run_gate(report(mode, cases(5, {3})), report(mode, cases(5, set())), max_regressions=5)
        assert result.exit_code == EXIT_REGRESSION and result.configs["default"].lost == ["c03/admin"]


def test_mode_full_allows_max_regressions_but_not_a_significant_loss() -> None:
    base = report("full", cases(20, set()))
    assert run_gate(report("full", cases(20, {1, 2})), base, max_regressions=2).exit_code == EXIT_OK
    lost_ten = run_gate(report("full", cases(20, set(range(10)))), base, max_regressions=20, alpha=0.05)
    assert lost_ten.exit_code == EXIT_REGRESSION and lost_ten.configs["default"].p_value == pytest.approx(0.00195, abs=1e-4)
    even = run_gate(report("full", cases(20, set(range(5)))), report("full", cases(20, set(range(5, 10)))),
                    max_regressions=20)
    assert even.exit_code == EXIT_OK and even.configs["default"].p_value == 1.0


def test_runs_of_another_suite_mode_or_schema_are_a_series_break() -> None:
    base = report("plans", cases(3, set()))
    for other in (report("plans", cases(3, set()), digest="d2"), report("retrieval", cases(3, set())),
                  report("plans", cases(3, set()), fingerprint="f2")):
        assert run_gate(other, base).exit_code == EXIT_USAGE


def test_a_run_stopped_by_its_dollar_cap_exits_3() -> None:
    assert run_gate(report("full", cases(3, set()), stopped="max_cost"), report("full", cases(3, set()))).exit_code \
        == EXIT_COST_CAP


def test_a_case_passes_only_when_every_pass_passed() -> None:
    flaky = report("full", cases(3, set()))
    flaky["boards"]["default"]["records"].append({"case_id": "c01", "role": "admin",
                                                   "scores": {"outcome": {"passed": False, "detail": {}}}})
    result = run_gate(flaky, report("full", cases(3, set())), max_regressions=0)
    assert result.configs["default"].lost == ["c01/admin"]


def record(kind: str, day: str, *, digest: str = "d1", strict: float = 1.0) -> dict:
    return {"schema": 1, "kind": kind, "recorded_at": f"{day}T10:00:00Z", "engine_version": "0.1.0",
            "git_commit": "abcdef0123", "git_dirty": False, "note": None, "dataset": {"name": "s.yaml",
                                                                                   "digest": digest},
            "database": {"datasource_id": "chinook", "schema_fingerprint": "f1"}, "config": {"name": "default"},
            "metrics": {"cases": 2, "runs": 2, "execution_accuracy": strict, "lenient_accuracy": strict,
                        "table_recall": None, "column_recall": None, "tables_sent": None, "columns_sent": None,
                        "routing_top1": None, "routing_shortlist": None, "cost_usd": None, "latency_p50_s": 0.1,
                        "latency_p95_s": 0.2},
            "verdicts": [{"case": "c00/admin", "passed": True}, {"case": "c01/admin", "passed": strict == 1.0}]}


def write(root: Path, rec: dict) -> Path:
    path = record_path(root, rec)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec))
    return path


def test_records_never_overwrite_and_the_newest_comparable_is_the_baseline(tmp_path: Path) -> None:
    first = write(tmp_path, record("plans", "2026-11-01"))
    second = write(tmp_path, record("plans", "2026-11-01", strict=0.5))
    assert first.name == "2026-11-01_abcdef0_default.json" and second.name == "2026-11-01_abcdef0_default-2.json"
    write(tmp_path, record("plans", "2026-11-02", digest="other"))
    found = newest_comparable(tmp_path, report("plans", cases(2, set())))
    assert found is not None and found[0] == second
    gate = run_gate(report("plans", cases(2, set())), found[1])
    assert gate.configs["default"].gained == ["c01/admin"]
    assert record_verdicts(record("plans", "2026-11-01"))["verdicts"][0] == {"case_id": "c00", "role": "admin",
                                                                            "passed": True}


def test_publish_is_deterministic_and_keeps_the_readme(tmp_path: Path) -> None:
    root = tmp_path / "benchmarks"
    write(root, record("plans", "2026-11-01"))
    write(root, record("retrieval", "2026-11-02", strict=0.5))
    docs, readme = tmp_path / "benchmarks.md", tmp_path / "README.md"
    readme.write_text(f"# Project\n\nintro\n\n{README_START}\nold\n{README_END}\n\nafter\n")
    publish(root, docs, readme)
    once = (docs.read_text(), readme.read_text())
    publish(root, docs, readme)
    assert (docs.read_text(), readme.read_text()) == once
    assert "intro" in once[1] and "after" in once[1] and "old" not in once[1] and "| plans | chinook | 100.0%" in once[1]
    assert "## Mode retrieval" in benchmarks_page(root)


ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_pages_are_what_publish_writes(tmp_path: Path) -> None:
    if not (ROOT / "benchmarks" / "plans").exists():
        pytest.skip("no records committed yet")
    from nl2sql.evaluation.records import readme_block

    assert (ROOT / "docs" / "benchmarks.md").read_text() == benchmarks_page(ROOT / "benchmarks") + "\n"
    assert readme_block(ROOT / "benchmarks") in (ROOT / "README.md").read_text()


def test_an_eval_runs_exit_code_says_the_worst_of_what_happened() -> None:
    from nl2sql.evaluation.gate import GateResult, eval_exit_code

    clean = {"mode": "plans", "boards": {"gold": {"failures": []}}}
    failing = {"mode": "plans", "boards": {"gold": {"failures": [{"case_id": "c1"}]}}}
    regression = GateResult(exit_code=1, reason="1 case(s) went from pass to fail")
    series_break = GateResult(exit_code=2, reason="not comparable (a series break)")
    assert eval_exit_code(clean, None) == (0, None)
    assert eval_exit_code(clean, GateResult(exit_code=0, reason="no regression")) == (0, None)
    assert eval_exit_code(failing, None) == (1, "mode plans: every case must pass for every role")
    assert eval_exit_code({**failing, "mode": "retrieval"}, None) == (0, None)  # only mode plans needs every case
    assert eval_exit_code(clean, regression) == (1, "1 case(s) went from pass to fail")
    assert eval_exit_code(failing, regression) == (1, "1 case(s) went from pass to fail")
    assert eval_exit_code(failing, series_break) == (2, "not comparable (a series break)")
    assert eval_exit_code({**clean, "stopped": "the dollar cap"}, regression) == (3, "stopped: the dollar cap")
