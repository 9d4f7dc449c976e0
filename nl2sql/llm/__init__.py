"""Models: provider wires, structured output, usage, prices and budgets. No Prefect here."""

from nl2sql.llm.budget import Budget
from nl2sql.llm.client import LLMClient, ModelNotConfigured, provider_class
from nl2sql.llm.models import (
    AnswerAbandoned,
    CallRecord,
    LimitReached,
    LLMAuthError,
    LLMError,
    LLMModelNotFound,
    LLMParseError,
    LLMProviderError,
    LLMRateLimited,
    LLMResponse,
    LLMTimeout,
    Message,
    Usage,
)
from nl2sql.llm.prices import PRICES, call_cost, price_for, require_prices

__all__ = [
    "PRICES",
    "AnswerAbandoned",
    "Budget",
    "CallRecord",
    "LLMAuthError",
    "LLMClient",
    "LLMError",
    "LLMModelNotFound",
    "LLMParseError",
    "LLMProviderError",
    "LLMRateLimited",
    "LLMResponse",
    "LLMTimeout",
    "LimitReached",
    "Message",
    "ModelNotConfigured",
    "Usage",
    "call_cost",
    "price_for",
    "provider_class",
    "require_prices",
]
