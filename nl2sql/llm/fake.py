"""Fake model servers on loopback: the OpenAI chat-completions wire (FakeLLMServer) and Anthropic's messages
wire (FakeAnthropicServer), each a real HTTP server on 127.0.0.1 with a random port.

Answers come from a table keyed by the structured output's schema name (the tool's name for
tool calls, `text` for plain completions), scripted per test: a queue of answers per name, or a
function of the request (to answer by case). An answer can be a dict (sent as JSON), a string
(sent as is: malformed JSON, or text), or a FakeAnswer with canned usage (cached and reasoning
tokens included, or none at all), an HTTP status to fail with, or a delay to trigger a timeout
(before answering, or between streamed pieces).

While it waits, a server watches its client: one that goes away ends the answer there and is
noted in `disconnects`, as a real server that cancels a gone client's generation does. With
`one_at_a_time=True` it serves one request at a time, like a local server with a single slot, so
a request whose client is still connected holds up the next one.

    with FakeLLMServer() as server:
        server.answer("PlanModel", {"select": [...], "from": {...}})
        config = server.model_config()       # a ModelConfig pointing at it
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from nl2sql.config.models import ModelConfig

TEXT = "text"
DEFAULT_USAGE = object()  # usage computed from the sizes of prompt and answer
STREAM_PIECE = 12  # characters per streamed delta


@dataclass
class FakeAnswer:
    """One scripted answer."""

    content: dict | list | str | None = None
    usage: dict[str, Any] | object | None = DEFAULT_USAGE
    status: int = 200
    error: str = "scripted failure"
    delay_s: float = 0.0  # before answering
    pace_s: float = 0.0  # between streamed pieces
    headers: dict[str, str] = field(default_factory=dict)
    finish_reason: str = "stop"  # "length" to act out an answer cut at max_tokens


Script = FakeAnswer | dict | list | str
Responder = Callable[[dict[str, Any]], Script]
WATCH_S = 0.01  # how often a waiting server looks for its client


class ClientGone(Exception):
    """The client closed its connection before the answer was complete."""


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        self.server.owner.serve(self, body)

    def connected(self) -> bool:
        """Whether the client still holds the connection (a closed one reads as end of file)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return not readable or self.connection.recv(1, socket.MSG_PEEK) != b""
        except OSError:
            return False

    def wait(self, seconds: float) -> None:
        """Sleep `seconds`, raising ClientGone as soon as the client leaves."""
        until = time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            if not self.connected():
                raise ClientGone
            time.sleep(min(WATCH_S, left))
        if not self.connected():
            raise ClientGone


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: _FakeServer


