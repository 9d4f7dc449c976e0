"""The adapter contract over SQLAlchemy: reflect, profile, and execute one guarded statement read-only.

Each dialect's adapter opens a read-only engine (so a guard bug still cannot write) and knows
how to cancel a statement that runs past its time limit. Everything else is shared here.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd
import sqlalchemy as sa
from sqlglot import exp

from nl2sql.datasources.guard import guard_sql, sqlglot_dialect
from nl2sql.datasources.models import (
    ColumnInfo,
    ColumnMeta,
    ColumnProfile,
    ExecutionResult,
    ForeignKey,
    SchemaSnapshot,
    TableInfo,
)
from nl2sql.errors import DatasourceError, QueryTimeout

TEXT_TYPE_MARKERS = ("CHAR", "TEXT", "STRING", "CLOB", "VARCHAR", "ENUM")
SAMPLE_VALUE_MAX_CHARS = 100


def is_text_type(type_name: str) -> bool:
    """Whether a reflected type holds text (SQLite's untyped columns count as text)."""
    upper = type_name.upper()
    return not upper or any(marker in upper for marker in TEXT_TYPE_MARKERS)


def _ident(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


def table_expression(name: str, schema: str | None = None) -> exp.Table:
    """A quoted table reference, as a sqlglot tree."""
    return exp.Table(this=_ident(name), db=_ident(schema) if schema else None)


class Adapter(ABC):
    """A datasource reached over SQLAlchemy. Subclasses set `name` and open a read-only engine."""

    name: ClassVar[str]
    #: Schemas never reflected (catalogs of the engine itself).
    system_schemas: ClassVar[frozenset[str]] = frozenset({"information_schema", "pg_catalog", "pg_toast"})

    def __init__(self, datasource_id: str, url: str, *, schemas: Sequence[str] | None = None,
                 base_dir: Path | None = None) -> None:
        self.datasource_id = datasource_id
        self.url = sa.make_url(url)
        self.schemas = list(schemas) if schemas else None
        self.base_dir = base_dir or Path.cwd()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.datasource_id!r}, {self.url.render_as_string(hide_password=True)!r})"

    @property
    def dialect(self) -> str:
        """The sqlglot dialect used to parse and render SQL for this datasource."""
        return sqlglot_dialect(self.name)

    # --- engine ------------------------------------------------------------------------------

    @cached_property
    def engine(self) -> sa.Engine:
        """The read-only SQLAlchemy engine (opened on first use)."""
        return self.create_engine()

    @abstractmethod
    def create_engine(self) -> sa.Engine:
        """Open an engine whose connections cannot write."""

    def close(self) -> None:
        """Release pooled connections."""
        if "engine" in self.__dict__:
            self.engine.dispose()
            del self.__dict__["engine"]

    def _error(self, exc: BaseException, what: str) -> DatasourceError:
        detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        reason = detail[0] if detail else type(exc).__name__
        return DatasourceError(f"{what} failed on datasource '{self.datasource_id}': {reason}",
                               datasource=self.datasource_id)

    # --- reflect -----------------------------------------------------------------------------

    def reflect(self) -> SchemaSnapshot:
        """Tables, columns (type, nullability), keys and row counts of the configured schemas."""
        try:
            with self.engine.connect() as conn:
                inspector = sa.inspect(conn)
                default_schema = inspector.default_schema_name
                schemas = self.schemas or [default_schema]
                tables: list[TableInfo] = []
                for schema in schemas:
                    schema_arg = None if schema == default_schema else schema
                    for name in sorted(inspector.get_table_names(schema=schema_arg)):
                        tables.append(self._reflect_table(inspector, name, schema_arg, view=False))
                    for name in sorted(inspector.get_view_names(schema=schema_arg)):
                        tables.append(self._reflect_table(inspector, name, schema_arg, view=True))
                for table in tables:
                    if table.row_count is None and table.kind == "table":
                        table.row_count, table.row_count_estimated = self._row_count(conn, table)
        except DatasourceError:
            raise
        except Exception as exc:  # driver errors vary by dialect; report them as one kind
            raise self._error(exc, "Reflection") from exc
        return SchemaSnapshot(datasource_id=self.datasource_id, dialect=self.name,
                              default_schema=default_schema, tables=tables)

    def _reflect_table(self, inspector: Any, name: str, schema: str | None, *, view: bool) -> TableInfo:
        pk = inspector.get_pk_constraint(name, schema=schema).get("constrained_columns") or [] if not view else []
        columns = [
            ColumnInfo(name=c["name"], type=str(c["type"]) if c.get("type") is not None else "",
                       nullable=bool(c.get("nullable", True)), primary_key=c["name"] in pk,
                       comment=c.get("comment"))
            for c in inspector.get_columns(name, schema=schema)
        ]
        fks = [] if view else [
            ForeignKey(columns=fk["constrained_columns"], ref_table=fk["referred_table"],
                       ref_columns=fk["referred_columns"], ref_schema=fk.get("referred_schema"))
            for fk in inspector.get_foreign_keys(name, schema=schema)
        ]
        return TableInfo(name=name, schema_name=schema, kind="view" if view else "table", columns=columns,
                         primary_key=list(pk), foreign_keys=fks)

    def _row_count(self, conn: sa.Connection, table: TableInfo) -> tuple[int | None, bool]:
        """Exact row count (adapters with cheap estimates override this for large tables)."""
        query = exp.select(exp.Count(this=exp.Star())).from_(table_expression(table.name, table.schema_name))
        return int(conn.exec_driver_sql(query.sql(dialect=self.dialect)).scalar_one()), False

    # --- profile -----------------------------------------------------------------------------

    def profile(self, snapshot: SchemaSnapshot, *, sample_rows: int = 100_000,
                max_sample_values: int = 20, low_cardinality: int = 50,
                tables: Sequence[str] | None = None) -> list[ColumnProfile]:
        """Null share, distinct count, min/max of each column over a bounded sample; for text columns with
        at most `low_cardinality` distinct values, their `max_sample_values` most frequent values."""
        profiles: list[ColumnProfile] = []
        for table in snapshot.tables:
            if tables is not None and table.name not in tables:
                continue
            profiles.extend(self._profile_table(table, sample_rows, max_sample_values, low_cardinality))
        return profiles

    def _sample(self, table: TableInfo, sample_rows: int) -> exp.Subquery:
        inner = exp.select("*").from_(table_expression(table.name, table.schema_name)).limit(sample_rows)
        return inner.subquery("sample")

    def _profile_table(self, table: TableInfo, sample_rows: int, max_sample_values: int,
                       low_cardinality: int) -> list[ColumnProfile]:
        if not table.columns:
            return []
        selects: list[exp.Expression] = [exp.alias_(exp.Count(this=exp.Star()), "n")]
        for i, col in enumerate(table.columns):
            ref = exp.column(_ident(col.name))
            selects += [
                exp.alias_(exp.Count(this=ref.copy()), f"nn_{i}"),
                exp.alias_(exp.Count(this=exp.Distinct(expressions=[ref.copy()])), f"d_{i}"),
                exp.alias_(exp.Min(this=ref.copy()), f"min_{i}"),
                exp.alias_(exp.Max(this=ref.copy()), f"max_{i}"),
            ]
        query = exp.select(*selects).from_(self._sample(table, sample_rows))
        stats = self._run(query.sql(dialect=self.dialect), row_limit=1, timeout_s=120).frame.iloc[0]
        n = int(stats["n"])
        out = []
        for i, col in enumerate(table.columns):
            non_null, distinct = int(stats[f"nn_{i}"]), int(stats[f"d_{i}"])
            profile = ColumnProfile(
                table=table.name, schema_name=table.schema_name, column=col.name, type=col.type,
                null_share=(n - non_null) / n if n else None, distinct_count=distinct,
                min=_short(stats[f"min_{i}"]), max=_short(stats[f"max_{i}"]), sampled_rows=n,
            )
            if is_text_type(col.type) and 0 < distinct <= low_cardinality and max_sample_values:
                profile.sample_values = self._frequent_values(table, col.name, sample_rows, max_sample_values)
            out.append(profile)
        return out

    def _frequent_values(self, table: TableInfo, column: str, sample_rows: int, limit: int) -> list[str]:
        ref = exp.column(_ident(column))
        query = (
            exp.select(ref.copy(), exp.alias_(exp.Count(this=exp.Star()), "freq"))
            .from_(self._sample(table, sample_rows))
            .where(exp.Not(this=exp.Is(this=ref.copy(), expression=exp.Null())))
            .group_by(ref.copy())
            .order_by(exp.Ordered(this=exp.column("freq"), desc=True), ref.copy())
            .limit(limit)
        )
        frame = self._run(query.sql(dialect=self.dialect), row_limit=limit, timeout_s=120).frame
        return [v for v in (_short(x) for x in frame.iloc[:, 0]) if v is not None]

    # --- execute -----------------------------------------------------------------------------

    def execute(self, sql: str, *, row_limit: int = 1000, timeout_s: float = 30.0) -> ExecutionResult:
        """Run one guarded, read-only statement: at most `row_limit` rows, cancelled after `timeout_s`."""
        guard_sql(sql, self.name)
        return self._run(sql, row_limit=row_limit, timeout_s=timeout_s)

    def _run(self, sql: str, *, row_limit: int, timeout_s: float) -> ExecutionResult:
        """Run a statement with no guard (callers guard, or built it themselves)."""
        started = time.perf_counter()
        try:
            with self.engine.connect() as conn:
                dbapi = conn.connection.dbapi_connection
                with self._statement(dbapi, timeout_s) as cursor:
                    cursor.execute(sql, **self.execute_kwargs)
                    description = cursor.description or []
                    rows = cursor.fetchmany(row_limit + 1) if description else []
                conn.rollback()
        except DatasourceError:
            raise
        except Exception as exc:
            if self.is_timeout(exc):
                raise QueryTimeout(
                    f"The statement ran longer than {timeout_s:g} s on datasource '{self.datasource_id}' "
                    "and was cancelled.",
                    fix="Narrow the question (filters, a smaller time range) or raise settings.pipeline.statement_timeout_s.",
                    datasource=self.datasource_id,
                ) from exc
            raise self._error(exc, "The statement") from exc
        names = [d[0] for d in description]
        truncated = len(rows) > row_limit
        frame = pd.DataFrame.from_records(list(rows[:row_limit]), columns=names) if names else pd.DataFrame()
        columns = [ColumnMeta(name=d[0], type=self.type_name(d[1])) for d in description]
        for meta, dtype in zip(columns, frame.dtypes, strict=False):
            if meta.type is None and len(frame):
                meta.type = str(dtype)
        return ExecutionResult(frame=frame, columns=columns, truncated=truncated,
                               elapsed_ms=(time.perf_counter() - started) * 1000, sql=sql)

    #: Extra keyword arguments for `cursor.execute` (PostgreSQL prepares, so one statement only).
    execute_kwargs: ClassVar[dict[str, Any]] = {}

    @abstractmethod
    def _statement(self, dbapi: Any, timeout_s: float) -> AbstractContextManager[Any]:
        """A cursor whose statement is cancelled after `timeout_s`."""

    @abstractmethod
    def is_timeout(self, exc: BaseException) -> bool:
        """Whether a driver error means the statement was cancelled for time."""

    def type_name(self, type_code: Any) -> str | None:
        """The driver's type code as a readable name."""
        return type_code if isinstance(type_code, str) else None


def _short(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and pd.isna(value)) or value is pd.NaT:
        return None
    text = str(value)
    return text if len(text) <= SAMPLE_VALUE_MAX_CHARS else text[: SAMPLE_VALUE_MAX_CHARS - 1] + "…"


@contextmanager
def closing_cursor(dbapi: Any) -> Iterator[Any]:
    """A DB-API cursor closed on exit."""
    cursor = dbapi.cursor()
    try:
        yield cursor
    finally:
        cursor.close()
