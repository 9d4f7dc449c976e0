"""The JSON schema of PlanModel as sent to providers (strict subset, unions written once)."""

from __future__ import annotations

import typing
from functools import cache

from nl2sql.llm.schema import strict_json_schema
from nl2sql.plan.model import Condition, Expr, PlanModel


def _members(union: object) -> frozenset[str]:
    inner = typing.get_args(union)[0]  # Annotated[Union[...], Field(discriminator=...)]
    return frozenset(t.__name__ for t in typing.get_args(inner))


@cache
def plan_json_schema() -> dict:
    """PlanModel's schema for structured output: OpenAI strict and Anthropic tool input alike."""
    return strict_json_schema(PlanModel, union_names={_members(Expr): "Expr", _members(Condition): "Condition"})
