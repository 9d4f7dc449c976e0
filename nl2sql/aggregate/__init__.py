"""Combining sub-query results from different databases (join, compare, union) with DuckDB."""

from nl2sql.aggregate.combine import (
    JOIN_KEY_UNCONVERTED,
    AggregateError,
    AggregateWarning,
    Combined,
    CombineSpec,
    Frame,
    JoinKeyPair,
    combine,
    convert,
)

__all__ = [
    "JOIN_KEY_UNCONVERTED",
    "AggregateError",
    "AggregateWarning",
    "CombineSpec",
    "Combined",
    "Frame",
    "JoinKeyPair",
    "combine",
    "convert",
]
