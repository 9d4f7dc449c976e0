"""Chinook copied into DuckDB, for tests that compare engines."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import duckdb
import pandas as pd
import sqlalchemy as sa

#: SQLite declared types → DuckDB types (Chinook's datetimes are text in SQLite, timestamps here).
DUCKDB_TYPES = {"INTEGER": "INTEGER", "DATETIME": "TIMESTAMP", "REAL": "DOUBLE"}


def _duck_type(declared: str) -> str:
    upper = declared.upper()
    if upper.startswith(("NVARCHAR", "VARCHAR", "TEXT", "CHAR")):
        return "VARCHAR"
    if upper.startswith(("NUMERIC", "DECIMAL")):
        return upper.replace("NUMERIC", "DECIMAL")
    return DUCKDB_TYPES.get(upper, "VARCHAR")


def copy_sqlite_to_duckdb(sqlite_path: Path, target: Path) -> None:
    """Copy every table of a SQLite file into a new DuckDB file: columns, primary and foreign keys, rows."""
    source = sa.create_engine(f"sqlite:///{sqlite_path}")
    metadata = sa.MetaData()
    metadata.reflect(source)
    con = duckdb.connect(str(target))
    raw = sqlite3.connect(sqlite_path)
    for table in metadata.sorted_tables:
        columns = [f'"{c.name}" {_duck_type(str(c.type))}{" NOT NULL" if not c.nullable else ""}' for c in table.columns]
        pk = [c.name for c in table.primary_key.columns]
        if pk:
            columns.append("PRIMARY KEY (" + ", ".join(f'"{c}"' for c in pk) + ")")
        for fk in table.foreign_key_constraints:
            if fk.referred_table.name == table.name:
                continue  # DuckDB refuses self-references in a CREATE TABLE's foreign keys
            cols = ", ".join(f'"{c.parent.name}"' for c in fk.elements)
            refs = ", ".join(f'"{c.column.name}"' for c in fk.elements)
            columns.append(f'FOREIGN KEY ({cols}) REFERENCES "{fk.referred_table.name}" ({refs})')
        con.execute(f'CREATE TABLE "{table.name}" ({", ".join(columns)})')
        frame = pd.read_sql_query(f'SELECT * FROM "{table.name}"', raw)
        con.register("incoming", frame)  # one bulk insert; DuckDB casts text datetimes to TIMESTAMP
        con.execute(f'INSERT INTO "{table.name}" SELECT * FROM incoming')
        con.unregister("incoming")
    raw.close()
    con.execute("CHECKPOINT")
    con.close()
    source.dispose()
