"""The adapter contract over SQLAlchemy: reflect, profile, and execute one guarded statement read-only.

Each dialect's adapter opens a read-only engine (so a guard bug still cannot write) and knows
how to cancel a statement that runs past its time limit. Everything else is shared here.
"""

from __future__ import annotations

import logging
import math
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from functools import cache, cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import ObjectKind
from sqlglot import exp

from nl2sql.config.models import ProfileSettings, ResourceSettings, parse_bytes
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
from nl2sql.datasources.redact import redact_driver_message
from nl2sql.datasources.worker import AdapterSpec, WorkerPool
from nl2sql.errors import DatasourceError, QueryTimeout, ResultTooLarge, SecurityViolation

if TYPE_CHECKING:
    from nl2sql.policies import Scope

TEXT_TYPE_MARKERS = ("CHAR", "TEXT", "STRING", "CLOB", "VARCHAR", "ENUM")
SAMPLE_VALUE_MAX_CHARS = 100
#: A text column of many distinct values whose most frequent ones make up this share of its rows gets them as
#: sample values, as a column of few values does (`Adapter.profile_table`; the default of the setting).
DOMINANT_SHARE: float = ProfileSettings.model_fields["dominant_share"].default
#: A text column with more distinct values than are sampled, and at most this many, keeps them all as name values:
#: what a question may name ("Luís Gonçalves", "Led Zeppelin"), matched but never shown or embedded.
MAX_NAME_VALUES: int = ProfileSettings.model_fields["max_name_values"].default
#: Tables counted per statement (SQLite allows 500 terms in one compound SELECT).
ROW_COUNT_BATCH = 200
#: Rows fetched per round trip while a result is checked against its byte budget.
FETCH_BATCH = 256
#: What a value costs beyond its own bytes (a Python object and a pointer), for the byte budget.
VALUE_OVERHEAD_BYTES = 16

audit_log = logging.getLogger("nl2sql.audit.datasource")


def is_text_type(type_name: str) -> bool:
    """Whether a reflected type holds text (SQLite's untyped columns count as text)."""
    upper = type_name.upper()
    return not upper or any(marker in upper for marker in TEXT_TYPE_MARKERS)


