"""The deployments as CI and a team use them: a PostgreSQL-backed `prefect server start` on loopback, `prefect
--no-prompt deploy --all` from the repository, a process worker, and `prefect deployment run … --watch`, whose exit
code is the run's state (0 Completed, 1 Failed); then `nl2sql serve` answering a question started by
`prefect deployment run 'ask/ask'`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nl2sql.config import Config
from nl2sql.errors import GENERIC_REFUSAL
from tests.e2e.test_exit_codes import broken_copy
from tests.support.ask import ModelScript

pytestmark = [pytest.mark.slow, pytest.mark.prefect, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)  # a worker ignores SIGTERM for 15 s; SIGINT stops it
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A Prefect server on PostgreSQL (SQLite stalls under many task runs) and the environment that reaches it."""
    from tests.support.postgres import server_available
    from tests.support.prefect_server import steady_prefect_server

    reason = server_available()
    if reason:
        pytest.skip(reason)
    with steady_prefect_server(tmp_path_factory.mktemp("prefect-server")) as (_, env):
        quick = {**env, "PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_RUNNER_POLL_FREQUENCY": "1", "COLUMNS": "200"}
        quick.pop("CI", None)
        yield quick


def run(args: list[str], env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """A command from the repository's root, as CI runs it."""
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def test_ci_runs_the_eval_deployments_and_fails_on_a_regression(server: dict[str, str], project: Config,
                                                                 tmp_path: Path) -> None:
    prefect = str(BIN / "prefect")
    created = run([prefect, "work-pool", "create", "nl2sql", "--type", "process"], server)
    assert created.returncode == 0, created.stdout + created.stderr
    deployed = run([prefect, "--no-prompt", "deploy", "--all"], server)
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    worker = _start([prefect, "worker", "start", "--pool", "nl2sql"], server, tmp_path / "worker.log")
    try:
        config = f"config={project.path}"
        passed = run([prefect, "deployment", "run", "eval-run/eval-plans", "--param", config, "--watch"], server)
        assert passed.returncode == 0, passed.stdout + passed.stderr + (tmp_path / "worker.log").read_text()
        assert "Completed" in passed.stdout

        broken, records = broken_copy(tmp_path)
        failed = run([prefect, "deployment", "run", "eval-run/eval-plans", "--param", config,
                      "--param", f"suite={broken}", "--param", f"baseline={records}", "--watch"], server)
        assert failed.returncode == 1, failed.stdout + failed.stderr
        assert "Failed" in failed.stdout
    finally:
        _stop(worker)


def test_serve_answers_a_question_started_from_a_deployment_run(server: dict[str, str], project: Config,
                                                                model: ModelScript, tmp_path: Path) -> None:
    # the test before deployed the same names to a work pool: serving them here is a take-over, asked for
    served = _start([str(BIN / "nl2sql"), "-c", str(project.path), "serve", "--take-over"], server,
                    tmp_path / "serve.log")
    try:
        deadline = time.monotonic() + 120
        while "Serving" not in (tmp_path / "serve.log").read_text() or "ask" not in (tmp_path / "serve.log").read_text():
            assert served.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(1)
        time.sleep(3)  # the runner registers its deployments after printing
        asked = run([str(BIN / "prefect"), "deployment", "run", "ask/ask", "--param",
                     "question=How much did we earn in each year?", "--param", "role=analyst", "--watch"], server)
        assert asked.returncode == 0, asked.stdout + asked.stderr + (tmp_path / "serve.log").read_text()
        assert "Completed" in asked.stdout

        # `nl2sql ask` hands its question to the warm process: it answers with no Prefect API of its own
        # (this process's PREFECT_API_URL leads nowhere), the refusal and its exit code come back too
        nowhere = {**server, "PREFECT_API_URL": "http://127.0.0.1:9/api"}
        nl2sql = str(BIN / "nl2sql")
        handed = run([nl2sql, "-c", str(project.path), "ask", "How much did we earn in each year?", "--role",
                      "analyst", "--json"], nowhere)
        assert handed.returncode == 0, handed.stdout + handed.stderr
        assert json.loads(handed.stdout)["status"] == "success"
        shown = run([nl2sql, "-c", str(project.path), "ask", "How many urgent tickets are still open?", "--role",
                     "support"], nowhere)
        assert shown.returncode == 0 and "verified queries" in shown.stderr  # the steps, streamed back
        refused = run([nl2sql, "-c", str(project.path), "ask", "Which customers live in Brazil?", "--role",
                       "viewer", "--json"], nowhere)
        assert refused.returncode == 1 and GENERIC_REFUSAL in refused.stdout
        unknown = run([nl2sql, "-c", str(project.path), "ask", "How many tracks?", "--role", "nosuch"], nowhere)
        assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
    finally:
        _stop(served)
    from nl2sql.cli.handover import find_desk

    assert find_desk(project.state_dir) is None  # the desk is gone with its process (a file left by a kill is stale)
