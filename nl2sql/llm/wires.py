"""Provider wires over httpx: the OpenAI-compatible chat-completions wire and the Anthropic messages wire.

httpx is used directly rather than the vendors' SDKs: one small dependency (already Prefect's),
the same retry, timeout and error rules on both wires, per-endpoint structured-output modes
(llama.cpp's server only takes `json_object` with a schema), and the usage fields read exactly
as reported, so an unreported count stays None.

`timeout_s` is one deadline per request, from connecting to the last byte, kept while an answer
streams in as well as while waiting for it: past it the connection is shut, so the server sees its
client leave and can stop generating (servers keep generating for a client that only stopped
reading, and a one-slot local server would queue the next call behind it).
"""

from __future__ import annotations

import json
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx

from nl2sql.config.models import DEFAULT_MAX_STRUCTURED_TOKENS, DEFAULT_MAX_TOKENS, ModelConfig
from nl2sql.config.reading import MAX_DEPTH, loads_json
from nl2sql.llm.models import (
    LLMAuthError,
    LLMError,
    LLMModelNotFound,
    LLMProviderError,
    LLMRateLimited,
    LLMResponse,
    LLMTimeout,
    Message,
    StructuredMode,
    Usage,
)

log = logging.getLogger("nl2sql.llm")

#: First backoff after a 429 or 5xx, doubled each retry (plus jitter), unless the server sends Retry-After.
BACKOFF_S = 0.5
#: How deep a provider's response may nest: a structured answer's MAX_DEPTH plus the wire's own envelope.
ENVELOPE_DEPTH = MAX_DEPTH + 8
MAX_BACKOFF_S = 30.0
#: Longest wait for a connection; a shorter timeout_s bounds it too.
CONNECT_TIMEOUT_S = 10.0

OnDelta = Callable[[str], None]


@dataclass
class ChatRequest:
    """One call: messages, and for structured output the JSON schema and its name."""

    node: str
    messages: list[Message]
    json_schema: dict | None = None
    schema_name: str | None = None
    #: A sampled call's temperature and seed (the model's configured temperature otherwise, no seed).
    temperature: float | None = None
    seed: int | None = None


def _opt_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def http_timeout(seconds: float) -> httpx.Timeout:
    """httpx timeouts for a request with `seconds` left: each wait bounded by them, connecting by CONNECT_TIMEOUT_S."""
    seconds = max(seconds, 0.001)
    return httpx.Timeout(seconds, connect=min(CONNECT_TIMEOUT_S, seconds))


class Deadline:
    """One request's deadline; once the response has started, a timer shuts its socket when the deadline passes.

    Shutting the socket (rather than only giving up reading) wakes a read blocked on it and sends the
    server a FIN at once, whichever thread is reading; the response is then closed by its reader.
    """

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds
        self.cut = False
        self._lock = threading.Lock()
        self._done = False
        self._sock: socket.socket | None = None
        self._timer: threading.Timer | None = None

    def left(self) -> float:
        """Seconds before the deadline (negative once past)."""
        return self.at - time.monotonic()

    @property
    def passed(self) -> bool:
        """Whether the deadline has passed (or the timer already cut the connection)."""
        return self.cut or self.left() <= 0

    def watch(self, response: httpx.Response) -> None:
        """Cut `response`'s connection at the deadline."""
        stream = response.extensions.get("network_stream")
        get_extra_info = getattr(stream, "get_extra_info", None)
        sock = get_extra_info("socket") if get_extra_info is not None else None
        self._sock = sock if isinstance(sock, socket.socket) else None
        self._timer = threading.Timer(max(self.left(), 0.0), self._cut)
        self._timer.daemon = True
        self._timer.start()

    def _cut(self) -> None:
        with self._lock:
            if self._done:
                return
            self.cut = True
            if self._sock is not None:
                with suppress(OSError):  # the base method: an SSL socket's own shutdown would unwrap it under its reader
                    socket.socket.shutdown(self._sock, socket.SHUT_RDWR)

    def stop(self) -> None:
        """Stop watching (before the response is closed, so the timer never touches a closed socket)."""
        with self._lock:
            self._done = True
        if self._timer is not None:
            self._timer.cancel()

    def lines(self, response: httpx.Response) -> Iterator[str]:
        """The response's lines, stopping at the deadline where no socket could be watched (HTTP/2, mock transports)."""
        for line in response.iter_lines():
            if self.passed:
                raise httpx.ReadTimeout("the request's deadline passed while the answer streamed in")
            yield line
        if self.cut:  # a body read until the connection closes just ends when it is cut
            raise httpx.ReadTimeout("the request's deadline passed while the answer streamed in")


