"""Handing a question to a running `nl2sql serve` (its question desk), and reading back its events and result:
the engine is warm there, so the question skips this process's imports, Prefect's start and the index loads.

A desk that resets or refuses the connection before it answers (a full backlog, a serve stopping) is tried
again a few times, then the question is asked here: the asker gets an answer either way, never a traceback. Once
the desk has answered, the run is under way there, so a connection lost after that is an error, not a second run.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nl2sql.errors import HandedOverError
from nl2sql.private_files import DESK_FILE, read_desk_file  # noqa: F401  (DESK_FILE: re-exported with find_desk)

if TYPE_CHECKING:
    from nl2sql.events import Event
    from nl2sql.pipeline.result import QueryResult

#: The waits before each try again of a desk that reset or refused the connection (then: ask here).
RETRY_WAITS_S = (0.1, 0.4)
#: Connection failures before the desk answered that are worth another try (it may be busy or restarting).
_TRANSIENT = (ConnectionResetError, ConnectionRefusedError, ConnectionAbortedError, BrokenPipeError)


#: The background desk's output, in the state folder.
DESK_LOG = "desk.log"
#: How long a first `nl2sql ask` waits for the background desk it started (Prefect's and the engine's start).
DESK_START_WAIT_S = 120.0


@dataclass(frozen=True)
class Desk:
    """Where a running `nl2sql serve`, or a background desk, takes questions."""

    port: int
    token: str
    pid: int = 0
    kind: str = "serve"
    prefect_api_url: str = ""
    started: float = 0.0


def find_desk(state_dir: Path) -> Desk | None:
    """The desk running on this project, or None (no file, or its process is gone)."""
    found = read_desk_file(state_dir)
    try:
        return None if found is None else Desk(
            port=int(found["port"]), token=str(found["token"]), pid=int(found["pid"]),
            kind=str(found.get("kind", "serve")), prefect_api_url=str(found.get("prefect_api_url", "")),
            started=float(found.get("started", 0.0)))
    except (ValueError, KeyError, TypeError):
        return None


def serves_this_shell(desk: Desk) -> bool:
    """Whether a question handed to this desk lands where this shell's Prefect points: a background desk keeps the
    PREFECT_API_URL of the `nl2sql ask` that started it (`nl2sql serve`'s desk is the project's, whatever it is)."""
    return desk.kind != "background" or desk.prefect_api_url == os.environ.get("PREFECT_API_URL", "")


def background_desk_wanted(enabled_in_config: bool) -> bool:
    """Whether a `nl2sql ask` that finds no desk starts one: `settings.desk.background`, unless
    NL2SQL_BACKGROUND_DESK is 0/false/no/off in the environment."""
    setting = os.environ.get("NL2SQL_BACKGROUND_DESK", "").strip().lower()
    return enabled_in_config and setting not in ("0", "false", "no", "off")


def start_background_desk(config_file: Path, state_dir: Path, wait_s: float = DESK_START_WAIT_S) -> Desk | None:
    """Start a background desk on the project (a process of its own, its output in STATE_DIR/desk.log) and wait
    until a desk takes questions: this one, or another that an `nl2sql ask` beside this one started. None when it
    stopped without one (its log says why) or did not start in `wait_s`."""
    from nl2sql.private_files import private_folder

    private_folder(state_dir)
    descriptor = os.open(state_dir / DESK_LOG, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the last start's
    with os.fdopen(descriptor, "ab") as log:
        process = subprocess.Popen([sys.executable, "-m", "nl2sql.cli", "-c", str(config_file), "desk", "run"],
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True, close_fds=True)  # outlives this command, holds no pipe
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        desk = find_desk(state_dir)
        if desk is not None:
            return desk
        if process.poll() not in (None, 0):  # it failed (0: it gave way to a desk started beside it)
            return None
        time.sleep(0.05)
    return None


def hand_over(desk: Desk, parameters: dict[str, Any], on_event: Callable[[Event], None] | None) -> QueryResult | None:
    """Run the question at the desk: each event to `on_event` as it comes, then the result; None when the desk
    does not answer (the caller asks here instead); the run's own error raised as HandedOverError."""
    from nl2sql.events import Event
    from nl2sql.pipeline.result import QueryResult

    body = json.dumps(parameters).encode()
    for wait in (*RETRY_WAITS_S, None):
        connection = http.client.HTTPConnection("127.0.0.1", desk.port, timeout=5)
        try:
            connection.request("POST", "/ask", body=body, headers={"Authorization": f"Bearer {desk.token}",
                                                                   "Content-Type": "application/json"})
            connection.sock.settimeout(None)  # a run may wait long between two lines (for an approver)
            response = connection.getresponse()
        except _TRANSIENT:  # turned away before it answered (RemoteDisconnected is a reset too)
            connection.close()
            if wait is None:
                return None
            time.sleep(wait)
            continue
        except (OSError, http.client.HTTPException):  # no desk there, or not one that speaks HTTP: ask here
            connection.close()
            return None
        break
    try:
        if response.status != 200:  # a desk of another process, or of another token: ask here
            return None
        return _read_run(response, on_event, Event, QueryResult)
    except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError):
        pass  # the connection broke, or a line came cut short: the run went on at the desk
    finally:
        connection.close()
    raise HandedOverError("ENGINE_FAULT", "`nl2sql serve` stopped before the question finished.",
                          fix="See its output; ask again.",
                          exit_code=1)


def _read_run(response: http.client.HTTPResponse, on_event: Callable[[Event], None] | None,
              event_type: type[Event], result_type: type[QueryResult]) -> QueryResult:
    """The desk's lines: each event to `on_event`, then the result, or the run's own error raised."""
    for raw in response:
        line = json.loads(raw)
        if "event" in line:
            if on_event is not None:
                on_event(event_type.model_validate(line["event"]))
        elif "result" in line:
            return result_type.model_validate(line["result"])
        else:
            error = line["error"]
            raise HandedOverError(error["code"], error["message"], fix=error.get("fix"),
                                  exit_code=int(error["exit_code"]))
    raise ConnectionResetError("the desk closed the answer early")
