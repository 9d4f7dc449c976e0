"""The index_build flow on a real (test) Prefect server: tasks per step, events, artifacts, failures."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import yaml

from nl2sql.events import Event
from nl2sql.index import StateStore
from nl2sql.project import load_project

pytestmark = pytest.mark.prefect


@pytest.fixture
def project(demo_dir: Path, tmp_path: Path) -> Path:
    """A copy of the demo project with its own state folder (and a fourth, broken datasource)."""
    target = tmp_path / "project"
    shutil.copytree(demo_dir, target, ignore=shutil.ignore_patterns(".nl2sql"))
    config = yaml.safe_load((target / "nl2sql.yaml").read_text())
    config["datasources"].append({"id": "gone", "url": "sqlite:///data/missing.sqlite"})
    (target / "nl2sql.yaml").write_text(yaml.safe_dump(config))
    return target / "nl2sql.yaml"


def test_flow_builds_publishes_and_reports(prefect_server: None, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    from nl2sql.flows import index as flow_module

    seen: list[Event] = []
    monkeypatch.setattr(flow_module, "forward_to_prefect", seen.append)
    state = flow_module.index_build(config=str(project), return_state=True)
    outcome = state.result()
    assert [b["datasource_id"] for b in outcome["builds"]] == ["chinook", "support", "webanalytics"]
    assert "gone" in outcome["failures"] and "Database file not found" in outcome["failures"]["gone"]

    names = [(e.name, e.data["datasource_id"]) for e in seen]
    # datasources build side by side (the task runner's threads): each one's events come in order
    assert [n for n, ds in names if ds == "chinook"] == ["index.started", "index.swapped"]
    assert ("datasource.failed", "gone") in names and ("index.failed", "gone") in names
    swapped = next(e for e in seen if e.name == "index.swapped" and e.data["datasource_id"] == "support")
    assert swapped.data["counts"]["table"] == 4 and swapped.data["replaced_build_id"] is None

    store = StateStore(load_project(project).state_dir)
    assert store.live_build("chinook").build_id == outcome["builds"][0]["build_id"]

    import asyncio

    async def artifacts() -> list:
        async with get_client() as client:
            flt = ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id]))
            return await client.read_artifacts(artifact_filter=flt)

    kinds = {a.type for a in asyncio.run(artifacts())}
    assert {"markdown", "progress"} <= kinds

    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from nl2sql.index.build import BUILD

    async def task_names() -> set[str]:
        async with get_client() as client:
            runs = await client.read_task_runs(flow_run_filter=FlowRunFilter(
                id=FlowRunFilterId(any_=[state.state_details.flow_run_id])))
            return {run.name.rsplit("-", 1)[0] for run in runs}  # a task run is named `<task>-<suffix>`

    # one task per datasource, and in it one per declared stage; a task run reaches the server by the events of its
    # states, so a failed one may be written a moment after the flow returns
    expected = {"build · chinook", "build · support", "build · webanalytics", "build · gone",
                *(stage.name for stage in BUILD)}
    deadline, seen_names = time.monotonic() + 30, asyncio.run(task_names())
    while seen_names != expected and time.monotonic() < deadline:
        time.sleep(0.5)
        seen_names = asyncio.run(task_names())
    assert seen_names == expected


def test_cli_build_then_retrieve(prefect_server: None, project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.e2e.test_cli import run_cli

    code, out, err = run_cli(capsys, "-c", str(project), "index", "build", "-d", "support", "-d", "chinook")
    assert code == 0, err
    assert "support" in out and "chinook" in out
    code, out, err = run_cli(capsys, "-c", str(project), "retrieve", "How many urgent tickets are still open?",
                             "--role", "admin", "--json")
    assert code == 0, err
    import json

    payload = json.loads(out)
    assert payload["routing"]["picks"][0] == "support"
    assert "tickets" in payload["schema"]["tables"]
    assert set(payload["routing"]["candidates"][0]["evidence"]) == {"dense", "lexical", "names", "bm25"}
    code, out, err = run_cli(capsys, "-c", str(project), "retrieve", "How many urgent tickets are still open?",
                             "--role", "admin")
    assert code == 0, err
    assert "Routing (evidence)" in out and "BM25" in out and "picked" in out
    code, out, _ = run_cli(capsys, "-c", str(project), "index", "versions", "support", "--json")
    assert code == 0 and json.loads(out)[0]["live"] is True


def test_a_dask_worker_drops_only_the_heartbeat_that_met_a_closed_connection() -> None:
    """The preload of each Dask worker: the heartbeat the closing scheduler cuts off prints no traceback; any other
    record of the worker's logger, an error with its traceback included, still prints."""
    import logging

    from nl2sql.flows import dask_worker

    logger = logging.getLogger("distributed.worker")
    dask_worker.dask_setup(worker=None)
    dask_worker.dask_setup(worker=None)  # a second preload adds no second filter
    assert sum(isinstance(f, dask_worker.ClosingHeartbeatFilter) for f in logger.filters) == 1

    def record(message: str, exc: BaseException | None) -> logging.LogRecord:
        info = (type(exc), exc, None) if exc else None
        return logger.makeRecord(logger.name, logging.ERROR, __file__, 1, message, (), info)

    assert not logger.filter(record(dask_worker.HEARTBEAT_FAILED, ConnectionResetError("Stream is closed")))
    assert logger.filter(record(dask_worker.HEARTBEAT_FAILED, None))
    assert logger.filter(record("Unexpected exception during heartbeat. Closing worker.", OSError("x")))
    assert logger.filter(record("Compute Failed", ValueError("bad datasource")))
