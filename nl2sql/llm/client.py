"""The models of a run: which model each node uses, structured output with parse retries, streaming, usage.

One LLMClient per run (or per eval case): it resolves a node's model from `llm:` (the node's
override, else the default), prices every call, feeds the run's Budget, and reports each call
and each parse retry through callbacks (the events package turns them into llm.call and
llm.parse_retry; this package knows nothing of Prefect or the bus).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from importlib.metadata import entry_points
from typing import Any, TypeVar

import httpx
import pydantic_core
from pydantic import BaseModel, ValidationError

from nl2sql.config.models import LLM_NODES, LLMConfig, ModelConfig
from nl2sql.config.reading import loads_json
from nl2sql.errors import NL2SQLError, UnknownNameError
from nl2sql.llm.budget import Budget
from nl2sql.llm.json_schema import strict_json_schema, with_enums
from nl2sql.llm.models import (
    AnswerAbandoned,
    CallRecord,
    LLMError,
    LLMParseError,
    LLMResponse,
    Message,
    Usage,
)
from nl2sql.llm.prices import call_cost, price_for
from nl2sql.llm.wires import BACKOFF_S, AnthropicWire, ChatRequest, OnDelta, OpenAIWire, Wire, http_timeout

T = TypeVar("T", bound=BaseModel)
ENTRY_POINT_GROUP = "nl2sql.llm_providers"
#: Built-in provider wires, registered exactly as a plugin's entry point would be.
PROVIDERS: dict[str, type[Wire]] = {"openai": OpenAIWire, "anthropic": AnthropicWire}
MAX_ERROR_LINES = 12

#: Loads a saved LLMBlock: name → (provider, model, base_url, api_key).
LLMBlockLoader = Callable[[str], tuple[str, str, str | None, str | None]]


class ModelNotConfigured(NL2SQLError):
    """No model is configured for a node that needs one."""

    code = "LLM_NOT_CONFIGURED"


def not_configured_fix(node: str) -> str:
    """How to give a node a model: the YAML to add, the environment route of the demo, what works without."""
    return (
        "Add a model to nl2sql.yaml (see docs/models.md):\n"
        "  llm:\n"
        "    models:\n"
        "      main: {provider: openai, model: gpt-4o-mini, api_key: '${env:OPENAI_API_KEY}'}\n"
        f"    default: main        # or only this node: nodes: {{{node}: main}}\n"
        "Or set OPENAI_API_KEY or ANTHROPIC_API_KEY (or NL2SQL_LLM_BASE_URL and NL2SQL_LLM_MODEL for a local "
        "OpenAI-compatible server) before `nl2sql init --demo`, which then writes it for you.\n"
        "Verified questions are answered without a model.")


def provider_class(name: str) -> type[Wire]:
    """The wire class of a provider (built-in or from the `nl2sql.llm_providers` entry point group)."""
    if name not in PROVIDERS:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name == name:
                PROVIDERS[name] = ep.load()
    if name not in PROVIDERS:
        raise UnknownNameError("LLM provider", name, PROVIDERS)
    return PROVIDERS[name]


def validation_lines(exc: ValidationError | json.JSONDecodeError) -> list[str]:
    """The errors of a bad answer as `path: message` lines (never the answer itself)."""
    if isinstance(exc, json.JSONDecodeError):
        return [f"(top): not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"]
    from nl2sql.config.load import key_path

    lines = [f"{key_path(tuple(e['loc'])) or '(top)'}: {e['msg']}" for e in exc.errors(include_url=False)]
    return lines[:MAX_ERROR_LINES] + ([f"… and {len(lines) - MAX_ERROR_LINES} more"] if len(lines) > MAX_ERROR_LINES else [])


_SLOTS: dict[tuple[str, str, str], threading.BoundedSemaphore] = {}
_SLOTS_LOCK = threading.Lock()


def _abandoning(node: str, abandon_when: Callable[[Any], bool]) -> OnDelta:
    """A stream's listener that raises AnswerAbandoned once the JSON answer read so far (a trailing string kept
    as far as it goes) satisfies `abandon_when`."""
    parts: list[str] = []

    def on_delta(piece: str) -> None:
        parts.append(piece)
        try:
            partial = pydantic_core.from_json("".join(parts), allow_partial="trailing-strings")
        except ValueError:  # not JSON (yet): the whole answer is read and judged as usual
            return
        if abandon_when(partial):
            raise AnswerAbandoned(f"The {node} model's answer was cut short: what it began to write is set aside.",
                                  node=node)

    return on_delta


def _call_slot(model: ModelConfig) -> AbstractContextManager[Any]:
    """A slot of the model's `max_concurrent` calls, shared by every client of the process (none: no limit)."""
    if model.max_concurrent is None:
        return nullcontext()
    key = (model.provider, model.base_url or "", model.model)
    with _SLOTS_LOCK:
        slot = _SLOTS.setdefault(key, threading.BoundedSemaphore(model.max_concurrent))
    return slot


