"""The price table: USD per million tokens, dated and sourced, with `llm.prices` overrides; call costs.

>>> price = price_for("gpt-4o-mini")
>>> round(call_cost(price, Usage(input_tokens=1_000_000, output_tokens=1_000_000)), 4)
0.75
>>> call_cost(price, Usage(input_tokens=10)) is None  # output count unknown: the cost is unknown
True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from nl2sql.config.models import LLMConfig, PriceConfig
from nl2sql.errors import ConfigError, ConfigProblem
from nl2sql.llm.models import Usage

#: When the table's rows were last compared with the providers' published prices.
PRICES_CHECKED_ON = "2026-11-30"


class ModelPrice(NamedTuple):
    """USD per million tokens for one model."""

    input: float
    output: float
    cached_input: float | None
    cache_write: float | None
    source: str
    checked_on: str


_OPENAI = "https://openai.com/api/pricing"
_ANTHROPIC = "https://www.anthropic.com/pricing#api"

#: Published list prices (USD per 1M tokens). Re-check before relying on a cost figure; override in llm.prices.
PRICES: dict[str, ModelPrice] = {
    "gpt-4o": ModelPrice(2.50, 10.00, 1.25, None, _OPENAI, PRICES_CHECKED_ON),
    "gpt-4o-mini": ModelPrice(0.15, 0.60, 0.075, None, _OPENAI, PRICES_CHECKED_ON),
    "gpt-4.1": ModelPrice(2.00, 8.00, 0.50, None, _OPENAI, PRICES_CHECKED_ON),
    "gpt-4.1-mini": ModelPrice(0.40, 1.60, 0.10, None, _OPENAI, PRICES_CHECKED_ON),
    "gpt-4.1-nano": ModelPrice(0.10, 0.40, 0.025, None, _OPENAI, PRICES_CHECKED_ON),
    "o4-mini": ModelPrice(1.10, 4.40, 0.275, None, _OPENAI, PRICES_CHECKED_ON),
    "claude-sonnet-4-5": ModelPrice(3.00, 15.00, 0.30, 3.75, _ANTHROPIC, PRICES_CHECKED_ON),
    "claude-sonnet-4-0": ModelPrice(3.00, 15.00, 0.30, 3.75, _ANTHROPIC, PRICES_CHECKED_ON),
    "claude-haiku-4-5": ModelPrice(1.00, 5.00, 0.10, 1.25, _ANTHROPIC, PRICES_CHECKED_ON),
    "claude-3-5-haiku-latest": ModelPrice(0.80, 4.00, 0.08, 1.00, _ANTHROPIC, PRICES_CHECKED_ON),
    "claude-opus-4-1": ModelPrice(15.00, 75.00, 1.50, 18.75, _ANTHROPIC, PRICES_CHECKED_ON),
}


def price_for(model: str, overrides: Mapping[str, PriceConfig] | None = None) -> ModelPrice | None:
    """The `llm.prices` row for the model, else the table's, by exact name; None when neither has it."""
    if overrides and model in overrides:
        row = overrides[model]
        return ModelPrice(row.input, row.output, row.cached_input, row.cache_write, "config", "")
    return PRICES.get(model)


def call_cost(price: ModelPrice | None, usage: Usage) -> float | None:
    """The dollars of one call; None when the price or a needed count (input, output) is unknown.

    `input_tokens` counts every prompt token, cache reads and writes included. Cached input is
    billed at the cached rate (input rate when the row has none), cache writes at the write rate
    (input rate when none); counts the provider did not report are not split out.
    """
    if price is None or usage.input_tokens is None or usage.output_tokens is None:
        return None
    cached = usage.cached_input_tokens or 0
    written = usage.cache_write_tokens or 0
    plain_input = max(usage.input_tokens - cached - written, 0)
    dollars = (
        plain_input * price.input
        + cached * (price.cached_input if price.cached_input is not None else price.input)
        + written * (price.cache_write if price.cache_write is not None else price.input)
        + usage.output_tokens * price.output
    )
    return dollars / 1_000_000


def unpriced_models(llm: LLMConfig) -> list[tuple[str, str]]:
    """(config key, model name) of every configured model with no price in the table or overrides."""
    return [(f"llm.models.{name}", m.model) for name, m in llm.models.items() if price_for(m.model, llm.prices) is None]


def require_prices(llm: LLMConfig, *, setting: str, file: str = "nl2sql.yaml") -> None:
    """With a dollar cap set, every configured model needs a price: a ConfigError naming each that has none."""
    problems = [
        ConfigProblem(file, key, f"model '{model}' has no price, so the dollar cap ({setting}) cannot be kept",
                      f"add llm.prices.{model}: {{input: …, output: …}} (USD per 1M tokens), or unset {setting}")
        for key, model in unpriced_models(llm)
    ]
    if problems:
        raise ConfigError(problems)
