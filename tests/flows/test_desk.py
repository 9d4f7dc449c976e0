"""The question desk of `nl2sql serve`, in process on the test server: a handed-over question runs as a flow run
of `ask` here, its steps stream back, a wrong token is turned away."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from nl2sql.cli.handover import DESK_FILE, Desk, find_desk, hand_over
from nl2sql.config import Config
from tests.support.ask import ModelScript

pytestmark = pytest.mark.prefect


def test_a_handed_over_question_runs_here_and_streams_back(prefect_server: None, project: Config,
                                                        model: ModelScript) -> None:
    from nl2sql.flows.desk import QuestionDesk

    desk = QuestionDesk(project.path, project.state_dir)
    desk.start()
    try:
        found = find_desk(project.state_dir)
        assert found is not None and found.token == desk.token
        steps: list[str] = []
        result = hand_over(found, {"question": "How much did we earn in each year?", "role": "analyst"},
                           lambda event: steps.append(event.data.get("node", "")) if event.name == "node.finished"
                           else None)
        assert result is not None, "no answer from the desk"
        assert result.status == "success", result.errors
        assert result.sub_queries[0].source == "verified"
        assert "curated_matcher" in steps and "executor" in steps
        assert hand_over(Desk(port=found.port, token="not-the-token"), {"question": "q"}, None) is None
    finally:
        desk.close()
    assert find_desk(project.state_dir) is None


def test_a_background_desk_gives_way_to_a_live_desk_and_serves_desk_takes_a_background_ones_place(
        prefect_server: None, project: Config) -> None:
    from nl2sql.flows.desk import QuestionDesk

    other = subprocess.Popen(["sleep", "60"])  # stands for another process's background desk
    file = project.state_dir / DESK_FILE
    try:
        file.write_text(json.dumps({"pid": other.pid, "port": 1, "token": "t", "kind": "background"}))
        second = QuestionDesk(project.path, project.state_dir, kind="background")
        assert second.start() is False  # started beside it by a second `nl2sql ask`: it stops, the file stays
        second.server.server_close()
        assert json.loads(file.read_text())["pid"] == other.pid

        served = QuestionDesk(project.path, project.state_dir)  # `nl2sql serve`'s
        assert served.start() is True
        try:
            assert other.wait(timeout=15) != 0  # the background desk was told to stop
            found = find_desk(project.state_dir)
            assert found is not None and found.kind == "serve" and found.token == served.token
            assert served.is_the_desk()
        finally:
            served.close()
        assert not file.exists()
    finally:
        other.kill()


def test_a_desk_is_idle_only_between_questions(prefect_server: None, project: Config) -> None:
    from nl2sql.flows.desk import QuestionDesk

    desk = QuestionDesk(project.path, project.state_dir, kind="background")
    assert desk.start()
    try:
        found = find_desk(project.state_dir)
        assert found is not None and found.kind == "background"
        time.sleep(0.2)
        assert desk.idle_for() >= 0.2
        assert hand_over(found, {"question": "How much did we earn in each year?", "role": "analyst"}, None)
        deadline = time.monotonic() + 5  # counted once the answer's last line is written, after the asker read it
        while desk.answered < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert desk.answered == 1 and desk.idle_for() < 1
    finally:
        desk.close()
