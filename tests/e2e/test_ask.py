"""Every path of a question through the inline executor, with the fake model server over the real wire."""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from pathlib import Path

import pytest
import yaml

from nl2sql.config import Config
from nl2sql.config.models import PlannerSettings
from nl2sql.errors import GENERIC_REFUSAL
from nl2sql.events import Event
from nl2sql.index.service import IndexService
from nl2sql.llm.fake import FakeAnswer
from nl2sql.pipeline import ask_inline
from tests.support.ask import (
    CUSTOMERS_PLAN,
    GENRES_PLAN,
    INVOICE_PLAN,
    TICKETS_PLAN,
    ModelScript,
    ask_on,
    runtime_for,
    select_plan,
    text_kind,
)

PLAYLISTS = "How many tracks does each playlist hold?"

WRONG_COLUMN_PLAN = yaml.safe_load("""
select:
  - {expr: {kind: column, table: g, column: GenreName}, alias: genre}
from: {table: Genre, alias: g}
""")


def ask(config: Config, question: str, role: str, events: list[Event] | None = None, **kwargs):
    return ask_on(runtime_for(config, **kwargs.pop("settings", {})), question, role, events, **kwargs)


def test_a_verified_question_is_answered_without_any_model(project: Config, model: ModelScript) -> None:
    from nl2sql.config.models import LLMConfig

    result = ask(project.model_copy(update={"llm": LLMConfig()}), "How much did we earn in each year?", "analyst")
    assert result.status == "success"
    assert model.fake.calls() == 0
    sq = result.sub_queries[0]
    assert sq.source == "verified" and sq.datasource_id == "chinook"
    assert [row[0] for row in sq.rows] == [2007, 2008, 2009, 2010, 2011]
    assert result.answer.content.startswith("5 rows")


def test_verified_parameters_are_read_from_the_question(project: Config, model: ModelScript) -> None:
    result = ask(project, "Which customers live in brazil?", "support")
    assert result.status == "success" and model.fake.calls() == model.fake.calls("text") == 1  # the answer only
    assert "Country = 'Brazil'" in result.sub_queries[0].sql
    assert result.sub_queries[0].total_rows == 5


def test_a_single_datasource_question_streams_its_answer_and_keeps_a_trace(project: Config,
                                                                           model: ModelScript) -> None:
    model.answers[PLAYLISTS] = "Music holds the most tracks: 3290 of them, tied with a second playlist of the same name."
    events: list[Event] = []
    result = ask(project, PLAYLISTS, "analyst", events, settings={"plan_cache": False})
    assert result.status == "success", result.errors
    sq = result.sub_queries[0]
    assert sq.source == "planner" and "PlaylistTrack" in sq.sql
    assert sq.rows[0][2] == 3290 and sq.total_rows == 14
    deltas = "".join(e.data["text"] for e in events if e.name == "answer.delta")
    assert deltas.strip() == result.answer.content
    assert result.llm_calls == 2  # planner, synthesizer: routing's one pick needs no answerability check
    assert result.cost_usd and result.cost_usd > 0 and result.usage["input_tokens"] > 0
    from nl2sql.index.store import StateStore

    trace = StateStore(project.state_dir).trace(result.trace_id)
    assert trace["status"] == "success" and trace["sub_queries"][0]["sql"] == sq.sql
    assert {s["node"] for s in trace["steps"]} >= {"resolver", "planner", "validator", "executor", "synthesizer"}
    assert trace["routing"]["picks"][0] == "chinook"
    assert "Music" not in json.dumps(trace)  # shapes, never values


def test_the_plan_cache_skips_the_planner_the_second_time(project: Config, model: ModelScript) -> None:
    question = "Which genres are there?"
    model.plan(question, GENRES_PLAN)
    first = ask(project, question, "analyst")
    planner_calls = model.fake.calls("PlanModel")
    second = ask(project, question, "analyst")
    assert first.status == second.status == "success"
    assert second.sub_queries[0].source == "plan_cache" and model.fake.calls("PlanModel") == planner_calls
    assert second.sub_queries[0].rows == first.sub_queries[0].rows


