"""PostgreSQL: every statement in a READ ONLY transaction, prepared (so one statement only), timed out server-side."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

import sqlalchemy as sa

from nl2sql.datasources.base import Adapter, closing_cursor
from nl2sql.datasources.models import ExecutionResult, TableInfo
from nl2sql.errors import DatasourceError

if TYPE_CHECKING:
    from nl2sql.policies import Scope

#: SQLSTATEs that mean "you may not read that" or "no such relation": both read as the generic refusal.
DENIED_SQLSTATES = frozenset({"42501", "42P01", "3F000"})

#: Roles whose members can read or write server files or run programs even in a READ ONLY transaction.
PRIVILEGED_ROLES = ("pg_write_server_files", "pg_execute_server_program", "pg_read_server_files")
PRIVILEGE_CHECK = (
    "SELECT r.rolsuper OR " + " OR ".join(f"pg_has_role(current_user, '{r}', 'MEMBER')" for r in PRIVILEGED_ROLES)
    + " FROM pg_roles r WHERE r.rolname = current_user"
)

#: Per table or view of the given schemas: an md5 of its columns and key definitions as the catalog holds them.
CATALOG_HASHES = """
SELECT n.nspname, c.relname, md5(concat_ws('|', c.relkind,
    (SELECT string_agg(concat_ws(' ', a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                                 col_description(c.oid, a.attnum)), ',' ORDER BY a.attnum)
     FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
    (SELECT string_agg(pg_get_constraintdef(k.oid), ',' ORDER BY k.conname)
     FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype IN ('p', 'f'))))
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'f', 'v', 'm') AND n.nspname = ANY(%(schemas)s)
"""

#: Above this estimated size, row counts come from the planner's statistics instead of COUNT(*).
ESTIMATE_ABOVE_ROWS = 1_000_000


class PostgreSQLAdapter(Adapter):
    """A PostgreSQL database over psycopg 3, read-only."""

    name = "postgresql"
    #: A prepared statement cannot hold more than one command.
    execute_kwargs: ClassVar[dict[str, Any]] = {"prepare": True}

    def explain_sql(self, sql: str) -> str | None:
        """PostgreSQL's planner estimate, as JSON."""
        return f"EXPLAIN (FORMAT JSON) {sql}"

    def rows_from_explain(self, result: ExecutionResult) -> int | None:
        """`Plan Rows` of the top plan node."""
        import json

        value = result.frame.iloc[0, 0]
        plan = json.loads(value) if isinstance(value, str) else value
        return int(plan[0]["Plan"]["Plan Rows"])

    def create_engine(self) -> sa.Engine:
        """Sessions default to read-only transactions; psycopg 3 is the driver unless the URL names another."""
        url = self.url
        if url.drivername == "postgresql":
            url = url.set(drivername="postgresql+psycopg")
        engine = sa.create_engine(
            url,
            connect_args={"options": "-c default_transaction_read_only=on", "connect_timeout": 10},
            pool_pre_ping=True,
        )
        sa.event.listen(engine, "connect", self._refuse_privileged_role)
        return engine

    def _refuse_privileged_role(self, dbapi: Any, _record: Any) -> None:
        """A superuser can COPY to files and programs inside a READ ONLY transaction: refuse such roles."""
        with closing_cursor(dbapi) as cursor:
            cursor.execute(PRIVILEGE_CHECK)
            privileged = bool(cursor.fetchone()[0])
        dbapi.rollback()
        if privileged:
            dbapi.close()
            raise DatasourceError(
                f"Datasource '{self.datasource_id}' connects as a superuser (or a role that can touch server "
                "files or run programs), which read-only transactions do not contain.",
                fix="Connect as a role that can only SELECT, e.g. CREATE ROLE nl2sql_reader LOGIN; "
                "GRANT USAGE ON SCHEMA public TO nl2sql_reader; GRANT SELECT ON ALL TABLES IN SCHEMA public "
                "TO nl2sql_reader.",
                datasource=self.datasource_id,
            )

    @contextmanager
    def _statement(self, dbapi: Any, timeout_s: float, scope: Scope | None) -> Iterator[Any]:
        database_role = self._database_role(scope)
        with closing_cursor(dbapi) as cursor:
            cursor.execute("BEGIN READ ONLY")
            # A query takes the transaction's snapshot, after which it can no longer be made read-write.
            cursor.execute("SELECT set_config('statement_timeout', %s, true)", (str(int(timeout_s * 1000)),))
            if database_role is not None:
                from psycopg import sql

                # the second lock: the statement runs with the grants of the role's database role only
                cursor.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(database_role)))
            try:
                yield cursor
            finally:
                dbapi.rollback()

    def _database_role(self, scope: Scope | None) -> str | None:
        """The database role a caller's statements run as (`policies.roles.<r>.database_role`), if any."""
        if scope is None:
            return None
        names = scope.database_roles
        if len(names) > 1:
            raise DatasourceError(
                f"A caller with several roles maps to several database roles on datasource '{self.datasource_id}'.",
                fix="Ask with one role, or give those roles one database role that holds the grants of them all.",
                datasource=self.datasource_id,
            )
        return names[0] if names else None

    def is_timeout(self, exc: BaseException) -> bool:
        """PostgreSQL cancels on statement_timeout with SQLSTATE 57014."""
        return getattr(getattr(exc, "orig", exc), "sqlstate", None) == "57014"

    def is_denied(self, exc: BaseException) -> bool:
        """Permission denied (42501), and relations or schemas that do not exist."""
        return getattr(getattr(exc, "orig", exc), "sqlstate", None) in DENIED_SQLSTATES

    def type_name(self, type_code: Any) -> str | None:
        """psycopg reports type OIDs: name them from its type registry."""
        try:
            import psycopg

            info = psycopg.adapters.types.get(type_code)
        except Exception:
            return None
        return info.name if info else None

    def _catalog_hashes(self, conn: sa.Connection, schemas: Sequence[str],
                        default_schema: str | None) -> dict[tuple[str | None, str], str]:
        """An md5 per table or view over what reflection reads: columns (name, type, nullability, comment) and
        the primary and foreign key definitions, all in one catalog query."""
        rows = conn.exec_driver_sql(CATALOG_HASHES, {"schemas": list(schemas)}).all()
        return {(None if schema == default_schema else schema, name): digest for schema, name, digest in rows}

    def _count_rows(self, conn: sa.Connection, tables: Sequence[TableInfo], default_schema: str | None) -> None:
        """The planner's estimate for tables above ESTIMATE_ABOVE_ROWS (one catalog query for all), exact
        counts for the rest."""
        schemas = {table.schema_name or default_schema for table in tables}
        rows = conn.exec_driver_sql(
            "SELECT n.nspname, c.relname, c.reltuples::bigint FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = ANY(%(schemas)s)",
            {"schemas": sorted(s for s in schemas if s)},
        ).all()
        estimates = {(schema, name): estimate for schema, name, estimate in rows}
        exact = []
        for table in tables:
            estimate = estimates.get((table.schema_name or default_schema, table.name))
            if estimate is not None and estimate > ESTIMATE_ABOVE_ROWS:
                table.row_count, table.row_count_estimated = int(estimate), True
            else:
                exact.append(table)
        super()._count_rows(conn, exact, default_schema)
