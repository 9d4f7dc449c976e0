"""A real `prefect server start` on loopback for tests that need one (automations, deployments, the UI)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    """A port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(home: Path, port: int) -> dict[str, str]:
    """The environment of a loopback server (and of processes that talk to it)."""
    return {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_API_PORT": str(port),
            "PREFECT_SERVER_API_HOST": "127.0.0.1", "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
            "PREFECT_UI_URL": f"http://127.0.0.1:{port}", "DO_NOT_TRACK": "1",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_LOGGING_LEVEL": "WARNING"}


def wait_until_healthy(api: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    """Wait for a starting `prefect server start` to answer its health check (RuntimeError naming its log if it
    exits or takes longer than `timeout`)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{api}/health", timeout=2) as response:
                if response.read().strip() == b"true":
                    return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"prefect server did not start; see {log}")
        time.sleep(0.5)


@contextmanager
def prefect_server_process(home: Path, *, extra_env: dict[str, str] | None = None,
                           services: bool = True) -> Iterator[tuple[str, dict[str, str]]]:
    """Start `prefect server start` (SQLite in `home` unless `extra_env` names another database); yield its API
    URL and environment; stop it after."""
    port = free_port()
    env = {**server_env(home, port), **(extra_env or {})}
    log = open(home / "server.log", "w")  # noqa: SIM115  (closed below)
    command = [str(Path(sys.executable).parent / "prefect"), "server", "start", *([] if services else ["--no-services"])]
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    api = env["PREFECT_API_URL"]
    try:
        wait_until_healthy(api, proc, home / "server.log")
        yield api, env
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@contextmanager
def steady_prefect_server(home: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """`prefect server start` on PostgreSQL when the loopback server answers (a scratch database, dropped after),
    else on SQLite: on 2 cores the SQLite-backed server stalls with 503s after bursts of writes."""
    import sqlalchemy as sa

    from tests.support.postgres import scratch_database, server_available

    if server_available() is not None:
        with prefect_server_process(home) as started:
            yield started
        return
    with scratch_database("nl2sql_prefect") as db:
        url = sa.make_url(db.admin_url).set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)
        with prefect_server_process(home, extra_env={"PREFECT_SERVER_DATABASE_CONNECTION_URL": url}) as started:
            yield started
