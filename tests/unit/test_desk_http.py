"""The question desk's HTTP front, on loopback with its real server and handler (no question is run: every
request here is turned away before one would start): any token bytes are a 401, never a traceback, and many
askers at once wait in the backlog rather than being reset."""

from __future__ import annotations

import http.client
import logging
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from nl2sql.flows.desk import LISTEN_BACKLOG, QuestionDesk

#: How many askers knock at once in the backlog test (the finding: 16 gave resets with socketserver's 5).
ASKERS = 32


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[QuestionDesk]:
    """A desk listening on loopback (its engine not loaded) whose accept loop the test starts (`serving`)."""
    made = QuestionDesk(tmp_path / "nl2sql.yaml", tmp_path / "state")
    accepting: list[threading.Thread] = []
    made.accepting = accepting  # type: ignore[attr-defined]
    yield made
    if accepting:
        made.server.shutdown()
    made.server.server_close()


def serving(desk: QuestionDesk) -> None:
    """Start the desk's accept loop, as `start()` does once the engine is loaded."""
    thread = threading.Thread(target=desk.server.serve_forever, daemon=True)
    desk.accepting.append(thread)  # type: ignore[attr-defined]
    thread.start()


def raw_post(port: int, authorization: bytes, path: str = "/ask", body: bytes = b"{}",
             length: bytes | None = None) -> bytes:
    """A POST written byte for byte (so a header may hold any bytes); the response's status line, or b'' when the
    connection was dropped without one."""
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n".encode()
            + b"Authorization: " + authorization + b"\r\nContent-Length: "
            + (length if length is not None else str(len(body)).encode()) + b"\r\nConnection: close\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head + body)
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
    return received.split(b"\r\n", 1)[0]


@pytest.mark.parametrize("authorization", [
    "Bearer é-not-ascii".encode(),                 # UTF-8 bytes past ASCII
    b"Bearer \xff\xfe\x80 raw bytes",                 # bytes no encoding reads
    b"Bearer " + b"\xc3\xa9" * 5000,                  # long
    b"Basic dXNlcjpwYXNz",                            # another scheme
    b"",                                               # none
])
def test_any_token_bytes_are_a_401_and_no_traceback(desk: QuestionDesk, authorization: bytes,
                                                    capfd: pytest.CaptureFixture[str],
                                                    caplog: pytest.LogCaptureFixture) -> None:
    serving(desk)
    with caplog.at_level(logging.WARNING, logger="nl2sql.desk"):
        status = raw_post(desk.server.server_address[1], authorization)
    assert status == b"HTTP/1.0 401 Unauthorized"
    _, err = capfd.readouterr()
    assert "Traceback" not in err and not caplog.records


def test_the_token_opens_only_the_ask_path_and_only_a_well_formed_question(desk: QuestionDesk) -> None:
    serving(desk)
    port, bearer = desk.server.server_address[1], f"Bearer {desk.token}".encode()
    assert raw_post(port, f"Bearer {desk.token}x".encode()) == b"HTTP/1.0 401 Unauthorized"
    assert raw_post(port, bearer, path="/other") == b"HTTP/1.0 404 Not Found"
    assert raw_post(port, bearer, body=b"{}") == b"HTTP/1.0 400 Bad Request"  # no question
    assert raw_post(port, bearer, body=b"[1, 2]") == b"HTTP/1.0 400 Bad Request"
    assert raw_post(port, bearer, body=b"\xff{") == b"HTTP/1.0 400 Bad Request"
    assert raw_post(port, bearer, length=b"-1") == b"HTTP/1.0 400 Bad Request"
    assert raw_post(port, bearer, length=b"99999999999") == b"HTTP/1.0 400 Bad Request"


def test_many_askers_at_once_wait_in_the_backlog_and_none_is_reset(desk: QuestionDesk) -> None:
    """Every asker connects before the desk accepts anyone (the worst case of a busy desk): with socketserver's
    backlog of 5 the kernel reset or stalled most of them; the desk's backlog holds them all."""
    assert LISTEN_BACKLOG >= ASKERS
    port, outcomes = desk.server.server_address[1], []
    tried, go = threading.Semaphore(0), threading.Event()
    half = ASKERS // 2

    def ask(n: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
        token = desk.token if n < half else "wrong"
        try:
            try:
                connection.connect()
            finally:
                tried.release()
            go.wait(30)
            connection.request("POST", "/ask", body=b"{}", headers={"Authorization": f"Bearer {token}"})
            outcomes.append(connection.getresponse().status)
        except OSError as exc:  # a reset, or a connect the kernel never completed
            outcomes.append(type(exc).__name__)
        finally:
            connection.close()

    askers = [threading.Thread(target=ask, args=(n,)) for n in range(ASKERS)]
    for asker in askers:
        asker.start()
    for _ in askers:  # each asker connected (the kernel completed its handshake) or gave up; none accepted yet
        assert tried.acquire(timeout=10)
    serving(desk)
    go.set()
    for asker in askers:
        asker.join(60)
    assert Counter(outcomes) == {400: half, 401: ASKERS - half}, Counter(outcomes)