class Wire:
    """Shared HTTP behaviour: retries with backoff on 429/5xx, timeouts, and one error per failure."""

    provider: ClassVar[str]
    #: The environment variable the fix for a refused key suggests.
    KEY_ENV: ClassVar[str] = "OPENAI_API_KEY"

    def __init__(self, name: str, config: ModelConfig, *, api_key: str | None = None,
                 http: httpx.Client | None = None, backoff_s: float = BACKOFF_S) -> None:
        self.name = name
        self.config = config
        self.api_key = api_key if api_key is not None else (
            config.api_key.get_secret_value() if config.api_key else None)
        self.http = http or httpx.Client(timeout=http_timeout(config.timeout_s))
        self.backoff_s = backoff_s
        #: the structured-output mode a server turned out to take, when `structured_output` is not set
        self._negotiated: StructuredMode | None = None

    # subclasses provide these
    def url(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def headers(self) -> dict[str, str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def body(self, request: ChatRequest, *, stream: bool) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def parse(self, data: dict[str, Any], request: ChatRequest) -> tuple[str, Usage]:  # pragma: no cover
        raise NotImplementedError

    def parse_stream(self, lines: Iterator[str], on_delta: OnDelta | None,
                     request: ChatRequest) -> tuple[str, Usage]:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def mode(self) -> StructuredMode:
        """How this endpoint is asked for structured output."""
        return self.config.structured_output or self._negotiated or "json_schema"

    def where(self, node: str) -> str:
        """The model and endpoint, for messages ("The planner model 'x' (llm.models.y) at URL")."""
        return f"The {node} model '{self.config.model}' (llm.models.{self.name}) at {self.url()}"

    # --- calls ---------------------------------------------------------------------------------

    def max_tokens(self, request: ChatRequest) -> int:
        """The answer cap of a call: llm.models.<name>.max_tokens, else the default for text or structured output."""
        if self.config.max_tokens is not None:
            return self.config.max_tokens
        return DEFAULT_MAX_STRUCTURED_TOKENS if request.json_schema is not None else DEFAULT_MAX_TOKENS

    def temperature(self, request: ChatRequest) -> float | None:
        """A call's temperature: the request's (a sampled call), else the model's; None where the model takes none."""
        if self.config.temperature == "none":
            return None
        return request.temperature if request.temperature is not None else self.config.temperature

    def streams(self, on_delta: OnDelta | None) -> bool:
        """Whether a call is streamed: when the caller shows text as it comes, or for every call with stream_all."""
        return on_delta is not None or self.config.stream_all

    def complete(self, request: ChatRequest, *, on_delta: OnDelta | None = None) -> LLMResponse:
        """One call, streamed when `on_delta` is given (or stream_all is set); retried on 429/5xx and connection errors.

        Each request has timeout_s from connecting to its last byte; past it the connection is cut and LLMTimeout
        raised (never retried).
        """
        try:
            return self._complete(request, on_delta)
        except LLMProviderError as exc:
            if not self._refused_json_schema(request, exc):
                raise
        # a server that takes only `json_object` with a schema (llama.cpp's, llama-cpp-python's) refused the
        # default: ask again in the mode it takes, and keep that mode for this model's next calls
        self._negotiated = "json_object"
        log.warning("%s refused response_format json_schema: structured output is asked as json_object from now on "
                    "(set llm.models.%s.structured_output to say so).", self.where(request.node), self.name)
        return self._complete(request, on_delta)

    def _complete(self, request: ChatRequest, on_delta: OnDelta | None) -> LLMResponse:
        started = time.perf_counter()
        stream = self.streams(on_delta)
        body = self.body(request, stream=stream)
        with self._send(request.node, body) as (response, deadline):
            try:
                if stream:
                    text, usage = self.parse_stream(deadline.lines(response), on_delta, request)
                    raw: dict[str, Any] = {}
                else:
                    response.read()
                    if deadline.cut:
                        raise httpx.ReadTimeout("the request's deadline passed")
                    raw = loads_json(response.text, max_depth=ENVELOPE_DEPTH)
                    text, usage = self.parse(raw, request)
            except LLMError:
                raise
            except Exception as exc:
                raise self._failed_mid_answer(request.node, exc, deadline) from exc
        return LLMResponse(text=text, usage=usage, model=self.config.model, provider=self.provider,
                           latency_ms=(time.perf_counter() - started) * 1000,
                           structured_mode=self.mode if request.json_schema else None, raw=raw)

    def _refused_json_schema(self, request: ChatRequest, exc: LLMProviderError) -> bool:
        """Whether a structured call failed because the server does not take `response_format: json_schema`, in the
        default mode (a mode set in the configuration is kept as set)."""
        return (self.provider == "openai" and request.json_schema is not None and self.config.structured_output is None
                and self._negotiated is None and "response_format" in exc.message and "json_schema" in exc.message)

    def _failed_mid_answer(self, node: str, exc: Exception, deadline: Deadline) -> Exception:
        """The error for a failure while reading an answer: a timeout when the deadline cut it, else what went wrong."""
        if deadline.passed or isinstance(exc, httpx.TimeoutException):
            return self._timeout(node)
        if isinstance(exc, KeyError | IndexError | TypeError | ValueError):
            return LLMProviderError(
                f"{self.where(node)} answered in an unexpected format ({type(exc).__name__}: {exc}).",
                fix="Check that base_url points at an OpenAI-compatible (or Anthropic) endpoint.", node=node)
        if isinstance(exc, httpx.TransportError):
            return LLMProviderError(f"{self.where(node)} dropped the connection mid-answer: {exc}.",
                                    fix="Retry; if it persists, check the server's logs.", node=node)
        return exc

    @contextmanager
    def _send(self, node: str, body: dict[str, Any]) -> Iterator[tuple[httpx.Response, Deadline]]:
        """POST `body` (retrying 429/5xx and connection errors); yields the open response and its deadline.

        The response is always opened as a stream, so its body is read under the deadline's watch; leaving the
        block stops the watch and closes the response (an unfinished one takes its connection with it).
        """
        attempt = 0
        while True:
            deadline = Deadline(self.config.timeout_s)
            try:
                request = self.http.build_request("POST", self.url(), json=body, headers=self.headers(),
                                                  timeout=http_timeout(deadline.left()))
                response = self.http.send(request, stream=True)
            except httpx.TimeoutException as exc:
                raise self._timeout(node) from exc
            except httpx.TransportError as exc:
                if attempt < self.config.max_retries:
                    attempt += 1
                    time.sleep(self._delay(attempt, None))
                    continue
                raise LLMProviderError(f"{self.where(node)} cannot be reached: {exc}.",
                                       fix="Check base_url and that the server is running.", node=node) from exc
            if response.status_code < 400:
                deadline.watch(response)
                try:
                    yield response, deadline
                finally:
                    deadline.stop()
                    response.close()
                return
            try:
                deadline.watch(response)
                response.read()
            except httpx.HTTPError:
                pass  # the status says enough; the detail is optional
            finally:
                deadline.stop()
                response.close()
            retryable = response.status_code == 429 or response.status_code >= 500
            if retryable and attempt < self.config.max_retries:
                attempt += 1
                time.sleep(self._delay(attempt, response.headers.get("retry-after")))
                continue
            raise self._status_error(node, response, attempts=attempt + 1)

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after is not None:
            try:
                return min(float(retry_after), MAX_BACKOFF_S)
            except ValueError:
                pass
        return min(self.backoff_s * 2 ** (attempt - 1) * (1 + random.random() / 4), MAX_BACKOFF_S)

    def _truncated(self, node: str) -> LLMProviderError:
        return LLMProviderError(f"{self.where(node)} stopped at its length limit before finishing the answer.",
                                fix=f"Raise llm.models.{self.name}.max_tokens.", node=node)

    def _timeout(self, node: str) -> LLMTimeout:
        return LLMTimeout(
            f"{self.where(node)} did not finish its answer within {self.config.timeout_s:g} s (timeout_s); "
            "the request was cancelled.",
            fix=f"Raise llm.models.{self.name}.timeout_s, lower llm.models.{self.name}.max_tokens, "
            f"or use a faster model for the {node}.", node=node)

    def _status_error(self, node: str, response: httpx.Response, *, attempts: int) -> LLMError:
        status = response.status_code
        detail = _error_detail(response)
        if status in (401, 403):
            return LLMAuthError(f"{self.where(node)} refused the API key (HTTP {status}{detail}).",
                                fix=f"Set llm.models.{self.name}.api_key (e.g. ${{env:{self.KEY_ENV}}}) to a valid key.",
                                node=node)
        if status == 404:
            return LLMModelNotFound(f"{self.where(node)} does not serve that model (HTTP 404{detail}).",
                                    fix=f"Check llm.models.{self.name}.model and base_url.", node=node)
        if status == 429:
            return LLMRateLimited(f"{self.where(node)} is rate limiting (HTTP 429 after {attempts} attempts{detail}).",
                                  fix="Wait and retry, lower the request rate, or raise the account's limits.",
                                  node=node)
        return LLMProviderError(f"{self.where(node)} failed (HTTP {status} after {attempts} attempts{detail}).",
                                fix="Retry later; if it persists, check the provider's status page.", node=node)


def _error_detail(response: httpx.Response) -> str:
    try:
        data = loads_json(response.text, max_depth=ENVELOPE_DEPTH)
    except (ValueError, httpx.StreamError):  # not JSON, or a body that could not be read
        return ""
    error = data.get("error") if isinstance(data, dict) else None
    message = error.get("message") if isinstance(error, dict) else error if isinstance(error, str) else None
    return f": {str(message)[:200]}" if message else ""


def _sse_data(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if line.startswith("data:"):
            payload = line[5:].strip()
            if payload and payload != "[DONE]":
                yield loads_json(payload, max_depth=ENVELOPE_DEPTH)


# --- OpenAI-compatible ---------------------------------------------------------------------------


class OpenAIWire(Wire):
    """Chat completions: OpenAI, OpenRouter, vLLM, Ollama, llama.cpp's server (base_url decides)."""

    provider = "openai"
    DEFAULT_BASE_URL = "https://api.openai.com/v1"

    def url(self) -> str:
        """The chat-completions endpoint."""
        return (self.config.base_url or self.DEFAULT_BASE_URL).rstrip("/") + "/chat/completions"

    def headers(self) -> dict[str, str]:
        """Bearer auth when a key is set (local servers need none)."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def body(self, request: ChatRequest, *, stream: bool) -> dict[str, Any]:
        """The request body: the answer cap (in the field the endpoint takes), the structured-output mode it takes."""
        body: dict[str, Any] = {"model": self.config.model,
                                "messages": [{"role": m.role, "content": m.content} for m in request.messages],
                                self.config.max_tokens_param: self.max_tokens(request)}
        temperature = self.temperature(request)
        if temperature is not None:
            body["temperature"] = temperature
        if request.seed is not None:
            body["seed"] = request.seed
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        if request.json_schema is not None:
            name = request.schema_name or "answer"
            if self.mode == "json_schema":
                body["response_format"] = {"type": "json_schema",
                                           "json_schema": {"name": name, "schema": request.json_schema, "strict": True}}
            elif self.mode == "json_object":
                body["response_format"] = {"type": "json_object", "schema": {**request.json_schema, "title": name}}
            else:
                body["tools"] = [{"type": "function", "function": {"name": name, "parameters": request.json_schema,
                                                                   "strict": True}}]
                body["tool_choice"] = {"type": "function", "function": {"name": name}}
        return body

    def parse(self, data: dict[str, Any], request: ChatRequest) -> tuple[str, Usage]:
        """Text (or the tool call's arguments) and usage of a non-streamed answer."""
        choice = data["choices"][0]
        if choice.get("finish_reason") == "length":
            raise self._truncated(request.node)
        message = choice["message"]
        calls = message.get("tool_calls") or []
        text = calls[0]["function"]["arguments"] if calls else (message.get("content") or "")
        return text, self.usage(data.get("usage"))

    def parse_stream(self, lines: Iterator[str], on_delta: OnDelta | None,
                     request: ChatRequest) -> tuple[str, Usage]:
        """Deltas as they arrive; usage from the usage chunk (asked for by stream_options) when the server sends one."""
        parts: list[str] = []
        usage = Usage()
        cut = False
        for chunk in _sse_data(lines):
            if chunk.get("usage"):
                usage = self.usage(chunk["usage"])
            for choice in chunk.get("choices") or []:
                cut = cut or choice.get("finish_reason") == "length"
                delta = choice.get("delta") or {}
                piece = delta.get("content") or "".join(
                    (c.get("function") or {}).get("arguments") or "" for c in delta.get("tool_calls") or [])
                if piece:
                    parts.append(piece)
                    if on_delta is not None:
                        on_delta(piece)
        if cut:
            raise self._truncated(request.node)
        return "".join(parts), usage

    @staticmethod
    def usage(data: dict[str, Any] | None) -> Usage:
        """OpenAI's usage object; absent fields stay None."""
        if not data:
            return Usage()
        prompt_details = data.get("prompt_tokens_details") or {}
        completion_details = data.get("completion_tokens_details") or {}
        return Usage(input_tokens=_opt_int(data.get("prompt_tokens")),
                     cached_input_tokens=_opt_int(prompt_details.get("cached_tokens")),
                     output_tokens=_opt_int(data.get("completion_tokens")),
                     reasoning_tokens=_opt_int(completion_details.get("reasoning_tokens")))


# --- Anthropic -----------------------------------------------------------------------------------


class AnthropicWire(Wire):
    """The Messages API; structured output through a forced tool call."""

    provider = "anthropic"
    KEY_ENV = "ANTHROPIC_API_KEY"
    DEFAULT_BASE_URL = "https://api.anthropic.com"
    VERSION = "2023-06-01"

    @property
    def mode(self) -> StructuredMode:
        """Anthropic takes schemas as tool input only."""
        return "tools"

    def url(self) -> str:
        """The messages endpoint."""
        return (self.config.base_url or self.DEFAULT_BASE_URL).rstrip("/") + "/v1/messages"

    def headers(self) -> dict[str, str]:
        """Anthropic's key and version headers."""
        return {"x-api-key": self.api_key or "", "anthropic-version": self.VERSION}

    def body(self, request: ChatRequest, *, stream: bool) -> dict[str, Any]:
        """System text apart, the rest as messages; a schema becomes a tool the model must call."""
        system = "\n\n".join(m.content for m in request.messages if m.role == "system")
        body: dict[str, Any] = {
            "model": self.config.model, "max_tokens": self.max_tokens(request),
            "messages": [{"role": m.role, "content": m.content} for m in request.messages if m.role != "system"],
        }
        if system:
            body["system"] = system
        if self.config.cache_prefix:
            _mark_shared_prefix(body, request.messages)
        temperature = self.temperature(request)
        if temperature is not None:
            body["temperature"] = temperature
        if stream:
            body["stream"] = True
        if request.json_schema is not None:
            name = request.schema_name or "answer"
            body["tools"] = [{"name": name, "description": f"Answer with a {name}.", "input_schema": request.json_schema}]
            body["tool_choice"] = {"type": "tool", "name": name}
        return body

    def parse(self, data: dict[str, Any], request: ChatRequest) -> tuple[str, Usage]:
        """The tool's input (as JSON text) or the text blocks, and usage."""
        if data.get("stop_reason") == "max_tokens":
            raise self._truncated(request.node)
        blocks = data["content"]
        tool = next((b for b in blocks if b.get("type") == "tool_use"), None)
        text = json.dumps(tool["input"]) if tool else "".join(b.get("text", "") for b in blocks)
        return text, self.usage(data.get("usage"))

    def parse_stream(self, lines: Iterator[str], on_delta: OnDelta | None,
                     request: ChatRequest) -> tuple[str, Usage]:
        """Text and input_json deltas; usage from message_start and message_delta."""
        parts: list[str] = []
        usage: dict[str, Any] = {}
        cut = False
        for event in _sse_data(lines):
            kind = event.get("type")
            if kind == "message_start":
                usage.update((event.get("message") or {}).get("usage") or {})
            elif kind == "message_delta":  # counts so far (output_tokens at least), replacing message_start's
                usage.update({k: v for k, v in (event.get("usage") or {}).items() if v is not None})
                cut = cut or (event.get("delta") or {}).get("stop_reason") == "max_tokens"
            elif kind == "content_block_delta":
                delta = event.get("delta") or {}
                piece = delta.get("text") or delta.get("partial_json") or ""
                if piece:
                    parts.append(piece)
                    if on_delta is not None:  # a forced tool's input too: a structured answer is watched as it comes
                        on_delta(piece)
        if cut:
            raise self._truncated(request.node)
        return "".join(parts), self.usage(usage)

    @staticmethod
    def usage(data: dict[str, Any] | None) -> Usage:
        """Anthropic reports input without cache reads/writes: input here is their sum, as OpenAI counts it."""
        if not data:
            return Usage()
        plain = _opt_int(data.get("input_tokens"))
        read = _opt_int(data.get("cache_read_input_tokens"))
        written = _opt_int(data.get("cache_creation_input_tokens"))
        total = None if plain is None else plain + (read or 0) + (written or 0)
        return Usage(input_tokens=total, cached_input_tokens=read, cache_write_tokens=written,
                     output_tokens=_opt_int(data.get("output_tokens")))


#: Anthropic's mark on the last block of a prompt prefix to cache
CACHE_CONTROL = {"type": "ephemeral"}


def _mark_shared_prefix(body: dict[str, Any], messages: Sequence[Message]) -> None:
    """Put Anthropic's cache mark at the end of the prefix a datasource's calls share (`Message.shared`): on the
    system text when it is all there is of it, else on the first `shared` characters of the last message holding
    some, split into a block of their own."""
    shared = [(i, m) for i, m in enumerate(messages) if m.shared]
    if not shared:
        return
    index, last = shared[-1]
    if last.role == "system":
        body["system"] = [{"type": "text", "text": body["system"], "cache_control": CACHE_CONTROL}]
        return
    position = sum(1 for m in messages[:index] if m.role != "system")
    head, tail = last.content[:last.shared], last.content[last.shared:]
    blocks = [{"type": "text", "text": head, "cache_control": CACHE_CONTROL}]
    if tail:
        blocks.append({"type": "text", "text": tail})
    body["messages"][position]["content"] = blocks
