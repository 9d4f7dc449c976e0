"""What a model call takes and gives back: messages, usage (unknown counts are None, never 0), the response."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from nl2sql.errors import NL2SQLError

Role = Literal["system", "user", "assistant"]
StructuredMode = Literal["json_schema", "json_object", "tools"]


@dataclass(frozen=True)
class Message:
    """One chat message."""

    role: Role
    content: str
    #: How many characters at the start of `content` belong to the prefix that every call about one datasource
    #: shares (`pipeline.prompts.SharedPrefix`): a provider that caches on request marks its end.
    shared: int = 0


class Usage(BaseModel):
    """Token counts of one call as the provider reported them; None where it reported nothing."""

    input_tokens: int | None = None
    cached_input_tokens: int | None = None
    cache_write_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None

    def __add__(self, other: Usage) -> Usage:
        """The sum of what was reported: a count stays None only when neither side knows it."""

        def add(a: int | None, b: int | None) -> int | None:
            return None if a is None and b is None else (a or 0) + (b or 0)

        return Usage(**{name: add(getattr(self, name), getattr(other, name)) for name in Usage.model_fields})


@dataclass
class LLMResponse:
    """One call's answer: the text (or the tool input as JSON text), usage and how it was asked."""

    text: str
    usage: Usage
    model: str
    provider: str
    latency_ms: float
    structured_mode: StructuredMode | None = None
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass
class CallRecord:
    """What a run keeps of each call (for usage totals, cost and llm.call events): never the prompt itself."""

    node: str
    model: str
    provider: str
    usage: Usage
    cost_usd: float | None
    latency_ms: float
    prompt_chars: int
    ok: bool
    error_code: str | None = None


# --- errors ------------------------------------------------------------------------------------


class LLMError(NL2SQLError):
    """A model call failed; the message names the node, the model and what to do."""

    code = "LLM_ERROR"


class LLMAuthError(LLMError):
    """The endpoint refused the credentials."""

    code = "LLM_AUTH"


class LLMModelNotFound(LLMError):
    """The endpoint does not serve the configured model."""

    code = "LLM_MODEL_NOT_FOUND"


class LLMRateLimited(LLMError):
    """The endpoint kept answering 429 after every retry."""

    code = "LLM_RATE_LIMITED"


class LLMTimeout(LLMError):
    """The endpoint did not answer in time."""

    code = "LLM_TIMEOUT"


class LLMProviderError(LLMError):
    """The endpoint failed (5xx after retries, or an answer that is not the wire's format)."""

    code = "LLM_PROVIDER_ERROR"


class LLMParseError(LLMError):
    """The model's answer never matched the structured-output schema, retries included."""

    code = "LLM_PARSE_FAILED"


class AnswerAbandoned(LLMError):
    """The caller cut a streamed answer short: what the model began to write is an answer it would set aside."""

    code = "LLM_ANSWER_ABANDONED"


class LimitReached(NL2SQLError):
    """A run's cap on model calls or dollars is reached: no further call is made.

    Deliberately not an LLMError, so loops that retry model errors never swallow it.
    """

    code = "RUN_LIMIT_REACHED"

    def __init__(self, message: str, *, limit: str, setting: str) -> None:
        super().__init__(message, node="budget")
        self.limit = limit
        self.setting = setting
