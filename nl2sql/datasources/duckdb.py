"""DuckDB: opened read-only with external access off and the configuration locked."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from nl2sql.datasources.base import Adapter, closing_cursor
from nl2sql.datasources.models import ColumnInfo, ExecutionResult, ForeignKey, SchemaSnapshot, TableInfo
from nl2sql.datasources.sqlite import database_path

#: No file or network access (COPY TO, read_csv, ATTACH of files, extension installs), and no SET to undo it.
READ_ONLY_CONFIG = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "lock_configuration": True,
}


class DuckDBAdapter(Adapter):
    """A DuckDB file, read-only."""

    name = "duckdb"

    def explain_sql(self, sql: str) -> str | None:
        """DuckDB's optimizer estimate, as JSON."""
        return f"EXPLAIN (FORMAT JSON) {sql}"

    def rows_from_explain(self, result: ExecutionResult) -> int | None:
        """The largest `Estimated Cardinality` in the plan (what the statement reads at its widest)."""
        import json

        text = str(result.frame.iloc[0, -1])
        found = [int(v) for v in re.findall(r'"Estimated Cardinality":\s*"(\d+)"', text)]
        json.loads(text)  # a plan that is not JSON is no estimate
        return max(found) if found else None

    def create_engine(self) -> sa.Engine:
        """A read-only engine over duckdb-engine."""
        path = database_path(self.url, self.base_dir)
        return sa.create_engine(
            f"duckdb:///{path}", connect_args={"read_only": True, "config": dict(READ_ONLY_CONFIG)}
        )

    def reflect(self, previous: SchemaSnapshot | None = None) -> SchemaSnapshot:
        """Reflection from DuckDB's own catalog functions (duckdb-engine's inspector lags DuckDB releases), in
        three queries for the whole database, so `previous` is not needed."""
        try:
            return self._reflect()
        except Exception as exc:
            raise self._error(exc, "Reflection") from exc

    def _reflect(self) -> SchemaSnapshot:
        with self.engine.connect() as conn:
            db = conn.exec_driver_sql("SELECT current_database(), current_schema()").one()
            database, default_schema = db[0], db[1]
            schemas = self.schemas or [default_schema]
            params = {"db": database}
            relations = conn.exec_driver_sql(
                "SELECT schema_name, table_name, 'table' AS kind, comment FROM duckdb_tables() "
                "WHERE database_name = $db AND NOT internal AND NOT temporary "
                "UNION ALL SELECT schema_name, view_name, 'view', comment FROM duckdb_views() "
                "WHERE database_name = $db AND NOT internal AND NOT temporary ORDER BY 3 DESC, 1, 2",
                params,
            ).all()
            columns = conn.exec_driver_sql(
                "SELECT schema_name, table_name, column_name, data_type, is_nullable, comment FROM duckdb_columns() "
                "WHERE database_name = $db AND NOT internal ORDER BY schema_name, table_name, column_index",
                params,
            ).all()
            constraints = conn.exec_driver_sql(
                "SELECT schema_name, table_name, constraint_type, constraint_column_names, referenced_table, "
                "referenced_column_names FROM duckdb_constraints() WHERE database_name = $db "
                "AND constraint_type IN ('PRIMARY KEY', 'FOREIGN KEY') ORDER BY constraint_index",
                params,
            ).all()
            tables: list[TableInfo] = []
            for schema, name, kind, comment in relations:
                if schema not in schemas:
                    continue
                keys = [c for c in constraints if c[0] == schema and c[1] == name]
                pk = next((list(c[3]) for c in keys if c[2] == "PRIMARY KEY"), [])
                table = TableInfo(
                    name=name, schema_name=None if schema == default_schema else schema, kind=kind,
                    comment=comment or None, primary_key=pk,
                    columns=[ColumnInfo(name=c[2], type=c[3], nullable=bool(c[4]), primary_key=c[2] in pk,
                                        comment=c[5] or None)
                             for c in columns if c[0] == schema and c[1] == name],
                    foreign_keys=[ForeignKey(columns=list(c[3]), ref_table=c[4], ref_columns=list(c[5]))
                                  for c in keys if c[2] == "FOREIGN KEY"],
                )
                tables.append(table)
            self._count_rows(conn, [t for t in tables if t.kind == "table"], default_schema)
        return SchemaSnapshot(datasource_id=self.datasource_id, dialect=self.name,
                              default_schema=default_schema, tables=tables)

    @contextmanager
    def _statement(self, dbapi: Any, timeout_s: float) -> Iterator[Any]:
        timer = threading.Timer(timeout_s, dbapi.interrupt)
        timer.daemon = True
        timer.start()
        try:
            with closing_cursor(dbapi) as cursor:
                yield cursor
        finally:
            timer.cancel()

    def is_timeout(self, exc: BaseException) -> bool:
        """DuckDB reports `interrupt()` as an INTERRUPT error."""
        return "interrupt" in str(getattr(exc, "orig", exc)).lower()
