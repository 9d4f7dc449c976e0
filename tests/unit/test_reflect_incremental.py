"""Reflection from the previous snapshot: only tables whose catalog definition changed are read again, and the
result is the same as a full reflection (SQLite and PostgreSQL); row counts batched across many tables."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from nl2sql.datasources import Adapter, adapter_class
from nl2sql.datasources.base import ROW_COUNT_BATCH, table_expression, table_sql

SCHEMA = [
    "CREATE TABLE region (region_id INTEGER PRIMARY KEY, name TEXT NOT NULL)",
    "CREATE TABLE store (store_id INTEGER PRIMARY KEY, region_id INTEGER REFERENCES region (region_id), city TEXT)",
    "CREATE TABLE shift (shift_id INTEGER PRIMARY KEY, store_id INTEGER REFERENCES store (store_id))",
    "CREATE VIEW store_city AS SELECT * FROM store",
    "INSERT INTO region VALUES (1, 'north'), (2, 'south')",
    "INSERT INTO store VALUES (10, 1, 'Oslo')",
]


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Adapter, Callable[[str], None]]]:
    """(a read-only adapter, a function running DDL/DML as the owner) over SCHEMA."""
    if request.param == "sqlite":
        path = tmp_path / "shop.sqlite"

        def run(statement: str) -> None:
            with sqlite3.connect(path) as conn:
                conn.execute(statement)
            conn.close()

        for statement in SCHEMA:
            run(statement)
        adapter = adapter_class("sqlite")("shop", f"sqlite:///{path}")
        yield adapter, run
        adapter.close()
        return
    from tests.support.postgres import scratch_database, server_available

    if reason := server_available():
        pytest.skip(reason)
    with scratch_database("nl2sql_reflect") as db:
        owner = sa.create_engine(db.admin_url, isolation_level="AUTOCOMMIT")

        def run(statement: str) -> None:
            with owner.connect() as conn:
                conn.exec_driver_sql(statement)

        for statement in SCHEMA:
            run(statement)
        db.grant_read()
        adapter = adapter_class("postgresql")("shop", db.reader_url)
        yield adapter, run
        adapter.close()
        owner.dispose()


def test_unchanged_tables_come_from_the_previous_snapshot(database: tuple[Adapter, Callable[[str], None]]) -> None:
    adapter, _ = database
    before = adapter.reflect()
    assert all(t.catalog_hash for t in before.tables if t.kind == "table")
    before.table("region").columns[1].comment = "marker"  # only a table taken from `before` can carry it
    again = adapter.reflect(before)
    assert again.table("region").column("name").comment == "marker"
    assert [(t.name, t.row_count) for t in again.tables] == [(t.name, t.row_count) for t in before.tables]


def test_a_changed_table_is_reflected_again(database: tuple[Adapter, Callable[[str], None]]) -> None:
    adapter, run = database
    before = adapter.reflect()
    before.table("region").columns[1].comment = "marker"
    run("ALTER TABLE store ADD COLUMN opened_on DATE")
    run("INSERT INTO region VALUES (3, 'east')")
    again = adapter.reflect(before)
    full = adapter.reflect()
    assert again.table("store").column("opened_on") is not None
    if adapter.name == "sqlite":  # SQLite expands a view's * when read, PostgreSQL when it creates the view
        assert again.table("store_city").column("opened_on") is not None
    assert again.table("region").row_count == 3  # row counts are always read
    again.table("region").columns[1].comment = None
    assert again == full


def test_a_table_referencing_a_changed_table_is_reflected_again(tmp_path: Path) -> None:
    # SQLite: a key declared without columns takes the referenced table's primary key at reflection time
    path = tmp_path / "keys.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript("CREATE TABLE parent (a INTEGER PRIMARY KEY, b INTEGER);"
                           "CREATE TABLE child (id INTEGER PRIMARY KEY, parent_b INTEGER REFERENCES parent);")
    conn.close()
    adapter = adapter_class("sqlite")("keys", f"sqlite:///{path}")
    before = adapter.reflect()
    assert before.table("child").foreign_keys[0].ref_columns == ["a"]
    with sqlite3.connect(path) as conn:
        conn.executescript("PRAGMA foreign_keys = OFF; DROP TABLE parent;"
                           "CREATE TABLE parent (a INTEGER, b INTEGER PRIMARY KEY);")
    conn.close()
    again = adapter.reflect(before)
    adapter.close()
    assert again.table("child").foreign_keys[0].ref_columns == ["b"]


def test_row_counts_span_several_statements(tmp_path: Path) -> None:
    path = tmp_path / "many.sqlite"
    n = ROW_COUNT_BATCH * 2 + 7
    with sqlite3.connect(path) as conn:
        for i in range(n):
            conn.execute(f"CREATE TABLE t{i} (x INTEGER)")
            conn.executemany(f"INSERT INTO t{i} VALUES (?)", [(k,) for k in range(i % 5)])
    conn.close()
    adapter = adapter_class("sqlite")("many", f"sqlite:///{path}")
    snapshot = adapter.reflect()
    adapter.close()
    assert {t.name: t.row_count for t in snapshot.tables} == {f"t{i}": i % 5 for i in range(n)}


@settings(max_examples=300, deadline=None)
@given(name=st.text(min_size=1, max_size=12), schema=st.none() | st.text(min_size=1, max_size=6),
       dialect=st.sampled_from(["sqlite", "postgres", "duckdb", "mysql", "bigquery", "snowflake", "tsql", "trino"]))
def test_a_table_reference_is_quoted_as_sqlglot_renders_it(name: str, schema: str | None, dialect: str) -> None:
    """Row counts quote every table's name without a sqlglot tree each: the same text, quotes in names included."""
    assert table_sql(name, schema, dialect) == table_expression(name, schema).sql(dialect=dialect)