def _ident(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


@lru_cache(maxsize=64)
def _quotes(dialect: str) -> tuple[str, str]:
    """The characters a dialect opens and closes a quoted identifier with."""
    sample = _ident("x").sql(dialect=dialect)
    return sample[0], sample[-1]


def _quoted(name: str, dialect: str) -> str:
    """An identifier quoted for a dialect, as sqlglot renders it: a printable name holding no closing quote and no
    backslash is only put between the dialect's quotes (rendering a tree per name cost a second for a schema of
    20,000 tables); any other is rendered by sqlglot, which escapes it as the dialect does."""
    opening, closing = _quotes(dialect)
    if closing in name or "\\" in name or not name.isprintable():
        return _ident(name).sql(dialect=dialect)
    return f"{opening}{name}{closing}"


def table_sql(name: str, schema: str | None, dialect: str) -> str:
    """A quoted table reference as SQL text (`table_expression` rendered)."""
    return f"{_quoted(schema, dialect)}.{_quoted(name, dialect)}" if schema else _quoted(name, dialect)


def table_expression(name: str, schema: str | None = None) -> exp.Table:
    """A quoted table reference, as a sqlglot tree."""
    return exp.Table(this=_ident(name), db=_ident(schema) if schema else None)


_TABLE, _COLUMN, _POSITION = "__nl2sql_table__", "__nl2sql_column__", "918273645"


class ProfileSql:
    """The profiling statements of one dialect, rendered once by sqlglot with placeholders for the table, the
    column and its position, then filled per table with identifiers the dialect quotes: rendering a tree per
    column dominated profiling on wide schemas."""

    def __init__(self, dialect: str, sample_rows: int, limit: int) -> None:
        self.dialect = dialect
        self._quoted_table = _ident(_TABLE).sql(dialect=dialect)
        self._quoted_column = _ident(_COLUMN).sql(dialect=dialect)
        self._placeholders = re.compile("|".join(map(re.escape, (self._quoted_table, self._quoted_column, _POSITION))))

        def alias(node: exp.Expression, name: str) -> exp.Alias:
            return exp.Alias(this=node, alias=exp.to_identifier(name))

        def ref() -> exp.Column:
            return exp.Column(this=_ident(_COLUMN))

        def sample() -> exp.Subquery:
            inner = exp.Select(expressions=[exp.Star()]).from_(table_expression(_TABLE), copy=False)
            inner = inner.limit(exp.Literal.number(sample_rows), copy=False)
            return exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier("sample")))

        self._count = alias(exp.Count(this=exp.Star()), "n").sql(dialect=dialect)
        self._column_stats = ", ".join(node.sql(dialect=dialect) for node in (
            alias(exp.Count(this=ref()), f"nn_{_POSITION}"),
            alias(exp.Count(this=exp.Distinct(expressions=[ref()])), f"d_{_POSITION}"),
            alias(exp.Min(this=ref()), f"min_{_POSITION}"),
            alias(exp.Max(this=ref()), f"max_{_POSITION}"),
        ))
        self._sample = sample().sql(dialect=dialect)
        rank = exp.Window(this=exp.RowNumber(), order=exp.Order(expressions=[
            exp.Ordered(this=exp.Count(this=exp.Star()), desc=True), exp.Ordered(this=ref())]))
        top = (
            exp.Select(expressions=[
                alias(exp.Literal.number(int(_POSITION)), "k"),
                alias(exp.Cast(this=ref(), to=exp.DataType(this=exp.DataType.Type.TEXT)), "v"),
                alias(rank, "r"),
                alias(exp.Count(this=exp.Star()), "c"),
            ])
            .from_(sample(), copy=False)
            .where(exp.Not(this=exp.Is(this=ref(), expression=exp.Null())), copy=False)
            .group_by(ref(), copy=False)
            .order_by(exp.Ordered(this=exp.Column(this=exp.to_identifier("r"))), copy=False)
            .limit(exp.Literal.number(limit), copy=False)
        )
        self._frequent = exp.Select(expressions=[exp.Star()]).from_(
            exp.Subquery(this=top, alias=exp.TableAlias(this=exp.to_identifier(f"top_{_POSITION}"))),
            copy=False).sql(dialect=dialect)

    def _fill(self, template: str, source: str, column: str, position: int) -> str:
        # one pass, so a name that happens to hold a placeholder is never rewritten
        values = {self._quoted_table: source, self._quoted_column: _quoted(column, self.dialect),
                  _POSITION: str(position)}
        return self._placeholders.sub(lambda m: values[m.group(0)], template)

    def statistics(self, source: str, columns: Sequence[str]) -> str:
        """Row count, then non-null count, distinct count, min and max of each column (`nn_i`, `d_i`, …)."""
        parts = [self._count] + [self._fill(self._column_stats, source, c, i) for i, c in enumerate(columns)]
        return f"SELECT {', '.join(parts)} FROM {self._fill(self._sample, source, '', 0)}"

    def frequent_values(self, source: str, columns: Sequence[str]) -> str:
        """(k, v, r, c) rows: the most frequent values v of the k-th column, ranked r, found c times in the sample,
        ordered by k then r."""
        union = " UNION ALL ".join(self._fill(self._frequent, source, c, k) for k, c in enumerate(columns))
        return f"SELECT * FROM ({union}) AS f ORDER BY k, r"


@cache
def _profile_sql(dialect: str, sample_rows: int, limit: int) -> ProfileSql:
    return ProfileSql(dialect, sample_rows, limit)


