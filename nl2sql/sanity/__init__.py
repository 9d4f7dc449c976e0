"""Checks of a statement's result for the usual mistakes: a filter value the column does not hold, a join that
repeats the rows an aggregate sums, a column with nothing but NULL in it.

Each check reads the plan and the result; the two that need the database (`check_values`, `check_fan_out`) get a
`Probe` from their caller, which runs what they build under the asker's scope. A finding is a `Finding`; the
pipeline turns it into a warning, or into one retry through the refiner (`RETRYABLE`).
"""

from nl2sql.sanity.fanout import check_fan_out, fan_out_probe, repeated_aliases
from nl2sql.sanity.findings import RETRYABLE, Finding, Probe
from nl2sql.sanity.nulls import check_nulls
from nl2sql.sanity.values import (
    LiteralFilter,
    check_values,
    closest_values,
    literal_filters,
    text_columns_elsewhere,
)

__all__ = ["RETRYABLE", "Finding", "LiteralFilter", "Probe", "check_fan_out", "check_nulls", "check_values",
           "closest_values", "fan_out_probe", "literal_filters", "repeated_aliases",
           "text_columns_elsewhere"]
