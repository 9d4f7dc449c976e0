"""The ask flow on a Prefect server: same results as the inline executor, a task run per step, run states."""

from __future__ import annotations

import json
import time

import pytest

from nl2sql.config import Config
from nl2sql.llm.fake import FakeLLMServer
from nl2sql.pipeline import QueryResult, ask_inline
from tests.support.ask import INVOICE_PLAN, ModelScript, runtime_for, write_ask_project

pytestmark = [pytest.mark.prefect, pytest.mark.usefixtures("prefect_server")]

CROSS = "Support tickets opened per customer, with the customer's country"
#: The demo questions run through both executors: (question, role).
DEMO_QUESTIONS = [
    ("How much did we earn in each year?", "analyst"),            # verified
    ("Which customers live in Germany?", "support"),              # verified, a parameter
    ("How many urgent tickets are still open?", "support"),       # verified, on support
    ("How many tracks does each playlist hold?", "analyst"),      # planned
    ("Which artists have the most albums?", "viewer"),            # planned, the catalog role
    ("What is the total of all invoices ever?", "viewer"),        # refused
    (CROSS, "analyst"),                                           # two databases joined
]


@pytest.fixture(scope="module")
def project(fake: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Config:
    return write_ask_project(tmp_path_factory.mktemp("ask-flow"), fake, plan_cache=False)


@pytest.fixture
def model(fake: FakeLLMServer) -> ModelScript:
    script = ModelScript(fake)
    script.plan("What is the total of all invoices ever?", INVOICE_PLAN)
    script.split_by_customer(CROSS, combine={"kind": "join", "left": 0, "right": 1,
                                            "join_keys": [{"left": "customer_id", "right": "customer_id"}]})
    return script


def comparable(result: QueryResult) -> dict:
    """A result without what differs between any two runs (ids, clocks)."""
    clocks = {"duration_ms", "model_ms", "time_to_sql_ms", "time_to_rows_ms", "time_to_answer_ms"}
    data = result.model_dump(mode="json", exclude={"trace_id", *clocks})
    return data


def run_flow(config: Config, question: str, role: str, **kwargs: object):
    from nl2sql.flows.ask import ask_here

    return ask_here(question, role=role, config=str(config.path), **kwargs)


def test_the_flow_and_the_inline_executor_give_identical_results(project: Config, model: ModelScript) -> None:
    runtime = runtime_for(project)
    try:
        for question, role in DEMO_QUESTIONS:
            inline = ask_inline(runtime, question, roles=[role])
            flowed = run_flow(project, question, role)
            assert comparable(flowed) == comparable(inline), question
            assert inline.status in ("success", "error")
    finally:
        runtime.close()
    statuses = {q: ask_inline(runtime_for(project), q, roles=[r]).status for q, r in DEMO_QUESTIONS[:1]}
    assert statuses == {"How much did we earn in each year?": "success"}


def test_each_step_is_a_task_run_and_the_flow_run_id_is_the_trace_id(project: Config, model: ModelScript) -> None:
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    result = run_flow(project, CROSS, "analyst")
    assert result.status == "success", result.errors
    expected = 5 + 2 * 6 + 2  # the steps before and after, six per sub-query, and each sub-query's own run
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(result.trace_id)
        deadline = time.monotonic() + 20
        while True:  # the server records task runs from their events, a moment after they finish
            tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])))
            if (len(tasks) >= expected and all(t.state and t.state.is_final() for t in tasks)) or \
                    time.monotonic() > deadline:
                break
            time.sleep(0.5)
    assert run.state.is_completed() and run.name.startswith("Support tickets opened")
    names = {t.name for t in tasks}
    # named as the CLI names the steps
    assert {"verified queries", "routing", "decomposing", "combined", "answer"} <= names
    for step in ("schema", "plan", "validated", "SQL", "ran", "checked"):
        assert {f"{step} · sq1 (chinook)", f"{step} · sq2 (support)"} <= names
    # the sub-queries were handed to the flow's task runner, each its own task run holding its steps
    assert {"sub-query · sq1 (chinook)", "sub-query · sq2 (support)"} <= names
    parents = {t.name: t.id for t in tasks}
    planner = next(t for t in tasks if t.name == "plan · sq2 (support)")
    assert [p.id for p in planner.task_inputs["__parents__"]] == [parents["sub-query · sq2 (support)"]]
    assert all(t.state.is_completed() for t in tasks)