class LLMClient:
    """The run's access to models: per-node resolution, pricing, budget, records of every call."""

    def __init__(
        self,
        config: LLMConfig,
        *,
        budget: Budget | None = None,
        on_call: Callable[[CallRecord], None] | None = None,
        on_parse_retry: Callable[[str, int, list[str]], None] | None = None,
        block_loader: LLMBlockLoader | None = None,
        http: httpx.Client | None = None,
        backoff_s: float = BACKOFF_S,
    ) -> None:
        self.config = config
        self.budget = budget or Budget()
        self.on_call = on_call
        self.on_parse_retry = on_parse_retry
        self.block_loader = block_loader
        self.http = http
        self.backoff_s = backoff_s
        self.records: list[CallRecord] = []
        self._wires: dict[str, Wire] = {}

    # --- models --------------------------------------------------------------------------------

    def model_name_for(self, node: str) -> str | None:
        """The configured model name for a node (its override, else the default), or None."""
        if node not in LLM_NODES:
            raise UnknownNameError("node", node, LLM_NODES)
        return self.config.nodes.get(node) or self.config.default  # type: ignore[call-overload]

    def configured(self, node: str) -> bool:
        """Whether the node has a model."""
        return self.model_name_for(node) is not None

    def wire_for(self, node: str) -> Wire:
        """The wire to call for a node (ModelNotConfigured when there is none)."""
        name = self.model_name_for(node)
        if name is None:
            raise ModelNotConfigured(f"No model is configured for the {node}.", fix=not_configured_fix(node), node=node)
        if name not in self._wires:
            self._wires[name] = self._build(name, self.config.models[name])
        return self._wires[name]

    def _build(self, name: str, config: ModelConfig) -> Wire:
        api_key = None
        if config.block:
            if self.block_loader is None:
                raise ModelNotConfigured(f"llm.models.{name} names block '{config.block}', which cannot be loaded here.",
                                         fix="Run through the nl2sql CLI or flows (they load blocks), or set api_key.")
            provider, model, base_url, api_key = self.block_loader(config.block)
            config = config.model_copy(update={"provider": provider, "model": model, "base_url": base_url})
        wire_class = provider_class(config.provider)
        http = self.http or httpx.Client(timeout=http_timeout(config.timeout_s))
        return wire_class(name, config, api_key=api_key, http=http, backoff_s=self.backoff_s)

    # --- calls ---------------------------------------------------------------------------------

    def _call(self, node: str, request: ChatRequest, *, on_delta: OnDelta | None = None) -> LLMResponse:
        wire = self.wire_for(node)
        self.budget.before_call()  # raises LimitReached: never caught by the retry loops below
        prompt_chars = sum(len(m.content) for m in request.messages)
        started = time.perf_counter()
        try:
            with _call_slot(wire.config), self.budget.calling():
                response = wire.complete(request, on_delta=on_delta)
        except AnswerAbandoned:  # the caller's choice, not a failure; a cut stream reports no usage
            self._record(CallRecord(node=node, model=wire.config.model, provider=wire.provider, usage=Usage(),
                                    cost_usd=None, latency_ms=(time.perf_counter() - started) * 1000,
                                    prompt_chars=prompt_chars, ok=True))
            raise
        except LLMError as exc:
            self._record(CallRecord(node=node, model=wire.config.model, provider=wire.provider, usage=Usage(),
                                    cost_usd=None, latency_ms=0.0, prompt_chars=prompt_chars, ok=False,
                                    error_code=exc.code))
            raise
        cost = call_cost(price_for(response.model, self.config.prices), response.usage)
        self._record(CallRecord(node=node, model=response.model, provider=response.provider, usage=response.usage,
                                cost_usd=cost, latency_ms=response.latency_ms, prompt_chars=prompt_chars, ok=True))
        return response

    def _record(self, record: CallRecord) -> None:
        self.records.append(record)
        if record.ok:
            self.budget.after_call(record.cost_usd)
        if self.on_call is not None:
            self.on_call(record)

    def structured(self, node: str, messages: list[Message], output: type[T], *, max_parse_retries: int = 2,
                   schema_name: str | None = None, enums: dict[tuple[str, str], list[str]] | None = None,
                   temperature: float | None = None, seed: int | None = None,
                   abandon_when: Callable[[Any], bool] | None = None) -> T:
        """Ask for an answer that validates as `output`; on a bad answer, retry with its errors (not the answer).
        `enums` narrows string fields of the schema sent (see `json_schema.with_enums`); parsing is not narrowed.
        `temperature` (with `seed`) samples instead of the model's configured temperature, as in `text`.
        `abandon_when`, given, streams the answer and cuts it (AnswerAbandoned) as soon as the JSON read so far
        satisfies it: a caller that would set such an answer aside stops paying for the rest of it."""
        name = schema_name or output.__name__
        schema = strict_json_schema(output) if not enums else with_enums(strict_json_schema(output), enums)
        request = ChatRequest(node=node, messages=list(messages), json_schema=schema, schema_name=name,
                              temperature=temperature, seed=seed)
        for attempt in range(max_parse_retries + 1):
            on_delta = _abandoning(node, abandon_when) if abandon_when is not None else None
            response = self._call(node, request, on_delta=on_delta)
            try:
                return output.model_validate(loads_json(response.text))
            except (ValidationError, json.JSONDecodeError) as exc:
                errors = validation_lines(exc)
            if attempt == max_parse_retries:
                raise LLMParseError(
                    f"The {node} model's answer did not match {name} after {attempt + 1} attempts: "
                    + "; ".join(errors[:3]),
                    fix="Try a stronger model for this node, or one with native structured output "
                    f"(llm.models.{self.wire_for(node).name}.structured_output).", node=node)
            if self.on_parse_retry is not None:
                self.on_parse_retry(node, attempt + 1, errors)
            feedback = Message("user", "Your answer did not match the required schema:\n"
                               + "\n".join(f"- {line}" for line in errors)
                               + "\nAnswer again with JSON that matches the schema exactly.")
            request = ChatRequest(node=node, messages=[*messages, feedback], json_schema=request.json_schema,
                                  schema_name=name, temperature=temperature, seed=seed)
        raise AssertionError("unreachable")  # pragma: no cover

    def text(self, node: str, messages: list[Message], *, on_delta: OnDelta | None = None,
             temperature: float | None = None, seed: int | None = None) -> str:
        """A plain text answer, streamed through `on_delta` when given; sampled at `temperature` (with `seed`, for
        servers that take one) instead of the model's configured temperature when given."""
        request = ChatRequest(node=node, messages=list(messages), temperature=temperature, seed=seed)
        return self._call(node, request, on_delta=on_delta).text

    # --- totals --------------------------------------------------------------------------------

    def usage(self) -> Usage:
        """Token totals of the run's calls (None where no call reported a count)."""
        total = Usage()
        for record in self.records:
            total = total + record.usage
        return total

    def cost_usd(self) -> float | None:
        """Dollars spent on calls with a known cost (None when no call had one)."""
        known = [r.cost_usd for r in self.records if r.cost_usd is not None]
        return math.fsum(known) if known else None  # exact: the same total whatever order parallel calls ended in

    def summary(self) -> dict[str, Any]:
        """Calls, usage and cost as a plain record."""
        return {"calls": len(self.records), "usage": self.usage().model_dump(), "cost_usd": self.cost_usd(),
                "unknown_cost_calls": sum(1 for r in self.records if r.ok and r.cost_usd is None)}

    def close(self) -> None:
        """Close the HTTP clients this client opened."""
        for wire in self._wires.values():
            if wire.http is not self.http:
                wire.http.close()