def test_a_cached_plan_is_not_served_by_an_engine_whose_plan_rules_changed(project: Config, model: ModelScript,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from nl2sql.pipeline import steps

    question = "Which genres are listed?"
    model.plan(question, GENRES_PLAN)
    assert ask(project, question, "analyst").sub_queries[0].source == "planner"
    assert ask(project, question, "analyst").sub_queries[0].source == "plan_cache"
    monkeypatch.setattr(steps, "plan_rules_revision", lambda: "another-engine")
    assert ask(project, question, "analyst").sub_queries[0].source == "planner"


def test_a_cross_database_question_joins_chinook_customers_with_support_tickets(project: Config,
                                                                               model: ModelScript) -> None:
    question = "Support tickets opened per customer, with the customer's country"
    model.routes[question] = ["chinook", "support"]
    model.decompositions[question] = {
        "sub_queries": [
            {"datasource_id": "chinook", "question": "Each customer's id and country",
             "expected_columns": [{"name": "customer_id", "description": "id"},
                                  {"name": "country", "description": "country"}]},
            {"datasource_id": "support", "question": "Tickets per customer id",
             "expected_columns": [{"name": "customer_id", "description": "id"},
                                  {"name": "tickets", "description": "count"}]}],
        "combine": {"kind": "join", "left": 0, "right": 1, "join_keys": [{"left": "customer_id",
                                                                            "right": "customer_id"}]}}
    model.plans["Each customer's id and country"] = CUSTOMERS_PLAN
    model.plans["Tickets per customer id"] = TICKETS_PLAN
    result = ask(project, question, "analyst", settings={"plan_cache": False, "preview_rows": 100})
    assert result.status == "success", result.errors
    assert [sq.datasource_id for sq in result.sub_queries] == ["chinook", "support"]
    assert result.combined is not None and result.combined.columns == ["customer_id", "country", "tickets"]
    data = project.base_dir / "data"
    conn = sqlite3.connect(data / "chinook.sqlite")
    conn.execute(f"ATTACH '{data / 'support.sqlite'}' AS s")
    expected = conn.execute("SELECT c.CustomerId, c.Country, COUNT(*) FROM Customer c JOIN s.tickets t "
                            "ON t.customer_id = c.CustomerId GROUP BY c.CustomerId ORDER BY c.CustomerId").fetchall()
    assert sorted(tuple(r) for r in result.combined.rows) == sorted(expected)[:100]
    assert result.combined.total_rows == len(expected)


def test_a_question_about_two_things_asks_the_database_of_each_part(project: Config, model: ModelScript) -> None:
    """Routed whole, the question's second database falls below the floor; its parts give the pair, and the
    decomposer splits it across both."""
    question = "Playlists next to the browsers visitors use"
    model.routes[question] = ["chinook", "webanalytics"]
    model.decompositions[question] = {
        "sub_queries": [
            {"datasource_id": "chinook", "question": "The playlists' names", "expected_columns": []},
            {"datasource_id": "webanalytics", "question": "The visitors' devices", "expected_columns": []}],
        "combine": None}
    model.plans["The playlists' names"] = select_plan("Playlist", "Name")
    model.plans["The visitors' devices"] = select_plan("visitors", "device")
    result = ask(project, question, "analyst", settings={"plan_cache": False})
    assert result.status == "success", result.errors
    assert [sq.datasource_id for sq in result.sub_queries] == ["chinook", "webanalytics"]
    from nl2sql.index.store import StateStore

    routing = StateStore(project.state_dir).trace(result.trace_id)["routing"]
    assert routing["pair"] == ["chinook", "webanalytics"] and routing["picks"][:2] == ["chinook", "webanalytics"]


def test_the_answerability_check_may_keep_either_database_of_a_pair(project: Config, model: ModelScript) -> None:
    """Routed whole, webanalytics scores far below chinook; the question's parts back it, so the model's choice of it
    alone stands (no SUB_QUERY_REROUTED)."""
    question = "Playlists next to the browsers visitors use"
    model.plan(question, select_plan("visitors", "device"), route=["webanalytics"])
    result = ask(project, question, "analyst", settings={"plan_cache": False})
    assert result.status == "success", result.errors
    assert [sq.datasource_id for sq in result.sub_queries] == ["webanalytics"]
    assert "SUB_QUERY_REROUTED" not in [w.code for w in result.warnings]


EMPLOYEE_PLAN = yaml.safe_load("""
select:
  - {expr: {kind: column, table: e, column: LastName}, alias: last_name}
from: {table: Employee, alias: e}
""")


@pytest.mark.parametrize(("role", "question", "plan", "hidden"), [
    ("viewer", "What is the total of all invoices ever?", INVOICE_PLAN, ("Invoice", "Total")),
    ("support", "What is the total of all invoices ever?", INVOICE_PLAN, ("Invoice", "Total")),
    ("analyst", "What are the last names of our staff?", EMPLOYEE_PLAN, ("Employee", "LastName")),
])
def test_a_refusal_names_no_table_anywhere(project: Config, model: ModelScript, role: str, question: str,
                                           plan: dict, hidden: tuple[str, ...]) -> None:
    model.plan(question, plan, route=["chinook"])
    events: list[Event] = []
    result = ask(project, question, role, events, settings={"plan_cache": False})
    assert result.status == "error"
    assert [e.code for e in result.errors] == ["SECURITY_VIOLATION"]
    assert result.answer.content == GENERIC_REFUSAL
    assert all(not sq.rows and sq.sql is None and sq.plan is None for sq in result.sub_queries)
    from nl2sql.index.store import StateStore

    seen = json.dumps([e.model_dump() for e in events]) + json.dumps(StateStore(project.state_dir).trace(
        result.trace_id)) + result.model_dump_json()
    assert not [name for name in hidden if name in seen]


def test_a_role_with_no_datasource_is_refused_before_any_search(project: Config, model: ModelScript) -> None:
    result = ask(project, "Which pages get the most views?", "support", datasource_id="webanalytics")
    assert [e.code for e in result.errors] == ["SECURITY_VIOLATION"] and model.fake.calls() == 0
    assert result.answer.content == GENERIC_REFUSAL


def test_a_question_about_sales_the_caller_may_not_read_is_refused_before_any_model(project: Config,
                                                                                    model: ModelScript) -> None:
    question = "Which genres sell best in Germany?"
    model.plan(question, GENRES_PLAN, route=["chinook"])  # what a model shown only the catalog would answer
    events: list[Event] = []
    result = ask(project, question, "viewer", events, settings={"plan_cache": False})
    assert result.status == "error" and [e.code for e in result.errors] == ["SECURITY_VIOLATION"]
    assert result.answer.content == GENERIC_REFUSAL and model.fake.calls("PlanModel") == 0
    denied = [e.data for e in events if e.name == "policy.decision" and e.data["decision"] == "deny"]
    assert denied and denied[0]["step"] == "schema_retrieval"
    seen = json.dumps([e.model_dump() for e in events]) + result.model_dump_json()
    assert not [name for name in ("Invoice", "InvoiceLine", "Customer") if name in seen]

    answered = ask(project, question, "viewer", settings={"plan_cache": False, "scope_evidence": False})
    assert answered.status == "success" and model.fake.calls("PlanModel") == 1  # off: the planner decides


def test_an_unanswerable_question_is_refused_by_the_planner(project: Config, model: ModelScript) -> None:
    question = "Which album cover has the most red in it?"  # about albums: routing finds evidence, no table answers
    model.unanswerable.add(question)
    result = ask(project, question, "analyst")
    assert result.status == "error" and [e.code for e in result.errors] == ["QUESTION_NOT_ANSWERABLE"]
    assert "weather" not in result.errors[0].message and model.fake.calls("PlanModel") == 1
    assert model.fake.calls("text") == 0 and not result.sub_queries[0].sql


def test_a_bad_structured_answer_is_asked_again(project: Config, model: ModelScript) -> None:
    question = "List every genre."
    model.plan(question, GENRES_PLAN)
    model.queue("PlanModel", {"select": "not a list"})
    events: list[Event] = []
    result = ask(project, question, "viewer", events, settings={"plan_cache": False})
    assert result.status == "success", result.errors
    retries = [e for e in events if e.name == "llm.parse_retry"]
    assert len(retries) == 1 and retries[0].data["node"] == "planner"
    assert "not a list" not in json.dumps(retries[0].data)  # the errors, never the answer


def test_the_refiner_fixes_a_wrong_column(project: Config, model: ModelScript) -> None:
    question = "Name all the genres."
    model.plan(question, WRONG_COLUMN_PLAN)
    model.queue("RefinedPlan", GENRES_PLAN)
    result = ask(project, question, "viewer", settings={"plan_cache": False})
    assert result.status == "success", result.errors
    assert result.sub_queries[0].attempts == 1 and result.sub_queries[0].total_rows == 25
    refiner_prompt = next(r for r in model.fake.requests if model.fake.name_of(r) == "RefinedPlan")
    assert "GenreName" in refiner_prompt["messages"][-1]["content"]  # the error went to the model


def test_a_refiner_that_repeats_the_failed_plan_stops_with_the_validation_error(project: Config,
                                                                               model: ModelScript) -> None:
    question = "Name every genre we sell."
    model.plan(question, WRONG_COLUMN_PLAN)
    model.fake.respond_with("RefinedPlan", lambda body: WRONG_COLUMN_PLAN)
    result = ask(project, question, "viewer", settings={"plan_cache": False, "max_retries": 3})
    assert result.status == "error" and result.errors[0].code == "PLAN_INVALID"
    assert model.fake.calls("RefinedPlan") == 1  # the repeat ends it: no second round of the same plan
    assert "REFINER_REPEATED" in [w.code for w in result.warnings]
    asked = next(r for r in model.fake.requests if model.fake.name_of(r) == "RefinedPlan")["messages"]
    assert asked[-1]["content"].startswith("That plan failed:")  # the planner's conversation, continued
    assert '"from"' in asked[-2]["content"] and '"from_"' not in asked[-2]["content"]  # as the model writes it


def test_a_refiner_that_cycles_between_failed_plans_stops(project: Config, model: ModelScript) -> None:
    question = "Which genres are there, by name?"
    other = json.loads(json.dumps(WRONG_COLUMN_PLAN).replace("GenreName", "GenreTitle"))
    model.plan(question, WRONG_COLUMN_PLAN)
    model.queue("RefinedPlan", other, WRONG_COLUMN_PLAN, other)
    result = ask(project, question, "viewer", settings={"plan_cache": False, "max_retries": 5})
    assert result.status == "error" and model.fake.calls("RefinedPlan") == 2


def test_the_call_limit_stops_the_run_and_says_which_limit(project: Config, model: ModelScript) -> None:
    events: list[Event] = []
    model.plan("List all the genres, please.", GENRES_PLAN)
    result = ask(project, "List all the genres, please.", "viewer", events, settings={"max_llm_calls": 1,
                                                                                       "plan_cache": False})
    assert result.status == "stopped" and result.errors[0].code == "RUN_LIMIT_REACHED"
    assert "settings.pipeline.max_llm_calls" in result.answer.content and result.llm_calls == 1
    assert [e.data["limit"] for e in events if e.name == "run.limit_reached"] == ["max_llm_calls"]


def test_the_time_limit_counts_the_engines_time_not_the_models(project: Config, model: ModelScript,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    question, limit_s = "Show me the genres.", 3.0
    model.plan(question, GENRES_PLAN)
    # a slow model still writing its plan is not cut: its time is bounded by the call's own deadline
    model.queue("PlanModel", FakeAnswer(content=GENRES_PLAN, delay_s=limit_s + 0.5))
    result = ask(project, question, "viewer", settings={"timeout_s": limit_s, "plan_cache": False})
    assert result.status == "success", result.errors
    assert result.model_ms >= (limit_s + 0.5) * 1000 and result.duration_ms > limit_s * 1000
    # the engine's own time is bounded: a schema read slower than the limit stops the run before its next step
    retrieve = IndexService.retrieve_schema

    def slow_retrieval(self: IndexService, *args: object, **kwargs: object) -> object:
        time.sleep(limit_s + 0.5)
        return retrieve(self, *args, **kwargs)

    monkeypatch.setattr(IndexService, "retrieve_schema", slow_retrieval)
    result = ask(project, question, "viewer", settings={"timeout_s": limit_s, "plan_cache": False})
    assert result.status == "stopped" and "settings.pipeline.timeout_s" in result.answer.content
    assert "the time it waited for models not counted" in result.answer.content


def test_too_many_sub_queries_is_too_broad(project: Config, model: ModelScript) -> None:
    question = "Tell me everything about customers, tickets, sessions and orders."
    model.routes[question] = ["chinook", "support", "webanalytics"]
    sub = {"datasource_id": "chinook", "question": "x", "expected_columns": []}
    model.decompositions[question] = {"sub_queries": [sub] * 4, "combine": None}
    result = ask(project, question, "analyst", settings={"plan_cache": False})
    assert result.status == "error" and result.errors[0].code == "QUESTION_TOO_BROAD"


def test_datasource_ids_are_an_enum_of_what_the_caller_may_ask_and_match_without_case(
        project: Config, model: ModelScript) -> None:
    question = "How many tickets did each customer open, with the customer's country?"
    model.routes[question] = ["Chinook", "SUPPORT"]  # as a model might write them
    model.decompositions[question] = {
        "sub_queries": [
            {"datasource_id": "CHINOOK", "question": "Each customer's id and country", "expected_columns": []},
            {"datasource_id": "Our Support Desk", "question": "Tickets per customer id", "expected_columns": []},
            {"datasource_id": "Support", "question": "Tickets per customer id", "expected_columns": []}],
        "combine": None}
    model.plans["Each customer's id and country"] = CUSTOMERS_PLAN
    model.plans["Tickets per customer id"] = TICKETS_PLAN
    result = ask(project, question, "analyst", settings={"plan_cache": False})
    assert [sq.datasource_id for sq in result.sub_queries] == ["chinook", "support"]
    assert "SUB_QUERY_DROPPED" in [w.code for w in result.warnings]  # the one naming no datasource
    requests = {model.fake.name_of(r): r for r in model.fake.requests}
    answerability = requests["Answerability"]["response_format"]
    schema = answerability.get("json_schema", {}).get("schema") or answerability.get("schema")
    assert set(schema["properties"]["datasource_ids"]["items"]["enum"]) <= {"chinook", "support", "webanalytics"}
    decomposition = requests["Decomposition"]["response_format"]
    schema = decomposition.get("json_schema", {}).get("schema") or decomposition.get("schema")
    assert schema["$defs"]["PlannedSubQuery"]["properties"]["datasource_id"]["enum"] == ["chinook", "support"]


def test_an_unanswerable_question_gets_a_fixed_sentence_not_the_models_words(project: Config,
                                                                             model: ModelScript) -> None:
    question = "Will it rain tomorrow?"
    model.unanswerable.add(question)
    result = ask(project, question, "viewer")
    assert result.status == "error" and result.errors[0].code == "QUESTION_NOT_ANSWERABLE"
    shown = result.errors[0].message + (result.errors[0].fix or "")
    assert "weather" not in shown  # the model's reason stays out of what the asker reads
    assert "chinook" in shown and "support" not in shown  # what the viewer may ask about, nothing more


def test_no_execute_writes_the_sql_and_runs_nothing(project: Config, model: ModelScript) -> None:
    result = ask(project, PLAYLISTS, "analyst", execute=False, settings={"plan_cache": False})
    assert result.status == "plan_only" and result.sub_queries[0].sql and not result.sub_queries[0].rows


class _Raises:
    def __init__(self, names: set[str] | None = None) -> None:
        self.names = names

    def __call__(self, event: Event) -> None:
        if self.names is None or event.name in self.names:
            raise RuntimeError("observer broke")


@pytest.mark.parametrize("broken", [None, {"run.finished"}, {"run.started", "node.finished"}])
def test_events_start_with_run_started_and_end_with_exactly_one_terminal_event(
        project: Config, model: ModelScript, broken: set[str] | None) -> None:
    runtime = runtime_for(project, plan_cache=False)
    events: list[Event] = []
    runtime.listeners.extend([_Raises(broken), events.append])
    try:
        result = ask_inline(runtime, PLAYLISTS, roles=["analyst"])
    finally:
        runtime.close()
    names = [e.name for e in events]
    assert names[0] == "run.started" and names[-1] == "run.finished"
    assert sum(n in ("run.finished", "run.failed") for n in names) == 1
    assert result.status == "success"
    assert all(e.trace_id == result.trace_id for e in events)


def test_an_engine_fault_publishes_run_failed_once(project: Config, model: ModelScript,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from nl2sql.pipeline import run

    def broken(*args: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(run, "build_result", broken)
    events: list[Event] = []
    with pytest.raises(RuntimeError):
        ask(project, "How much did we earn in each year?", "analyst", events)
    assert [e.name for e in events].count("run.failed") == 1 and events[-1].name == "run.failed"


def test_every_log_line_of_a_run_carries_its_trace_id(project: Config, model: ModelScript,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    import threading

    log = logging.getLogger("nl2sql.test")
    seen: list[tuple[str, str | None]] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append((threading.current_thread().name, getattr(record, "trace_id", None)))

    handler = Capture()
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    from nl2sql.pipeline import steps

    original = steps.execute

    def logged_execute(ctx, state, sq):  # type: ignore[no-untyped-def]
        log.info("executing %s", sq.id)
        original(ctx, state, sq)

    from nl2sql.pipeline import declaration

    patched = declaration.Step("executor", logged_execute, per_sub_query=True)
    subs = tuple(patched if s.name == "executor" else s for s in declaration.ASK.sub_query)
    import dataclasses

    pipeline = dataclasses.replace(declaration.ASK, sub_query=subs)
    question = "Support tickets opened per customer, with the customer's country"
    model.split_by_customer(question)
    from nl2sql.pipeline.inline import run_parallel
    from nl2sql.pipeline.run import drive, finish_run, invoke_step, start_run

    runtime = runtime_for(project, plan_cache=False)
    try:
        ctx, state = start_run(runtime, question, roles=["analyst"])
        with ctx.trace.entered():
            drive(ctx, state, invoke_step, run_parallel, pipeline)
            result = finish_run(ctx, state)
    finally:
        runtime.close()
        log.removeHandler(handler)
    assert result.status == "success", result.errors
    assert len(seen) == 2 and {trace for _, trace in seen} == {result.trace_id}
    assert any(name.startswith("nl2sql-sub-query") for name, _ in seen)  # on worker threads too


def test_the_demo_config_has_no_scripted_answers() -> None:
    demo = Path(__file__).resolve().parents[2] / "nl2sql" / "demo" / "nl2sql.yaml"
    assert "llm:" not in demo.read_text()


# --- the `sql` planner format: the model writes SQL, the engine reads it into a plan -------------------------

SQL_FORMAT = {"plan_cache": False, "planner": PlannerSettings(format="sql")}


def answer_sql(model: ModelScript, node: str, statements: dict[str, str]) -> None:
    """The `sql` format's plain-text answers of the planner or the refiner, by question."""
    (model.sql if node == "planner" else model.refined_sql).update(statements)


def sql_requests(model: ModelScript, kind: str) -> list[dict]:
    return [r for r in model.fake.requests if model.fake.name_of(r) == "text" and text_kind(r) == kind]


def test_the_planner_writes_sql_unless_configured_otherwise(project: Config, model: ModelScript) -> None:
    # the format measured best on a real model (docs/models.md); the tests' project pins `plan` for the gold plans
    question = "How many albums does each artist have?"
    answer_sql(model, "planner", {question: "SELECT ar.Name AS artist, COUNT(*) AS albums FROM Album al JOIN Artist ar "
                                            "ON ar.ArtistId = al.ArtistId GROUP BY ar.ArtistId, ar.Name"})
    result = ask(project, question, "viewer", settings={"plan_cache": False, "planner": PlannerSettings()})
    assert result.status == "success", result.errors
    assert len(sql_requests(model, "sql_planner")) == 1 and model.fake.calls("PlanModel") == 0


def test_the_sql_format_reads_the_models_statement_into_a_validated_plan(project: Config, model: ModelScript) -> None:
    question = "For each media type, the number of tracks stored in it?"
    answer_sql(model, "planner", {question: "```sql\nSELECT m.Name AS media_type, COUNT(*) AS tracks FROM Track t JOIN "
                                              "MediaType m ON m.MediaTypeId = t.MediaTypeId GROUP BY m.Name "
                                              "ORDER BY tracks DESC, media_type;\n```\nThis counts the tracks."})
    result = ask(project, question, "viewer", settings=SQL_FORMAT)
    assert result.status == "success", result.errors
    sq = result.sub_queries[0]
    assert sq.source == "planner" and sq.total_rows == 5 and sq.columns == ["media_type", "tracks"]
    assert "INNER JOIN" in sq.sql  # the statement that ran is the one generated from the plan
    assert model.fake.calls("PlanModel") == 0


#: A statement the plan language cannot say (a GLOB pattern), for the refiner's rounds.
UNSAYABLE = "SELECT Name FROM Genre WHERE Name GLOB 'R*'"


def test_the_sql_format_refines_what_the_plan_language_cannot_say(project: Config, model: ModelScript) -> None:
    question = "List the genre names that start with R."
    answer_sql(model, "planner", {question: UNSAYABLE})
    answer_sql(model, "refiner", {question: "SELECT g.Name AS name FROM Genre g WHERE g.Name LIKE 'R%' ORDER BY g.Name"})
    result = ask(project, question, "viewer", settings=SQL_FORMAT)
    assert result.status == "success", result.errors
    asked = sql_requests(model, "sql_planner")[0]["messages"]
    refiner = sql_requests(model, "sql_refiner")[0]["messages"]
    assert refiner[:len(asked)] == asked  # the planner's conversation goes on: the same prompt, then its statement
    assert refiner[len(asked)] == {"role": "assistant", "content": UNSAYABLE}
    assert "PLAN_UNSUPPORTED: A GLOB pattern is not supported" in refiner[-1]["content"]
    assert len(refiner) == len(asked) + 2


def test_the_answer_follows_the_planners_conversation_so_a_server_reuses_its_prefix(project: Config,
                                                                                    model: ModelScript) -> None:
    question = "How many tracks does each media type hold?"
    statement = ("SELECT m.Name AS media_type, COUNT(*) AS tracks FROM Track t JOIN MediaType m "
                 "ON m.MediaTypeId = t.MediaTypeId GROUP BY m.Name")
    answer_sql(model, "planner", {question: statement})
    model.answers[question] = "MPEG audio files hold the most tracks."
    result = ask(project, question, "viewer", settings=SQL_FORMAT)
    assert result.status == "success" and result.answer.content == "MPEG audio files hold the most tracks."
    planner = sql_requests(model, "sql_planner")[-1]["messages"]
    synthesizer = sql_requests(model, "synthesizer")[-1]["messages"]
    assert synthesizer[:len(planner)] == planner  # byte for byte: the planner's prompt is the answer's prefix
    assert synthesizer[len(planner)] == {"role": "assistant", "content": statement}
    assert synthesizer[-1]["content"].startswith("That statement ran.\nResult:\nmedia_type | tracks")
    assert len(synthesizer) == len(planner) + 2
    assert result.time_to_sql_ms is not None and result.time_to_rows_ms is not None
    assert result.time_to_sql_ms <= result.time_to_rows_ms <= result.time_to_answer_ms <= result.duration_ms

    answer_sql(model, "planner", {f"{question} (apart)": statement})
    apart = ask(project, f"{question} (apart)", "viewer", settings={**SQL_FORMAT, "synthesizer_follows_planner": False})
    assert apart.status == "success"
    alone = sql_requests(model, "synthesizer")[-1]["messages"]
    assert alone[0]["content"].startswith("You answer a question") and len(alone) == 2


def _examples_shown(messages: list[dict]) -> str:
    """The worked examples of a `sql`-format planner prompt."""
    text = messages[1]["content"]
    return text.split("-- Answered before on this database:", 1)[1].split("-- Using valid", 1)[0]


def test_fixed_examples_are_the_same_for_every_question(project: Config, model: ModelScript) -> None:
    settings = {**SQL_FORMAT, "planner": PlannerSettings(format="sql", examples_chosen="fixed")}
    for question in ("How many albums are there, counted once?", "Which customers spent the most on invoices?"):
        answer_sql(model, "planner", {question: "SELECT COUNT(*) AS albums FROM Album"})
        ask(project, question, "analyst", settings=settings)
    first, second = (_examples_shown(r["messages"]) for r in sql_requests(model, "sql_planner")[-2:])
    assert first == second and "-- Question:" in first  # the same examples in the same order


def test_an_asker_who_wants_no_sentence_gets_the_rows_without_a_synthesizer_call(project: Config,
                                                                                  model: ModelScript) -> None:
    question = "How many tracks does each media type hold, rows only?"
    answer_sql(model, "planner", {question: "SELECT m.Name AS media_type, COUNT(*) AS tracks FROM Track t JOIN "
                                            "MediaType m ON m.MediaTypeId = t.MediaTypeId GROUP BY m.Name"})
    before = len(sql_requests(model, "synthesizer"))
    result = ask(project, question, "viewer", settings=SQL_FORMAT, in_words=False)
    assert result.status == "success" and result.sub_queries[0].total_rows == 5
    assert len(sql_requests(model, "synthesizer")) == before  # no model call for the sentence
    assert result.answer.content.startswith("5 rows (media_type, tracks)")
    assert result.time_to_rows_ms is not None and result.time_to_answer_ms is not None


@pytest.mark.parametrize(("statement", "rows"), [
    ("SELECT Name FROM Genre UNION SELECT Name FROM MediaType", 30),
    ("SELECT g.Name FROM Genre g INTERSECT SELECT g2.Name FROM Genre g2 WHERE g2.Name LIKE 'R%'", 4),
    ("WITH long AS (SELECT t.GenreId FROM Track t WHERE t.Milliseconds > 600000) SELECT g.Name, COUNT(*) AS n "
     "FROM long l JOIN Genre g ON g.GenreId = l.GenreId GROUP BY g.Name", None),
    ("SELECT a.Title, x.n FROM (SELECT t.AlbumId, COUNT(*) AS n FROM Track t GROUP BY t.AlbumId) x "
     "JOIN Album a ON a.AlbumId = x.AlbumId ORDER BY x.n DESC", 347),
    ("SELECT CAST(AVG(t.Milliseconds) AS INTEGER) AS ms, SUBSTR(MIN(t.Name), 1, 3) AS first FROM Track t", 1),
    ("SELECT * FROM Genre WHERE GenreId < 4", 3),
])
def test_the_sql_format_answers_what_analysts_write(project: Config, model: ModelScript, statement: str,
                                                     rows: int | None) -> None:
    question = f"Analysts' constructs: {statement[:60]}"
    answer_sql(model, "planner", {question: statement})
    result = ask(project, question, "viewer", settings=SQL_FORMAT)
    assert result.status == "success", result.errors
    sq = result.sub_queries[0]
    assert sq.source == "planner" and not sql_requests(model, "sql_refiner")
    if rows is not None:
        assert sq.total_rows == rows


@pytest.mark.parametrize("statement", [
    "SELECT Name FROM Genre UNION SELECT LastName FROM Employee",
    "WITH staff AS (SELECT LastName FROM Employee) SELECT LastName FROM staff",
    "SELECT x.LastName FROM (SELECT LastName FROM Employee) x",
    "SELECT g.Name FROM Genre g CROSS JOIN Employee e",
    "SELECT g.Name FROM Genre g JOIN Track t ON t.GenreId = g.GenreId AND t.TrackId IN (SELECT EmployeeId FROM Employee)",
])
def test_the_sql_format_refuses_a_denied_table_inside_any_construct(project: Config, model: ModelScript,
                                                                      statement: str) -> None:
    question = f"Denied inside: {statement[:60]}"
    answer_sql(model, "planner", {question: statement})
    result = ask(project, question, "viewer", settings=SQL_FORMAT)
    assert result.status == "error" and [(e.code, e.message) for e in result.errors] == [
        ("SECURITY_VIOLATION", GENERIC_REFUSAL)]
    assert not result.sub_queries or not result.sub_queries[0].sql


def test_the_sql_format_refuses_a_denied_table_with_the_generic_sentence(project: Config,
                                                                          model: ModelScript) -> None:
    question = "Which employees report to whom?"
    answer_sql(model, "planner", {question: "SELECT e.LastName AS name FROM Employee e"})
    result = ask(project, question, "viewer", settings=SQL_FORMAT)
    assert result.status == "error" and [(e.code, e.message) for e in result.errors] == [
        ("SECURITY_VIOLATION", GENERIC_REFUSAL)]
    assert not result.sub_queries or not result.sub_queries[0].sql


def test_a_denied_table_and_a_missing_one_read_alike(project: Config, model: ModelScript) -> None:
    """What the analyst gets for a statement over Employee (denied) and over a table that does not exist."""
    seen = []
    for table in ("Employee", "Salaries"):
        question = f"Which staff members are listed ({table})?"
        answer_sql(model, "planner", {question: f"SELECT LastName FROM {table}"})
        before = model.fake.calls()
        result = ask(project, question, "analyst", settings=SQL_FORMAT)
        seen.append(([(e.code, e.message, e.fix) for e in result.errors], result.status,
                     model.fake.calls() - before, [w.code for w in result.warnings]))
    assert seen[0] == seen[1] and seen[0][0] == [("SECURITY_VIOLATION", GENERIC_REFUSAL, None)]
    assert not sql_requests(model, "sql_refiner")  # refused at once: no round that could differ


def test_the_sql_format_stops_when_the_refiner_repeats_a_statement(project: Config, model: ModelScript) -> None:
    question = "Show genres that match R*."
    statement = UNSAYABLE
    answer_sql(model, "planner", {question: statement})
    answer_sql(model, "refiner", {question: statement + ";"})
    result = ask(project, question, "viewer", settings={**SQL_FORMAT, "max_retries": 3})
    assert result.status == "error" and result.errors[0].code == "PLAN_UNSUPPORTED"
    assert result.errors[0].details == ["A GLOB pattern"]  # the construct the plan language lacks
    assert len(sql_requests(model, "sql_refiner")) == 1 and "REFINER_REPEATED" in [w.code for w in result.warnings]
    # the planner was sampled `planner.resamples` times (3), each with its own seed, and said the same each time
    samples = [r for r in sql_requests(model, "sql_planner") if "seed" in r]
    assert [(r["temperature"], r["seed"]) for r in samples] == [(0.7, 1), (0.7, 2), (0.7, 3)]
    assert len(sql_requests(model, "sql_planner")) == 4 and "PLANNER_RESAMPLED" not in [w.code for w in result.warnings]


def test_the_planner_is_sampled_when_the_refiner_repeats_and_its_first_valid_answer_goes_on(
        project: Config, model: ModelScript) -> None:
    question = "Show genres matching R*, all of them."
    union = UNSAYABLE
    # planner, refiner (repeats), then samples: the same again, one over a table the viewer may not read, a valid one
    model.queue("text", union, union, union, "SELECT LastName FROM Employee", "SELECT g.Name AS genre FROM Genre g")
    result = ask(project, question, "viewer", settings=SQL_FORMAT)
    assert result.status == "success", result.errors
    assert result.sub_queries[0].columns == ["genre"] and result.sub_queries[0].total_rows == 25
    codes = [w.code for w in result.warnings]
    assert codes.count("REFINER_REPEATED") == 1 and codes.count("PLANNER_RESAMPLED") == 1
    assert next(w for w in result.warnings if w.code == "PLANNER_RESAMPLED").detail == {"sample": 3}
    # none sampled when resamples is 0: refining stops where the refiner repeats
    model.queue("text", union, union)
    stopped = ask(project, "Show genres matching R*, every one.", "viewer",
                  settings={**SQL_FORMAT, "planner": PlannerSettings(format="sql", resamples=0)})
    assert stopped.status == "error" and stopped.errors[0].code == "PLAN_UNSUPPORTED"


def _planner_prompt(model: ModelScript, name: str = "PlanModel") -> str:
    return "\n".join(m["content"] for m in [r for r in model.fake.requests
                                             if model.fake.name_of(r) == name][-1]["messages"])


def test_the_planner_is_shown_the_verified_queries_the_caller_may_read_as_worked_examples(
        project: Config, model: ModelScript) -> None:
    question = "Which artists have the most albums in the catalog?"
    model.plan(question, GENRES_PLAN)
    ask(project, question, "viewer", settings={"plan_cache": False})
    shown = _planner_prompt(model)
    assert "Answered before on this database:" in shown and "- Asked: " in shown and '"kind":"column"' in shown
    viewer_tables = {"Album", "Artist", "Genre", "MediaType", "Playlist", "PlaylistTrack", "Track"}
    for denied in ("Customer", "Invoice", "Employee"):
        assert f'"{denied}"' not in shown  # never a query over a table the viewer may not read
    assert any(f'"{t}"' in shown for t in viewer_tables)


def test_worked_examples_can_be_turned_off_and_follow_the_sql_format(project: Config, model: ModelScript) -> None:
    question = "Which artists have the most albums in the catalog?"
    model.plan(question, GENRES_PLAN)
    ask(project, question, "viewer",
        settings={"plan_cache": False, "planner": PlannerSettings(format="plan", examples=0)})
    assert "Answered before" not in _planner_prompt(model)
    answer_sql(model, "planner", {question: "SELECT a.Name AS artist FROM Artist a ORDER BY a.Name"})
    ask(project, question, "viewer", settings=SQL_FORMAT)
    shown = sql_requests(model, "sql_planner")[-1]["messages"][1]["content"]
    assert "-- Answered before on this database:" in shown and "\nSELECT " in shown
    assert shown.index("CREATE TABLE") < shown.index("-- Answered before") < shown.index(f"Question: {question}")


def test_verified_queries_may_only_teach_the_planner(project: Config, model: ModelScript) -> None:
    question = "How many tracks are there in each genre?"  # a verified query of the demo
    teaching = project.model_copy(update={"settings": project.settings.model_copy(update={
        "curated": project.settings.curated.model_copy(update={"answer": False})}), "datasources": [
        ds.model_copy(update={"example_questions": []}) for ds in project.datasources]})  # verified ones teach
    answer_sql(model, "planner", {question: "SELECT g.Name, COUNT(*) FROM Genre g JOIN Track t ON t.GenreId = g.GenreId "
                                            "GROUP BY g.Name"})
    result = ask(teaching, question, "viewer", settings=SQL_FORMAT)
    assert result.status == "success" and result.sub_queries[0].source == "planner"
    shown = sql_requests(model, "sql_planner")[-1]["messages"][1]["content"]
    assert f"-- Question: {question}\n" in shown  # its own verified query, as a worked example


# --- which datasources: routing's evidence decides, the model check only narrows -----------------------------

TWO_PICKS = "How many tickets did each customer open, with the customer's country?"


def test_one_routing_pick_asks_no_model_which_datasource(project: Config, model: ModelScript) -> None:
    result = ask(project, PLAYLISTS, "analyst", settings={"plan_cache": False})
    assert result.status == "success" and model.fake.calls("Answerability") == 0
    assert IndexService(project).route(PLAYLISTS, ["analyst"]).picks == ["chinook"]


def test_the_answerability_check_narrows_weak_evidence_to_one_datasource(project: Config,
                                                                         model: ModelScript) -> None:
    model.routes[TWO_PICKS] = ["SUPPORT"]
    model.plans[TWO_PICKS] = TICKETS_PLAN
    result = ask(project, TWO_PICKS, "analyst", settings={"plan_cache": False})
    assert result.status == "success", result.errors
    assert len(IndexService(project).route(TWO_PICKS, ["analyst"]).picks) > 1
    assert model.fake.calls("Answerability") == 1
    assert [sq.datasource_id for sq in result.sub_queries] == ["support"]
    assert model.fake.calls("Decomposition") == 0  # one datasource: nothing to split


def test_the_answerability_check_keeps_routings_first_pick(project: Config, model: ModelScript) -> None:
    question = "How much did we sell each year?"  # invoices (chinook) first, web orders (webanalytics) close
    picks = IndexService(project).route(question, ["analyst"]).picks
    assert picks[:2] == ["chinook", "webanalytics"]
    model.routes[question] = ["webanalytics"]  # a small model's pick of the sibling database
    model.decompositions[question] = {"sub_queries": [{"datasource_id": "webanalytics", "question": question,
                                                       "expected_columns": []}], "combine": None}
    result = ask(project, question, "analyst", settings={"plan_cache": False})
    assert model.fake.calls("Answerability") == 1 and model.fake.calls("Decomposition") == 0
    assert [sq.datasource_id for sq in result.sub_queries] == ["chinook"]
    rerouted = [w for w in result.warnings if w.code == "SUB_QUERY_REROUTED"]
    assert [w.step for w in rerouted] == ["resolver"] and "webanalytics" in rerouted[0].message
    # a close call is the model's to make: a datasource within settings.routing.close_call of the best
    routing = project.settings.routing.model_copy(update={"close_call": 0.7})
    close = project.model_copy(update={"settings": project.settings.model_copy(update={"routing": routing})})
    result = ask(close, question, "analyst", settings={"plan_cache": False})
    assert [sq.datasource_id for sq in result.sub_queries] == ["webanalytics"]


def test_the_answerability_check_cannot_refuse(project: Config, model: ModelScript) -> None:
    """A check that says nothing answers leaves routing's picks standing: the planner decides, not the check."""
    model.fake.respond_with("Answerability", lambda body: {"reason": "The question is not about data.",
                                                           "answerable": False, "datasource_ids": []})
    model.decompositions[TWO_PICKS] = {"sub_queries": [{"datasource_id": "support", "question": "Tickets",
                                                        "expected_columns": []}], "combine": None}
    model.plans[TWO_PICKS] = TICKETS_PLAN
    result = ask(project, TWO_PICKS, "analyst", settings={"plan_cache": False})
    assert result.status == "success", result.errors
    assert model.fake.calls("Decomposition") == 1
    # one sub-query after all: it is asked the asker's own question, not the decomposer's rewording
    assert [(sq.datasource_id, sq.question) for sq in result.sub_queries] == [("support", TWO_PICKS)]


def test_an_answerability_check_never_read_leaves_routings_picks(project: Config, model: ModelScript) -> None:
    model.queue("Answerability", "", "", "")  # a server that answers nothing, three times
    model.decompositions[TWO_PICKS] = {"sub_queries": [{"datasource_id": "support", "question": "Tickets",
                                                        "expected_columns": []}], "combine": None}
    model.plans[TWO_PICKS] = TICKETS_PLAN
    result = ask(project, TWO_PICKS, "analyst", settings={"plan_cache": False})
    assert result.status == "success", result.errors
    assert model.fake.calls("Answerability") == 3 and model.fake.calls("Decomposition") == 1
    assert "ANSWERABILITY_CHECK_UNREAD" in [w.code for w in result.warnings]


def test_without_the_check_routings_picks_go_to_the_decomposer(project: Config, model: ModelScript) -> None:
    model.split_by_customer(TWO_PICKS, combine={"kind": "join", "left": 0, "right": 1,
                                                "join_keys": [{"left": "customer_id", "right": "customer_id"}]})
    result = ask(project, TWO_PICKS, "analyst", settings={"plan_cache": False, "answerability_check": False})
    assert result.status == "success", result.errors
    assert model.fake.calls("Answerability") == 0 and model.fake.calls("Decomposition") == 1
    assert [sq.datasource_id for sq in result.sub_queries] == ["chinook", "support"]


def test_a_question_naming_nothing_of_any_datasource_is_refused_before_any_model_call(
        project: Config, model: ModelScript) -> None:
    question = "What will the weather be in Oslo tomorrow?"
    result = ask(project, question, "viewer", settings=SQL_FORMAT)
    assert result.status == "error" and [e.code for e in result.errors] == ["QUESTION_NOT_ANSWERABLE"]
    assert result.errors[0].message == "None of the data you can reach answers this question."
    assert not model.fake.requests and not result.sub_queries
    # off, the planner is asked (and may say the tables cannot answer)
    answer_sql(model, "planner", {question: "CANNOT ANSWER"})
    routing = project.settings.routing.model_copy(update={"min_evidence": 0.0})
    off = project.model_copy(update={"settings": project.settings.model_copy(update={"routing": routing})})
    result = ask(off, question, "viewer", settings=SQL_FORMAT)
    assert [e.code for e in result.errors] == ["QUESTION_NOT_ANSWERABLE"] and sql_requests(model, "sql_planner")


def test_a_decomposition_kept_to_one_database_goes_to_routings_first_pick(project: Config,
                                                                          model: ModelScript) -> None:
    question = "How much did we sell each year?"  # invoices (chinook) first, web orders (webanalytics) close
    assert IndexService(project).route(question, ["analyst"]).picks[:2] == ["chinook", "webanalytics"]
    model.decompositions[question] = {"sub_queries": [{"datasource_id": "webanalytics", "question": question,
                                                       "expected_columns": []}], "combine": None}
    result = ask(project, question, "analyst", settings={"plan_cache": False, "answerability_check": False})
    assert [sq.datasource_id for sq in result.sub_queries] == ["chinook"]
    rerouted = [w for w in result.warnings if w.code == "SUB_QUERY_REROUTED"]
    assert len(rerouted) == 1 and "webanalytics" in rerouted[0].message and rerouted[0].step == "decomposer"


@pytest.mark.parametrize("position", [0, 1])
def test_a_decomposition_with_a_sub_query_written_as_sql_is_cut_and_discarded(
        project: Config, model: ModelScript, position: int) -> None:
    sub_queries = [{"datasource_id": "chinook", "question": "Each customer's id and country", "expected_columns": []}]
    sub_queries.insert(position, {"datasource_id": "support", "question": "SELECT customer_id, COUNT(*) FROM tickets "
                                  "GROUP BY customer_id", "expected_columns": [{"name": "tickets", "description":
                                                                                "tickets per customer"}]})
    decomposition = {"sub_queries": sub_queries, "combine": {"kind": "join", "left": 0, "right": 1, "join_keys": [
        {"left": "customer_id", "right": "CustomerId"}]}}
    model.fake.respond_with("Decomposition", lambda body: FakeAnswer(decomposition, pace_s=0.02))
    model.plans[TWO_PICKS] = TICKETS_PLAN
    result = ask(project, TWO_PICKS, "analyst", settings={"plan_cache": False, "answerability_check": False})
    first = IndexService(project).route(TWO_PICKS, ["analyst"]).picks[0]
    assert result.status == "success", result.errors
    assert [(sq.datasource_id, sq.question) for sq in result.sub_queries] == [(first, TWO_PICKS)]
    assert "DECOMPOSITION_DISCARDED" in [w.code for w in result.warnings]
    # the model was stopped as soon as a sub-query began as SQL: the rest of its answer was never sent
    (asked_to_split,) = [b for b in model.fake.requests if model.fake.name_of(b) == "Decomposition"]
    assert asked_to_split["stream"] is True
    assert model.fake.wait_for_disconnects() and model.fake.disconnects == ["Decomposition"]


def test_the_sql_planner_may_say_the_tables_cannot_answer(project: Config, model: ModelScript) -> None:
    question = "Which album cover has the most red in it?"  # about albums: routing finds evidence, no table answers
    answer_sql(model, "planner", {question: "CANNOT ANSWER: there is no album cover image."})
    result = ask(project, question, "viewer", settings=SQL_FORMAT)
    assert result.status == "error" and [e.code for e in result.errors] == ["QUESTION_NOT_ANSWERABLE"]
    assert "image" not in result.errors[0].message + (result.errors[0].fix or "")
    assert sql_requests(model, "sql_planner")
    assert not any(sq.sql for sq in result.sub_queries) and not sql_requests(model, "sql_refiner")


def test_the_planners_table_names_are_an_enum_of_the_tables_it_was_shown(project: Config,
                                                                           model: ModelScript) -> None:
    result = ask(project, PLAYLISTS, "viewer", settings={"plan_cache": False})
    assert result.status == "success", result.errors
    request = next(r for r in model.fake.requests if model.fake.name_of(r) == "PlanModel")
    format_ = request["response_format"]
    schema = format_.get("json_schema", {}).get("schema") or format_.get("schema")
    tables = schema["$defs"]["TableRef"]["properties"]["table"]["enum"]
    assert {"Playlist", "PlaylistTrack"} <= set(tables)
    assert not {"Customer", "Employee", "Invoice"} & set(tables)  # the viewer's scope, nothing more
    assert all(f"\n{t}, " in "\n" + asked_tables(request) for t in tables)


def test_a_models_page_unit_and_group_labels_are_read_against_the_question(project: Config,
                                                                           model: ModelScript) -> None:
    paged, timed = "Which are the 11th to 20th longest tracks?", "Which are the three longest tracks, in minutes?"
    grouped = "How many tracks does each playlist hold?"
    fixed = "Which tracks belong to the opera genre?"
    answer_sql(model, "planner", {
        fixed: "SELECT T1.Name FROM Genre AS T1 JOIN Track AS T2 ON T1.GenreId = T2.GenreId WHERE T1.Name = 'Opera'",
        paged: "SELECT TrackId, Milliseconds FROM Track ORDER BY Milliseconds DESC LIMIT 10 OFFSET 9",
        timed: "SELECT TrackId, Milliseconds / 1000.0 AS minutes FROM Track ORDER BY Milliseconds DESC LIMIT 3",
        grouped: "SELECT p.Name, COUNT(*) AS tracks FROM Playlist p JOIN PlaylistTrack pt ON pt.PlaylistId = "
                 "p.PlaylistId GROUP BY p.PlaylistId, p.Name"})
    result = ask(project, paged, "viewer", settings=SQL_FORMAT)
    assert result.status == "success", result.errors
    assert "LIMIT 10 OFFSET 10" in result.sub_queries[0].sql and result.sub_queries[0].rows[0][0] == 3232
    assert [w.detail["repair"] for w in result.warnings if w.code == "PLAN_REPAIRED"] == ["QUESTION_RANGE"]
    result = ask(project, timed, "viewer", settings=SQL_FORMAT)
    assert [round(row[1], 2) for row in result.sub_queries[0].rows] == [88.12, 84.81, 49.34]
    assert [w.detail["repair"] for w in result.warnings if w.code == "PLAN_REPAIRED"] == ["UNIT_FACTOR"]
    result = ask(project, grouped, "viewer", settings=SQL_FORMAT)
    assert result.sub_queries[0].columns == ["Name", "tracks"]  # as the model chose
    keyed = {**SQL_FORMAT, "planner": PlannerSettings(format="sql", answer_shape=["key"])}
    result = ask(project, grouped, "viewer", settings=keyed)
    assert result.sub_queries[0].columns == ["playlist_id", "Name", "tracks"]  # two playlists are called "Music"
    assert [row[:2] for row in result.sub_queries[0].rows if row[1] == "Music"] == [[1, "Music"], [8, "Music"]]
    result = ask(project, fixed, "viewer", settings=SQL_FORMAT)  # the track's name, not "Opera"
    assert result.sub_queries[0].columns == ["Name"] and "Opera" not in {row[0] for row in result.sub_queries[0].rows}
    assert [w.detail["repair"] for w in result.warnings if w.code == "PLAN_REPAIRED"] == ["SHOWN_COLUMN_FIXED"]


def test_a_join_the_model_invented_is_dropped_and_a_value_nothing_resembles_stays_unanswered(
        project: Config, model: ModelScript) -> None:
    # a small model trained on other schemas links customers to an Address table this database does not have
    # (worded unlike the demo's verified query about customers by country, which would answer without a model)
    # ("customers" names a table: a question naming nothing of any datasource is refused before the planner)
    brazil, narnia = "Whose home is in Brazil, among our customers?", "Whose home is in Narnia, among our customers?"
    invented = ("SELECT T1.FirstName, T1.LastName FROM Customer AS T1 INNER JOIN Address AS T2 "
                "ON T1.AddressId = T2.AddressId WHERE T2.Country = '{}'")
    answer_sql(model, "planner", {brazil: invented.format("Brazil"), narnia: invented.format("Narnia")})
    result = ask(project, brazil, "analyst", settings=SQL_FORMAT)
    assert result.status == "success", result.errors
    sq = result.sub_queries[0]
    assert "Address" not in sq.sql and sq.total_rows == 5
    assert sq.source == "planner" and sq.columns == ["FirstName", "LastName"]
    assert sorted(row[-1] for row in sq.rows) == ["Almeida", "Gonçalves", "Martins", "Ramos", "Rocha"]
    assert [w.detail["repair"] for w in result.warnings if w.code == "PLAN_REPAIRED"] == ["INVENTED_JOIN"]
    # no customer lives in Narnia, and no country on record is Narnia misspelt: the empty answer is the answer
    result = ask(project, narnia, "analyst", settings=SQL_FORMAT)
    assert result.status == "success", result.errors
    assert result.sub_queries[0].total_rows == 0 and "'Narnia'" in result.sub_queries[0].sql
    assert model.fake.calls("RefinedPlan") == 0 and "VALUE_NOT_FOUND" in [w.code for w in result.warnings]
    # the viewer may not read customers: no answer, and the refusal names no table
    result = ask(project, brazil, "viewer", settings=SQL_FORMAT)
    assert result.status == "error" and [e.code for e in result.errors] == ["SECURITY_VIOLATION"]
    assert "Customer" not in result.errors[0].message and not any(sq.rows for sq in result.sub_queries)


def asked_tables(body: dict) -> str:
    """The user message that shows the planner its tables."""
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def test_a_ranking_cut_by_limit_is_stable_and_key_and_measure_are_asked_for(project: Config,
                                                                            model: ModelScript) -> None:
    listed, ranked = "Which tracks are called Symphony something?", "Which composer wrote the most songs?"
    answer_sql(model, "planner", {listed: "SELECT Name FROM Track WHERE Name LIKE 'Symphony%'",
                                  ranked: "SELECT Composer FROM Track GROUP BY Composer ORDER BY COUNT(*) DESC LIMIT 1"})
    # by default the answer has the columns the model chose, and a cut by LIMIT 1 is made stable
    result = ask(project, listed, "viewer", settings=SQL_FORMAT)
    assert result.status == "success", result.errors
    assert result.sub_queries[0].columns == ["Name"] and result.sub_queries[0].total_rows == 8 and not result.warnings
    result = ask(project, ranked, "viewer", settings=SQL_FORMAT)
    assert result.sub_queries[0].columns == ["Composer"] and result.sub_queries[0].rows == [[None]]
    assert [w.code for w in result.warnings] == ["ANSWER_SHAPED", "ALL_NULL_COLUMN"]
    assert "ties broken on Track.Composer" in result.warnings[0].message
    # asked for: a list gets its table's key, a ranking its measure
    every_rule = {"plan_cache": False,
                  "planner": PlannerSettings(format="sql", answer_shape=["measure", "groups", "key", "ties"])}
    result = ask(project, listed, "viewer", settings=every_rule)
    assert result.sub_queries[0].columns == ["track_id", "Name"] and result.sub_queries[0].total_rows == 8
    assert [w.code for w in result.warnings] == ["ANSWER_SHAPED"] and "track_id" in result.warnings[0].message
    result = ask(project, ranked, "viewer", settings=every_rule)
    # the count says why the "composer" is NULL: 978 tracks have none recorded
    assert result.sub_queries[0].columns == ["Composer", "count"] and result.sub_queries[0].rows == [[None, 978]]
    assert "ties broken on Track.Composer" in result.warnings[0].message
    # as written, with the rules off
    result = ask(project, ranked, "viewer", settings={
        "plan_cache": False, "planner": PlannerSettings(format="sql", answer_shape=[])})
    assert result.sub_queries[0].columns == ["Composer"] and "ANSWER_SHAPED" not in [w.code for w in result.warnings]
