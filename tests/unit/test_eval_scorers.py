"""The scorers: result_match (strict and lenient), outcome, faithfulness, retrieval_recall, routing, the registry."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from nl2sql.datasources.compare import rows_match
from nl2sql.errors import GENERIC_REFUSAL, UnknownNameError
from nl2sql.evaluation.scorers import SCORERS, CaseRun, Score, lenient_match, score_run, scorer
from nl2sql.evaluation.suite import EvalCase
from nl2sql.pipeline.result import Answer, CombinedResult, QueryResult, RunError, SubQueryResult


def make_case(rows: list[dict[str, Any]] | None = None, **kw: Any) -> EvalCase:
    fields: dict[str, Any] = {"id": "c1", "question": "How many tracks per genre?", "datasources": ["chinook"],
                              "sql": "SELECT 1", "outcome": {"viewer": "allowed"}, "rows": rows}
    fields.update(kw)
    return EvalCase(**fields)


def success(columns: list[str], rows: list[list[Any]], *, answer: str = "", **kw: Any) -> QueryResult:
    return QueryResult(trace_id="t", question="q", status="success", answer=Answer(summary=answer),
                       sub_queries=[SubQueryResult(id="sq1", datasource_id="chinook", question="q",
                                                   columns=columns, rows=rows)], **kw)


def failure(code: str, message: str, rows: list[list[Any]] | None = None) -> QueryResult:
    return QueryResult(trace_id="t", question="q", status="error",
                       sub_queries=[SubQueryResult(id="sq1", datasource_id="chinook", question="q",
                                                   columns=["Name"] if rows else [], rows=rows or [])],
                       errors=[RunError(code=code, message=message)])


def match(case: EvalCase, result: QueryResult | None, *, role: str = "viewer") -> Score:
    return SCORERS["result_match"](CaseRun(case=case, role=role, result=result))


def both(gold: list[list[Any]], predicted: list[list[Any]], *, order_matters: bool = False) -> tuple[bool, bool]:
    """(strict, lenient) through the scorer, gold written as dicts with the given values in order."""
    rows = [{f"c{i}": v for i, v in enumerate(r)} for r in gold]
    width = len(predicted[0]) if predicted else 1
    score = match(make_case(rows, order_matters=order_matters), success([f"p{i}" for i in range(width)], predicted))
    assert score.passed is score.detail["strict"]
    return score.detail["strict"], score.detail["lenient"]


# --- strict ----------------------------------------------------------------------------------------


def test_strict_match_ignores_names_and_reports_the_gold_rows() -> None:
    case = make_case([{"Country": "USA", "Total": 523.06}, {"Country": "Canada", "Total": 303.96}])
    score = match(case, success(["c", "t"], [["Canada", 303.96], ["USA", 523.0600001]]))
    assert score.passed is True
    assert score.detail == {"strict": True, "lenient": True, "matched": "rows"}


def test_gold_values_are_read_in_key_order() -> None:
    case = make_case([{"Total": 5, "Name": "Rock"}])
    assert match(case, success(["a", "b"], [[5, "Rock"]])).passed is True
    assert match(case, success(["a", "b"], [["Rock", 5]])).detail["strict"] is False


def test_a_number_matches_a_string_that_spells_it() -> None:
    assert both([["2009", 449.46]], [[2009, 449.4600001]]) == (True, True)
    assert both([[2009]], [["2009"]]) == (True, True)


def test_two_strings_compare_as_strings() -> None:
    assert both([["2009"], ["2010"]], [["2009.0"], ["2010.0"]]) == (False, False)


def test_numbers_within_the_tolerance_only() -> None:
    assert both([[1.0]], [[1.004]]) == (True, True)
    assert both([[1.0]], [[1.01]]) == (False, False)


def test_order_counts_only_when_order_matters() -> None:
    gold, reversed_rows = [["a", 1], ["b", 2]], [["b", 2], ["a", 1]]
    assert both(gold, reversed_rows) == (True, True)
    assert both(gold, reversed_rows, order_matters=True) == (False, False)
    # lenient keeps the order rule: columns swapped and rows reversed
    assert both(gold, [[2, "b"], [1, "a"]], order_matters=True) == (False, False)
    assert both(gold, [[1, "a"], [2, "b"]], order_matters=True) == (False, True)


def test_an_alternative_may_match() -> None:
    case = make_case([{"FirstName": "Luís", "LastName": "Gonçalves"}], alt_sql=["SELECT 2"],
                     alt_rows=[[{"Name": "Luís Gonçalves"}]])
    score = match(case, success(["Name"], [["Luís Gonçalves"]]))
    assert score.detail == {"strict": True, "lenient": True, "matched": "alt_rows[0]"}
    assert match(case, success(["Name"], [["Someone Else"]])).detail["matched"] is None


def test_lenient_only_match_names_the_alternative_it_matched() -> None:
    case = make_case([{"Name": "x"}], alt_sql=["SELECT 2"], alt_rows=[[{"Year": "2009"}, {"Year": "2010"}]])
    score = match(case, success(["y"], [["2009-01-01"], ["2010-01-01"]]))
    assert score.detail == {"strict": False, "lenient": True, "matched": "alt_rows[0]"}
    assert score.passed is False


def test_the_combined_result_is_read_when_there_is_one() -> None:
    case = make_case([{"Name": "Rock"}])
    result = QueryResult(
        trace_id="t", question="q", status="success",
        sub_queries=[SubQueryResult(id="sq1", datasource_id="chinook", question="q", columns=["x"], rows=[["no"]]),
                     SubQueryResult(id="sq2", datasource_id="crm", question="q", columns=["y"], rows=[["no"]])],
        combined=CombinedResult(kind="join", columns=["Name"], rows=[["Rock"]], total_rows=1, truncated=False))
    assert match(case, result).passed is True


def test_two_result_sets_without_a_combined_one_fail() -> None:
    case = make_case([{"Name": "Rock"}])
    result = QueryResult(
        trace_id="t", question="q", status="success",
        sub_queries=[SubQueryResult(id="sq1", datasource_id="chinook", question="q", columns=["x"], rows=[["Rock"]]),
                     SubQueryResult(id="sq2", datasource_id="crm", question="q", columns=["x"], rows=[["Rock"]])])
    score = match(case, result)
    assert score.passed is False and score.detail["lenient"] is False


def test_a_failed_sub_query_is_not_a_result_set() -> None:
    case = make_case([{"Name": "Rock"}])
    result = QueryResult(
        trace_id="t", question="q", status="success",
        sub_queries=[SubQueryResult(id="sq1", datasource_id="chinook", question="q", columns=["x"], rows=[["Rock"]]),
                     SubQueryResult(id="sq2", datasource_id="crm", question="q",
                                    error=RunError(code="DATASOURCE_ERROR", message="down"))])
    assert match(case, result).passed is True


def test_a_run_that_is_not_a_success_fails() -> None:
    case = make_case([{"Name": "Rock"}])
    result = success(["Name"], [["Rock"]]).model_copy(update={"status": "error"})
    assert match(case, result).detail == {"strict": False, "lenient": False, "matched": None,
                                          "reason": "status error"}


def test_result_match_applies_only_to_allowed_runs_with_a_result() -> None:
    refused = make_case([{"Name": "Rock"}], outcome={"viewer": "refused", "admin": "allowed"})
    assert match(refused, failure("SECURITY_VIOLATION", GENERIC_REFUSAL)).passed is None
    assert match(refused, success(["Name"], [["Rock"]]), role="admin").passed is True
    allowed = make_case([{"Name": "Rock"}])
    assert match(allowed, None).passed is None  # mode retrieval: nothing to compare
    fault = SCORERS["result_match"](CaseRun(case=allowed, role="viewer", error="engine crashed"))
    assert fault.passed is False and fault.detail["reason"] == "engine crashed"


def test_a_case_without_gold_rows_is_not_scored() -> None:
    case = make_case(None, status="draft")
    assert match(case, success(["Name"], [["Rock"]])).passed is None


def test_empty_gold_rows_need_an_empty_result() -> None:
    assert match(make_case([]), success(["Name"], [])).passed is True
    assert match(make_case([]), success(["Name"], [["Rock"]])).detail["lenient"] is False


# --- lenient ---------------------------------------------------------------------------------------


def test_lenient_accepts_swapped_columns() -> None:
    gold = [["Luís", "Gonçalves"], ["Leonie", "Köhler"]]
    assert both(gold, [["Gonçalves", "Luís"], ["Köhler", "Leonie"]]) == (False, True)


def test_lenient_accepts_one_extra_key_column() -> None:
    gold = [["Rock", 1297], ["Jazz", 130]]
    assert both(gold, [[1, "Rock", 1297], [2, "Jazz", 130]]) == (False, True)


def test_lenient_values_swapped_between_rows_still_fail() -> None:
    gold = [["a", 1], ["b", 2]]
    # every column matches as a multiset, but the rows do not line up
    assert both(gold, [[1, "b"], [2, "a"]]) == (False, False)
    assert both(gold, [[1, "a"], [2, "b"]]) == (False, True)


def test_lenient_needs_the_same_row_count() -> None:
    assert both([["a"], ["b"]], [["a", 1], ["b", 2], ["c", 3]]) == (False, False)


def test_lenient_needs_every_gold_column() -> None:
    assert both([["a", 1], ["b", 2]], [["a", 5], ["b", 6]]) == (False, False)


def test_lenient_needs_distinct_result_columns() -> None:
    # both gold columns hold the same values; one result column may not answer for both
    assert both([["a", "a"], ["b", "b"]], [["a", 1], ["b", 2]]) == (False, False)
    assert both([["a", "a"], ["b", "b"]], [["a", "a", 1], ["b", "b", 2]]) == (False, True)


def test_column_cap() -> None:
    gold = [["Rock"], ["Jazz"]]
    # three columns for a one-column gold answer: allowed
    assert both(gold, [[1, "Rock", 10], [2, "Jazz", 20]]) == (False, True)
    # four would pass without the cap
    assert both(gold, [[1, "Rock", 10, "x"], [2, "Jazz", 20, "y"]]) == (False, False)
    # two gold columns: four allowed, five not; three: six allowed, seven not
    two = [["Rock", 5], ["Jazz", 6]]
    assert both(two, [["Rock", 5, 1, 2], ["Jazz", 6, 3, 4]])[1] is True
    assert both(two, [[9, "Rock", 5, 1, 2], [8, "Jazz", 6, 3, 4]])[1] is False
    three = [["Rock", 5, "a"], ["Jazz", 6, "b"]]
    assert both(three, [["a", "Rock", 5, 1, 2, 3], ["b", "Jazz", 6, 4, 5, 6]])[1] is True
    assert both(three, [["a", "Rock", 5, 1, 2, 3, 4], ["b", "Jazz", 6, 4, 5, 6, 7]])[1] is False


def test_a_constant_column_may_not_answer_a_gold_column() -> None:
    gold = [["Rock", 5], ["Jazz", 5]]
    # the literal 5 has the right height but tells nothing: would pass without the rule
    assert both(gold, [[5, "Rock", 1], [5, "Jazz", 2]]) == (False, False)
    # strict is untouched by it: lenient includes strict
    assert both(gold, [["Rock", 5], ["Jazz", 5]]) == (True, True)


def test_an_all_null_column_counts_as_constant() -> None:
    gold = [["Rock", None], ["Jazz", None]]
    assert both(gold, [[None, "Rock"], [None, "Jazz"]]) == (False, False)
    assert both(gold, [["Rock", None], ["Jazz", None]]) == (True, True)


def test_on_a_single_row_the_constant_rule_is_off() -> None:
    assert both([["Rock", 5]], [[5, "Rock"]]) == (False, True)


def test_date_labels_match_a_date_starting_with_them() -> None:
    assert both([["2009", 449.46], ["2010", 481.45]],
                [["2009-01-01", 449.46], ["2010-01-01", 481.45]]) == (False, True)
    assert both([["2013-02"]], [[dt.date(2013, 2, 1)]]) == (False, True)
    assert both([["2013-02"]], [["2013-02-01T00:00:00"]]) == (False, True)
    assert both([["2009-01-01"]], [[dt.datetime(2009, 1, 1, 10, 30)]]) == (False, True)
    # a midnight timestamp equals its date already, strictly
    assert both([["2009-01-01"]], [[dt.datetime(2009, 1, 1)]]) == (True, True)


def test_date_labels_only_the_gold_side_may_be_shorter() -> None:
    assert both([["2009-01-01"]], [["2009"]]) == (False, False)
    assert both([["2013-02-01"]], [["2013-02"]]) == (False, False)


def test_date_labels_only_strings_are_read_as_labels() -> None:
    assert both([[2009]], [["2009-01-01"]]) == (False, False)
    assert both([[2009.0]], [[dt.date(2009, 1, 1)]]) == (False, False)


def test_date_labels_need_a_date_on_the_predicted_side() -> None:
    assert both([["2009"]], [["2009 sales"]]) == (False, False)
    assert both([["2009"]], [[20090101]]) == (False, False)
    assert both([["2009"]], [["2010-01-01"]]) == (False, False)


def test_lenient_includes_strict() -> None:
    pairs = [
        ([["a", 1], ["b", 2]], [["b", 2], ["a", 1]]),
        ([["Rock", 5], ["Jazz", 5]], [["Rock", 5], ["Jazz", 5]]),
        ([[None], [None]], [[None], [None]]),
        ([["2009", 1.0]], [[2009, 1.001]]),
        ([["x", "y", "z", 1]], [["x", "y", "z", 1]]),
        ([["a"], ["a"]], [["a"], ["a"]]),
    ]
    for gold, predicted in pairs:
        strict, lenient = both(gold, predicted)
        assert strict and lenient, (gold, predicted)
    for gold, predicted in pairs:
        if rows_match(gold, predicted, order_matters=True):
            assert lenient_match(gold, predicted, order_matters=True), (gold, predicted)


# --- outcome ---------------------------------------------------------------------------------------


def outcome_of(expected: str, result: QueryResult | None, *, error: str | None = None) -> Score:
    case = make_case([{"Name": "Rock"}] if expected == "allowed" else None, outcome={"viewer": expected},
                     sql="SELECT 1" if expected == "allowed" else None)
    return SCORERS["outcome"](CaseRun(case=case, role="viewer", result=result, error=error))


def test_outcome_allowed() -> None:
    assert outcome_of("allowed", success(["Name"], [["Rock"]])).detail == {"expected": "allowed", "got": "allowed"}
    assert outcome_of("allowed", success(["Name"], [["Rock"]])).passed is True
    got = outcome_of("allowed", failure("SECURITY_VIOLATION", GENERIC_REFUSAL))
    assert got.passed is False and got.detail["got"] == "refused"


def test_outcome_refused_with_the_generic_refusal() -> None:
    score = outcome_of("refused", failure("SECURITY_VIOLATION", GENERIC_REFUSAL))
    assert score.passed is True
    assert score.detail == {"expected": "refused", "got": "refused"}


def test_a_refusal_that_names_a_table_fails() -> None:
    score = outcome_of("refused", failure("SECURITY_VIOLATION", "You may not read the table Employee."))
    assert score.passed is False
    assert "generic" in score.detail["reason"]


def test_a_refusal_with_a_second_naming_error_fails() -> None:
    result = failure("SECURITY_VIOLATION", GENERIC_REFUSAL).model_copy(update={"sub_queries": [
        SubQueryResult(id="sq1", datasource_id="chinook", question="q",
                       error=RunError(code="SECURITY_VIOLATION", message="Employee.Salary is restricted"))]})
    assert outcome_of("refused", result).passed is False


def test_a_refusal_that_carries_rows_fails() -> None:
    score = outcome_of("refused", failure("SECURITY_VIOLATION", GENERIC_REFUSAL, rows=[["Andrew Adams"]]))
    assert score.passed is False
    assert score.detail["reason"] == "rows were returned"


def test_a_refusal_that_is_not_an_error_or_not_a_security_violation_fails() -> None:
    assert outcome_of("refused", success(["Name"], [])).passed is False
    assert outcome_of("refused", failure("QUESTION_NOT_ANSWERABLE", "no datasource")).passed is False


def test_outcome_unanswerable() -> None:
    score = outcome_of("unanswerable", failure("QUESTION_NOT_ANSWERABLE", "No datasource can answer this."))
    assert score.passed is True and score.detail == {"expected": "unanswerable", "got": "unanswerable"}
    assert outcome_of("unanswerable", failure("QUESTION_NOT_ANSWERABLE", "no", rows=[["x"]])).passed is False
    assert outcome_of("unanswerable", failure("DATASOURCE_ERROR", "down")).passed is False
    assert outcome_of("unanswerable", success(["Name"], [])).passed is False


def test_outcome_of_a_fault_and_of_a_run_without_a_result() -> None:
    fault = outcome_of("allowed", None, error="boom")
    assert fault.passed is False and fault.detail["got"] == "fault"
    assert outcome_of("allowed", None).passed is None


def test_outcome_for_a_role_the_case_does_not_name() -> None:
    case = make_case([{"Name": "Rock"}])
    score = SCORERS["outcome"](CaseRun(case=case, role="admin", result=success(["Name"], [["Rock"]])))
    assert score.passed is None


# --- faithfulness ----------------------------------------------------------------------------------


def test_faithfulness_applies_to_a_written_answer() -> None:
    case = make_case([{"Name": "Rock", "Tracks": 1297}])
    good = SCORERS["faithfulness"](CaseRun(case=case, role="viewer",
                                           result=success(["Name", "Tracks"], [["Rock", 1297]],
                                                          answer="**Rock** has 1,297 tracks.")))
    assert good.passed is True
    assert good.detail == {"faithful": True, "unsupported_numbers": [], "unsupported_entities": [], "checked": 2}
    bad = SCORERS["faithfulness"](CaseRun(case=case, role="viewer",
                                          result=success(["Name", "Tracks"], [["Rock", 1297]],
                                                         answer="**Jazz** has 1,300 tracks.")))
    assert bad.passed is False
    assert bad.detail["unsupported_numbers"] == ["1,300"] and bad.detail["unsupported_entities"] == ["Jazz"]


def test_faithfulness_reads_the_content_too() -> None:
    result = success(["Name", "Tracks"], [["Rock", 1297]], answer="Rock leads.")
    result.answer.content = "It has 1,400 tracks."
    score = SCORERS["faithfulness"](CaseRun(case=make_case([{"a": 1}]), role="viewer", result=result))
    assert score.detail["unsupported_numbers"] == ["1,400"]


def test_faithfulness_reads_every_result_set() -> None:
    result = QueryResult(
        trace_id="t", question="q", status="success", answer=Answer(summary="7 customers and 3 employees."),
        sub_queries=[SubQueryResult(id="sq1", datasource_id="chinook", question="q", columns=["n"], rows=[[7]]),
                     SubQueryResult(id="sq2", datasource_id="hr", question="q", columns=["n"], rows=[[3]])])
    assert SCORERS["faithfulness"](CaseRun(case=make_case([{"a": 1}]), role="viewer", result=result)).passed


def test_faithfulness_does_not_apply_without_an_answer() -> None:
    case = make_case([{"Name": "Rock"}])
    refusal = failure("SECURITY_VIOLATION", GENERIC_REFUSAL)
    assert SCORERS["faithfulness"](CaseRun(case=case, role="viewer", result=refusal)).passed is None
    silent = success(["Name"], [["Rock"]], answer="  ")
    assert SCORERS["faithfulness"](CaseRun(case=case, role="viewer", result=silent)).passed is None
    assert SCORERS["faithfulness"](CaseRun(case=case, role="viewer")).passed is None


# --- retrieval_recall ------------------------------------------------------------------------------


def recall(case: EvalCase, retrieval: dict | None, role: str = "viewer") -> Score:
    return SCORERS["retrieval_recall"](CaseRun(case=case, role=role, retrieval=retrieval))


def test_retrieval_recall_full_and_partial() -> None:
    case = make_case([{"a": 1}], tables=["Invoice", "Customer"],
                     columns=["Invoice.Total", "Invoice.InvoiceDate", "Customer.Country", "Customer.CustomerId"])
    full = recall(case, {"tables_sent": ["invoice", "CUSTOMER", "Track"],
                         "columns_sent": ["invoice.total", "Invoice.InvoiceDate", "Customer.Country",
                                          "Customer.CustomerId"]})
    assert full.passed is True
    assert full.detail["table_recall"] == 1.0 and full.detail["column_recall"] == 1.0
    partial = recall(case, {"tables_sent": ["Invoice"], "columns_sent": ["Invoice.Total", "Invoice.BillingCountry"]})
    assert partial.passed is False
    assert partial.detail == {
        "table_recall": 0.5, "column_recall": 0.25, "missed_tables": ["Customer"],
        "missed_columns": ["Invoice.InvoiceDate", "Customer.Country", "Customer.CustomerId"],
        "tables_sent": ["Invoice"], "columns_sent": ["Invoice.Total", "Invoice.BillingCountry"]}


def test_retrieval_recall_all_tables_but_a_missed_column_fails() -> None:
    case = make_case([{"a": 1}], tables=["Invoice"], columns=["Invoice.Total"])
    score = recall(case, {"tables_sent": ["Invoice"], "columns_sent": ["Invoice.BillingCountry"]})
    assert score.passed is False and score.detail["table_recall"] == 1.0 and score.detail["column_recall"] == 0.0


def test_retrieval_recall_applies_to_allowed_answer_cases_with_a_retrieval() -> None:
    case = make_case([{"a": 1}], tables=["Employee"], outcome={"viewer": "refused", "admin": "allowed"})
    sent = {"tables_sent": ["Employee"], "columns_sent": []}
    assert recall(case, sent).passed is None
    assert recall(case, sent, role="admin").passed is True
    assert recall(case, None, role="admin").passed is None
    unanswerable = make_case(None, sql=None, outcome={"viewer": "unanswerable"})
    assert recall(unanswerable, sent).passed is None
    routing_case = EvalCase(id="r1", question="q", kind="routing", datasources=["chinook"],
                            outcome={"viewer": "allowed"})
    assert recall(routing_case, sent).passed is None


# --- routing ---------------------------------------------------------------------------------------


def route(datasources: list[str], retrieval: dict | None) -> Score:
    case = EvalCase(id="r1", question="q", kind="routing", datasources=datasources, outcome={"viewer": "allowed"})
    return SCORERS["routing"](CaseRun(case=case, role="viewer", retrieval=retrieval))


def test_routing_top1_and_shortlist() -> None:
    hit = route(["chinook"], {"picks": ["chinook", "crm"], "shortlist": ["chinook", "crm"]})
    assert hit.passed is True and hit.detail == {"top1": True, "shortlist": True, "picks": ["chinook", "crm"]}
    second = route(["chinook"], {"picks": ["crm", "chinook"], "shortlist": ["crm", "chinook"]})
    assert second.passed is False and second.detail["shortlist"] is True
    miss = route(["chinook"], {"picks": [], "shortlist": []})
    assert miss.passed is False and miss.detail["shortlist"] is False


def test_routing_two_datasources_need_both_shortlisted() -> None:
    both_listed = route(["chinook", "crm"], {"picks": ["crm"], "shortlist": ["crm", "chinook", "hr"]})
    assert both_listed.passed is True
    one_missing = route(["chinook", "crm"], {"picks": ["crm"], "shortlist": ["crm", "hr"]})
    assert one_missing.passed is False and one_missing.detail["shortlist"] is False
    wrong_first = route(["chinook", "crm"], {"picks": ["hr"], "shortlist": ["hr", "crm", "chinook"]})
    assert wrong_first.passed is False and wrong_first.detail["shortlist"] is True


def test_routing_applies_only_with_picks() -> None:
    assert route(["chinook"], None).passed is None
    assert route(["chinook"], {"tables_sent": []}).passed is None


# --- the registry ----------------------------------------------------------------------------------


def test_the_built_ins_are_registered() -> None:
    assert sorted(SCORERS) == ["faithfulness", "outcome", "result_match", "retrieval_recall", "routing"]
    assert scorer("outcome") is SCORERS["outcome"]


def test_an_unknown_scorer_names_the_known_ones() -> None:
    with pytest.raises(UnknownNameError) as err:
        scorer("result_mtach")
    assert "result_match" in str(err.value)


def test_score_run_scores_with_every_named_scorer() -> None:
    case = make_case([{"Name": "Rock"}])
    run = CaseRun(case=case, role="viewer", result=success(["Name"], [["Rock"]], answer="**Rock**."))
    scores = score_run(run, ["result_match", "outcome", "faithfulness", "routing"])
    assert list(scores) == ["result_match", "outcome", "faithfulness", "routing"]
    assert [s.passed for s in scores.values()] == [True, True, True, None]
    assert all(scores[n].name == n for n in scores)


def test_a_scorer_that_raises_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(run: CaseRun) -> Score:
        raise RuntimeError("bad plugin")

    monkeypatch.setitem(SCORERS, "broken", broken)
    run = CaseRun(case=make_case([{"Name": "Rock"}]), role="viewer", result=success(["Name"], [["Rock"]]))
    score = score_run(run, ["broken"])["broken"]
    assert score.passed is False and score.detail == {"error": "RuntimeError: bad plugin"}
