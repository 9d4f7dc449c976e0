"""The drift-check flow on a real (test) Prefect server: a report artifact per datasource, `schema.drifted` once
per distinct drift with counts only, and a status per datasource in its result."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from nl2sql.events import Event

pytestmark = pytest.mark.prefect


@pytest.fixture
def project(demo_dir: Path, tmp_path: Path) -> Path:
    """A copy of the demo project with its own state folder."""
    target = tmp_path / "project"
    shutil.copytree(demo_dir, target, ignore=shutil.ignore_patterns(".nl2sql"))
    return target / "nl2sql.yaml"


def test_drift_is_reported_per_datasource_and_published_once(prefect_server: None, project: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    from nl2sql.flows import drift as drift_module
    from nl2sql.flows.index import index_build

    index_build(datasource_ids=["support"], config=str(project))
    seen: list[Event] = []
    monkeypatch.setattr(drift_module, "forward_to_prefect", seen.append)
    first = drift_module.drift_check(config=str(project))
    assert [(r["datasource_id"], r["status"]) for r in first["reports"]] == [
        ("chinook", "not_indexed"), ("support", "unchanged"), ("webanalytics", "not_indexed")]
    assert first["exit_code"] == 0 and not [e for e in seen if e.name == "schema.drifted"]

    with sqlite3.connect(project.parent / "data" / "support.sqlite") as conn:
        conn.execute("ALTER TABLE tickets RENAME COLUMN status TO state")
    state = drift_module.drift_check(datasource_ids=["support"], config=str(project), return_state=True)
    second = state.result()
    assert second["exit_code"] == 1 and second["reports"][0]["status"] == "drifted"
    [drifted] = [e for e in seen if e.name == "schema.drifted"]
    assert drifted.data == {"datasource_id": "support", "changes": {"added_columns": 1, "removed_columns": 1,
                                                                      "renamed_columns": 1},
                            "impact": {"verified_queries": 1, "example_questions": 0, "policy_patterns": 0,
                                       "eval_cases": 0},
                            "failed_expectations": 3}

    async def artifacts() -> dict[str, str]:
        async with get_client() as client:
            flt = ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id]))
            return {a.key: a.data for a in await client.read_artifacts(artifact_filter=flt)}

    report = asyncio.run(artifacts())["drift-support"]
    assert "column renamed: `tickets.status` → `tickets.state`" in report and "How many {priority} tickets" in report

    drift_module.drift_check(datasource_ids=["support"], config=str(project))  # the same drift: not again
    assert len([e for e in seen if e.name == "schema.drifted"]) == 1
