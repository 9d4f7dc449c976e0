"""A throwaway PostgreSQL database on the loopback server with a SELECT-only reader role, and loading data."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

#: The server the tests use; override with NL2SQL_TEST_PG_URL (a superuser URL to a maintenance database).
SERVER_URL = os.environ.get("NL2SQL_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def server_available() -> str | None:
    """None when the server answers, else the reason it does not."""
    try:
        engine = sa.create_engine(SERVER_URL, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        engine.dispose()
    except Exception as exc:  # any driver or network failure means "no server"
        return f"no PostgreSQL server at {sa.make_url(SERVER_URL).render_as_string(hide_password=True)}: {exc}"
    return None


@dataclass(frozen=True)
class ScratchDatabase:
    """A database to load as its owner (`admin_url`) and to query as a SELECT-only role (`reader_url`)."""

    admin_url: str
    reader_url: str
    reader: str

    def grant_read(self) -> None:
        """Let the reader SELECT every table that exists now."""
        engine = sa.create_engine(self.admin_url)
        with engine.begin() as conn:
            conn.exec_driver_sql(f'GRANT USAGE ON SCHEMA public TO "{self.reader}"')
            conn.exec_driver_sql(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{self.reader}"')
        engine.dispose()


@contextmanager
def scratch_database(prefix: str = "nl2sql_test") -> Iterator[ScratchDatabase]:
    """Create a uniquely named database and reader role; drop both afterwards."""
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    reader = f"{name}_reader"
    admin = sa.create_engine(SERVER_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        conn.exec_driver_sql(f'CREATE ROLE "{reader}" LOGIN')
    base = sa.make_url(SERVER_URL).set(database=name)
    try:
        yield ScratchDatabase(
            admin_url=base.render_as_string(hide_password=False),
            reader_url=base.set(username=reader, password=None).render_as_string(hide_password=False),
            reader=reader,
        )
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.exec_driver_sql(f'DROP ROLE IF EXISTS "{reader}"')
        admin.dispose()


def copy_sqlite_database(sqlite_path: Path, target_url: str) -> None:
    """Copy every table of a SQLite file (schema, keys, rows) into the target database, names kept."""
    source = sa.create_engine(f"sqlite:///{sqlite_path}")
    target = sa.create_engine(target_url)
    metadata = sa.MetaData()
    metadata.reflect(source)
    for table in metadata.tables.values():
        for column in table.columns:
            column.type = column.type.as_generic()  # NVARCHAR(40) → VARCHAR(40), DATETIME → TIMESTAMP
            column.autoincrement = False  # keep the ids as they are, no SERIAL
    metadata.create_all(target)
    with source.connect() as src, target.begin() as dst:
        for table in metadata.sorted_tables:
            rows = [dict(r._mapping) for r in src.execute(table.select())]
            if rows:
                dst.execute(table.insert(), rows)
    source.dispose()
    target.dispose()
