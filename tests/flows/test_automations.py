"""The project's automations on a real `prefect server start`: applied twice (the same automations), a drift runs
the eval-retrieval deployment, a failed eval run calls the failures' webhook."""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from nl2sql.config import Config
from tests.e2e.test_exit_codes import broken_copy
from tests.flows.test_approvals import _drain_workers, wait_for

pytestmark = [pytest.mark.prefect, pytest.mark.slow]


class _Receiver(BaseHTTPRequestHandler):
    received: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        _Receiver.received.append(json.loads(body or b"{}"))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from tests.support.prefect_server import steady_prefect_server

    with steady_prefect_server(tmp_path_factory.mktemp("prefect-server")) as (api, _), \
            temporary_settings(updates={PREFECT_API_URL: api}):
        yield api
        _drain_workers()  # while the server still answers: a worker left holding its events blocks later modules


@pytest.fixture
def receiver() -> Iterator[str]:
    http = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{http.server_address[1]}/alerts"
    finally:
        http.shutdown()


def _flow_runs_of(deployment_id: object) -> list:
    from prefect import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    with get_client(sync_client=True) as client:
        return client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])))


def test_drift_runs_eval_retrieval_and_a_failed_eval_calls_the_webhook(server: str, receiver: str, project: Config,
                                                                       demo_dir: Path, tmp_path: Path) -> None:
    from nl2sql.events.prefect_automations import (
        DRIFT_AUTOMATION_NAME,
        FAILURES_AUTOMATION_NAME,
        apply_automations,
    )
    from nl2sql.flows.drift import drift_check
    from nl2sql.flows.evals import eval_run
    from nl2sql.flows.index import index_build

    skipped = {a.name: a.skipped for a in apply_automations(None, receiver)}
    assert "not deployed" in (skipped[DRIFT_AUTOMATION_NAME] or "") and skipped[FAILURES_AUTOMATION_NAME] is None
    deployment_id = eval_run.to_deployment(name="eval-retrieval", parameters={
        "mode": "retrieval", "suite": "suites/chinook.yaml", "baseline": "benchmarks"}).apply()
    first = {a.name: a for a in apply_automations(None, receiver)}
    again = {a.name: a for a in apply_automations(None, receiver)}  # idempotent: the same ones, updated
    assert first[DRIFT_AUTOMATION_NAME].automation_id == again[DRIFT_AUTOMATION_NAME].automation_id
    assert not again[DRIFT_AUTOMATION_NAME].created and not again[FAILURES_AUTOMATION_NAME].created
    time.sleep(2)  # the server loads new automations on its next refresh

    target = tmp_path / "drifting"
    shutil.copytree(demo_dir, target, ignore=shutil.ignore_patterns(".nl2sql"))
    index_build(datasource_ids=["support"], config=str(target / "nl2sql.yaml"))
    with sqlite3.connect(target / "data" / "support.sqlite") as conn:
        conn.execute("ALTER TABLE tickets RENAME COLUMN status TO state")
    assert drift_check(datasource_ids=["support"], config=str(target / "nl2sql.yaml"))["exit_code"] == 1
    runs = wait_for("a run of eval-retrieval", lambda: _flow_runs_of(deployment_id), timeout=30)
    assert runs[0].parameters["mode"] == "retrieval"

    broken, records = broken_copy(tmp_path)
    state = eval_run("plans", str(broken), config=str(project.path), roles=["admin"], baseline=str(records),
                     return_state=True)
    assert state.is_failed() and "went from pass to fail" in (state.message or "")
    got = wait_for("the failures' webhook", lambda: [b for b in _Receiver.received if b.get("flow") == "eval-run"],
                   timeout=30)
    assert got[0]["run_id"] == str(state.state_details.flow_run_id) and "went from pass to fail" in got[0]["message"]
