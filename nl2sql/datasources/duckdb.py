"""DuckDB: opened read-only with external access off and the configuration locked."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlglot import exp

from nl2sql.datasources.base import Adapter, audit_log, closing_cursor
from nl2sql.datasources.guard import allowed_functions
from nl2sql.datasources.models import ColumnInfo, ExecutionResult, ForeignKey, SchemaSnapshot, TableInfo
from nl2sql.datasources.sqlite import database_path
from nl2sql.datasources.worker import out_of_memory_error
from nl2sql.errors import DatasourceError, SecurityViolation

if TYPE_CHECKING:
    from nl2sql.policies import Scope

#: No file or network access (COPY TO, read_csv, ATTACH of files, extension installs), and no SET to undo it.
READ_ONLY_CONFIG = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "lock_configuration": True,
    # EXPLAIN shows the binder's plan too (before the optimizer folds scans away): the second lock reads it
    "explain_output": "all",
}
#: Names DuckDB's parser gives to syntax (LIKE … ESCAPE, list comprehensions), beside the operators' symbols.
DUCKDB_SYNTAX_FUNCTIONS = frozenset({"like_escape", "not_like_escape", "ilike_escape", "not_ilike_escape",
                                     "list_apply"})
#: Table functions that only compute values; every other table function (catalogs, files, settings) is refused.
VALUE_TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})


def plan_nodes(plan: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every operator of an EXPLAIN (FORMAT JSON) plan, depth first."""
    stack = list(plan)
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.get("children") or [])


def printed_table(text: str) -> tuple[str, str]:
    """(schema, table) of a table name as EXPLAIN prints it, quotes read as DuckDB reads them: it quotes reserved
    and odd names (`main."order"`), and a quoted name may hold a dot.

    >>> printed_table('main."order"'), printed_table("sessions"), printed_table('main."we.ird"')
    (('main', 'order'), ('', 'sessions'), ('main', 'we.ird'))
    """
    table = exp.to_table(text, dialect="duckdb")
    return table.db, table.name


class DuckDBAdapter(Adapter):
    """A DuckDB file, read-only."""

    name = "duckdb"
    #: DuckDB's string, list and regex functions allocate outside its buffer manager (`memory_limit` does not see
    #: them): a caller's statement runs in a worker process with its own memory bound.
    runs_in_worker = True

    def explain_sql(self, sql: str) -> str | None:
        """DuckDB's optimizer estimate, as JSON."""
        return f"EXPLAIN (FORMAT JSON) {sql}"

    def rows_from_explain(self, result: ExecutionResult) -> int | None:
        """The largest `Estimated Cardinality` in the plan (what the statement reads at its widest)."""
        import json

        rows = result.frame.values.tolist()
        text = str(next((row[-1] for row in rows if row[0] == "physical_plan"), rows[0][-1]))
        found = [int(v) for v in re.findall(r'"Estimated Cardinality":\s*"(\d+)"', text)]
        json.loads(text)  # a plan that is not JSON is no estimate
        return max(found) if found else None

    def create_engine(self) -> sa.Engine:
        """A read-only engine over duckdb-engine."""
        path = database_path(self.url, self.base_dir)
        limits = self.resources
        config: dict[str, Any] = {"memory_limit": limits.duckdb_memory_limit, "threads": limits.duckdb_threads,
                                  "max_temp_directory_size": limits.duckdb_max_temp_directory_size}
        return sa.create_engine(
            f"duckdb:///{path}", connect_args={"read_only": True, "config": {**config, **READ_ONLY_CONFIG}}
        )

    @cached_property
    def _table_functions(self) -> frozenset[str]:
        """The names of DuckDB's table functions (lower case), as this DuckDB build lists them."""
        with self.engine.connect() as conn:
            rows = conn.exec_driver_sql(
                "SELECT DISTINCT lower(function_name) FROM duckdb_functions() WHERE function_type = 'table'").all()
        return frozenset(r[0] for r in rows)

    def check_reads(self, cursor: Any, sql: str, scope: Scope) -> None:
        """The second lock: DuckDB has no authorizer, so the tables its own binder resolves for the statement (the
        unoptimized plan of EXPLAIN) are checked against the scope, and table functions that read anything but
        their arguments are refused."""
        self._check_functions(cursor, sql)
        functions = self._table_functions
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}")
        plans = dict(cursor.fetchall())
        for node in plan_nodes(json.loads(plans["logical_plan"])):
            table = (node.get("extra_info") or {}).get("Table")
            name = str(node.get("name", "")).lower()
            if table is not None:
                schema, relation = printed_table(str(table))
                if not scope.allows(relation, None if schema in ("", "main") else schema):
                    raise SecurityViolation(datasource=self.datasource_id)
            elif name in functions and name not in VALUE_TABLE_FUNCTIONS:
                raise SecurityViolation(datasource=self.datasource_id)

    def _check_functions(self, cursor: Any, sql: str) -> None:
        """The function allow-list again, on DuckDB's own parse of the statement (`json_serialize_sql`): a function
        that binds SQL text (`json_serialize_plan('SELECT * FROM secret')` returns the columns of a table it never
        scans) or reads the catalog is invisible in the plan, so a statement the guard misread is caught here."""
        cursor.execute("SELECT json_serialize_sql(?)", [sql])
        parsed = json.loads(cursor.fetchone()[0])
        if parsed.get("error"):
            raise SecurityViolation(datasource=self.datasource_id)
        allowed = allowed_functions("duckdb")
        stack: list[Any] = [parsed]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                name = str(node.get("function_name") or "").lower()
                if name[:1].isalpha() and name not in allowed and name not in DUCKDB_SYNTAX_FUNCTIONS:
                    raise SecurityViolation(datasource=self.datasource_id)
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)

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
    def _statement(self, dbapi: Any, timeout_s: float, scope: Scope | None) -> Iterator[Any]:
        timer = threading.Timer(timeout_s, dbapi.interrupt)
        timer.daemon = True
        timer.start()
        try:
            with closing_cursor(dbapi) as cursor:
                yield cursor
        finally:
            timer.cancel()

    def _error(self, exc: BaseException, what: str) -> DatasourceError:
        """An out-of-memory error (DuckDB's own limit, or the worker process's bound) says so, with the fix."""
        if "out of memory" in str(getattr(exc, "orig", None) or exc).lower():
            audit_log.info("%s ran out of memory on datasource %s: %s", what, self.datasource_id, exc)
            return out_of_memory_error(self.datasource_id)
        return super()._error(exc, what)

    def is_timeout(self, exc: BaseException) -> bool:
        """DuckDB reports `interrupt()` as an INTERRUPT error."""
        return "interrupt" in str(getattr(exc, "orig", exc)).lower()

    def is_denied(self, exc: BaseException) -> bool:
        """A table or schema that does not exist reads as a refusal (Catalog Error)."""
        text = str(getattr(exc, "orig", exc))
        return text.startswith("Catalog Error") and ("does not exist" in text or "not found" in text)
