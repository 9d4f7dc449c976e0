"""Candidates chosen by execution, through the fake model server on loopback: the planner's first answer and its
samples are each read, validated under the caller's scope and run; the sub-query goes on with the largest group that
agree on their result."""

from __future__ import annotations

from nl2sql.config import Config
from nl2sql.config.models import HookConfig, PlannerSettings
from nl2sql.errors import GENERIC_REFUSAL
from nl2sql.events import Event
from tests.support.ask import GENRES_PLAN, ModelScript, ask_on, runtime_for, text_kind


def candidates(n: int, **planner: object) -> dict:
    """Run settings: the `sql` format (unless told otherwise) with `n` candidates, no plan cache."""
    return {"plan_cache": False, "planner": PlannerSettings(**{"format": "sql", "candidates": n, **planner})}


def ask(config: Config, question: str, role: str, events: list[Event], **settings: object):
    return ask_on(runtime_for(config, **settings), question, role, events)


def planner_requests(model: ModelScript) -> list[dict]:
    return [r for r in model.fake.requests if model.fake.name_of(r) == "text" and text_kind(r) == "sql_planner"]


def chosen(events: list[Event]) -> dict:
    (event,) = [e for e in events if e.name == "planner.candidates"]
    return event.data


def test_the_candidates_that_agree_outvote_the_first_answer(project: Config, model: ModelScript) -> None:
    events: list[Event] = []
    model.queue("text", "SELECT COUNT(*) AS tracks FROM Album",  # the first answer: the wrong table
                "SELECT COUNT(*) AS tracks FROM Track", "SELECT COUNT(t.TrackId) AS n FROM Track t")
    result = ask(project, "How many tracks are in the catalog?", "viewer", events, **candidates(3))
    assert result.status == "success", result.errors
    assert result.sub_queries[0].rows == [[3503]] and "FROM Track" in result.sub_queries[0].sql
    assert chosen(events) == {"sub_query_id": "sq1", "datasource_id": "chinook", "drawn": 3, "ran": 3,
                              "groups": [2, 1], "chosen": 1, "failures": {}}
    samples = planner_requests(model)[1:]  # the same prompt, sampled: each its own seed
    assert [(r["temperature"], r["seed"]) for r in samples] == [(0.7, 1), (0.7, 2)]
    assert {str(r["messages"]) for r in planner_requests(model)} == {str(samples[0]["messages"])}


def test_without_agreement_the_first_answer_goes_on(project: Config, model: ModelScript) -> None:
    events: list[Event] = []
    model.queue("text", "SELECT COUNT(*) AS artists FROM Artist", "SELECT COUNT(*) AS albums FROM Album",
                "SELECT COUNT(*) AS n FROM Genre")
    result = ask(project, "How many artists are there?", "viewer", events, **candidates(3))
    assert result.sub_queries[0].rows == [[275]]
    assert chosen(events)["groups"] == [1, 1, 1] and chosen(events)["chosen"] == 0


def test_a_result_with_rows_wins_a_tie_over_an_empty_one(project: Config, model: ModelScript) -> None:
    events: list[Event] = []
    model.queue("text", "SELECT Name AS genre FROM Genre WHERE Name = 'rock'", "SELECT Name AS genre FROM Genre "
                "WHERE Name = 'Rock'")
    result = ask(project, "Is Rock one of the genres?", "viewer", events, **candidates(2))
    assert result.sub_queries[0].rows[0][-1] == "Rock" and chosen(events)["chosen"] == 1


