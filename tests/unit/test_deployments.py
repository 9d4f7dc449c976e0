"""The deployments are one declaration (`flows/deployments.py`): what `nl2sql serve` serves, what `nl2sql
deployments write` writes into a project's prefect.yaml, and the repository's own prefect.yaml."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nl2sql.config import Config
from nl2sql.errors import ConfigError
from nl2sql.flows.deployments import CORE_DEPLOYMENTS, TIMEZONE, eval_deployments, project_deployments
from nl2sql.project import load_project

ROOT = Path(__file__).resolve().parents[2]
#: What the repository's prefect.yaml deploys: the core deployments and the evals on the Chinook suite.
REPOSITORY = CORE_DEPLOYMENTS + eval_deployments("suites/chinook.yaml", "benchmarks")


def test_prefect_yaml_lists_the_declared_deployments() -> None:
    written = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
    assert [d["name"] for d in written] == [spec.name for spec in REPOSITORY]
    for entry, spec in zip(written, REPOSITORY, strict=True):
        assert entry["entrypoint"] == spec.entrypoint, spec.name
        assert entry["description"] == spec.description, spec.name
        assert entry.get("parameters", {}) == spec.parameters, spec.name
        schedules = entry.get("schedules", [])
        assert schedules == ([{"cron": spec.cron, "timezone": TIMEZONE}] if spec.cron else []), spec.name
        assert entry["work_pool"]["name"] == "nl2sql"


@pytest.mark.parametrize("spec", REPOSITORY, ids=lambda s: s.name)
def test_each_deployment_names_a_flow_that_takes_its_parameters(spec) -> None:
    import inspect

    from nl2sql.flows.deployments import load_flow

    assert ".py" not in spec.entrypoint and ":" in spec.entrypoint  # imported, never read from a file path
    flow = load_flow(spec.entrypoint)
    accepted = inspect.signature(flow.fn).parameters
    assert set(spec.parameters) <= set(accepted), spec.name
    required = {n for n, p in accepted.items() if p.default is inspect.Parameter.empty} - set(spec.parameters)
    expected = {"ask": {"question"}, "eval-full": {"max_cost_usd"}}.get(spec.name, set())
    assert required == expected, spec.name  # what the run form asks for before a run may start
    for name in ("suite", "baseline"):
        if name in spec.parameters:
            assert (ROOT / spec.parameters[name]).exists(), f"{spec.name}: {spec.parameters[name]}"


def _project_with_evals(demo_dir: Path, target: Path, evals: str) -> Config:
    """A copy of the demo project whose configuration ends with `evals`, and a suite and records beside it."""
    shutil.copytree(demo_dir, target)
    (target / "suites").mkdir()
    shutil.copyfile(ROOT / "suites" / "chinook.yaml", target / "suites" / "chinook.yaml")
    (target / "records").mkdir()
    config = target / "nl2sql.yaml"
    config.write_text(config.read_text() + "\n" + evals + "\n")
    return load_project(config)


def test_the_demo_names_no_suite_so_it_has_no_eval_deployments(demo_config: Config) -> None:
    assert project_deployments(demo_config) == CORE_DEPLOYMENTS


def test_the_eval_deployments_take_suite_and_baseline_from_the_configuration(demo_dir: Path, tmp_path: Path) -> None:
    config = _project_with_evals(demo_dir, tmp_path / "p", "evals: {suites: [suites/chinook.yaml], "
                                 "baseline_dir: records}")
    evals = {spec.name: spec.parameters for spec in project_deployments(config)[len(CORE_DEPLOYMENTS):]}
    suite, records = str((tmp_path / "p" / "suites" / "chinook.yaml").resolve()), str((tmp_path / "p" / "records").resolve())
    assert evals == {"eval-retrieval": {"mode": "retrieval", "suite": suite, "baseline": records},
                     "eval-plans": {"mode": "plans", "suite": suite, "baseline": records},
                     "eval-full": {"suite": suite, "baseline": records}}
    relative = project_deployments(config, relative_to=tmp_path / "p")[-1].parameters
    assert relative == {"suite": "suites/chinook.yaml", "baseline": "records"}


def test_a_default_baseline_folder_that_is_missing_leaves_the_evals_ungated(demo_dir: Path, tmp_path: Path) -> None:
    config = _project_with_evals(demo_dir, tmp_path / "p", "evals: {suites: [suites/chinook.yaml]}")
    plans = {spec.name: spec for spec in project_deployments(config)}["eval-plans"]
    assert "baseline" not in plans.parameters and "ungated" in plans.description


@pytest.mark.parametrize(("evals", "key"), [
    ("evals: {suites: [suites/nosuch.yaml]}", "evals.suites[0]"),
    ("evals: {suites: [suites/chinook.yaml], baseline_dir: nosuch}", "evals.baseline_dir"),
])
def test_a_suite_or_baseline_that_is_not_there_is_a_config_error(demo_dir: Path, tmp_path: Path, evals: str,
                                                                 key: str) -> None:
    config = _project_with_evals(demo_dir, tmp_path / "p", evals)
    with pytest.raises(ConfigError) as caught:
        project_deployments(config)
    assert key in str(caught.value) and "nosuch" in str(caught.value)


def test_deployments_write_writes_the_projects_prefect_yaml(demo_dir: Path, tmp_path: Path) -> None:
    _project_with_evals(demo_dir, tmp_path / "p", "evals: {suites: [suites/chinook.yaml], baseline_dir: records}")
    nl2sql = [str(Path(sys.executable).parent / "nl2sql"), "deployments", "write"]
    wrote = subprocess.run(nl2sql, cwd=tmp_path / "p", capture_output=True, text=True, timeout=120)
    assert wrote.returncode == 0, wrote.stdout + wrote.stderr
    written = yaml.safe_load((tmp_path / "p" / "prefect.yaml").read_text())
    assert written["pull"] == [{"prefect.deployments.steps.set_working_directory":
                                {"directory": str((tmp_path / "p").resolve())}}]
    by_name = {d["name"]: d for d in written["deployments"]}
    assert list(by_name) == ["ask", "index-build", "drift-check", "storage-purge", "eval-retrieval", "eval-plans",
                             "eval-full"]
    assert by_name["ask"]["entrypoint"] == "nl2sql.flows.ask:ask"
    assert by_name["ask"]["work_pool"] == {"name": "nl2sql", "job_variables": {"env": {"NL2SQL_CONFIG": "nl2sql.yaml"}}}
    assert by_name["drift-check"]["schedules"] == [{"cron": "0 2 * * *", "timezone": "UTC"}]
    assert by_name["eval-retrieval"]["schedules"] == [{"cron": "0 3 * * *", "timezone": "UTC"}]
    assert by_name["eval-plans"]["parameters"] == {"mode": "plans", "suite": "suites/chinook.yaml",
                                                   "baseline": "records"}

    again = subprocess.run(nl2sql, cwd=tmp_path / "p", capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "--force" in again.stderr and "Traceback" not in again.stderr
