"""Provider wires over httpx: the OpenAI-compatible chat-completions wire and the Anthropic messages wire.

httpx is used directly rather than the vendors' SDKs: one small dependency (already Prefect's),
the same retry, timeout and error rules on both wires, per-endpoint structured-output modes
(llama.cpp's server only takes `json_object` with a schema), and the usage fields read exactly
as reported, so an unreported count stays None.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx

from nl2sql.config.models import ModelConfig
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

#: First backoff after a 429 or 5xx, doubled each retry (plus jitter), unless the server sends Retry-After.
BACKOFF_S = 0.5
#: How deep a provider's response may nest: a structured answer's MAX_DEPTH plus the wire's own envelope.
ENVELOPE_DEPTH = MAX_DEPTH + 8
MAX_BACKOFF_S = 30.0

OnDelta = Callable[[str], None]


@dataclass
class ChatRequest:
    """One call: messages, and for structured output the JSON schema and its name."""

    node: str
    messages: list[Message]
    json_schema: dict | None = None
    schema_name: str | None = None


def _opt_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


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
        self.http = http or httpx.Client(timeout=httpx.Timeout(config.timeout_s, connect=10.0))
        self.backoff_s = backoff_s

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
        return self.config.structured_output or "json_schema"

    def where(self, node: str) -> str:
        """The model and endpoint, for messages ("The planner model 'x' (llm.models.y) at URL")."""
        return f"The {node} model '{self.config.model}' (llm.models.{self.name}) at {self.url()}"

    # --- calls ---------------------------------------------------------------------------------

    def complete(self, request: ChatRequest, *, on_delta: OnDelta | None = None) -> LLMResponse:
        """One call, streamed when `on_delta` is given; retried on 429/5xx and connection errors."""
        started = time.perf_counter()
        stream = on_delta is not None
        body = self.body(request, stream=stream)
        with self._send(request.node, body, stream=stream) as response:
            try:
                if stream:
                    text, usage = self.parse_stream(response.iter_lines(), on_delta, request)
                    raw: dict[str, Any] = {}
                else:
                    raw = loads_json(response.text, max_depth=ENVELOPE_DEPTH)
                    text, usage = self.parse(raw, request)
            except httpx.TimeoutException as exc:
                raise self._timeout(request.node) from exc
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                raise LLMProviderError(
                    f"{self.where(request.node)} answered in an unexpected format ({type(exc).__name__}: {exc}).",
                    fix="Check that base_url points at an OpenAI-compatible (or Anthropic) endpoint.",
                    node=request.node) from exc
        return LLMResponse(text=text, usage=usage, model=self.config.model, provider=self.provider,
                           latency_ms=(time.perf_counter() - started) * 1000,
                           structured_mode=self.mode if request.json_schema else None, raw=raw)

    @contextmanager
    def _send(self, node: str, body: dict[str, Any], *, stream: bool) -> Iterator[httpx.Response]:
        attempt = 0
        while True:
            try:
                request = self.http.build_request("POST", self.url(), json=body, headers=self.headers(),
                                                  timeout=httpx.Timeout(self.config.timeout_s, connect=10.0))
                response = self.http.send(request, stream=stream)
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
                try:
                    yield response
                finally:
                    response.close()
                return
            if stream:
                response.read()
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
        return LLMTimeout(f"{self.where(node)} did not answer within {self.config.timeout_s:g} s.",
                          fix=f"Raise llm.models.{self.name}.timeout_s, or use a faster model for {node}.", node=node)

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
    except ValueError:
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
        """The request body, with the structured-output mode this endpoint takes."""
        body: dict[str, Any] = {"model": self.config.model,
                                "messages": [{"role": m.role, "content": m.content} for m in request.messages]}
        if isinstance(self.config.temperature, int | float):
            body["temperature"] = self.config.temperature
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
        """Deltas as they arrive; usage from the final chunk when the server sends one."""
        parts: list[str] = []
        usage = Usage()
        for chunk in _sse_data(lines):
            if chunk.get("usage"):
                usage = self.usage(chunk["usage"])
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                piece = delta.get("content") or "".join(
                    (c.get("function") or {}).get("arguments") or "" for c in delta.get("tool_calls") or [])
                if piece:
                    parts.append(piece)
                    if on_delta is not None:
                        on_delta(piece)
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
            "model": self.config.model, "max_tokens": self.config.max_tokens,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages if m.role != "system"],
        }
        if system:
            body["system"] = system
        if isinstance(self.config.temperature, int | float):
            body["temperature"] = self.config.temperature
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
        for event in _sse_data(lines):
            kind = event.get("type")
            if kind == "message_start":
                usage.update((event.get("message") or {}).get("usage") or {})
            elif kind == "message_delta":
                usage.update(event.get("usage") or {})
            elif kind == "content_block_delta":
                delta = event.get("delta") or {}
                piece = delta.get("text") or delta.get("partial_json") or ""
                if piece:
                    parts.append(piece)
                    if on_delta is not None and delta.get("type") == "text_delta":
                        on_delta(piece)
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
