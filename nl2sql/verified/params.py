"""Typed parameters of verified queries: values coerced to their declared type and bound into the SQL tree.

Values become sqlglot literals in place of `:name` placeholders, never pasted into SQL text.

>>> bind_parameters("SELECT COUNT(*) FROM Customer WHERE Country = :country", "sqlite", {"country": "Brazil"})
"SELECT COUNT(*) FROM Customer WHERE Country = 'Brazil'"
>>> bind_parameters("SELECT * FROM t WHERE y = :year", "duckdb", {"year": 2010})
'SELECT * FROM t WHERE y = 2010'
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import sqlglot
from sqlglot import exp

from nl2sql.config.models import ParameterConfig
from nl2sql.datasources.guard import sqlglot_dialect
from nl2sql.errors import NL2SQLError


class ParameterError(NL2SQLError):
    """A verified query's parameter is missing or has a value of the wrong type."""

    code = "PARAMETER_INVALID"


def coerce_value(name: str, value: Any, param: ParameterConfig) -> str | int | float:
    """The value as its declared type (ParameterError naming the parameter when it is not one)."""
    try:
        if param.type in ("integer", "year"):
            number = int(str(value).strip())
            if param.type == "year" and not 1000 <= number <= 9999:
                raise ValueError
            return number
        if param.type == "number":
            return float(str(value).strip())
        if param.type == "date":
            return dt.date.fromisoformat(str(value).strip()).isoformat()
    except ValueError:
        raise ParameterError(f"Parameter {name} should be {_type_words(param.type)}, not {value!r}.",
                             fix="Ask again with a value of that type.") from None
    return str(value)


def _type_words(type_name: str) -> str:
    return {"integer": "a whole number", "year": "a four-digit year", "number": "a number",
            "date": "a date (YYYY-MM-DD)"}.get(type_name, "text")


def bind_parameters(sql: str, dialect: str, values: Mapping[str, Any]) -> str:
    """The SQL with every `:name` replaced by its value as a literal (ParameterError when one is missing)."""
    read = sqlglot_dialect(dialect)
    tree = sqlglot.parse_one(sql, read=read)

    def swap(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Placeholder) and node.this:
            name = str(node.this)
            if name not in values:
                raise ParameterError(f"Parameter {name} has no value.", fix=f"Give {name} a value or a default.")
            value = values[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return exp.Literal.string(str(value))
            return exp.Literal.number(value)
        return node

    return tree.transform(swap).sql(dialect=read)
