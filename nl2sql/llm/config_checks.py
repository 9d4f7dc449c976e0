"""The configuration's models checked against the price table: a question's dollar cap needs a price for every
model it may call."""

from __future__ import annotations

from collections.abc import Callable

from nl2sql.config.models import Config
from nl2sql.errors import ConfigProblem
from nl2sql.llm.prices import price_for


def check_prices(config: Config, file_of: Callable[[str], str], valid: set[str]) -> list[ConfigProblem]:
    """With `settings.pipeline.max_cost_usd` set, every configured model (but those in blocks) has a price."""
    if not {"llm", "settings"} <= valid or config.settings.pipeline.max_cost_usd is None:
        return []
    llm, file = config.llm, file_of("llm")
    problems = []
    for name, model in llm.models.items():
        if model.block is None and price_for(model.model, llm.prices) is None:
            problems.append(ConfigProblem(
                file, f"llm.models.{name}.model",
                f"model '{model.model}' has no price, so settings.pipeline.max_cost_usd cannot be kept",
                f"add llm.prices.{model.model}: {{input: …, output: …}} (USD per 1M tokens), or unset "
                "settings.pipeline.max_cost_usd"))
    return problems
