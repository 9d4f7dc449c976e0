"""One prompt prefix per datasource and caller scope, byte for byte, across questions and model calls; the model
calls before the planner only where routing leaves the choice open; the rows before the answer in words, to the
asker alone. Through the fake model server over the real wire."""

from __future__ import annotations

from collections.abc import Sequence

from nl2sql.config import Config
from nl2sql.config.models import PlannerSettings
from nl2sql.events import Event
from nl2sql.pipeline.words import ROWS_READY
from tests.support.ask import TICKETS_PLAN, ModelScript, ask_on, runtime_for, text_kind

SQL_FORMAT = {"plan_cache": False, "planner": PlannerSettings(format="sql")}
#: the analyst reads every Chinook table but Employee; the viewer only the catalog
ANALYST_TABLES = ["Album", "Artist", "Customer", "Genre", "Invoice", "InvoiceLine", "MediaType", "Playlist",
                  "PlaylistTrack", "Track"]
DENIED_TO_VIEWER = ["Customer", "Employee", "Invoice", "InvoiceLine"]


def ask(config: Config, question: str, role: str, events: list[Event] | None = None, **settings: object):
    return ask_on(runtime_for(config, **{**SQL_FORMAT, **settings}), question, role, events)


def chinook_requests(model: ModelScript) -> list[dict]:
    """Every request about Chinook (its tables open the first user message), in order."""
    return [r for r in model.fake.requests if _user(r).startswith(("CREATE TABLE Album", "CREATE TABLE Artist"))]


def _user(request: dict) -> str:
    return next(m["content"] for m in request["messages"] if m["role"] == "user")


def common_prefix(texts: Sequence[str]) -> str:
    """The characters every text begins with."""
    first, *rest = texts
    end = len(first)
    for text in rest:
        end = next((i for i, (a, b) in enumerate(zip(first[:end], text, strict=False)) if a != b),
                   min(end, len(text)))
    return first[:end]


def test_every_call_about_a_datasource_begins_with_the_same_bytes(project: Config, model: ModelScript) -> None:
    # a plain question (planner, then the answer), one the refiner fixes, one routing leaves to the answerability
    # check, one the decomposer splits: five kinds of call, each begins with Chinook's prefix for the analyst
    first, refined = "Which genres have the longest tracks on average?", "List the genre names that start with R."
    checked, split = "Which employees support the most customers?", "Support tickets per customer, with the country"
    model.sql[first] = ("SELECT g.Name AS genre, AVG(t.Milliseconds) AS ms FROM Track t JOIN Genre g "
                        "ON g.GenreId = t.GenreId GROUP BY g.Name ORDER BY ms DESC")
    model.sql[refined] = "SELECT Name FROM Genre WHERE Name GLOB 'R*'"
    model.refined_sql[refined] = "SELECT g.Name AS name FROM Genre g WHERE g.Name LIKE 'R%'"
    model.routes[checked] = ["chinook"]
    model.sql[checked] = "SELECT c.SupportRepId AS rep, COUNT(*) AS customers FROM Customer c GROUP BY c.SupportRepId"
    model.routes[split] = ["chinook", "support"]
    model.decompositions[split] = {"sub_queries": [
        {"datasource_id": "chinook", "question": "Each customer's id and country", "expected_columns": []},
        {"datasource_id": "support", "question": "Tickets per customer id", "expected_columns": []}], "combine": None}
    model.sql["Each customer's id and country"] = "SELECT CustomerId AS customer_id, Country AS country FROM Customer"
    model.plans["Tickets per customer id"] = TICKETS_PLAN
    model.sql["Tickets per customer id"] = ("SELECT t.customer_id, COUNT(*) AS tickets FROM tickets t "
                                            "GROUP BY t.customer_id")
    for question in (first, refined, checked, split):
        assert ask(project, question, "analyst").status == "success", question

    requests = chinook_requests(model)
    kinds = {model.fake.name_of(r) if model.fake.name_of(r) != "text" else text_kind(r) for r in requests}
    assert kinds == {"Answerability", "Decomposition", "sql_planner", "sql_refiner", "synthesizer"}
    assert len({r["messages"][0]["content"] for r in requests}) == 1  # one system message for every node
    shared = common_prefix([_user(r) for r in requests])
    assert shared.count("CREATE TABLE ") == len(ANALYST_TABLES)  # every table the analyst reads, whole, in all
    # then the worked examples, the same for every question (settings.pipeline.planner.examples_chosen: fixed)
    assert "-- Answered before on this database:" in shared and shared.rstrip().endswith(";")
    assert "Employee" not in shared.split("-- Answered before")[0]
    # the support desk, which the decomposer writes a question for and no query, as its tables' names and columns
    split_request = next(r for r in requests if model.fake.name_of(r) == "Decomposition")
    others = _user(split_request).split("The other databases:")[1].split("Decide whether")[0]
    assert "tickets(" in others and "customer_id" in others
    assert "CREATE TABLE" not in others and "e.g." not in others and "INTEGER" not in others.upper()


