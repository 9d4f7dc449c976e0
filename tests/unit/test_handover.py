"""Finding a running `nl2sql serve`'s question desk, and falling back when there is none."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from nl2sql.cli.handover import DESK_FILE, Desk, find_desk, hand_over


def test_a_desk_is_found_only_while_its_process_lives(tmp_path: Path) -> None:
    assert find_desk(tmp_path) is None  # no file
    (tmp_path / DESK_FILE).write_text(json.dumps({"pid": os.getpid(), "port": 4567, "token": "t"}))
    assert find_desk(tmp_path) == Desk(port=4567, token="t")
    (tmp_path / DESK_FILE).write_text(json.dumps({"pid": 2 ** 22 + 12345, "port": 4567, "token": "t"}))
    assert find_desk(tmp_path) is None  # its process is gone
    (tmp_path / DESK_FILE).write_text("{not json")
    assert find_desk(tmp_path) is None


def test_a_desk_that_does_not_answer_sends_the_question_back_here() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens once it is closed
    assert hand_over(Desk(port=port, token="t"), {"question": "q"}, None) is None


def test_the_desks_file_name_is_the_one_serve_writes() -> None:
    from nl2sql.flows.desk import DESK_FILE as WRITTEN

    assert WRITTEN == DESK_FILE
