"""The question desk of `nl2sql serve`, in process on the test server: a handed-over question runs as a flow run
of `ask` here, its steps stream back, a wrong token is turned away."""

from __future__ import annotations

import pytest

from nl2sql.cli.handover import Desk, find_desk, hand_over
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
