"""Golden plans: each `tests/golden/plans/*.yaml` holds a plan and the SQL expected in every dialect.

A file has three top-level keys, `sql` last: `description`, `plan` (a PlanModel as YAML, JSON key
`from` for the FROM table) and `sql` (dialect → expected SQL, keys sorted). The test generates
the SQL of the plan in each dialect and compares; the expected SQL must parse with sqlglot in
that dialect, and the SQLite and DuckDB statements run on Chinook.

To accept the generator's current output after a deliberate change, run

    NL2SQL_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_plan_golden.py

which rewrites only the `sql:` block of each file (stable YAML, sorted dialect keys; the
description and plan are left as written), then review the diff before committing it.

PyYAML reads YAML 1.1, where a bare `on`, `yes` or `no` is a boolean: write a join's key list as
`'on':` and never use such words as bare aliases.
"""

from __future__ import annotations

import os
import re
import sqlite3
import tempfile
from functools import cache
from pathlib import Path

import pytest
import sqlglot
import yaml

from nl2sql.plan import DIALECTS, PlanModel, generate_sql

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "golden" / "plans"
GOLDEN_FILES = sorted(GOLDEN_DIR.glob("*.yaml"))
UPDATE = os.environ.get("NL2SQL_UPDATE_GOLDEN") == "1"
SQL_BLOCK = re.compile(r"^sql:.*?(?=^\S|\Z)", re.MULTILINE | re.DOTALL)


def load(path: Path) -> dict:
    """One golden file as a mapping."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def sql_block(sql: dict[str, str]) -> str:
    """The `sql:` block as written to a golden file: sorted keys, one line per statement."""
    return yaml.safe_dump({"sql": dict(sorted(sql.items()))}, sort_keys=True, allow_unicode=True,
                          default_flow_style=False, width=1_000_000)


@cache
def rewrite(path: Path) -> None:
    """Write the generator's current SQL into the file's `sql:` block (once per file and process)."""
    text = path.read_text(encoding="utf-8")
    plan = PlanModel.model_validate(yaml.safe_load(text)["plan"])
    block = sql_block({dialect: generate_sql(plan, dialect) for dialect in DIALECTS})
    if SQL_BLOCK.search(text):
        text = SQL_BLOCK.sub(lambda _: block, text, count=1)
    else:
        text = text.rstrip("\n") + "\n" + block
    # Atomic, so parallel workers rewriting the same file never leave it half-written.
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, delete=False, suffix=".tmp") as tmp:
        tmp.write(text)
    os.replace(tmp.name, path)


def cases() -> list:
    return [pytest.param(path, dialect, id=f"{path.stem}-{dialect}") for path in GOLDEN_FILES for dialect in DIALECTS]


def test_golden_files_are_complete() -> None:
    assert len(GOLDEN_FILES) >= 16
    for path in GOLDEN_FILES:
        if UPDATE:
            rewrite(path)
        doc = load(path)
        assert list(doc) == ["description", "plan", "sql"], f"{path.name}: keys must be description, plan, sql"
        assert isinstance(doc["description"], str) and doc["description"].strip(), path.name
        assert sorted(doc["sql"]) == sorted(DIALECTS), f"{path.name}: sql must give every dialect {DIALECTS}"
        assert list(doc["sql"]) == sorted(doc["sql"]), f"{path.name}: sql keys must be sorted"


@pytest.mark.parametrize(("path", "dialect"), cases())
def test_plan_golden(path: Path, dialect: str) -> None:
    if UPDATE:
        rewrite(path)
    doc = load(path)
    got = generate_sql(PlanModel.model_validate(doc["plan"]), dialect)
    expected = (doc.get("sql") or {}).get(dialect)
    assert expected is not None, f"{path.name} has no sql.{dialect}; run with NL2SQL_UPDATE_GOLDEN=1 to add it"
    assert got == expected, (
        f"{path.name} [{dialect}] generated SQL differs from the golden file\n"
        f"expected: {expected}\n"
        f"     got: {got}\n"
        "(if the change is intended, rerun with NL2SQL_UPDATE_GOLDEN=1 and review the diff)"
    )
    sqlglot.parse_one(expected, read=dialect)  # raises ParseError when the dialect's parser refuses it


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=[p.stem for p in GOLDEN_FILES])
def test_golden_sqlite_runs_on_chinook(path: Path, chinook_path: Path) -> None:
    sql = load(path)["sql"]["sqlite"]
    with sqlite3.connect(f"file:{chinook_path}?mode=ro", uri=True) as con:
        con.execute(sql).fetchall()


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=[p.stem for p in GOLDEN_FILES])
def test_golden_duckdb_runs_on_chinook(path: Path, duckdb_chinook_path: Path) -> None:
    import duckdb

    sql = load(path)["sql"]["duckdb"]
    with duckdb.connect(str(duckdb_chinook_path), read_only=True) as con:
        con.execute(sql).fetchall()


@pytest.mark.postgres
@pytest.mark.parametrize("path", GOLDEN_FILES, ids=[p.stem for p in GOLDEN_FILES])
def test_golden_postgres_runs_on_chinook(path: Path, postgres_chinook_url: str) -> None:
    import sqlalchemy as sa

    sql = load(path)["sql"]["postgres"]
    engine = sa.create_engine(postgres_chinook_url)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(sql.replace("%", "%%")).fetchall()
    finally:
        engine.dispose()
