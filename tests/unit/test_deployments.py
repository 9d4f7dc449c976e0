"""prefect.yaml and the deployments `nl2sql serve` serves are one declaration (`flows/deployments.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nl2sql.flows.deployments import DEPLOYMENTS, TIMEZONE

ROOT = Path(__file__).resolve().parents[2]


def test_prefect_yaml_lists_the_declared_deployments() -> None:
    written = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
    assert [d["name"] for d in written] == [spec.name for spec in DEPLOYMENTS]
    for entry, spec in zip(written, DEPLOYMENTS, strict=True):
        assert entry["entrypoint"] == spec.entrypoint, spec.name
        assert entry["description"] == spec.description, spec.name
        assert entry.get("parameters", {}) == spec.parameters, spec.name
        schedules = entry.get("schedules", [])
        assert schedules == ([{"cron": spec.cron, "timezone": TIMEZONE}] if spec.cron else []), spec.name
        assert entry["work_pool"]["name"] == "nl2sql"


@pytest.mark.parametrize("spec", DEPLOYMENTS, ids=lambda s: s.name)
def test_each_deployment_names_a_flow_that_takes_its_parameters(spec) -> None:
    import inspect

    from nl2sql.flows.deployments import load_flow

    flow = load_flow(spec.entrypoint)
    accepted = inspect.signature(flow.fn).parameters
    assert set(spec.parameters) <= set(accepted), spec.name
    required = {n for n, p in accepted.items() if p.default is inspect.Parameter.empty} - set(spec.parameters)
    expected = {"ask": {"question"}, "eval-full": {"max_cost_usd"}}.get(spec.name, set())
    assert required == expected, spec.name  # what the run form asks for before a run may start
    for name in ("suite", "baseline"):
        if name in spec.parameters:
            assert (ROOT / spec.parameters[name]).exists(), f"{spec.name}: {spec.parameters[name]}"