class _FakeServer:
    """Shared machinery: the HTTP server thread, the answer table, the request log."""

    path = "/"

    def __init__(self, *, one_at_a_time: bool = False) -> None:
        self._queues: dict[str, deque[Script]] = defaultdict(deque)
        self._responders: dict[str, Responder] = {}
        self._lock = threading.Lock()
        self._slot = threading.Lock() if one_at_a_time else contextlib.nullcontext()
        self._gone = threading.Condition()
        self.requests: list[dict[str, Any]] = []
        #: Schema names of the requests whose client left before the answer was complete, in order.
        self.disconnects: list[str] = []
        self._server: _Server | None = None

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> _FakeServer:
        """Listen on 127.0.0.1 (random port) in a background thread."""
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name=type(self).__name__,
                         daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The port it listens on."""
        assert self._server is not None, "start the server first"
        return self._server.server_address[1]

    # --- scripting -----------------------------------------------------------------------------

    def answer(self, name: str, *answers: Script) -> None:
        """Queue answers for a schema name (`text` for plain completions), served in order."""
        with self._lock:
            self._queues[name].extend(answers)

    def respond_with(self, name: str, responder: Responder) -> None:
        """Answer every request for `name` (once its queue is empty) by calling `responder(request_body)`."""
        self._responders[name] = responder

    def fail(self, name: str, status: int, *, times: int = 1, retry_after: str | None = None) -> None:
        """Queue `times` failures with an HTTP status (429, 500, …) for a schema name."""
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        self.answer(name, *[FakeAnswer(status=status, headers=headers) for _ in range(times)])

    def calls(self, name: str | None = None) -> int:
        """How many requests arrived (for one schema name, or in all)."""
        return sum(1 for r in self.requests if name is None or self.name_of(r) == name)

    def wait_for_disconnects(self, count: int = 1, timeout: float = 5.0) -> bool:
        """Wait until `count` clients have left mid-answer; whether they did within `timeout` seconds."""
        with self._gone:
            return self._gone.wait_for(lambda: len(self.disconnects) >= count, timeout)

    def reset(self) -> None:
        """Forget scripts, the request log and the disconnects."""
        with self._lock:
            self._queues.clear()
            self._responders.clear()
            self.requests.clear()
        with self._gone:
            self.disconnects.clear()

    def _next(self, name: str, body: dict[str, Any]) -> FakeAnswer:
        with self._lock:
            queued = self._queues[name].popleft() if self._queues[name] else None
        if queued is None and name in self._responders:
            queued = self._responders[name](body)
        if queued is None:
            return FakeAnswer(status=500, error=f"FakeLLMServer has no scripted answer for '{name}'")
        return queued if isinstance(queued, FakeAnswer) else FakeAnswer(content=queued)

    # --- serving -------------------------------------------------------------------------------

    def name_of(self, body: dict[str, Any]) -> str:  # pragma: no cover - per wire
        raise NotImplementedError

    def serve(self, handler: _Handler, body: dict[str, Any]) -> None:
        """Serve one request (after the one in the slot, when serving one at a time), noting a client that left."""
        with self._slot:
            try:
                self.handle(handler, body)
            except (ClientGone, BrokenPipeError, ConnectionResetError):
                with self._gone:
                    self.disconnects.append(self.name_of(body))
                    self._gone.notify_all()
                handler.close_connection = True

    def handle(self, handler: _Handler, body: dict[str, Any]) -> None:
        """Serve one request from the script."""
        self.requests.append(body)
        answer = self._next(self.name_of(body), body)
        if answer.delay_s:
            handler.wait(answer.delay_s)
        if answer.status != 200:
            self._send_json(handler, answer.status, {"error": {"message": answer.error, "type": "fake"}},
                            answer.headers)
            return
        text = answer.content if isinstance(answer.content, str) else json.dumps(answer.content)
        usage = self.default_usage(body, text) if answer.usage is DEFAULT_USAGE else answer.usage
        if body.get("stream"):
            self._stream(handler, body, text, usage, answer)
        else:
            payload = self.completion(body, text, usage)
            if answer.finish_reason != "stop":
                self.mark_cut(payload)
            self._send_json(handler, 200, payload, answer.headers)

    @staticmethod
    def _send_json(handler: _Handler, status: int, payload: dict[str, Any], headers: dict[str, str]) -> None:
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(data)

    def _stream(self, handler: _Handler, body: dict[str, Any], text: str, usage: Any, answer: FakeAnswer) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        for i, event in enumerate(self.stream_events(body, text, usage, finish_reason=answer.finish_reason)):
            if i and answer.pace_s:
                handler.wait(answer.pace_s)
            handler.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            handler.wfile.flush()
        handler.wfile.write(b"data: [DONE]\n\n")

    def default_usage(self, body: dict[str, Any], text: str) -> Any:  # pragma: no cover - per wire
        raise NotImplementedError

    def completion(self, body: dict[str, Any], text: str, usage: Any) -> dict[str, Any]:  # pragma: no cover
        raise NotImplementedError

    def stream_events(self, body: dict[str, Any], text: str, usage: Any, *,
                      finish_reason: str = "stop") -> list[dict[str, Any]]:  # pragma: no cover - per wire
        raise NotImplementedError

    def mark_cut(self, payload: dict[str, Any]) -> None:  # pragma: no cover - per wire
        raise NotImplementedError


def _pieces(text: str) -> list[str]:
    return [text[i:i + STREAM_PIECE] for i in range(0, len(text), STREAM_PIECE)] or [""]


class FakeLLMServer(_FakeServer):
    """The OpenAI chat-completions wire (json_schema, json_object+schema and tool calls; streaming)."""

    @property
    def base_url(self) -> str:
        """The URL to put in `llm.models.X.base_url`."""
        return f"http://127.0.0.1:{self.port}/v1"

    def model_config(self, model: str = "fake-model", **overrides: Any) -> ModelConfig:
        """A ModelConfig that talks to this server."""
        return ModelConfig(**{"provider": "openai", "model": model, "base_url": self.base_url, "api_key": "fake-key",
                               **overrides})

    def name_of(self, body: dict[str, Any]) -> str:
        """The schema name a request asks for (`text` when it asks for none)."""
        fmt = body.get("response_format") or {}
        if fmt.get("type") == "json_schema":
            return fmt["json_schema"]["name"]
        if fmt.get("type") == "json_object":
            return (fmt.get("schema") or {}).get("title") or "json_object"
        tools = body.get("tools") or []
        return tools[0]["function"]["name"] if tools else TEXT

    def default_usage(self, body: dict[str, Any], text: str) -> dict[str, Any]:
        """Token counts from sizes (about four characters a token)."""
        prompt = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
        return {"prompt_tokens": max(prompt // 4, 1), "completion_tokens": max(len(text) // 4, 1),
                "total_tokens": max(prompt // 4, 1) + max(len(text) // 4, 1)}

    def completion(self, body: dict[str, Any], text: str, usage: Any) -> dict[str, Any]:
        """A chat.completion object; a tool call when the request forced one."""
        message: dict[str, Any] = {"role": "assistant", "content": text}
        tools = body.get("tools") or []
        if tools:
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_fake", "type": "function",
                 "function": {"name": tools[0]["function"]["name"], "arguments": text}}]}
        payload: dict[str, Any] = {"id": "chatcmpl-fake", "object": "chat.completion", "model": body.get("model"),
                                   "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
        if usage is not None:
            payload["usage"] = usage
        return payload

    def mark_cut(self, payload: dict[str, Any]) -> None:
        """Say the answer stopped at the length limit."""
        payload["choices"][0]["finish_reason"] = "length"

    def stream_events(self, body: dict[str, Any], text: str, usage: Any, *,
                      finish_reason: str = "stop") -> list[dict[str, Any]]:
        """chat.completion.chunk events (the last with the finish reason), then a usage chunk when asked for."""
        tools = body.get("tools") or []
        events = []
        for piece in _pieces(text):
            delta: dict[str, Any] = {"content": piece}
            if tools:
                delta = {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
            events.append({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]})
        events[-1]["choices"][0]["finish_reason"] = "length" if finish_reason == "length" else (
            "tool_calls" if tools else "stop")
        if usage is not None and (body.get("stream_options") or {}).get("include_usage"):
            events.append({"object": "chat.completion.chunk", "choices": [], "usage": usage})
        return events


class FakeAnthropicServer(_FakeServer):
    """Anthropic's messages wire (text and forced tool use; streaming)."""

    @property
    def base_url(self) -> str:
        """The URL to put in `llm.models.X.base_url`."""
        return f"http://127.0.0.1:{self.port}"

    def model_config(self, model: str = "fake-claude", **overrides: Any) -> ModelConfig:
        """A ModelConfig that talks to this server."""
        return ModelConfig(**{"provider": "anthropic", "model": model, "base_url": self.base_url, "api_key": "fake-key",
                               **overrides})

    def name_of(self, body: dict[str, Any]) -> str:
        """The forced tool's name, or `text`."""
        tools = body.get("tools") or []
        return tools[0]["name"] if tools else TEXT

    def default_usage(self, body: dict[str, Any], text: str) -> dict[str, Any]:
        """Token counts from sizes."""
        prompt = len(str(body.get("system", ""))) + sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
        return {"input_tokens": max(prompt // 4, 1), "output_tokens": max(len(text) // 4, 1)}

    def completion(self, body: dict[str, Any], text: str, usage: Any) -> dict[str, Any]:
        """A message with a tool_use block (when a tool was forced) or a text block."""
        tools = body.get("tools") or []
        block: dict[str, Any] = {"type": "text", "text": text}
        if tools:
            block = {"type": "tool_use", "id": "toolu_fake", "name": tools[0]["name"], "input": json.loads(text)}
        payload: dict[str, Any] = {"id": "msg_fake", "type": "message", "role": "assistant", "model": body.get("model"),
                                   "content": [block], "stop_reason": "end_turn"}
        if usage is not None:
            payload["usage"] = usage
        return payload

    def mark_cut(self, payload: dict[str, Any]) -> None:
        """Say the answer stopped at max_tokens."""
        payload["stop_reason"] = "max_tokens"

    def stream_events(self, body: dict[str, Any], text: str, usage: Any, *,
                      finish_reason: str = "stop") -> list[dict[str, Any]]:
        """message_start, content block deltas (text or partial JSON), message_delta with output usage."""
        usage = usage or {}
        tools = body.get("tools") or []
        start_usage = {k: v for k, v in usage.items() if k != "output_tokens"}
        events: list[dict[str, Any]] = [{"type": "message_start", "message": {"usage": start_usage}}]
        kind = "input_json_delta" if tools else "text_delta"
        key = "partial_json" if tools else "text"
        events += [{"type": "content_block_delta", "index": 0, "delta": {"type": kind, key: p}} for p in _pieces(text)]
        stop = "max_tokens" if finish_reason == "length" else "tool_use" if tools else "end_turn"
        events.append({"type": "message_delta", "delta": {"stop_reason": stop},
                       "usage": {k: v for k, v in usage.items() if k == "output_tokens"}})
        events.append({"type": "message_stop"})
        return events
