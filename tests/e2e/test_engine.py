"""The library facade, `nl2sql.Engine`, as a Python caller uses it: the caller decides every answer, inline runs
stream their own events, retrieval, evaluation, and the errors a caller can act on."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from nl2sql.config import Config
from nl2sql.engine import Engine
from nl2sql.errors import SecurityViolation, UnknownNameError
from nl2sql.policies.users import IdentityError
from tests.support.ask import ModelScript

ROOT = Path(__file__).resolve().parents[2]


def test_retrieve_routes_for_the_caller(project: Config) -> None:
    with Engine(project) as engine:
        found = engine.retrieve("How many urgent tickets are still open?", role="support")
        assert found.routing.picks[0] == "support" and found.retrieved is not None
        assert "tickets" in found.retrieved.table_names()
        viewer = engine.retrieve("How many urgent tickets are still open?", role="viewer")
        assert viewer.retrieved is None or viewer.retrieved.datasource_id == "chinook"  # the only one it reaches


def test_evaluate_runs_a_suite_in_this_process(project: Config) -> None:
    with Engine(project) as engine:
        report = engine.evaluate(ROOT / "suites" / "chinook.yaml", mode="retrieval", limit=3, roles=["analyst"])
    assert report.mode == "retrieval" and report.suite["cases"] == 3
    [board] = report.boards.values()
    assert board.runs == 3 and board.retrieval and board.retrieval["table_recall"] > 0


def test_streams_of_two_questions_at_once_hear_their_own_events(project: Config, model: ModelScript) -> None:
    with Engine(project) as engine:
        first = engine.stream("How much did we earn in each year?", role="analyst")
        second = engine.stream("How many urgent tickets are still open?", role="support")
        heard: dict[str, list] = {}
        readers = [threading.Thread(target=lambda s=s, k=k: heard.__setitem__(k, list(s)))
                   for k, s in (("first", first), ("second", second))]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(timeout=60)
    assert first.result and second.result and first.result.trace_id != second.result.trace_id
    assert {e.trace_id for e in heard["first"]} == {first.result.trace_id}
    assert {e.trace_id for e in heard["second"]} == {second.result.trace_id}
    assert heard["first"][-1].name == "run.finished" and heard["first"][-1].data["status"] == "success"


def test_the_caller_is_checked_before_anything_runs(project: Config, model: ModelScript) -> None:
    with Engine(project) as engine:
        with pytest.raises(UnknownNameError, match="superuser"):
            engine.ask("How much did we earn in each year?", role="superuser")
        with pytest.raises(UnknownNameError, match="executor"):
            engine.ask("How much did we earn in each year?", role="analyst", executor="dask")  # type: ignore[arg-type]
        with pytest.raises(SecurityViolation):
            engine.schema("support", role="viewer")
        assert model.fake.calls() == 0
    policies = type(project.policies).model_validate({**project.policies.model_dump(),
                                                      "users": {"ann": {"roles": ["viewer"]}}})
    with Engine(project.model_copy(update={"policies": policies})) as engine:
        with pytest.raises(IdentityError):
            engine.ask("How much did we earn in each year?", role="analyst")  # no user id
        with pytest.raises(IdentityError):
            engine.sql("SELECT 1", datasource="chinook", user="ann", role="analyst")  # not one of ann's roles
        assert engine.role_of("ann") == "viewer"
        assert engine.ask("How much did we earn in each year?", user="ann").errors[0].code == "SECURITY_VIOLATION"
