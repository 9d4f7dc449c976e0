"""Slicing a suite (--case, --tag, --limit), model configs from files (--llm), and the per-case detail that the
reports and the records keep."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nl2sql.errors import ConfigError
from nl2sql.evaluation.gate import EXIT_OK, EXIT_REGRESSION, run_gate
from nl2sql.evaluation.records import build_record, check_recordable, verdict_details
from nl2sql.evaluation.report import CaseRecord, build_report
from nl2sql.evaluation.run import load_llm, select_cases, selection_of
from nl2sql.evaluation.suite import EvalSuite, load_suite

ROOT = Path(__file__).resolve().parents[2]
CHINOOK = ROOT / "suites" / "chinook.yaml"


@pytest.fixture(scope="module")
def suite() -> EvalSuite:
    return load_suite(CHINOOK)


# --- selection -------------------------------------------------------------------------------------


def test_cases_are_selected_by_id_in_suite_order(suite: EvalSuite) -> None:
    picked = select_cases(suite, ids=["chinook_003", "chinook_001"])
    assert [c.id for c in picked] == ["chinook_001", "chinook_003"]


def test_tags_select_any_of_them_and_combine_with_ids(suite: EvalSuite) -> None:
    window = select_cases(suite, tags=["window"])
    offset = select_cases(suite, tags=["offset"])
    both = select_cases(suite, tags=["window", "offset"])
    assert window and offset and {c.id for c in both} == {c.id for c in window + offset}
    assert all("window" in c.tags for c in window)
    first = window[0].id
    assert [c.id for c in select_cases(suite, ids=[first, "chinook_001"], tags=["window"])] == [first]


def test_limit_takes_the_first_selected_cases(suite: EvalSuite) -> None:
    approved = [c.id for c in suite.select()]
    assert [c.id for c in select_cases(suite, limit=3)] == approved[:3]
    joins = [c.id for c in select_cases(suite, tags=["join"])]
    assert [c.id for c in select_cases(suite, tags=["join"], limit=2)] == joins[:2]
    assert len(select_cases(suite, limit=10_000)) == len(approved)


def test_an_unknown_case_or_tag_is_a_usage_error_with_a_guess(suite: EvalSuite) -> None:
    with pytest.raises(ConfigError) as caught:
        select_cases(suite, ids=["chinook_001", "chinok_002", "nothing-like-it"], tags=["windw"])
    problems = [str(p) for p in caught.value.problems]
    assert len(problems) == 3
    assert "unknown case 'chinok_002'" in problems[0] and "did you mean 'chinook_002'?" in problems[0]
    assert "unknown case 'nothing-like-it'" in problems[1]
    assert "'windw'" in problems[2] and "did you mean 'window'?" in problems[2]
    with pytest.raises(ConfigError, match="--limit"):
        select_cases(suite, limit=0)


def test_a_draft_case_named_is_refused(suite: EvalSuite) -> None:
    drafted = suite.model_copy(update={"cases": [suite.cases[0].model_copy(update={"status": "draft"}),
                                                 *suite.cases[1:]]})
    with pytest.raises(ConfigError, match="is draft"):
        select_cases(drafted, ids=[suite.cases[0].id])


def test_the_selection_is_kept_only_for_a_slice(suite: EvalSuite) -> None:
    assert selection_of(None, None, None, suite.cases, 66) is None
    assert selection_of(None, None, 100, suite.cases, 66) is None  # every case ran: the whole suite
    assert selection_of(None, ["join"], 2, suite.cases[:2], 66) == {"ids": None, "tags": ["join"], "limit": 2,
                                                                    "cases": 2, "of": 66}


# --- --llm files -------------------------------------------------------------------------------------

SECTION = {"models": {"m": {"provider": "openai", "model": "some-model", "base_url": "http://127.0.0.1:9",
                            "api_key": "k"}}, "default": "m", "prices": {"some-model": {"input": 1, "output": 2}}}


@pytest.mark.parametrize("wrapped", [False, True])
def test_an_llm_file_holds_the_section_bare_or_under_llm(tmp_path: Path, wrapped: bool) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"llm": SECTION, "datasources": []} if wrapped else SECTION))
    name, llm = load_llm(f"mine={path}")
    assert name == "mine" and llm.default == "m" and llm.models["m"].model == "some-model"
    assert load_llm(str(path))[0] == "models"


def test_a_bad_llm_file_gives_one_problem_per_error_naming_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"llm": {"models": {"m": {"model": 3}}, "defualt": "m"}}))
    with pytest.raises(ConfigError) as caught:
        load_llm(f"x={path}")
    problems = caught.value.problems
    assert {p.key for p in problems} == {"llm.models.m.provider", "llm.models.m.model", "llm.defualt"}
    assert all(p.file == str(path) for p in problems)
    text = "\n".join(str(p) for p in problems)
    assert "did you mean 'default'?" in text and "validation error" not in text and "pydantic" not in text

    path.write_text(yaml.safe_dump({"models": {"m": {"provider": "openai", "model": "x"}}, "default": "n"}))
    with pytest.raises(ConfigError) as caught:
        load_llm(f"x={path}")
    assert [(p.key, p.message) for p in caught.value.problems] == [("llm.default", "unknown model 'n'")]

    for text, message in (("- a list\n", "must hold an llm section"), ("llm: [\n", "not valid YAML")):
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_llm(f"x={path}")
    with pytest.raises(ConfigError, match="no preset or file"):
        load_llm(f"x={tmp_path / 'missing.yaml'}")


# --- per-case detail ---------------------------------------------------------------------------------


def record(case_id: str, *, passed: bool, pass_index: int = 0, **detail: object) -> CaseRecord:
    scores = {"outcome": {"passed": passed, "detail": {"expected": "allowed", "got": "success" if passed else "error"}}}
    return CaseRecord(case_id=case_id, role="admin", config="default", pass_index=pass_index, tags=[],
                      outcome="allowed", status="success" if passed else "error", scores=scores, latency_s=0.5,
                      answer="There are 59 customers." if passed else None, **detail)  # type: ignore[arg-type]


def test_the_failures_table_and_the_records_carry_codes_and_counts() -> None:
    failing = record("c1", passed=False, error_code="PLAN_INVALID", error_details=["UNKNOWN_COLUMN", "GROUP_BY_MISMATCH"],
                     parse_retries=1, refiner_rounds=2, repairs=0, warnings=["REFINER_REPEATED"], llm_calls=7)
    ok = record("c0", passed=True, error_code=None, parse_retries=0, refiner_rounds=0, repairs=0, llm_calls=4)
    report = build_report("full", suite={"name": "s.yaml", "digest": "d", "cases": 2, "selection": None},
                          database={"datasource_id": "chinook", "schema_fingerprint": "f"}, settings={},
                          records=[ok, failing], planned={"default": 2})
    failure = report.boards["default"].failures[0]
    assert failure["error_code"] == "PLAN_INVALID" and failure["parse_retries"] == 1
    assert failure["refiner_rounds"] == 2 and failure["llm_calls"] == 7 and failure["warnings"] == ["REFINER_REPEATED"]
    assert "got error PLAN_INVALID" in failure["why"]
    table = report.markdown().split("## Failures (default)")[1]
    assert "| c1 | admin |" in table
    assert "| PLAN_INVALID (UNKNOWN_COLUMN, GROUP_BY_MISMATCH) | 1 | 2 | 0 | REFINER_REPEATED | 7 | 0.5 |" in table

    saved = build_record(report.model_dump(mode="json"), "default")
    by_case = {v["case"]: v for v in saved["verdicts"]}
    assert by_case["c1/admin"] == {"case": "c1/admin", "passed": False, "status": "error",
                                   "error_code": "PLAN_INVALID",
                                   "error_details": ["UNKNOWN_COLUMN", "GROUP_BY_MISMATCH"], "parse_retries": 1,
                                   "refiner_rounds": 2,
                                   "repairs": 0, "warnings": ["REFINER_REPEATED"], "llm_calls": 7, "latency_s": 0.5}
    assert by_case["c0/admin"]["passed"] is True and "error_code" not in by_case["c0/admin"]
    assert "59" not in str(saved["verdicts"])  # no answer text, no rows


def test_several_passes_sum_the_counts_and_keep_the_failing_code() -> None:
    runs = [record("c1", passed=True, pass_index=0, parse_retries=1, refiner_rounds=0, llm_calls=4),
            record("c1", passed=False, pass_index=1, error_code="DATASOURCE_ERROR", parse_retries=0,
                   refiner_rounds=3, llm_calls=8)]
    report = build_report("full", suite={"name": "s.yaml", "digest": "d", "cases": 1},
                          database={"datasource_id": "chinook", "schema_fingerprint": "f"}, settings={},
                          records=runs, planned={"default": 2})
    detail = verdict_details(report.boards["default"].model_dump())["c1/admin"]
    assert detail["error_code"] == "DATASOURCE_ERROR" and detail["status"] == "error"
    assert detail["parse_retries"] == 1 and detail["refiner_rounds"] == 3 and detail["llm_calls"] == 12


# --- a slice and the gate ----------------------------------------------------------------------------


def gate_report(passed: dict[str, bool], selection: dict | None = None) -> dict:
    records = [{"case_id": key, "role": "admin", "scores": {"outcome": {"passed": ok, "detail": {}}}}
               for key, ok in passed.items()]
    return {"mode": "plans", "suite": {"name": "s.yaml", "digest": "d", "selection": selection},
            "database": {"datasource_id": "chinook", "schema_fingerprint": "f"},
            "boards": {"default": {"records": records}}}


def test_a_sliced_run_is_gated_on_the_cases_it_ran_and_never_recorded() -> None:
    baseline = gate_report({f"c{i}": True for i in range(10)})
    sliced = {"ids": ["c1", "c2"], "tags": None, "limit": None, "cases": 2, "of": 10}
    result = run_gate(gate_report({"c1": True, "c2": True}, sliced), baseline)
    assert result.exit_code == EXIT_OK
    assert result.configs["default"].compared == 2 and result.configs["default"].baseline_cases == 10
    lost = run_gate(gate_report({"c1": True, "c2": False}, sliced), baseline)
    assert lost.exit_code == EXIT_REGRESSION and lost.configs["default"].lost == ["c2/admin"]
    with pytest.raises(ConfigError, match="a sliced run"):
        check_recordable(gate_report({"c1": True}, sliced), "r.json")
    check_recordable(baseline, "r.json")


# --- worked examples from another suite (eval run --examples) ---------------------------------------------

DEV = ROOT / "benchmarks" / "models" / "dev_questions.yaml"


def test_another_suites_cases_are_the_planners_examples_and_never_answer(suite: EvalSuite, demo_config) -> None:
    from nl2sql.evaluation.run import eval_config, worked_examples_from

    examples = worked_examples_from(DEV, suite, "full")
    assert examples and all(c.sql for c in examples)
    config = eval_config(demo_config, examples=examples)
    chinook = next(ds for ds in config.datasources if ds.id == "chinook")
    # example questions, which nothing answers from, in place of the project's; no verified query at all
    assert {q.question for q in chinook.example_questions} == {c.question for c in examples
                                                               if c.datasources == ["chinook"]}
    assert all(not ds.verified_queries for ds in config.datasources)
    # without examples: the project's own example questions, no verified query, the matcher as configured
    plain = eval_config(demo_config)
    assert all(not ds.verified_queries for ds in plain.datasources) and plain.settings.curated.answer
    assert [ds.example_questions for ds in plain.datasources] == [ds.example_questions
                                                                  for ds in demo_config.datasources]


def test_examples_may_not_ask_the_suites_questions_and_are_for_mode_full(suite: EvalSuite, tmp_path: Path) -> None:
    from nl2sql.evaluation.run import worked_examples_from

    leaked = yaml.safe_load(DEV.read_text())
    leaked["cases"][0]["question"] = "  how many tracks are in the  CATALOG? "  # chinook_001, spelt otherwise
    path = tmp_path / "leaked.yaml"
    path.write_text(yaml.safe_dump(leaked, sort_keys=False))
    with pytest.raises(ConfigError) as caught:
        worked_examples_from(path, suite, "full")
    assert "dev_001 ask a question of the suite run" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        worked_examples_from(DEV, suite, "plans")
    assert "for mode full" in str(caught.value)
