"""One fake model server per test module (stopping one takes a moment), with a fresh script per test."""

from __future__ import annotations

from collections.abc import Iterator

from nl2sql.llm.fake import FakeAnthropicServer, FakeLLMServer


def running(server_class: type[FakeLLMServer] | type[FakeAnthropicServer]) -> Iterator:
    """Start a fake server for a module-scoped fixture; stop it afterwards."""
    with server_class() as fake:
        yield fake
