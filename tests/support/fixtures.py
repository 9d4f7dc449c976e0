"""Fixtures for the tests that ask the demo questions: the fake model server, the demo project wired to it,
and a fresh model script per test. tests/conftest.py lists this module in `pytest_plugins`, so every test
module may use them; one that needs another project (other settings, hooks, a gold model) defines its own
`project`, and one that scripts more answers its own `model`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nl2sql.config import Config
from nl2sql.llm.fake import FakeLLMServer
from tests.support.ask import ModelScript, write_ask_project
from tests.support.llm import running


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLLMServer]:
    """The OpenAI-compatible fake model server, one per test module."""
    yield from running(FakeLLMServer)


@pytest.fixture(scope="module")
def project(fake: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Config:
    """The demo project with `fake` as every node's model and its index built, one per test module."""
    return write_ask_project(tmp_path_factory.mktemp("project"), fake)


@pytest.fixture
def model(fake: FakeLLMServer) -> ModelScript:
    """`fake` reset and scripted to answer like a model (the gold plans), per test."""
    return ModelScript(fake)