def test_the_run_shows_a_person_the_answer_the_sql_the_rows_and_its_steps(project: Config, model: ModelScript) -> None:
    """What the Prefect UI shows of a run (the demo's settings.prefect.artifact_rows is on): the answer sentence,
    the SQL on short lines, the rows as a table artifact, and the steps in the run's log in the CLI's words."""
    import asyncio

    from prefect import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        LogFilter,
        LogFilterFlowRunId,
    )

    assert project.settings.prefect.artifact_rows
    result = run_flow(project, "How much did we earn in each year?", "analyst")
    assert result.status == "success", result.errors

    async def read() -> tuple[dict, list[str]]:
        async with get_client() as client:
            deadline = time.monotonic() + 20
            while True:  # logs reach the server in batches
                artifacts = await client.read_artifacts(artifact_filter=ArtifactFilter(
                    flow_run_id=ArtifactFilterFlowRunId(any_=[result.trace_id])))
                logs = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(
                    any_=[result.trace_id])))
                messages = [entry.message for entry in logs]
                # the run's own last line (Prefect's "Finished in state …" may come in an earlier batch)
                if any(m.startswith("Finished: ") for m in messages) or time.monotonic() > deadline:
                    return {a.type: a for a in artifacts}, messages
                await asyncio.sleep(0.5)

    artifacts, messages = asyncio.run(read())
    markdown = artifacts["markdown"].data
    assert f"**Answer:** {result.answer.content}" in markdown
    sql = markdown.split("```sql\n", 1)[1].split("\n```", 1)[0]
    assert len(sql.splitlines()) > 3 and max(len(line) for line in sql.splitlines()) < 100  # laid out, not one line
    table = artifacts["table"]
    assert table.key == f"rows-{result.trace_id}" and len(json.loads(table.data)) == result.sub_queries[0].total_rows
    assert table.task_run_id is None  # the run's own, beside the answer on its Artifacts tab, though the answer step made it
    assert json.loads(table.data)[0]["year"] == result.sub_queries[0].rows[0][0]
    assert any("✓ verified queries" in m for m in messages) and any("✓ ran · sq1" in m for m in messages)
    assert any(m.startswith("Asked by") and "as analyst" in m for m in messages)
    assert any(m.startswith("Finished: success.") for m in messages)


def test_the_engine_streams_a_flow_runs_events_and_returns_its_result(project: Config, model: ModelScript) -> None:
    from prefect import get_client

    from nl2sql.engine import Engine

    model.answers["How many tracks does each playlist hold?"] = "Music and 90’s Music hold the most."
    with Engine(project) as engine:
        stream = engine.stream("How many tracks does each playlist hold?", role="analyst", executor="prefect")
        events = list(stream)
    result = stream.result
    assert result is not None and result.status == "success", result
    assert {e.trace_id for e in events} == {result.trace_id}  # this run's events, and only them
    assert events[0].name == "run.started" and events[-1].name == "run.finished"
    finished = [e.data["node"] for e in events if e.name == "node.finished"]
    assert finished[:2] == ["curated_matcher", "resolver"] and "sanity" in finished
    assert "".join(e.data["text"] for e in events if e.name == "answer.delta").strip() == result.answer.content
    with get_client(sync_client=True) as client:  # a flow run of the ask flow, its id the trace id
        assert str(client.read_flow_run(result.trace_id).id) == result.trace_id


def test_a_refused_question_completes_the_flow_run_with_the_status_on_the_result(project: Config,
                                                                                 model: ModelScript) -> None:
    from prefect import get_client

    result = run_flow(project, "What is the total of all invoices ever?", "viewer")
    assert result.status == "error" and result.errors[0].code == "SECURITY_VIOLATION"
    with get_client(sync_client=True) as client:
        assert client.read_flow_run(result.trace_id).state.is_completed()


def test_an_engine_fault_fails_the_flow_run(project: Config, model: ModelScript,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from nl2sql.flows.ask import ask
    from nl2sql.pipeline import run

    def broken(*args: object) -> None:
        raise RuntimeError("disk on fire at luis@example.com")

    monkeypatch.setattr(run, "build_result", broken)
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        state = ask("How much did we earn in each year?", role="analyst", config=str(project.path),
                    return_state=True)
    assert state.is_failed()
    assert "RuntimeError" in state.message and "luis@" not in state.message  # Prefect keeps the type only


def test_the_run_events_reach_prefect_related_to_the_flow_run(project: Config, model: ModelScript) -> None:
    import httpx
    from prefect.settings import PREFECT_API_URL

    result = run_flow(project, "How much did we earn in each year?", "analyst")
    body = {"filter": {"event": {"prefix": ["nl2sql."]},
                       "related": {"resources_in_roles": [[f"prefect.flow-run.{result.trace_id}", "flow-run"]]},
                       "order": "ASC"}, "limit": 50}
    names: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "nl2sql.run.finished" not in names:  # the server stores events in batches
        time.sleep(1)
        response = httpx.post(f"{PREFECT_API_URL.value()}/events/filter", json=body, timeout=10)
        response.raise_for_status()
        names = [e["event"] for e in response.json()["events"]]
    assert names[0] == "nl2sql.run.started" and "nl2sql.run.finished" in names
    assert "nl2sql.node.finished" in names
