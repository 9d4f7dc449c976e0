"""The result checks on a question's path, through the inline executor with the fake model server: a filter value
the column does not hold, a join that repeats what an aggregate sums, an all-null column; probes and hooks, probes
and the caller's scope."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from nl2sql.config import Config
from nl2sql.config.models import HookConfig
from nl2sql.engine import Engine
from nl2sql.events import Event
from nl2sql.pipeline import steps
from nl2sql.pipeline.run import start_run
from nl2sql.pipeline.state import SubQuery
from nl2sql.plan import PlanModel
from tests.support.ask import ModelScript, runtime_for, text_kind, with_settings

HEAVY = "Which albums are heavy metal?"
REVENUE = "How much revenue did each billing country bring in?"


def column(alias: str, name: str) -> dict:
    return {"kind": "column", "table": alias, "column": name}


def genre_albums(genre: str) -> dict:
    """Album titles of the tracks of a genre, named as the asker wrote it."""
    return {"select": [{"expr": column("a", "Title"), "alias": "album"}], "distinct": True,
            "from": {"table": "Album", "alias": "a"},
            "joins": [{"type": "inner", "table": {"table": "Track", "alias": "t"},
                       "on": [{"left": column("t", "AlbumId"), "right": column("a", "AlbumId")}]},
                      {"type": "inner", "table": {"table": "Genre", "alias": "g"},
                       "on": [{"left": column("g", "GenreId"), "right": column("t", "GenreId")}]}],
            "where": {"kind": "compare", "op": "=", "left": column("g", "Name"),
                      "right": {"kind": "literal", "value": genre}},
            "order_by": [{"expr": column("a", "Title"), "direction": "asc"}]}


#: Each invoice's Total summed once per invoice line: the join to InvoiceLine repeats every invoice.
FANNED_REVENUE = {
    "select": [{"expr": column("i", "BillingCountry"), "alias": "country"},
               {"expr": {"kind": "aggregate", "func": "sum", "arg": column("i", "Total")}, "alias": "revenue"}],
    "from": {"table": "Invoice", "alias": "i"},
    "joins": [{"type": "inner", "table": {"table": "InvoiceLine", "alias": "il"},
               "on": [{"left": column("il", "InvoiceId"), "right": column("i", "InvoiceId")}]}],
    "group_by": [column("i", "BillingCountry")],
    "order_by": [{"expr": column("i", "BillingCountry"), "direction": "asc"}]}

#: The same revenue from the lines themselves: each line once.
LINE_REVENUE = {
    "select": [{"expr": column("i", "BillingCountry"), "alias": "country"},
               {"expr": {"kind": "aggregate", "func": "sum", "arg": {
                   "kind": "arithmetic", "op": "*", "left": column("il", "UnitPrice"),
                   "right": column("il", "Quantity")}}, "alias": "revenue"}],
    "from": {"table": "InvoiceLine", "alias": "il"},
    "joins": [{"type": "inner", "table": {"table": "Invoice", "alias": "i"},
               "on": [{"left": column("i", "InvoiceId"), "right": column("il", "InvoiceId")}]}],
    "group_by": [column("i", "BillingCountry")],
    "order_by": [{"expr": column("i", "BillingCountry"), "direction": "asc"}]}

UNKNOWN_COMPOSERS = "Which five tracks have no composer on record?"
NO_COMPOSER = {
    "select": [{"expr": column("t", "Name"), "alias": "track"}, {"expr": column("t", "Composer"), "alias": "composer"}],
    "from": {"table": "Track", "alias": "t"},
    "where": {"kind": "is_null", "expr": column("t", "Composer")},
    "order_by": [{"expr": column("t", "TrackId"), "direction": "asc"}], "limit": 5}


def ask(config: Config, question: str, role: str, events: list[Event] | None = None, **settings: Any):
    with Engine(with_settings(config, plan_cache=False, **settings)) as engine:
        return engine.ask(question, role=role, on_event=None if events is None else events.append)


def chinook_rows(config: Config, sql: str) -> list[tuple]:
    """What the demo's chinook holds, asked directly (the expected answer)."""
    runtime = runtime_for(config)
    try:
        result = runtime.catalog.get("chinook").execute(sql, row_limit=10_000, timeout_s=10)
        return [tuple(row) for row in result.plain_frame().values.tolist()]
    finally:
        runtime.close()


def synthesizer_prompt(model: ModelScript) -> str:
    [request] = [r for r in model.fake.requests if model.fake.name_of(r) == "text" and text_kind(r) == "synthesizer"]
    return json.dumps(request["messages"])


def refiner_prompts(model: ModelScript) -> list[str]:
    return [r["messages"][-1]["content"] for r in model.fake.requests if model.fake.name_of(r) == "RefinedPlan"]


