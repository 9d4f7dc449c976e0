"""The question desk of `nl2sql serve`: a question that `nl2sql ask` hands over runs here, in the warm process (the
engine with its index, embedder and connections loaded once), still as a flow run of `ask`; its events and its
result go back as JSON lines over loopback while it runs.

Who may hand a question over: whoever reads the desk's file in the project's state folder (it holds a token;
written mode 0600), that is, whoever could read the project's state and ask the question themselves. Any other
request is answered 401 (no or a wrong token, whatever bytes it holds) or 404 (another path), and nothing a
client sends ends in a traceback.
"""

from __future__ import annotations

import contextvars
import fcntl
import json
import logging
import os
import queue
import secrets
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from nl2sql.errors import EngineFault, NL2SQLError, exit_code_of
from nl2sql.events import Event
from nl2sql.flows.ask import ASK_LISTENERS, ask_here, runtime_for
from nl2sql.index.embed import shared_embedder
from nl2sql.policies.users import same_secret
from nl2sql.private_files import DESK_FILE, private_folder, read_desk_file

log = logging.getLogger("nl2sql.desk")

#: The parameters of `ask` a handed-over question may set (the project is the desk's).
ASK_PARAMETERS = ("question", "role", "user_id", "datasource_id", "execute", "in_words")
#: Connections the kernel holds for the desk while its thread accepts others: many `nl2sql ask` at once (a
#: script, a team) must wait their turn, not be reset (socketserver's default is 5).
LISTEN_BACKLOG = 128
#: How long a stopping background desk lets the questions it runs finish.
QUESTIONS_FINISH_S = 30.0
#: The largest question body the desk reads (a question and its few parameters).
MAX_BODY_BYTES = 1 << 20
_relay_to: contextvars.ContextVar[queue.Queue | None] = contextvars.ContextVar("nl2sql_desk_queue", default=None)


def _relay(event: Event) -> None:
    """An ask event, to the handed-over question it belongs to (the context its run was started in)."""
    outbox = _relay_to.get()
    if outbox is not None:
        outbox.put(event)


def _drain(request: BaseHTTPRequestHandler) -> None:
    """Read a turned-away request's body (at most MAX_BODY_BYTES): a connection closed with bytes unread is reset,
    and the client could lose the reply."""
    try:
        length = int(request.headers.get("Content-Length") or 0)
        if 0 < length <= MAX_BODY_BYTES:
            request.rfile.read(length)
    except (ValueError, OSError):
        pass


