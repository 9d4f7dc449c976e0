"""A verified query as the index and the matcher see it: the question, its reviewed SQL and its parameters."""

from __future__ import annotations

from pydantic import BaseModel, Field


class VerifiedQuery(BaseModel):
    """A question with reviewed SQL (and named, typed parameters) that answers it."""

    question: str
    sql: str
    datasource: str
    parameters: dict[str, str] = Field(default_factory=dict)
    tables: list[str] = Field(default_factory=list)