def test_a_value_the_column_does_not_hold_is_found_and_corrected_in_one_retry(project: Config,
                                                                              model: ModelScript) -> None:
    model.plan(HEAVY, genre_albums("heavy metal"))
    model.queue("RefinedPlan", genre_albums("Heavy Metal"))
    events: list[Event] = []
    result = ask(project, HEAVY, "viewer", events)
    assert result.status == "success", result.errors
    sq = result.sub_queries[0]
    assert "'Heavy Metal'" in sq.sql and sq.attempts == 1
    expected = chinook_rows(project, "SELECT DISTINCT a.Title FROM Album a JOIN Track t ON t.AlbumId = a.AlbumId "
                            "JOIN Genre g ON g.GenreId = t.GenreId WHERE g.Name = 'Heavy Metal' ORDER BY a.Title")
    assert sq.total_rows == len(expected) > 0 and [r[0] for r in sq.rows] == [r[0] for r in expected][:len(sq.rows)]
    # the refiner was told what the column holds
    [prompt] = refiner_prompts(model)
    assert "VALUE_NOT_FOUND: 'heavy metal' is not a Genre.Name; closest: 'Heavy Metal', 'Metal'" in prompt
    [warning] = result.warnings
    assert warning.code == "VALUE_NOT_FOUND" and warning.step == "sanity" and warning.detail["recovered"] is True
    assert warning.detail["closest"][:2] == ["Heavy Metal", "Metal"]
    # fixed, so the answer's data notes leave it out
    synthesizer = synthesizer_prompt(model)
    assert "is not a Genre.Name" not in synthesizer
    flagged = [e.data for e in events if e.name == "sanity.flagged"]
    assert flagged == [{"sub_query_id": "sq1", "code": "VALUE_NOT_FOUND", "count": 1, "retry": True}]
    steps_run = [e.data["node"] for e in events if e.name == "node.finished"]
    assert steps_run.count("sanity") == 2 and steps_run.count("refiner") == 1


def test_a_value_no_stored_one_resembles_is_reported_not_replaced_by_a_neighbour(project: Config,
                                                                                  model: ModelScript) -> None:
    # "Narnia" is no country on record, and no country is it misspelt: the empty answer is the answer, and the
    # refiner is never invited to swap in the nearest stored value
    question = "Which customers live in Narnia?"
    model.plan(question, {"select": [{"expr": column("c", "FirstName"), "alias": "first_name"}],
                          "from": {"table": "Customer", "alias": "c"},
                          "where": {"kind": "compare", "op": "=", "left": column("c", "Country"),
                                    "right": {"kind": "literal", "value": "Narnia"}}})
    events: list[Event] = []
    result = ask(project, question, "analyst", events)
    assert result.status == "success", result.errors
    [sq] = result.sub_queries
    assert sq.total_rows == 0 and "'Narnia'" in sq.sql and sq.attempts == 0
    assert model.fake.calls("RefinedPlan") == 0
    [warning] = [w for w in result.warnings if w.code == "VALUE_NOT_FOUND"]
    assert warning.message.startswith("'Narnia' is not a Customer.Country")
    assert "recovered" not in warning.detail and "retry_failed" not in warning.detail
    flagged = [e.data for e in events if e.name == "sanity.flagged"]
    assert flagged == [{"sub_query_id": "sq1", "code": "VALUE_NOT_FOUND", "count": 1, "retry": False}]


def test_a_value_in_the_wrong_column_is_moved_to_the_readable_column_that_holds_it(project: Config,
                                                                                  model: ModelScript) -> None:
    question = "Which invoices were billed to Germany?"

    def invoices_billed(column_name: str) -> dict:
        return {"select": [{"expr": column("i", "InvoiceId"), "alias": "invoice"}],
                "from": {"table": "Invoice", "alias": "i"},
                "where": {"kind": "compare", "op": "=", "left": column("i", column_name),
                          "right": {"kind": "literal", "value": "Germany"}}}
    model.plan(question, invoices_billed("BillingCity"))
    model.queue("RefinedPlan", invoices_billed("BillingCountry"))
    result = ask(project, question, "analyst")
    assert result.status == "success", result.errors
    [prompt] = refiner_prompts(model)
    assert "VALUE_NOT_FOUND: 'Germany' is not a Invoice.BillingCity; it is a Invoice.BillingCountry." in prompt
    truth = chinook_rows(project, "SELECT InvoiceId FROM Invoice WHERE BillingCountry = 'Germany'")
    sq = result.sub_queries[0]
    assert sq.total_rows == len(truth) > 0 and {row[0] for row in sq.rows} <= {row[0] for row in truth}
    [warning] = result.warnings
    assert warning.code == "VALUE_NOT_FOUND" and warning.detail["recovered"] is True


