"""The eval flow: one task run per case and role, the report as artifacts."""

from __future__ import annotations

import time

import pytest

from nl2sql.config import Config
from nl2sql.evaluation.run import eval_jobs
from nl2sql.evaluation.suite import load_suite
from tests.e2e.test_evals import CHINOOK

pytestmark = [pytest.mark.prefect, pytest.mark.usefixtures("prefect_server")]


def test_the_eval_flow_runs_a_task_per_case_and_role(project: Config) -> None:
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from nl2sql.flows.evals import eval_run

    suite = load_suite(CHINOOK)
    ids = [c.id for c in suite.select()[:3]]
    state = eval_run("plans", str(CHINOOK), config=str(project.path), ids=ids, return_state=True)
    report = state.result()
    expected = len(eval_jobs(suite.select(ids=ids), "plans"))
    assert report["boards"]["default"]["runs"] == expected and report["metrics"]["execution_accuracy"] == 1.0
    with get_client(sync_client=True) as client:
        run_filter = FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
        deadline = time.monotonic() + 20
        while True:  # task runs are recorded from their events, a moment after they finish
            tasks = client.read_task_runs(flow_run_filter=run_filter)
            if len(tasks) >= expected or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    assert len(tasks) == expected and all(t.name.startswith(tuple(ids)) for t in tasks)
