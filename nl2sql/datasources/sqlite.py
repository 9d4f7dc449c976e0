"""SQLite: opened with `mode=ro` and `PRAGMA query_only`, cancelled through a progress handler."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import sqlalchemy as sa

from nl2sql.datasources.base import Adapter, closing_cursor
from nl2sql.errors import DatasourceError

if TYPE_CHECKING:
    from nl2sql.policies import Scope

#: How many SQLite VM instructions run between two looks at the clock.
PROGRESS_STEPS = 20_000

#: PRAGMAs that only describe the schema (SQLAlchemy's reflection uses them); every other PRAGMA is denied.
READ_PRAGMAS = frozenset({"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo",
                          "foreign_key_list", "database_list", "table_list"})
#: Actions denied outright: attaching files and every kind of write (query_only already refuses writes).
DENIED_ACTIONS = frozenset({
    sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH, sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE,
    sqlite3.SQLITE_DELETE, sqlite3.SQLITE_CREATE_TABLE, sqlite3.SQLITE_CREATE_INDEX, sqlite3.SQLITE_CREATE_VIEW,
    sqlite3.SQLITE_CREATE_TRIGGER, sqlite3.SQLITE_CREATE_TEMP_TABLE, sqlite3.SQLITE_CREATE_TEMP_INDEX,
    sqlite3.SQLITE_CREATE_TEMP_VIEW, sqlite3.SQLITE_CREATE_TEMP_TRIGGER, sqlite3.SQLITE_CREATE_VTABLE,
    sqlite3.SQLITE_DROP_TABLE, sqlite3.SQLITE_DROP_INDEX, sqlite3.SQLITE_DROP_VIEW, sqlite3.SQLITE_DROP_TRIGGER,
    sqlite3.SQLITE_DROP_TEMP_TABLE, sqlite3.SQLITE_DROP_TEMP_INDEX, sqlite3.SQLITE_DROP_TEMP_VIEW,
    sqlite3.SQLITE_DROP_TEMP_TRIGGER, sqlite3.SQLITE_DROP_VTABLE, sqlite3.SQLITE_ALTER_TABLE,
    sqlite3.SQLITE_REINDEX, sqlite3.SQLITE_ANALYZE,
})  # fmt: skip


def read_only_authorizer(action: int, arg1: str | None, arg2: str | None, _db: str | None, _src: str | None) -> int:
    """SQLite authorizer: no ATTACH, no writes, no PRAGMA but schema introspection (so query_only stays on)."""
    if action in DENIED_ACTIONS:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_PRAGMA:
        name = (arg1 or "").lower()
        if name in READ_PRAGMAS or (name == "read_uncommitted" and arg2 is None):
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


#: What SQLite reads on its own behalf or describes the database with: never readable by a caller's statement,
#: whatever its scope (the catalog, table-valued pragmas, dbstat and other eponymous virtual tables).
CATALOG_READS = ("sqlite_", "pragma_")
VIRTUAL_CATALOGS = frozenset({"dbstat", "sqlite_dbpage", "sqlite_stmt"})


def scoped_authorizer(scope: Scope):  # -> the callback sqlite3 takes
    """SQLite authorizer for a caller's statement: the read-only rules, and no read of a table outside `scope`.

    SQLite resolves every name itself, so this holds whatever the SQL's form (`x IN table`, quoted or qualified
    names, views, CTEs): a read of a view's tables is allowed when the view is in scope. The catalog, pragmas and
    virtual tables that describe the database are refused for every caller.
    """

    def authorize(action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None) -> int:
        if action == sqlite3.SQLITE_PRAGMA:
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_READ:
            table = (arg1 or "").lower()
            if table.startswith(CATALOG_READS) or table in VIRTUAL_CATALOGS:
                return sqlite3.SQLITE_DENY
            if db not in (None, "main"):  # temp: nothing of the caller's lives there
                return sqlite3.SQLITE_DENY
            if scope.allows(arg1 or "") or (source is not None and scope.allows(source)):
                return sqlite3.SQLITE_OK
            return sqlite3.SQLITE_DENY
        return read_only_authorizer(action, arg1, arg2, db, source)

    return authorize


def database_path(url: sa.URL, base_dir: Path) -> Path:
    """The file a SQLite/DuckDB URL points at, relative paths resolved against `base_dir`."""
    if not url.database or url.database == ":memory:":
        raise DatasourceError(
            f"The URL '{url.render_as_string(hide_password=True)}' names no database file.",
            fix="Point it at a file, e.g. sqlite:///data/app.sqlite (relative to nl2sql.yaml).",
        )
    path = Path(url.database)
    path = path if path.is_absolute() else base_dir / path
    if not path.is_file():
        raise DatasourceError(
            f"Database file not found: {path}.",
            fix="Check the datasource's url in nl2sql.yaml (relative paths are relative to that file).",
        )
    return path.resolve()


class SQLiteAdapter(Adapter):
    """A SQLite file, read-only."""

    name = "sqlite"
    #: A sort or a temp b-tree of huge rows writes and reads for minutes between two calls of the progress handler:
    #: a caller's statement runs in a worker process, killed when it overruns its time.
    runs_in_worker = True

    def create_engine(self) -> sa.Engine:
        """A read-only engine: `mode=ro`, `PRAGMA query_only`, no attached databases, and an authorizer."""
        path = database_path(self.url, self.base_dir)

        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, check_same_thread=False)
            conn.execute("PRAGMA query_only = ON")
            conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, self.resources.sqlite_max_value_bytes)
            conn.set_authorizer(read_only_authorizer)
            return conn

        return sa.create_engine("sqlite://", creator=connect)

    def _catalog_hashes(self, conn: sa.Connection, schemas: Sequence[str],
                        default_schema: str | None) -> dict[tuple[str | None, str], str]:
        """The hash of each table's CREATE statement as SQLite keeps it (ALTER TABLE rewrites it); views have
        none, so they are always reflected (their columns follow the tables they read)."""
        if any(schema != default_schema for schema in schemas):
            return {}
        rows = conn.exec_driver_sql("SELECT name, sql FROM sqlite_master WHERE type = 'table'").all()
        return {(None, name): hashlib.sha256(sql.encode()).hexdigest()[:16] for name, sql in rows if sql}

    @contextmanager
    def _statement(self, dbapi: Any, timeout_s: float, scope: Scope | None) -> Iterator[Any]:
        deadline = time.monotonic() + timeout_s
        dbapi.set_progress_handler(lambda: int(time.monotonic() > deadline), PROGRESS_STEPS)
        if scope is not None:
            dbapi.set_authorizer(scoped_authorizer(scope))
        try:
            with closing_cursor(dbapi) as cursor:
                yield cursor
        finally:
            dbapi.set_progress_handler(None, 0)
            if scope is not None:
                dbapi.set_authorizer(read_only_authorizer)

    def is_denied(self, exc: BaseException) -> bool:
        """The authorizer's refusals ('not authorized', 'access to … is prohibited') and unknown tables."""
        text = str(getattr(exc, "orig", exc)).lower()
        return any(sign in text for sign in ("not authorized", "is prohibited", "no such table", "vtable constructor"))

    def is_timeout(self, exc: BaseException) -> bool:
        """SQLite reports a progress-handler abort as 'interrupted'."""
        return "interrupted" in str(getattr(exc, "orig", exc)).lower()