def test_a_value_only_a_hidden_table_holds_is_reported_as_held_by_nothing(project: Config,
                                                                          model: ModelScript) -> None:
    # the viewer reads the catalog only: Germany, a customer's country, is looked for in what the viewer may read
    # (here through a sub-query's filter), found nowhere, and nothing names the table that holds it
    question = "Which genres are popular in Germany?"  # no word of sales: the planner is asked (see test_ask)
    model.plan(question, {
        "select": [{"expr": column("g", "Name"), "alias": "genre"}], "distinct": True,
        "from": {"table": "Genre", "alias": "g"},
        "joins": [{"type": "inner", "table": {"table": "Track", "alias": "t"},
                   "on": [{"left": column("t", "GenreId"), "right": column("g", "GenreId")}]},
                  {"type": "inner", "table": {"table": "Album", "alias": "a"},
                   "on": [{"left": column("a", "AlbumId"), "right": column("t", "AlbumId")}]}],
        "where": {"kind": "in_subquery", "expr": column("a", "ArtistId"), "plan": {
            "select": [{"expr": column("ar", "ArtistId")}], "from": {"table": "Artist", "alias": "ar"},
            "where": {"kind": "compare", "op": "=", "left": column("ar", "Name"),
                      "right": {"kind": "literal", "value": "Germany"}}}}})
    result = ask(project, question, "viewer")
    assert result.status == "success", result.errors
    assert result.sub_queries[0].total_rows == 0 and model.fake.calls("RefinedPlan") == 0
    [warning] = result.warnings
    assert warning.message.startswith("'Germany' is not a Artist.Name; closest: ") and not warning.detail.get("found_in")
    assert "Customer" not in json.dumps(result.model_dump(mode="json"))


def test_when_no_corrected_plan_runs_the_first_result_stands_with_its_warning(project: Config,
                                                                             model: ModelScript) -> None:
    question = "Albums in the heavy metal genre?"
    model.plan(question, genre_albums("heavy metal"))
    model.fake.respond_with("RefinedPlan", lambda body: genre_albums("heavy metal"))  # it repeats itself
    result = ask(project, question, "viewer")
    assert result.status == "success", result.errors
    sq = result.sub_queries[0]
    assert sq.total_rows == 0 and "'heavy metal'" in sq.sql and sq.error is None
    codes = [w.code for w in result.warnings]
    assert codes == ["REFINER_REPEATED", "VALUE_NOT_FOUND"]
    warning = result.warnings[-1]
    assert warning.detail["retry_failed"] == "VALUE_NOT_FOUND" and "recovered" not in warning.detail
    synthesizer = synthesizer_prompt(model)
    assert "'heavy metal' is not a Genre.Name" in synthesizer  # the answer says so
    assert model.fake.calls("RefinedPlan") == 1


def test_a_sum_repeated_by_a_join_is_flagged_and_corrected(project: Config, model: ModelScript) -> None:
    model.plan(REVENUE, FANNED_REVENUE)
    model.queue("RefinedPlan", LINE_REVENUE)
    events: list[Event] = []
    result = ask(project, REVENUE, "analyst", events)
    assert result.status == "success", result.errors
    [prompt] = refiner_prompts(model)
    assert "JOIN_FAN_OUT: SUM over Invoice.Total counts some Invoice rows more than once" in prompt
    [warning] = result.warnings
    assert warning.code == "JOIN_FAN_OUT" and warning.detail["recovered"] is True
    truth = dict(chinook_rows(project, "SELECT BillingCountry, ROUND(SUM(Total), 2) FROM Invoice "
                                       "GROUP BY BillingCountry"))
    got = {country: round(float(revenue), 2) for country, revenue in result.sub_queries[0].rows}
    assert got and all(got[c] == truth[c] for c in got)
    assert [e.data["code"] for e in events if e.name == "sanity.flagged"] == ["JOIN_FAN_OUT"]


def test_a_join_on_the_far_tables_key_is_not_flagged(project: Config, model: ModelScript) -> None:
    question = "Revenue by billing country, from the invoice lines"
    model.plan(question, LINE_REVENUE)
    result = ask(project, question, "analyst")
    assert result.status == "success" and not result.warnings and model.fake.calls("RefinedPlan") == 0


