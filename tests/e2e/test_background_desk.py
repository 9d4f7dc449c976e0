"""The question desk a first `nl2sql ask` starts, as a person meets it: the installed command in a project folder,
no Prefect server set and nothing started by hand. The first question says at once what it waits for and is
answered; the next is answered by the warm desk; the desk stops by itself after its idle time, and on `nl2sql desk
stop`; `--no-desk` starts none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.prefect]

BIN = Path(sys.executable).parent
QUESTION = "How much did we earn in each year?"  # a verified query: no model
IDLE_STOP_S = 12


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    """A demo project with a short idle stop, its index built; any desk left is stopped at the end."""
    env = asker_env()
    subprocess.run([str(BIN / "nl2sql"), "init", "--demo", str(tmp_path / "demo")], env=env, check=True,
                   capture_output=True)
    config = tmp_path / "demo" / "nl2sql.yaml"
    text = config.read_text()
    assert "\nsettings:\n" in text
    config.write_text(text.replace("\nsettings:\n", f"\nsettings:\n  desk:\n    idle_stop_s: {IDLE_STOP_S}\n"))
    subprocess.run([str(BIN / "nl2sql"), "index", "build"], cwd=config.parent, env=env, check=True,
                   capture_output=True)
    yield config.parent
    nl2sql(config.parent, "desk", "stop")


def asker_env() -> dict[str, str]:
    """A person's shell: no Prefect server set, the background desk not turned off (as the tests do)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "NL2SQL_BACKGROUND_DESK")}
    return {**env, "COLUMNS": "200"}


def nl2sql(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "nl2sql"), *args], cwd=folder, env=asker_env(), capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


def desk_pid(folder: Path) -> int | None:
    shown = nl2sql(folder, "desk", "status", "--json")
    return json.loads(shown.stdout)["pid"] if shown.returncode == 0 else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def test_the_first_question_starts_the_desk_the_next_is_quick_and_it_stops_when_idle(folder: Path) -> None:
    first = subprocess.Popen([str(BIN / "nl2sql"), "ask", QUESTION, "--role", "analyst"], cwd=folder,
                             env=asker_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL)
    started = time.monotonic()
    line = first.stderr.readline()  # type: ignore[union-attr]
    said_at = time.monotonic() - started
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, line + err
    assert "Starting the question desk in the background" in line and "--no-desk" in line
    assert said_at < 5  # the benchmark holds it to 0.5 s; a loaded CI machine gets slack here
    assert "5 rows" in out and "verified query" in out

    pid = desk_pid(folder)
    assert pid is not None and alive(pid)
    status = nl2sql(folder, "desk", "status")
    assert "started by `nl2sql ask`" in status.stdout and f"{IDLE_STOP_S} s without a question" in status.stdout

    second = nl2sql(folder, "ask", QUESTION, "--role", "analyst", "--json")
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["status"] == "success"
    assert "Starting" not in second.stderr  # handed to the warm desk: nothing started
    refused = nl2sql(folder, "ask", "Which customers live in Brazil?", "--role", "viewer")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert desk_pid(folder) == pid

    deadline = time.monotonic() + IDLE_STOP_S + 30
    while alive(pid):
        assert time.monotonic() < deadline, "the background desk did not stop when idle"
        time.sleep(0.5)
    assert desk_pid(folder) is None
    assert "no question for" in (folder / ".nl2sql" / "desk.log").read_text()


def test_no_desk_starts_none_and_desk_stop_ends_one(folder: Path) -> None:
    here = nl2sql(folder, "ask", QUESTION, "--role", "analyst", "--no-desk")
    assert here.returncode == 0, here.stderr
    assert "Starting the engine" in here.stderr and "question desk" not in here.stderr
    assert desk_pid(folder) is None

    started = nl2sql(folder, "desk", "start")
    assert started.returncode == 0, started.stdout + started.stderr
    pid = desk_pid(folder)
    assert pid is not None
    stopped = nl2sql(folder, "desk", "stop")
    assert stopped.returncode == 0 and f"process {pid}" in stopped.stdout
    assert not alive(pid) and desk_pid(folder) is None