class Adapter(ABC):
    """A datasource reached over SQLAlchemy. Subclasses set `name` and open a read-only engine."""

    name: ClassVar[str]
    #: Schemas never reflected (catalogs of the engine itself).
    system_schemas: ClassVar[frozenset[str]] = frozenset({"information_schema", "pg_catalog", "pg_toast"})

    #: Callers' statements run in worker processes with a memory bound (`nl2sql/datasources/worker.py`): set by
    #: engines that allocate outside their own accounting or stop looking at an interrupt while they allocate.
    runs_in_worker: ClassVar[bool] = False

    def __init__(self, datasource_id: str, url: str, *, schemas: Sequence[str] | None = None,
                 base_dir: Path | None = None, resources: ResourceSettings | None = None,
                 max_result_bytes: int | None = None) -> None:
        self._spec = AdapterSpec(f"{type(self).__module__}:{type(self).__qualname__}", {
            "datasource_id": datasource_id, "url": url, "schemas": schemas, "base_dir": base_dir,
            "resources": resources, "max_result_bytes": max_result_bytes})
        self.datasource_id = datasource_id
        self.url = sa.make_url(url)
        self.schemas = list(schemas) if schemas else None
        self.base_dir = base_dir or Path.cwd()
        self.resources = resources or ResourceSettings()
        self.max_result_bytes = max_result_bytes or self.resources.max_result_bytes

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

    @cached_property
    def _workers(self) -> WorkerPool:
        """The worker processes that run callers' statements (adapters with `runs_in_worker`)."""
        return WorkerPool(self._spec, memory_bytes=parse_bytes(self.resources.statement_process_memory),
                          size=self.resources.statement_processes)

    def close(self) -> None:
        """Release pooled connections and stop the worker processes."""
        if "_workers" in self.__dict__:
            self._workers.close()
            del self.__dict__["_workers"]
        if "engine" in self.__dict__:
            self.engine.dispose()
            del self.__dict__["engine"]

    def _error(self, exc: BaseException, what: str) -> DatasourceError:
        """The driver's error as the asker and the traces see it: its literals and numbers redacted (they can
        be row values); the raw text goes to the audit log only."""
        detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        raw = detail[0] if detail else type(exc).__name__
        audit_log.info("%s failed on datasource %s: %s", what, self.datasource_id, raw)
        return DatasourceError(f"{what} failed on datasource '{self.datasource_id}': {redact_driver_message(raw)}",
                               datasource=self.datasource_id)

    # --- reflect -----------------------------------------------------------------------------

    def reflect(self, previous: SchemaSnapshot | None = None) -> SchemaSnapshot:
        """Tables, columns (type, nullability), keys and row counts of the configured schemas.

        Given the previous snapshot, a table whose catalog definition hashes as before (adapters that can
        hash it: `_catalog_hashes`) is taken from it instead of being reflected again, unless a table it
        references changed; row counts are always read.
        """
        try:
            with self.engine.connect() as conn:
                inspector = sa.inspect(conn)
                default_schema = inspector.default_schema_name
                schemas = self.schemas or [default_schema]
                hashes = self._catalog_hashes(conn, schemas, default_schema)
                kept = _unchanged_tables(previous, hashes)
                tables: list[TableInfo] = []
                for schema in schemas:
                    schema_arg = None if schema == default_schema else schema
                    for view in (False, True):
                        names = inspector.get_view_names(schema=schema_arg) if view else \
                            inspector.get_table_names(schema=schema_arg)
                        tables += self._reflect_tables(inspector, sorted(names), schema_arg, view=view, kept=kept)
                for table in tables:
                    table.catalog_hash = hashes.get((table.schema_name, table.name))
                self._count_rows(conn, [t for t in tables if t.kind == "table"], default_schema)
        except DatasourceError:
            raise
        except Exception as exc:  # driver errors vary by dialect; report them as one kind
            raise self._error(exc, "Reflection") from exc
        return SchemaSnapshot(datasource_id=self.datasource_id, dialect=self.name,
                              default_schema=default_schema, tables=tables)

    def _catalog_hashes(self, conn: sa.Connection, schemas: Sequence[str],
                        default_schema: str | None) -> dict[tuple[str | None, str], str]:
        """A hash of each table's definition in the catalog, keyed (schema or None for the default, name),
        read in one cheap query; empty where the adapter has none (every table is then reflected)."""
        return {}

    def _reflect_tables(self, inspector: Any, names: Sequence[str], schema: str | None, *, view: bool,
                        kept: dict[tuple[str | None, str], TableInfo] | None = None) -> list[TableInfo]:
        """Reflect tables (or views) of one schema with SQLAlchemy's multi-table calls: one catalog query
        per kind of fact for the whole schema where the dialect batches them (PostgreSQL), the per-table
        calls otherwise (SQLite); the same facts either way. Tables in `kept` are taken from there."""
        kept = kept or {}
        fresh = [n for n in names if (schema, n) not in kept]
        reflected: dict[str, TableInfo] = {}
        if fresh:
            kind = ObjectKind.VIEW if view else ObjectKind.TABLE
            # a partial reflection names its tables; a full one lets the dialect read the schema at once
            only = {"filter_names": fresh} if len(fresh) < len(names) else {}

            def by_name(facts: dict[tuple[str | None, str], Any]) -> dict[str, Any]:
                return {key[1]: value for key, value in facts.items()}

            columns = by_name(inspector.get_multi_columns(schema=schema, kind=kind, **only))
            pks = {} if view else by_name(inspector.get_multi_pk_constraint(schema=schema, kind=kind, **only))
            fks = {} if view else by_name(inspector.get_multi_foreign_keys(schema=schema, kind=kind, **only))
            for name in fresh:
                if name not in columns:  # not in the batch (e.g. created meanwhile): ask for it alone
                    reflected[name] = self._reflect_table(inspector, name, schema, view=view)
                else:
                    reflected[name] = self._table_info(name, schema, view, columns[name], pks.get(name) or {},
                                                       fks.get(name) or [])
        return [reflected[n] if n in reflected else kept[(schema, n)] for n in names]

    def _reflect_table(self, inspector: Any, name: str, schema: str | None, *, view: bool) -> TableInfo:
        pk = {} if view else inspector.get_pk_constraint(name, schema=schema)
        fks = [] if view else inspector.get_foreign_keys(name, schema=schema)
        return self._table_info(name, schema, view, inspector.get_columns(name, schema=schema), pk, fks)

    @staticmethod
    def _table_info(name: str, schema: str | None, view: bool, reflected_columns: list[dict[str, Any]],
                    pk_constraint: dict[str, Any], foreign_keys: list[dict[str, Any]]) -> TableInfo:
        pk = [] if view else pk_constraint.get("constrained_columns") or []
        columns = [
            ColumnInfo(name=c["name"], type=str(c["type"]) if c.get("type") is not None else "",
                       nullable=bool(c.get("nullable", True)), primary_key=c["name"] in pk,
                       comment=c.get("comment"))
            for c in reflected_columns
        ]
        fks = [] if view else [
            ForeignKey(columns=fk["constrained_columns"], ref_table=fk["referred_table"],
                       ref_columns=fk["referred_columns"], ref_schema=fk.get("referred_schema"))
            for fk in foreign_keys
        ]
        return TableInfo(name=name, schema_name=schema, kind="view" if view else "table", columns=columns,
                         primary_key=list(pk), foreign_keys=fks)

    def _count_rows(self, conn: sa.Connection, tables: Sequence[TableInfo], default_schema: str | None) -> None:
        """Set each table's exact row count (adapters with cheap estimates override this for large tables),
        a few hundred tables per statement: one round trip per table cost more than the counting."""
        for start in range(0, len(tables), ROW_COUNT_BATCH):
            batch = tables[start:start + ROW_COUNT_BATCH]
            sources = [table_sql(t.name, t.schema_name, self.dialect) for t in batch]
            sql = " UNION ALL ".join(f"SELECT {i} AS n, COUNT(*) AS c FROM {src}" for i, src in enumerate(sources))
            for i, count in conn.exec_driver_sql(sql).all():
                batch[int(i)].row_count, batch[int(i)].row_count_estimated = int(count), False

    # --- profile -----------------------------------------------------------------------------

    def profile(self, snapshot: SchemaSnapshot, *, sample_rows: int = 100_000,
                max_sample_values: int = 20, low_cardinality: int = 50, dominant_share: float = DOMINANT_SHARE,
                max_name_values: int = MAX_NAME_VALUES, tables: Sequence[str] | None = None) -> list[ColumnProfile]:
        """Null share, distinct count, min/max of each column over a bounded sample; for text columns with
        at most `low_cardinality` distinct values, or whose `max_sample_values` most frequent values make up at
        least `dominant_share` of their rows, those values; for the other text columns of at most
        `max_name_values` distinct values, their values as name values."""
        profiles: list[ColumnProfile] = []
        wanted = None if tables is None else set(tables)
        for table in snapshot.tables:
            if wanted is None or table.name in wanted:
                profiles += self.profile_table(table, sample_rows=sample_rows, max_sample_values=max_sample_values,
                                               low_cardinality=low_cardinality, dominant_share=dominant_share,
                                               max_name_values=max_name_values)
        return profiles

    def profile_table(self, table: TableInfo, *, sample_rows: int = 100_000, max_sample_values: int = 20,
                      low_cardinality: int = 50, dominant_share: float = DOMINANT_SHARE,
                      max_name_values: int = MAX_NAME_VALUES, name_values_left: int | None = None) -> list[ColumnProfile]:
        """`profile` of one table, in at most three statements: the column statistics, the frequent values of every
        text column that may have sample values, and the values of those that may have name values.

        A text column with more distinct values keeps those of its frequent values found more than once when
        together they make up `dominant_share` of its rows: ticket subjects ("Player crashes on startup") beside
        ones that name an invoice number. One with no sample values and at most `max_name_values` distinct values
        keeps them all as name values: customers' first names, artists; while they fit in `name_values_left` (what is
        left of a build's budget), columns in order. A column whose distinct values are more than both bounds allow
        is not asked."""
        if not table.columns:
            return []
        sql = _profile_sql(self.dialect, sample_rows, max_sample_values)
        source = table_expression(table.name, table.schema_name).sql(dialect=self.dialect)
        description, rows = self._fetch(sql.statistics(source, [c.name for c in table.columns]), row_limit=1,
                                        timeout_s=120)
        stats = dict(zip([d[0] for d in description], rows[0], strict=True))
        n = int(stats["n"])
        counts = [(int(stats[f"nn_{i}"]), int(stats[f"d_{i}"])) for i in range(len(table.columns))]
        low, wide, named = [], {}, []
        left: float = math.inf if name_values_left is None else name_values_left
        for col, (non_null, distinct) in zip(table.columns, counts, strict=True):
            if not distinct or not is_text_type(col.type):
                continue
            if distinct <= low_cardinality:
                if max_sample_values:
                    low.append(col.name)
                continue
            # the top values can make up the share only if the rest fit in what is left of the rows
            if max_sample_values and distinct - max_sample_values <= (1 - dominant_share) * non_null:
                wide[col.name] = non_null
            if distinct <= min(max_name_values, left):  # (one that cannot fit is not asked)
                named.append(col.name)
        # a column that may have either kind is asked once, for all its values (the most frequent come first)
        asked = [*low, *(c for c in wide if c not in named)]
        frequent = self._frequent_values_of(table, asked, sample_rows, max_sample_values) if asked else {}
        every = self._frequent_values_of(table, named, sample_rows, max_name_values) if named else {}
        for name, non_null in wide.items():
            top = (every[name] if name in every else frequent[name])[:max_sample_values]
            found = [(value, count) for value, count in top if count > 1]
            frequent[name] = found if sum(count for _, count in found) >= dominant_share * non_null else []
        names: dict[str, list[str]] = {}
        for name, found in every.items():  # in the table's column order, while they fit
            if not frequent.get(name) and len(found) <= left:
                names[name] = [value for value, _ in found]
                left -= len(found)
        out = []
        for i, (col, (non_null, distinct)) in enumerate(zip(table.columns, counts, strict=True)):
            out.append(ColumnProfile(
                table=table.name, schema_name=table.schema_name, column=col.name, type=col.type,
                null_share=(n - non_null) / n if n else None, distinct_count=distinct,
                min=_short(stats[f"min_{i}"]), max=_short(stats[f"max_{i}"]), sampled_rows=n,
                sample_values=[value for value, _ in frequent.get(col.name, [])],
                name_values=names.get(col.name, []),
            ))
        return out

    def sample_columns(self, table: TableInfo, columns: Sequence[str], *, sample_rows: int = 100_000) -> pd.DataFrame:
        """At most `sample_rows` rows of some columns of a table, values as the driver returns them (object
        columns: no NaN for NULL, no float for an integer column with NULLs): what data expectations check."""
        select = exp.select(*(exp.column(_ident(c)) for c in columns)).from_(
            table_expression(table.name, table.schema_name)).limit(sample_rows)
        _, rows = self._fetch(select.sql(dialect=self.dialect), row_limit=sample_rows, timeout_s=120)
        return pd.DataFrame(rows, columns=list(columns), dtype=object)

    def _frequent_values_of(self, table: TableInfo, columns: Sequence[str], sample_rows: int,
                            limit: int) -> dict[str, list[tuple[str, int]]]:
        """The `limit` most frequent non-null values of each column in the sample with how often each was found,
        most frequent first (ties in the column's own order), in one statement: a UNION ALL of one grouping per
        column."""
        sql = _profile_sql(self.dialect, sample_rows, limit)
        source = table_expression(table.name, table.schema_name).sql(dialect=self.dialect)
        _, rows = self._fetch(sql.frequent_values(source, columns), row_limit=limit * len(columns), timeout_s=120)
        out: dict[str, list[tuple[str, int]]] = {c: [] for c in columns}
        for k, value, _, count in rows:
            if (text := _short(value)) is not None:
                out[columns[int(k)]].append((text, int(count)))
        return out

    # --- execute -----------------------------------------------------------------------------

    def execute(self, sql: str, *, row_limit: int = 1000, timeout_s: float = 30.0,
                scope: Scope | None = None) -> ExecutionResult:
        """Run one guarded, read-only statement: at most `row_limit` rows, cancelled after `timeout_s`; with a
        `scope`, the database itself refuses any read outside it (the second lock, after the guard's check)."""
        guard_sql(sql, self.name)
        return self._run(sql, row_limit=row_limit, timeout_s=timeout_s, scope=scope)

    def estimate_rows(self, sql: str, *, timeout_s: float = 10.0, scope: Scope | None = None) -> int | None:
        """The database's estimate of the rows a guarded statement reads (EXPLAIN), or None where the dialect
        gives none or the estimate fails."""
        guard_sql(sql, self.name)
        query = self.explain_sql(sql)
        if query is None:
            return None
        try:
            result = self._run(query, row_limit=10_000, timeout_s=timeout_s, scope=scope)
        except Exception:  # an estimate is advice: never a reason to fail the question
            return None
        return self.rows_from_explain(result)

    def explain_sql(self, sql: str) -> str | None:
        """The EXPLAIN statement giving a row estimate (None: this dialect has none)."""
        return None

    def rows_from_explain(self, result: ExecutionResult) -> int | None:
        """The estimated rows in an EXPLAIN result."""
        return None

    def _run(self, sql: str, *, row_limit: int, timeout_s: float, scope: Scope | None = None) -> ExecutionResult:
        """Run a statement with no guard (callers guard, or built it themselves); `scope` as in `execute`.

        The row limit is bounded by `settings.resources.max_rows` whatever the caller asks for, and building the
        result counts against the statement's time limit too."""
        started = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        row_limit = max(1, min(row_limit, self.resources.max_rows))
        if self.runs_in_worker:
            try:
                description, rows, sent = self._workers.fetch(sql, row_limit=row_limit + 1, timeout_s=timeout_s,
                                                              scope=scope, datasource=self.datasource_id)
            except TimeoutError:  # no answer past the timeout: the worker was stopped with its statement
                raise self._timeout(timeout_s) from None
            deadline = sent + timeout_s
        else:
            description, rows = self._fetch(sql, row_limit=row_limit + 1, timeout_s=timeout_s, scope=scope)
        given = [d[0] for d in description]
        names = distinct_column_names(given)
        truncated = len(rows) > row_limit
        frame = pd.DataFrame.from_records(list(rows[:row_limit]), columns=names) if names else pd.DataFrame()
        columns = [ColumnMeta(name=name, type=self.type_name(d[1])) for name, d in zip(names, description, strict=True)]
        for meta, dtype in zip(columns, frame.dtypes, strict=False):
            if meta.type is None and len(frame):
                meta.type = str(dtype)
        if time.monotonic() > deadline:
            raise self._timeout(timeout_s)
        return ExecutionResult(frame=frame, columns=columns, truncated=truncated,
                               elapsed_ms=(time.perf_counter() - started) * 1000, sql=sql,
                               repeated_names=sorted({n for n in given if given.count(n) > 1}))

    def _fetch(self, sql: str, *, row_limit: int, timeout_s: float,
               scope: Scope | None = None) -> tuple[Sequence[Any], list[tuple]]:
        """(the cursor's description, at most `row_limit` rows) of a statement with no guard, as the driver gives
        them: profiling reads thousands of one-row results, for which building a DataFrame cost more than the query.

        Rows come in batches, each weighed against the datasource's byte budget (`max_result_bytes`)."""
        deadline = time.monotonic() + timeout_s
        try:
            with self.engine.connect() as conn:
                dbapi = conn.connection.dbapi_connection
                with self._statement(dbapi, timeout_s, scope) as cursor:
                    if scope is not None:
                        self.check_reads(cursor, sql, scope)
                    cursor.execute(sql, **self.execute_kwargs)
                    description = cursor.description or []
                    rows = self._fetch_within_budget(cursor, row_limit, deadline, timeout_s) if description else []
                conn.rollback()
        except (DatasourceError, SecurityViolation):
            raise
        except Exception as exc:
            if self.is_timeout(exc):
                raise self._timeout(timeout_s) from exc
            if scope is not None and self.is_denied(exc):
                # the database's own lock refused a read: the asker learns nothing more than from the guard
                audit_log.info("datasource %s refused a read: %s", self.datasource_id, exc)
                raise SecurityViolation(datasource=self.datasource_id) from None
            raise self._error(exc, "The statement") from exc
        return description, rows

    def _fetch_within_budget(self, cursor: Any, row_limit: int, deadline: float, timeout_s: float) -> list[tuple]:
        rows: list[tuple] = []
        size = 0
        while len(rows) < row_limit:
            batch = cursor.fetchmany(min(FETCH_BATCH, row_limit - len(rows)))
            if not batch:
                break
            size += sum(_row_bytes(row) for row in batch)
            if size > self.max_result_bytes:
                raise ResultTooLarge(
                    f"The result is larger than {self.max_result_bytes:,} bytes on datasource "
                    f"'{self.datasource_id}'; the statement was stopped.",
                    fix="Select fewer columns or rows (filters, aggregates, a LIMIT), or raise the datasource's "
                    "max_result_bytes (settings.resources.max_result_bytes).",
                    datasource=self.datasource_id,
                )
            rows += batch
            if time.monotonic() > deadline:
                raise self._timeout(timeout_s)
        return rows

    def _timeout(self, timeout_s: float) -> QueryTimeout:
        return QueryTimeout(
            f"The statement ran longer than {timeout_s:g} s on datasource '{self.datasource_id}' and was cancelled.",
            fix="Narrow the question (filters, a smaller time range) or raise settings.pipeline.statement_timeout_s.",
            datasource=self.datasource_id,
        )

    def check_reads(self, cursor: Any, sql: str, scope: Scope) -> None:
        """Refuse (SecurityViolation) a statement that reads outside `scope`, where the database cannot refuse it
        itself while it runs (adapters whose connection enforces the scope need nothing here)."""
        return None

    def is_denied(self, exc: BaseException) -> bool:
        """Whether a driver error means the database refused a read (or a table that does not exist: the two
        must look the same to an asker, or an error would tell which denied tables exist)."""
        return False

    #: Extra keyword arguments for `cursor.execute` (PostgreSQL prepares, so one statement only).
    execute_kwargs: ClassVar[dict[str, Any]] = {}

    @abstractmethod
    def _statement(self, dbapi: Any, timeout_s: float, scope: Scope | None) -> AbstractContextManager[Any]:
        """A cursor whose statement is cancelled after `timeout_s` and, given a scope, may read nothing outside it."""

    @abstractmethod
    def is_timeout(self, exc: BaseException) -> bool:
        """Whether a driver error means the statement was cancelled for time."""

    def type_name(self, type_code: Any) -> str | None:
        """The driver's type code as a readable name."""
        return type_code if isinstance(type_code, str) else None


