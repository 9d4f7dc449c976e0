"""`nl2sql serve` as a user runs it: the installed command in a project folder outside the repository, against a
real `prefect server start` on loopback. It takes over a work pool's deployments only when told to, answers
`prefect deployment run 'ask/ask'`, and stops within 5 s of SIGTERM or SIGINT, with or without its server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from nl2sql.config import Config
from tests.support.prefect_server import free_port, prefect_server_process, server_env, wait_until_healthy

pytestmark = [pytest.mark.slow, pytest.mark.prefect]

BIN = Path(sys.executable).parent
QUICK = {"PREFECT_RUNNER_POLL_FREQUENCY": "1", "PREFECT_WORKER_QUERY_SECONDS": "1", "COLUMNS": "200"}


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


@contextmanager
def _serving(folder: Path, env: dict[str, str], log: Path, *args: str) -> Iterator[subprocess.Popen]:
    """`nl2sql serve` started in `folder` (no -c: its nl2sql.yaml), once it says its deployments are served."""
    proc = subprocess.Popen([str(BIN / "nl2sql"), "serve", *args], cwd=folder, env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "deployments are being served" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _stops_within(proc: subprocess.Popen, signum: int, seconds: float) -> float:
    """Send `signum`; the seconds the process took to exit (fails past `seconds`)."""
    sent = time.monotonic()
    proc.send_signal(signum)
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        pytest.fail(f"nl2sql serve still ran {seconds} s after signal {signum}")
    return time.monotonic() - sent


def test_serve_in_a_project_folder_takes_over_only_when_told_and_answers(project: Config, tmp_path: Path) -> None:
    folder = project.path.parent
    assert Path(__file__).resolve().parents[2] not in folder.resolve().parents  # outside the repository
    (tmp_path / "prefect").mkdir()
    with prefect_server_process(tmp_path / "prefect") as (_, server):
        env = {**server, **QUICK}
        env.pop("NL2SQL_CONFIG", None)
        prefect = str(BIN / "prefect")
        # a work pool's deployments, from the prefect.yaml `nl2sql deployments write` writes
        wrote = _run([str(BIN / "nl2sql"), "deployments", "write"], folder, env)
        assert wrote.returncode == 0, wrote.stdout + wrote.stderr
        assert _run([prefect, "work-pool", "create", "nl2sql", "--type", "process"], folder, env).returncode == 0
        deployed = _run([prefect, "--no-prompt", "deploy", "--all"], folder, env)
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr

        refused = _run([str(BIN / "nl2sql"), "serve"], folder, env, timeout=120)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "ask/ask (work pool nl2sql)" in refused.stderr and "--take-over" in refused.stderr
        assert "Traceback" not in refused.stdout + refused.stderr

        log = tmp_path / "serve.log"
        with _serving(folder, env, log, "--take-over") as served:
            assert "ask/ask was work pool nl2sql's deployment" in log.read_text()
            asked = _run([prefect, "deployment", "run", "ask/ask", "--param",
                          "question=How much did we earn in each year?", "--param", "role=analyst", "--watch"],
                         tmp_path, env)
            assert asked.returncode == 0, asked.stdout + asked.stderr + log.read_text()
            assert "Completed" in asked.stdout
            _stops_within(served, signal.SIGTERM, 5)
        assert "Traceback" not in log.read_text(), log.read_text()
        assert "Stopped." in log.read_text()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_stops_on_a_signal_after_its_server_is_gone(project: Config, tmp_path: Path, signum: int) -> None:
    port = free_port()
    env = {**server_env(tmp_path / "prefect", port), **QUICK}
    (tmp_path / "prefect").mkdir()
    server = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--no-services"], env=env,
                              stdout=(tmp_path / "server.log").open("w"), stderr=subprocess.STDOUT)
    try:
        wait_until_healthy(env["PREFECT_API_URL"], server, tmp_path / "server.log")
        log = tmp_path / "serve.log"
        with _serving(project.path.parent, env, log) as served:
            server.kill()
            server.wait()
            time.sleep(3)  # the runner's polls now fail and retry
            _stops_within(served, signum, 5)
        assert "Traceback" not in log.read_text(), log.read_text()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
