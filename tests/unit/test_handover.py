"""Finding a running `nl2sql serve`'s question desk, and falling back when there is none, or when it resets the
connection before it answers (tried again first)."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest

from nl2sql.cli.handover import (
    DESK_FILE,
    RETRY_WAITS_S,
    Desk,
    background_desk_wanted,
    find_desk,
    hand_over,
    serves_this_shell,
)
from nl2sql.errors import HandedOverError
from tests.support.loopback import LoopbackServer


def test_a_desk_is_found_only_while_its_process_lives(tmp_path: Path) -> None:
    assert find_desk(tmp_path) is None  # no file
    (tmp_path / DESK_FILE).write_text(json.dumps({"pid": os.getpid(), "port": 4567, "token": "t"}))
    assert find_desk(tmp_path) == Desk(port=4567, token="t", pid=os.getpid())  # a desk file before kinds: serve's
    (tmp_path / DESK_FILE).write_text(json.dumps({"pid": 2 ** 22 + 12345, "port": 4567, "token": "t"}))
    assert find_desk(tmp_path) is None  # its process is gone
    (tmp_path / DESK_FILE).write_text("{not json")
    assert find_desk(tmp_path) is None


def test_a_background_desk_serves_only_askers_on_its_own_prefect_server(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / DESK_FILE).write_text(json.dumps({"pid": os.getpid(), "port": 1, "token": "t", "kind": "background",
                                                  "prefect_api_url": "http://127.0.0.1:4200/api"}))
    found = find_desk(tmp_path)
    assert found is not None and found.kind == "background"
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert serves_this_shell(found)
    monkeypatch.delenv("PREFECT_API_URL")  # this shell's runs would go to Prefect's local server, not that one
    assert not serves_this_shell(found)
    assert serves_this_shell(Desk(port=1, token="t", kind="serve", prefect_api_url="http://elsewhere/api"))


@pytest.mark.parametrize(("setting", "configured", "wanted"), [
    (None, True, True), ("0", True, False), ("off", True, False), ("false", True, False), ("1", True, True),
    (None, False, False), ("1", False, False),
])
def test_a_background_desk_is_started_unless_the_configuration_or_the_environment_says_no(
        setting: str | None, configured: bool, wanted: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if setting is None:
        monkeypatch.delenv("NL2SQL_BACKGROUND_DESK", raising=False)
    else:
        monkeypatch.setenv("NL2SQL_BACKGROUND_DESK", setting)
    assert background_desk_wanted(configured) is wanted


def test_a_desk_that_does_not_answer_sends_the_question_back_here() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens once it is closed
    assert hand_over(Desk(port=port, token="t"), {"question": "q"}, None) is None


def test_the_desks_file_name_is_the_one_serve_writes() -> None:
    from nl2sql.flows.desk import DESK_FILE as WRITTEN

    assert WRITTEN == DESK_FILE


def test_a_desk_that_resets_the_connection_is_tried_again_then_the_question_is_asked_here() -> None:
    server = LoopbackServer()
    try:
        started = time.monotonic()
        assert hand_over(Desk(port=server.port, token="t"), {"question": "q"}, None) is None
        assert server.taken == 1 + len(RETRY_WAITS_S)
        assert time.monotonic() - started < 5
    finally:
        server.close()


def test_a_desk_that_speaks_no_http_sends_the_question_back_here() -> None:
    server = LoopbackServer(b"hello\r\n", reset=False)
    try:
        assert hand_over(Desk(port=server.port, token="t"), {"question": "q"}, None) is None
        assert server.taken == 1
    finally:
        server.close()


def test_a_run_cut_off_after_the_desk_answered_is_an_error_not_a_second_run() -> None:
    """Once the desk answered, the run is under way there: asking here too would run it twice."""
    started = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n\r\n"
    for reply in (started, started + b'{"event": {"name": "run.sta'):
        server = LoopbackServer(reply, reset=False)  # (a reset could beat the reply to the client: a retry)
        try:
            with pytest.raises(HandedOverError) as caught:
                hand_over(Desk(port=server.port, token="t"), {"question": "q"}, None)
            assert caught.value.code == "ENGINE_FAULT" and "stopped before the question finished" in caught.value.message
            assert server.taken == 1
        finally:
            server.close()