def _unchanged_tables(previous: SchemaSnapshot | None,
                      hashes: dict[tuple[str | None, str], str]) -> dict[tuple[str | None, str], TableInfo]:
    """Copies (sharing their columns and keys) of the previous snapshot's tables whose catalog hash is unchanged
    and whose foreign keys point at unchanged tables only (a key declared without columns takes the referenced
    table's primary key)."""
    if previous is None or not hashes:
        return {}
    same = {(t.schema_name, t.name): t for t in previous.tables
            if t.catalog_hash is not None and hashes.get((t.schema_name, t.name)) == t.catalog_hash}
    names = {name for _, name in same}
    return {key: t.model_copy(update={"row_count": None, "row_count_estimated": False})
            for key, t in same.items() if all(fk.ref_table in names for fk in t.foreign_keys)}


def distinct_column_names(names: Sequence[str]) -> list[str]:
    """A result's column names made distinct, so that no column is lost where results are keyed by name (JSON
    rows, DataFrames): a repeated name gets the first free suffix `_1`, `_2`, ….

    >>> distinct_column_names(["x", "x", "x_1", "y"])
    ['x', 'x_2', 'x_1', 'y']
    """
    taken, used = set(names), set()
    out = []
    for name in names:
        candidate, n = name, 0
        while candidate in used or (n and candidate in taken):  # never a name a later column holds
            n += 1
            candidate = f"{name}_{n}"
        used.add(candidate)
        out.append(candidate)
    return out


def _row_bytes(row: Sequence[Any]) -> int:
    """About what a fetched row costs in memory: the bytes of its texts and blobs, a word for the rest."""
    return sum(len(v) + VALUE_OVERHEAD_BYTES if isinstance(v, str | bytes | bytearray | memoryview)
               else 8 + VALUE_OVERHEAD_BYTES for v in row)


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
