"""Regenerating a suite's gold rows: run every answer case's sql (and each reviewed alternative) and write
what came back.

Rows are never typed by hand: `regenerate` runs each statement on the case's first datasource through
the project's adapter and writes `rows` (one {column: value} mapping per row, in order) and `alt_rows`.
Values are plain JSON-able Python (int, float, str, None), floats rounded to 10 significant digits so
that the file does not churn on the last bits of a float. Cases without sql (routing, unanswerable,
refused for every role) are written unchanged. Regenerating an unchanged suite is byte-identical.

>>> plain_value(1.0 / 3)
0.3333333333
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd

from nl2sql.config.models import Config
from nl2sql.datasources import DatasourceCatalog
from nl2sql.errors import ConfigError, ConfigProblem, NL2SQLError
from nl2sql.evaluation.suite import EvalCase, EvalSuite, load_suite, write_suite

#: The most rows a gold answer may have (a larger one is cut short, which is an error: narrow the question).
ROW_LIMIT = 10_000
#: Seconds one gold statement may run.
TIMEOUT_S = 120.0
#: Significant digits floats keep in the file.
FLOAT_DIGITS = 10


def plain_value(value: Any) -> Any:
    """One result value as plain JSON-able Python: int, float (10 significant digits), str, bool or None."""
    if value is None or value is pd.NaT or value is pd.NA:
        return None
    if hasattr(value, "item") and not isinstance(value, str | bytes):  # numpy / pandas scalars
        value = value.item()
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, float | Decimal):
        number = float(value)
        if math.isnan(number):
            return None
        if math.isinf(number):
            return str(number)
        return float(f"{number:.{FLOAT_DIGITS}g}")
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def frame_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A result frame as one {column: value} mapping per row, in order.

    A column of integers with NULLs comes back from pandas as floats; such a column (every value
    integral, at least one NULL) is written as integers again, as the database returned them.
    """
    columns: list[list[Any]] = []
    for name in frame.columns:
        values = [plain_value(v) for v in frame[name].tolist()]
        numbers = [v for v in values if v is not None]
        if (pd.api.types.is_float_dtype(frame[name].dtype) and len(numbers) < len(values)
                and numbers and all(isinstance(v, float) and v.is_integer() for v in numbers)):
            values = [None if v is None else int(v) for v in values]
        columns.append(values)
    names = [str(n) for n in frame.columns]
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)] if columns else []


def _rows(catalog: DatasourceCatalog, case: EvalCase, sql: str, where: str, path: Path) -> list[dict[str, Any]]:
    try:
        result = catalog.get(case.datasource).execute(sql, row_limit=ROW_LIMIT, timeout_s=TIMEOUT_S)
    except NL2SQLError as exc:
        raise ConfigError(ConfigProblem(str(path), where, f"the statement failed: {exc}",
                                        "fix the statement so it runs on the case's first datasource")) from exc
    twice = result.repeated_names
    if twice:
        raise ConfigError(ConfigProblem(
            str(path), where, f"the statement returns more than one column named {', '.join(map(repr, twice))}",
            "alias the columns so every output column has its own name (e.g. `e.LastName AS employee, "
            "m.LastName AS manager`)"))
    if result.truncated:
        raise ConfigError(ConfigProblem(str(path), where, f"the statement returns more than {ROW_LIMIT} rows",
                                        "narrow the question: a gold answer is meant to be read"))
    return frame_rows(result.frame)


def regenerate_case(case: EvalCase, catalog: DatasourceCatalog, path: Path, index: int = 0) -> EvalCase:
    """The case with rows and alt_rows written from its sql (unchanged when it has no sql); errors name
    the file, the case (`cases[index] (id)`) and the field."""
    if case.kind != "answer" or not case.sql:
        return case
    label = f"cases[{index}] ({case.id})"
    rows = _rows(catalog, case, case.sql, f"{label}.sql", path)
    alt_rows = [_rows(catalog, case, sql, f"{label}.alt_sql.{i}", path) for i, sql in enumerate(case.alt_sql)]
    return case.model_copy(update={"rows": rows, "alt_rows": alt_rows})


def regenerate(path: Path, config: Config) -> EvalSuite:
    """Load the suite at `path`, rewrite every answer case's rows from its sql, write the file, return it."""
    path = Path(path)
    suite = load_suite(path)
    with DatasourceCatalog(config) as catalog:
        cases = [regenerate_case(case, catalog, path, i) for i, case in enumerate(suite.cases)]
    out = suite.model_copy(update={"cases": cases})
    write_suite(out, path)
    return out
