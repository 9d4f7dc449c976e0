"""Data expectations: what the engine relies on in a datasource's data, checked with great-expectations.

From the live build's profile and snapshot (`expectations_for`): the columns verified queries read exist and
hold values of their type; the low-cardinality text columns whose values the matcher and the prompts show still
hold exactly those values; primary keys are non-null and unique. `check_expectations` runs them over bounded
samples of the live tables. Only the drift check calls it: great-expectations is imported there, not at import
time (it costs ~3 s).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from nl2sql.datasources.models import ColumnProfile, SchemaSnapshot
from nl2sql.plan.join_keys import category, dtype_of
from nl2sql.schema.snapshot import table_key

if TYPE_CHECKING:
    import pandas as pd

ExpectationKind = Literal["column_exists", "value_type", "value_set", "not_null", "unique"]
#: The Python types a driver returns for each category of column type (SQLite returns dates as text).
PYTHON_TYPES: dict[str, tuple[str, ...]] = {
    "number": ("int", "float", "Decimal"), "text": ("str",), "boolean": ("bool", "int"),
    "temporal": ("str", "date", "datetime", "Timestamp"),
}
#: What a failure shows of the values of a value set (the rest are counted).
SHOWN_VALUES = 10


@dataclass(frozen=True)
class Expectation:
    """One expectation about one column (or a key's columns) of one table."""

    table: str
    columns: tuple[str, ...]
    kind: ExpectationKind
    why: str
    values: tuple[str, ...] = ()
    table_name: str | None = None  # as the table spells itself (`table` is the lower-case key); None: `table`


class ExpectationResult(BaseModel):
    """How one expectation fared on the live data."""

    table: str
    column: str
    kind: ExpectationKind
    why: str
    passed: bool
    detail: str = ""
    counted: str = Field(default="", description="The detail told by counts alone (no value), for a value set.")


def expectations_for(snapshot: SchemaSnapshot, profiles: Sequence[ColumnProfile],
                     read_by_verified: Collection[tuple[str, str]]) -> list[Expectation]:
    """The expectations of one datasource, from its live build: `read_by_verified` holds (table, column) pairs
    in lower case, as `schema.impact.columns_read` gives them."""
    out: list[Expectation] = []
    profile_of = {(table_key(p.schema_name, p.table), p.column.lower()): p for p in profiles}
    for table in snapshot.tables:
        name = table_key(table.schema_name, table.name)
        spelled = f"{table.schema_name}.{table.name}" if table.schema_name else table.name
        for column in table.columns:
            lowered = column.name.lower()
            if (name, lowered) in read_by_verified:
                out.append(Expectation(name, (column.name,), "column_exists", "read by a verified query", table_name=spelled))
                types = PYTHON_TYPES.get(category(dtype_of(column.type, snapshot.dialect)))
                if types:
                    out.append(Expectation(name, (column.name,), "value_type", f"read by a verified query as "
                                           f"{column.type}", types, spelled))
            profile = profile_of.get((name, lowered))
            if profile and profile.sample_values and profile.distinct_count == len(profile.sample_values):
                out.append(Expectation(name, (column.name,), "value_set", "its values are shown to the model and "
                                       "matched in questions", tuple(profile.sample_values), spelled))
        if table.primary_key:
            for column_name in table.primary_key:
                out.append(Expectation(name, (column_name,), "not_null", "primary key", table_name=spelled))
            out.append(Expectation(name, tuple(table.primary_key), "unique", "primary key", table_name=spelled))
    return out


def check_expectations(expectations: Sequence[Expectation], frames: Mapping[str, pd.DataFrame],
                       suite_name: str) -> list[ExpectationResult]:
    """Run the expectations over each table's sample (a frame of object columns, as the driver returned the
    values), one great-expectations suite per table; a table with no frame fails every expectation on it."""
    import great_expectations as gx
    import great_expectations.expectations as gxe
    from great_expectations.data_context.types.base import ProgressBarsConfig

    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    source = context.data_sources.add_pandas(suite_name)
    results: list[ExpectationResult] = []
    by_table: dict[str, list[Expectation]] = {}
    for expectation in expectations:
        by_table.setdefault(expectation.table, []).append(expectation)
    for table, expected in by_table.items():
        frame = frames.get(table)
        if frame is None:
            results += [_result(e, False, "the table could not be read") for e in expected]
            continue
        suite = gx.ExpectationSuite(name=f"{suite_name}.{table}")
        ours: dict[tuple[str, tuple[str, ...]], Expectation] = {}
        for expectation in expected:
            configured = suite.add_expectation(_gx_expectation(gxe, expectation))
            ours[_identity(configured.expectation_type, configured.configuration.kwargs)] = expectation
        batch = source.add_dataframe_asset(name=table).add_batch_definition_whole_dataframe("sample").get_batch(
            batch_parameters={"dataframe": frame})
        # the results come back in an order of great-expectations' own: each is matched to its expectation
        checked_of = {ours[_identity(c.expectation_config.type, c.expectation_config.kwargs)]: c
                      for c in batch.validate(suite).results}
        for expectation in expected:
            checked = checked_of[expectation]
            result = _result(expectation, bool(checked.success), _detail(expectation, checked, frame))
            if expectation.kind == "value_set" and not result.passed:
                result.counted = _counted(expectation, frame)
            results.append(result)
    return results


def _identity(kind: str, kwargs: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """An expectation's type and columns: what tells the expectations of one table apart."""
    columns = kwargs.get("column_list") or [kwargs.get("column")]
    return kind, tuple(str(c) for c in columns)


def _gx_expectation(gxe: Any, expectation: Expectation) -> Any:
    column = expectation.columns[0]
    if expectation.kind == "column_exists":
        return gxe.ExpectColumnToExist(column=column)
    if expectation.kind == "value_type":
        return gxe.ExpectColumnValuesToBeInTypeList(column=column, type_list=list(expectation.values))
    if expectation.kind == "value_set":
        return gxe.ExpectColumnDistinctValuesToEqualSet(column=column, value_set=list(expectation.values))
    if expectation.kind == "not_null":
        return gxe.ExpectColumnValuesToNotBeNull(column=column)
    if len(expectation.columns) == 1:
        return gxe.ExpectColumnValuesToBeUnique(column=column)
    return gxe.ExpectCompoundColumnsToBeUnique(column_list=list(expectation.columns))


def _detail(expectation: Expectation, checked: Any, frame: pd.DataFrame) -> str:
    """What failed, in words: counts, and for a value set the values gone and new (values the prompts show)."""
    if checked.success:
        return ""
    missing = [c for c in expectation.columns if c not in frame.columns]
    if missing:
        return f"no column {', '.join(missing)} in the table"
    if expectation.kind == "value_set":
        gone, new = _value_set_change(expectation, frame)
        parts = [f"no longer holds {_some(gone)}"] if gone else []
        parts += [f"now also holds {_some(new)}"] if new else []
        return "; ".join(parts) or "its values changed"
    result = checked.result or {}
    count = result.get("unexpected_count")
    if expectation.kind == "value_type":
        return f"{count} of {result.get('element_count')} values are not {'/'.join(expectation.values)}"
    if count is not None:
        return f"{count} of {result.get('element_count')} rows break it"
    return "failed"


def _value_set_change(expectation: Expectation, frame: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(the known values the sample no longer holds, the values it holds that were not known)."""
    seen = {str(v) for v in frame[expectation.columns[0]].dropna()}
    return [v for v in expectation.values if v not in seen], sorted(seen - set(expectation.values))


def _counted(expectation: Expectation, frame: pd.DataFrame) -> str:
    """A value set's failure in counts: how many known values are gone and how many are new."""
    column = expectation.columns[0]
    if column not in frame.columns:
        return f"no column {column} in the table"
    gone, new = _value_set_change(expectation, frame)
    return f"{len(gone)} of {len(expectation.values)} known values gone, {len(new)} new"


def _some(values: Sequence[str]) -> str:
    shown = ", ".join(repr(v) for v in values[:SHOWN_VALUES])
    return shown + (f" and {len(values) - SHOWN_VALUES} more" if len(values) > SHOWN_VALUES else "")


def _result(expectation: Expectation, passed: bool, detail: str) -> ExpectationResult:
    return ExpectationResult(table=expectation.table_name or expectation.table, column=", ".join(expectation.columns), kind=expectation.kind,
                             why=expectation.why, passed=passed, detail=detail)