def test_another_scope_has_its_own_prefix_without_the_tables_it_may_not_read(project: Config,
                                                                               model: ModelScript) -> None:
    question = "How many albums does each artist have?"
    model.sql[question] = ("SELECT ar.Name AS artist, COUNT(*) AS albums FROM Album al JOIN Artist ar "
                           "ON ar.ArtistId = al.ArtistId GROUP BY ar.ArtistId, ar.Name")
    for role in ("viewer", "viewer", "analyst"):
        assert ask(project, question, role).status == "success"
    viewer_first, viewer_again, analyst = (_user(r) for r in chinook_requests(model)
                                           if text_kind(r) == "sql_planner")
    assert viewer_first == viewer_again  # the same question and scope: the same prompt, byte for byte
    viewer_tables = viewer_first.split("\n\n-- Using valid")[0]
    assert not any(f"CREATE TABLE {t} " in viewer_tables for t in DENIED_TO_VIEWER)
    assert not analyst.startswith(viewer_tables)  # a scope that reads more tables has another prefix
    assert all(f"CREATE TABLE {t} " in analyst for t in ("Customer", "Invoice"))


def test_a_sure_pick_skips_the_models_before_the_planner_and_a_close_call_gets_them(project: Config,
                                                                                    model: ModelScript) -> None:
    sure = "What is the average invoice total per month?"  # webanalytics a distant second, named by no word
    model.sql[sure] = ("SELECT strftime('%Y-%m', InvoiceDate) AS month, AVG(Total) AS average FROM Invoice "
                       "GROUP BY month")
    result = ask(project, sure, "analyst")
    assert result.status == "success" and result.sub_queries[0].datasource_id == "chinook"
    assert model.fake.calls("Answerability") == 0 and model.fake.calls("Decomposition") == 0

    close = "Which employees support the most customers?"  # support within 0.8 of chinook's score
    model.routes[close] = ["chinook"]
    model.sql[close] = "SELECT c.SupportRepId AS rep, COUNT(*) AS customers FROM Customer c GROUP BY c.SupportRepId"
    assert ask(project, close, "analyst").status == "success"
    assert model.fake.calls("Answerability") == 1

    routing = project.settings.routing.model_copy(update={"ask_models_above": 0.0})
    asked_always = project.model_copy(update={"settings": project.settings.model_copy(update={"routing": routing})})
    model.routes[sure] = ["chinook"]
    assert ask(asked_always, sure, "analyst").status == "success"
    assert model.fake.calls("Answerability") == 2  # 0: asked whenever routing picks more than one


def test_the_rows_reach_the_asker_before_the_sentence_and_no_event_holds_them(project: Config,
                                                                             model: ModelScript) -> None:
    question = "How many tracks does each media type hold, before the sentence?"
    model.sql[question] = ("SELECT m.Name AS media_type, COUNT(*) AS tracks FROM Track t JOIN MediaType m "
                           "ON m.MediaTypeId = t.MediaTypeId GROUP BY m.Name")
    model.answers[question] = "MPEG audio files hold the most tracks."
    heard: list[Event] = []
    result = ask_on(runtime_for(project, **SQL_FORMAT), question, "viewer", heard)
    stored = runtime_for(project)
    try:
        trace = stored.store.trace(result.trace_id)
    finally:
        stored.close()
    assert result.status == "success" and trace is not None
    names = [e.name for e in heard]
    assert names.index(ROWS_READY) < names.index("answer.delta")  # the rows, then the sentence
    rows = heard[names.index(ROWS_READY)]
    assert rows.data["columns"] == ["media_type", "tracks"] and rows.data["total_rows"] == 5
    assert rows.data["sub_queries"][0]["sql"] == result.sub_queries[0].sql
    assert sorted(map(tuple, rows.data["rows"])) == sorted(map(tuple, result.sub_queries[0].rows))
    assert ROWS_READY not in trace["events"]  # the asker's alone: never an event of the run's bus