def test_a_candidate_outside_the_callers_scope_is_never_run_nor_chosen(project: Config,
                                                                        model: ModelScript) -> None:
    """Two candidates over a table the analyst may not read agree on nothing: they never ran. The one that
    validates goes on, and nothing the run says names the denied table."""
    events: list[Event] = []
    model.queue("text", "SELECT LastName AS name FROM Employee", "SELECT LastName AS name FROM Employee ",
                "SELECT FirstName || ' ' || LastName AS name FROM Customer WHERE SupportRepId = 3",
                "SELECT Titel FROM Album")
    result = ask(project, "Who are Jane's customers?", "analyst", events, **candidates(4))
    assert result.status == "success", result.errors
    assert chosen(events) == {"sub_query_id": "sq1", "datasource_id": "chinook", "drawn": 4, "ran": 1, "groups": [1],
                              "chosen": 2, "failures": {"SECURITY_VIOLATION": 2, "PLAN_INVALID": 1}}
    assert "Customer" in result.sub_queries[0].sql and result.sub_queries[0].total_rows == 21
    said = " ".join([w.message for w in result.warnings] + [str(e.data) for e in events if e.name != "run.started"])
    assert "Employee" not in said.replace(GENERIC_REFUSAL, "")


def test_when_no_candidate_runs_the_first_answers_error_goes_to_the_refiner(project: Config,
                                                                            model: ModelScript) -> None:
    events: list[Event] = []
    model.queue("text", "SELECT Nme FROM Genre", "SELECT Titel FROM Album")
    model.refined_sql["Which genres are there?"] = "SELECT Name AS genre FROM Genre"
    result = ask(project, "Which genres are there?", "viewer", events, **candidates(2))
    assert result.status == "success", result.errors
    assert chosen(events)["ran"] == 0 and chosen(events)["chosen"] == 0
    assert result.sub_queries[0].total_rows == 25  # the refiner's statement, after the first answer's error


def test_candidates_stop_at_the_runs_cap_on_model_calls(project: Config, model: ModelScript) -> None:
    events: list[Event] = []
    model.queue("text", *["SELECT COUNT(*) AS playlists FROM Playlist"] * 8)
    result = ask(project, "How many playlists are there?", "viewer", events, max_llm_calls=3, **candidates(8))
    assert chosen(events)["drawn"] == 3 and len(planner_requests(model)) == 3
    assert result.sub_queries[0].rows == [[18]]


def test_no_candidate_runs_before_an_approver_sees_it(project: Config, model: ModelScript) -> None:
    """With a hook at execute.before (an approval, a review), the planner's first answer alone goes on: a candidate
    would run before any approver saw it."""
    events: list[Event] = []
    model.queue("text", "SELECT COUNT(*) AS media_types FROM MediaType")
    hooks = [HookConfig(use="sql_review", options={"tables": ["chinook.Invoice"]})]
    result = ask(project.model_copy(update={"hooks": hooks}), "How many media types are there?", "viewer", events,
                 **candidates(3))
    assert result.status == "success", result.errors
    assert len(planner_requests(model)) == 1 and not [e for e in events if e.name == "planner.candidates"]


def test_plan_format_candidates_are_sampled_plans(project: Config, model: ModelScript) -> None:
    events: list[Event] = []
    model.plan("List every genre.", GENRES_PLAN)
    result = ask(project, "List every genre.", "viewer", events, **candidates(2, format="plan"))
    assert result.status == "success", result.errors
    plans = [r for r in model.fake.requests if model.fake.name_of(r) == "PlanModel"]
    assert len(plans) == 2 and (plans[1]["temperature"], plans[1]["seed"]) == (0.7, 1)
    assert chosen(events)["groups"] == [2] and chosen(events)["chosen"] == 0


def test_one_candidate_is_the_default(project: Config, model: ModelScript) -> None:
    events: list[Event] = []
    model.queue("text", "SELECT COUNT(*) AS tracks FROM Album", "SELECT COUNT(*) AS tracks FROM Track")
    result = ask(project, "How many tracks are in the catalog?", "viewer", events, plan_cache=False,
                 planner=PlannerSettings(format="sql"))
    assert result.sub_queries[0].rows == [[347]]  # the first answer, right or wrong: one planner call
    assert len(planner_requests(model)) == 1 and not [e for e in events if e.name == "planner.candidates"]
