"""All-null columns: a result column with rows but no value in any of them."""

from __future__ import annotations

import pandas as pd

from nl2sql.sanity.findings import Finding


def check_nulls(frame: pd.DataFrame) -> list[Finding]:
    """ALL_NULL_COLUMN for each column of a non-empty result whose every value is NULL.

    >>> check_nulls(pd.DataFrame({"a": [1, 2], "b": [None, None]}))[0].detail
    {'column': 'b', 'rows': 2}
    """
    if frame.empty:
        return []
    findings = []
    for position, name in enumerate(map(str, frame.columns)):
        if frame.iloc[:, position].isna().all():
            findings.append(Finding("ALL_NULL_COLUMN", f"Column {name} is empty (NULL) in every row of the result.",
                                    {"column": name, "rows": len(frame)}))
    return findings