class DeskServer(ThreadingHTTPServer):
    """The desk's HTTP server: a backlog fit for many askers at once, a thread per question, and a request that
    fails logged in one line (never a traceback on serve's output)."""

    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line for a request the handler failed on (the connection is then closed)."""
        log.warning("the question desk dropped a request from %s: %s", client_address[0],
                    type(sys.exc_info()[1]).__name__)


class QuestionDesk:
    """A loopback HTTP endpoint (POST /ask) that runs handed-over questions through the `ask` flow: `nl2sql serve`'s
    (kind "serve"), or one a first `nl2sql ask` started in the background (kind "background")."""

    def __init__(self, config: Path, state_dir: Path, kind: str = "serve") -> None:
        self.config = str(config.resolve())
        self.file = state_dir / DESK_FILE
        self.kind = kind
        self.token = secrets.token_urlsafe(32)
        self.answered = 0
        self.last_question_at = time.monotonic()
        self._asking = 0
        self._count_lock = threading.Lock()
        desk = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                desk.answer(self)

            def log_message(self, *args: object) -> None:
                pass

        self.server = DeskServer(("127.0.0.1", 0), Handler)

    def start(self) -> bool:
        """Load the engine, listen, and tell `nl2sql ask` where (the desk file). A background desk does not take the
        place of a live desk already there (False: it should stop); `nl2sql serve`'s always does, and stops a
        background desk it replaces."""
        runtime = runtime_for(self.config)  # the engine and its connections, loaded once
        shared_embedder().embed(["warm"])  # the embedding model, loaded once
        for datasource in runtime.config.datasources:  # each live index read once (it stays cached)
            runtime.index.retriever.live(datasource.id)
        if _relay not in ASK_LISTENERS:
            ASK_LISTENERS.append(_relay)
        private_folder(self.file.parent)
        # the look at the file and the write are one step for every desk of this state folder
        replaced: int | None = None
        with open(self.file.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            there = read_desk_file(self.file.parent)
            if there is not None and there["pid"] != os.getpid():
                if self.kind == "background":
                    return False
                if there.get("kind") == "background":
                    replaced = int(there["pid"])
            threading.Thread(target=self.server.serve_forever, name="nl2sql-desk", daemon=True).start()
            descriptor = os.open(self.file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w") as out:
                json.dump({"pid": os.getpid(), "port": self.server.server_address[1], "token": self.token,
                           "kind": self.kind, "config": self.config, "started": time.time(),
                           "prefect_api_url": os.environ.get("PREFECT_API_URL", "")}, out)
        if replaced is not None:  # it sees the file is no longer its own; the signal makes it go now
            stop_process(replaced)
        return True

    def is_the_desk(self) -> bool:
        """Whether the desk file still names this desk (`nl2sql serve` takes a background desk's place)."""
        there = read_desk_file(self.file.parent)
        return there is not None and there["pid"] == os.getpid() and there.get("port") == self.server.server_address[1]

    def idle_for(self) -> float:
        """Seconds since the last question ended (0 while one runs, an approver's wait included)."""
        with self._count_lock:
            return 0.0 if self._asking else time.monotonic() - self.last_question_at

    def close(self) -> None:
        """Stop listening and take the desk file away (if it is still this desk's)."""
        with open(self.file.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self.is_the_desk():
                self.file.unlink(missing_ok=True)
        self.server.shutdown()
        self.server.server_close()

    def answer(self, request: BaseHTTPRequestHandler) -> None:
        """One handed-over question: its events as they come, then its result (or its error), one JSON per line."""
        given = request.headers.get("Authorization", "")  # header text: any bytes, as latin-1
        scheme, _, presented = given.partition(" ")
        # Compared whatever was sent (no early answer to time); same_secret takes any text of any length.
        if not same_secret(presented, self.token) or scheme.lower() != "bearer":
            _drain(request)
            request.send_response(401)
            request.send_header("WWW-Authenticate", "Bearer")
            request.send_header("Content-Length", "0")
            request.end_headers()
            return
        if request.path != "/ask":
            _drain(request)
            request.send_error(404)
            return
        try:
            length = int(request.headers.get("Content-Length") or 0)
            if not 0 <= length <= MAX_BODY_BYTES:
                raise ValueError(f"a body of {length} bytes")
            body = json.loads(request.rfile.read(length))
            parameters = {k: body[k] for k in ASK_PARAMETERS if k in body}
            if not isinstance(parameters.get("question"), str):
                raise ValueError("no question")
        except (ValueError, TypeError):
            request.send_error(400)
            return
        outbox: queue.Queue[Any] = queue.Queue()
        with self._count_lock:
            self._asking += 1
        try:
            self._relay_answer(request, parameters, outbox)
        finally:
            with self._count_lock:
                self._asking -= 1
                self.answered += 1
                self.last_question_at = time.monotonic()

    def _relay_answer(self, request: BaseHTTPRequestHandler, parameters: dict[str, Any], outbox: queue.Queue) -> None:
        """Run the question in a thread of its own; write its events, then its result or error, as they come."""

        def run() -> None:
            _relay_to.set(outbox)
            try:
                outbox.put(("result", ask_here(config=self.config, **parameters)))
            except NL2SQLError as exc:
                outbox.put(("error", exc))
            except Exception as exc:
                outbox.put(("error", EngineFault(exc)))

        threading.Thread(target=contextvars.copy_context().run, args=(run,), name="nl2sql-desk-ask",
                         daemon=True).start()
        request.send_response(200)
        request.send_header("Content-Type", "application/x-ndjson")
        request.end_headers()
        while True:
            item = outbox.get()
            if isinstance(item, Event):
                line = {"event": item.model_dump(mode="json")}
            elif item[0] == "result":
                line = {"result": item[1].model_dump(mode="json")}
            else:
                exc = item[1]
                line = {"error": {"code": exc.code, "message": exc.message, "fix": exc.fix,
                                  "exit_code": exit_code_of(exc)}}
            try:
                request.wfile.write((json.dumps(line, default=str) + "\n").encode())
                request.wfile.flush()
            except OSError:  # the asker went away: the run goes on, its result stays in the trace
                return
            if not isinstance(item, Event):
                return


def stop_process(pid: int, wait_s: float = 10.0) -> bool:
    """SIGTERM a desk's process and wait for it to go (True when it went)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        return True
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            return True
        time.sleep(0.05)
    return False


def warm_prefect() -> None:
    """Reach the Prefect API once: with no PREFECT_API_URL this starts Prefect's temporary server, which this process
    then keeps for every question it runs."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        client.hello()


def run_background_desk(config: Path, state_dir: Path, idle_stop_s: float) -> None:
    """A desk of its own (no deployments served): Prefect and the engine started once, questions taken until
    `idle_stop_s` pass without one, SIGTERM or SIGINT, or `nl2sql serve` takes its place."""
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    warm_prefect()
    desk = QuestionDesk(config, state_dir, kind="background")
    if not desk.start():
        log.info("another desk takes this project's questions: this one stops")
        desk.server.server_close()
        return
    log.info("the question desk takes questions on %s; it stops after %d s without one", config, idle_stop_s)
    try:
        while not stopping.wait(1.0):
            if not desk.is_the_desk():
                log.info("`nl2sql serve` takes this project's questions now: the background desk stops")
                break
            if desk.idle_for() >= idle_stop_s:
                log.info("no question for %d s: the background desk stops (%d answered)", idle_stop_s,
                         desk.answered)
                break
    finally:
        desk.close()
        deadline = time.monotonic() + QUESTIONS_FINISH_S
        while desk.idle_for() == 0.0 and time.monotonic() < deadline:  # questions under way may finish
            time.sleep(0.1)