def test_an_all_null_column_is_a_warning_the_answer_mentions(project: Config, model: ModelScript) -> None:
    model.plan(UNKNOWN_COMPOSERS, NO_COMPOSER)
    result = ask(project, UNKNOWN_COMPOSERS, "viewer")
    assert result.status == "success" and result.sub_queries[0].total_rows == 5
    [warning] = [w for w in result.warnings if w.step == "sanity"]
    assert (warning.code, warning.step, warning.detail) == ("ALL_NULL_COLUMN", "sanity", {"column": "composer",
                                                                                          "rows": 5})
    assert model.fake.calls("RefinedPlan") == 0  # nothing a plan could fix
    synthesizer = synthesizer_prompt(model)
    assert "Column composer is empty (NULL) in every row" in synthesizer


def test_the_checks_are_off_with_the_setting(project: Config, model: ModelScript) -> None:
    question = "Heavy metal albums, please"
    model.plan(question, genre_albums("heavy metal"))
    events: list[Event] = []
    result = ask(project, question, "viewer", events, sanity_checks=False)
    assert result.status == "success" and result.sub_queries[0].total_rows == 0 and not result.warnings
    assert "sanity" not in [e.data["node"] for e in events if e.name == "node.finished"]


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement the question's steps run (the sub-query's own and the checks' probes), as run."""
    seen: list[str] = []
    real = steps.run_checked_sql

    def recording(adapter: Any, sql: str, caller: Any, **kwargs: Any) -> Any:
        seen.append(sql)
        return real(adapter, sql, caller, **kwargs)

    monkeypatch.setattr(steps, "run_checked_sql", recording)
    return seen


@pytest.fixture
def watched(project: Config) -> Config:
    """The project with a review hook at execute.before (it holds statements over invoices for an approver)."""
    return project.model_copy(update={"hooks": [HookConfig(use="sql_review", points=["execute.before"],
                                                           options={"tables": ["chinook.Invoice"]})]})


def test_no_probe_runs_while_a_hook_watches_execute_before(watched: Config, model: ModelScript,
                                                          statements: list[str]) -> None:
    question = "heavy metal albums"
    model.plan(question, genre_albums("heavy metal"))
    result = ask(watched, question, "viewer")
    assert result.status == "success" and result.sub_queries[0].total_rows == 0
    assert statements == [result.sub_queries[0].sql]  # the approved statement only: no probe
    assert not result.warnings and model.fake.calls("RefinedPlan") == 0
    # the null check reads the result only, so it still runs
    model.plan(UNKNOWN_COMPOSERS, NO_COMPOSER)
    result = ask(watched, UNKNOWN_COMPOSERS, "viewer")
    assert [w.code for w in result.warnings if w.step == "sanity"] == ["ALL_NULL_COLUMN"] and len(statements) == 2


def test_a_probe_never_reads_a_table_the_caller_may_not_read(project: Config, statements: list[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan over Invoice (denied to the viewer) that somehow reached the checks: the probes are refused before
    they reach the database, and the check reports nothing."""
    runtime = runtime_for(project)
    ran: list[str] = []
    adapter = runtime.catalog.get("chinook")
    real_run = adapter._run
    monkeypatch.setattr(adapter, "_run", lambda sql, **kw: (ran.append(sql), real_run(sql, **kw))[1])
    try:
        ctx, state = start_run(runtime, "invoices from nowhere", roles=["viewer"])
        plan = PlanModel.model_validate({
            "select": [{"expr": column("i", "InvoiceId"), "alias": None}], "from": {"table": "Invoice", "alias": "i"},
            "where": {"kind": "compare", "op": "=", "left": column("i", "BillingCountry"),
                      "right": {"kind": "literal", "value": "Atlantis"}}})
        sq = SubQuery(id="sq1", datasource_id="chinook", question=state.question, plan=plan, plan_source="planner")
        sq.result = adapter._run("SELECT InvoiceId FROM Invoice WHERE 0", row_limit=10, timeout_s=5)
        ran.clear()
        assert steps.result_findings(ctx, state, sq) == []
        assert statements and all("Invoice" in s for s in statements)  # the probe was built and refused
        assert ran == []  # nothing reached the database
    finally:
        runtime.close()


def test_a_check_that_fails_reports_nothing_but_a_log_line(project: Config, model: ModelScript,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    def broken(*args: Any, **kwargs: Any) -> list:
        raise RuntimeError("the check broke on 'Heavy Metal'")

    monkeypatch.setattr(steps, "check_fan_out", broken)
    question = "Revenue per billing country, please"
    model.plan(question, FANNED_REVENUE)
    with caplog.at_level(logging.WARNING, logger="nl2sql.pipeline"):
        result = ask(project, question, "analyst")
    assert result.status == "success" and not [w for w in result.warnings if w.step == "sanity"]
    assert model.fake.calls("RefinedPlan") == 0
    assert "The fan-out check of sq1 failed and reports nothing: RuntimeError" in caplog.text
    assert "Heavy Metal" not in caplog.text  # its type only: an exception's text may quote values
