"""The configuration's datasources checked against what this package knows: the adapters registered for each
dialect, the URL's driver, and the SQL guard (every verified query is one read-only SELECT)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from nl2sql.config.models import Config
from nl2sql.datasources.guard import guard_sql
from nl2sql.errors import ConfigProblem, SQLRejected

#: How to install the driver module a datasource URL needs, where an extra of nl2sql-engine provides it.
DRIVER_FIXES = {
    "psycopg": 'pip install "nl2sql-engine[postgres]"',
    "psycopg2": 'pip install psycopg2-binary, or write the URL as postgresql+psycopg://… and '
                'pip install "nl2sql-engine[postgres]"',
}


def check_datasources(config: Config, file_of: Callable[[str], str], valid: set[str]) -> list[ConfigProblem]:
    """Each datasource's URL parses and has its driver installed; each of its verified queries passes the SQL
    guard."""
    if "datasources" not in valid:
        return []
    file = file_of("datasources")
    problems: list[ConfigProblem] = []
    for index, ds in enumerate(config.datasources):
        if ds.url is not None:
            problems.extend(_check_url(ds.url.get_secret_value(), file, f"datasources[{index}].url"))
        problems.extend(_check_curated_sql(ds, file, f"datasources[{index}]"))
    return problems


def _check_url(raw: str, file: str, where: str) -> list[ConfigProblem]:
    """The URL parses (its port is a number) and its driver is installed. Never echoes the URL (it may hold a
    password)."""
    try:
        url = sa.engine.make_url(raw)
    except ValueError:
        return [ConfigProblem(file, where, "the port is not a number",
                              "write the port as digits after the host (e.g. host:5432), or leave it out")]
    except sa.exc.ArgumentError:
        return [ConfigProblem(file, where, "not a valid SQLAlchemy URL",
                              "write it as DIALECT://USER:PASSWORD@HOST:PORT/DATABASE (see docs/configuration.md)")]
    dialect, _, driver = url.drivername.partition("+")
    if dialect == "postgresql" and not driver:  # the adapter's default driver
        url, driver = url.set(drivername="postgresql+psycopg"), "psycopg"
    if not driver:
        return []
    try:
        dialect_class = url.get_dialect()
    except sa.exc.NoSuchModuleError:
        return [ConfigProblem(file, where, f"unknown driver '{driver}' for {dialect}",
                              f"write the URL as {dialect}://… (the default driver) or name an installed driver")]
    try:
        dialect_class.import_dbapi()
    except ImportError as exc:
        module = exc.name or driver
        fix = DRIVER_FIXES.get(module, f"pip install {module}")
        return [ConfigProblem(file, where, f"the {dialect} driver '{driver}' is not installed (no module "
                              f"named '{module}')", fix)]
    return []


def _check_curated_sql(ds: Any, file: str, where: str) -> list[ConfigProblem]:
    """Each verified query's and example question's SQL passes the SQL guard (one read-only SELECT) for its
    datasource's dialect."""
    problems = []
    for key in ("verified_queries", "example_questions"):
        for index, query in enumerate(getattr(ds, key)):
            try:
                guard_sql(query.sql, ds.dialect or "")
            except SQLRejected as exc:
                problems.append(ConfigProblem(file, f"{where}.{key}[{index}].sql", exc.message.rstrip("."),
                                              exc.fix or "write one SELECT statement that only reads data"))
    return problems
