"""`nl2sql serve` as a user runs it: the installed command in a project folder outside the repository, against a
real `prefect server start` on loopback. It takes over a work pool's deployments only when told to, answers
`prefect deployment run 'ask/ask'`, and stops within 5 s of SIGTERM or SIGINT, with or without its server."""

from __future__ import annotations

import json
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
from tests.support.packaging import offline_pip_env
from tests.support.prefect_server import free_port, prefect_server_process, server_env, wait_until_healthy

pytestmark = [pytest.mark.slow, pytest.mark.prefect]

BIN = Path(sys.executable).parent
QUICK = {"PREFECT_RUNNER_POLL_FREQUENCY": "1", "PREFECT_WORKER_QUERY_SECONDS": "1", "COLUMNS": "200"}


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


@contextmanager
def _serving(folder: Path, env: dict[str, str], log: Path, *args: str,
             command: Path = BIN / "nl2sql") -> Iterator[subprocess.Popen]:
    """`nl2sql serve` started in `folder` (no -c: its nl2sql.yaml), once it says its deployments are served."""
    proc = subprocess.Popen([str(command), "serve", *args], cwd=folder, env=env, stdout=log.open("w"),
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


def _answers_then_stops(prefect: list[str], served: subprocess.Popen, cwd: Path, env: dict[str, str],
                        log: Path) -> None:
    """`prefect deployment run 'ask/ask' --watch` completes on the served deployment, then SIGTERM stops it
    within 5 s."""
    asked = _run([*prefect, "deployment", "run", "ask/ask", "--param", "question=How much did we earn in each year?",
                  "--param", "role=analyst", "--watch"], cwd, env)
    assert asked.returncode == 0, asked.stdout + asked.stderr + log.read_text()
    assert "Completed" in asked.stdout
    _stops_within(served, signal.SIGTERM, 5)


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
        formed = _run([str(BIN / "nl2sql"), "deployments", "forms"], folder, env)
        assert formed.returncode == 0, formed.stdout + formed.stderr
        schema = json.loads(_run([prefect, "deployment", "inspect", "ask/ask", "--output", "json"], folder,
                                 env).stdout)["parameter_openapi_schema"]
        assert schema["properties"]["role"]["enum"] == list(project.policies.roles)  # the work pool's form too
        assert "config" not in schema["properties"]

        refused = _run([str(BIN / "nl2sql"), "serve"], folder, env, timeout=120)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "ask/ask (work pool nl2sql)" in refused.stderr and "--take-over" in refused.stderr
        assert "Traceback" not in refused.stdout + refused.stderr

        log = tmp_path / "serve.log"
        with _serving(folder, env, log, "--take-over") as served:
            assert "ask/ask was work pool nl2sql's deployment" in log.read_text()
            _answers_then_stops([prefect], served, tmp_path, env, log)
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


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment outside the repository holding the project's wheel, built here as the image's
    build step builds it (deployments/docker/build-steps.sh). Its dependencies are this environment's, reached
    through a path file: nothing is fetched, and the repository's editable install is not on its path (the
    editable finder is loaded by a .pth file of that folder, which a path added this way does not run)."""
    import sysconfig

    root = tmp_path_factory.mktemp("wheel-venv")
    steps = Path(__file__).resolve().parents[2] / "deployments" / "docker" / "build-steps.sh"
    built = _run(["sh", str(steps), "wheel", sys.executable, str(steps.parents[2]), str(root / "wheels")], root,
                 offline_pip_env())
    assert built.returncode == 0, built.stdout + built.stderr
    venv = root / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], root, dict(os.environ)).returncode == 0
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root,
                     dict(os.environ)).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    [wheel] = (root / "wheels").glob("nl2sql_engine-*.whl")
    installed = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                      str(wheel)], root, dict(os.environ))
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return venv


def test_an_installed_wheel_serves_a_project_folder_and_answers(wheel_venv: Path, tmp_path: Path) -> None:
    """From the wheel, in a fresh environment: `nl2sql init --demo DIR`, then in DIR `nl2sql serve`, and
    `prefect deployment run 'ask/ask'` answers."""
    nl2sql, python = wheel_venv / "bin" / "nl2sql", wheel_venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("NL2SQL_CONFIG", "PREFECT_API_URL")}
    where = _run([str(python), "-c", "import nl2sql; print(nl2sql.__file__)"], tmp_path, env).stdout
    assert where.startswith(str(wheel_venv)), where  # the wheel's package, not the repository's
    folder = tmp_path / "project"
    assert _run([str(nl2sql), "init", "--demo", str(folder)], tmp_path, env).returncode == 0
    (tmp_path / "prefect").mkdir()
    with prefect_server_process(tmp_path / "prefect") as (_, server):
        env = {**env, **server, **QUICK}
        indexed = _run([str(nl2sql), "index", "build"], folder, env)
        assert indexed.returncode == 0, indexed.stdout + indexed.stderr
        log = tmp_path / "serve.log"
        with _serving(folder, env, log, command=nl2sql) as served:
            _answers_then_stops([str(python), "-m", "prefect"], served, tmp_path, env, log)
        assert "Traceback" not in log.read_text(), log.read_text()
