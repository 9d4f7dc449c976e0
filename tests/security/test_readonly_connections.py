"""With the SQL guard bypassed (`adapter._run`), each engine's connection still refuses to write.

The guard is the first wall; the read-only connection is the second. Every test here talks to the
connection directly, then checks that the database (its file bytes, its rows) is unchanged and
that no file appeared. Attempts come as (setup, statement): the setup statements try to weaken
the connection and may be refused or accepted; the statement after them must be refused.

PostgreSQL runs as a SELECT-only role: the adapter refuses superusers (and members of the roles
that can touch server files), because a READ ONLY transaction does not stop their COPY … TO.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

from nl2sql.datasources import Adapter, adapter_class
from nl2sql.errors import DatasourceError

ROWS = [(1, "ada"), (2, "grace"), (3, "edsger")]


def run(adapter: Adapter, sql: str) -> list[tuple]:
    """Run `sql` with no guard at all, as a guard bug would."""
    result = adapter._run(sql, row_limit=100, timeout_s=10)
    return [tuple(row) for row in result.frame.itertuples(index=False)]


def try_run(adapter: Adapter, sql: str) -> None:
    """Run a setup statement that the connection may refuse or accept."""
    with contextlib.suppress(DatasourceError):
        run(adapter, sql)


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@dataclass
class FileDatabase:
    """A small SQLite or DuckDB file in tmp_path, its read-only adapter, and a snapshot to compare."""

    root: Path
    path: Path
    adapter: Adapter
    before: dict[str, bytes]

    def row_count(self) -> int:
        if self.path.suffix == ".duckdb":
            with duckdb.connect(str(self.path), read_only=True) as conn:
                return conn.execute("SELECT count(*) FROM items").fetchone()[0]
        with contextlib.closing(sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)) as conn:
            return conn.execute("SELECT count(*) FROM items").fetchone()[0]

    def assert_untouched(self) -> None:
        self.adapter.close()
        assert files_under(self.root) == self.before, "the database file changed or a new file appeared"
        assert self.row_count() == len(ROWS)


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[FileDatabase]:
    path = tmp_path / "shop.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
        conn.execute("CREATE INDEX items_name ON items (name)")
        conn.executemany("INSERT INTO items VALUES (?, ?)", ROWS)
        conn.commit()
    adapter = adapter_class("sqlite")("shop", f"sqlite:///{path}", base_dir=tmp_path)
    db = FileDatabase(tmp_path, path, adapter, files_under(tmp_path))
    assert run(adapter, "SELECT count(*) FROM items") == [(len(ROWS),)]
    yield db
    adapter.close()


@pytest.fixture
def duckdb_db(tmp_path: Path) -> Iterator[FileDatabase]:
    path = tmp_path / "shop.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name VARCHAR NOT NULL)")
        conn.execute("CREATE SEQUENCE items_seq")
        conn.executemany("INSERT INTO items VALUES (?, ?)", ROWS)
    (tmp_path / "outside.csv").write_text("id,name\n9,mallory\n")
    adapter = adapter_class("duckdb")("shop", f"duckdb:///{path}", base_dir=tmp_path)
    db = FileDatabase(tmp_path, path, adapter, files_under(tmp_path))
    assert run(adapter, "SELECT count(*) FROM items") == [(len(ROWS),)]
    yield db
    adapter.close()


# --- SQLite: mode=ro + PRAGMA query_only --------------------------------------------------------

SQLITE_WRITES = [
    pytest.param((), "INSERT INTO items VALUES (9, 'mallory')", id="insert"),
    pytest.param((), "UPDATE items SET name = 'mallory'", id="update"),
    pytest.param((), "DELETE FROM items", id="delete"),
    pytest.param((), "CREATE TABLE pwned (x INTEGER)", id="create-table"),
    pytest.param((), "CREATE TEMP TABLE pwned (x INTEGER)", id="create-temp-table"),
    pytest.param((), "DROP TABLE items", id="drop-table"),
    pytest.param((), "ALTER TABLE items ADD COLUMN pwned INTEGER", id="alter-table"),
    pytest.param((), "CREATE INDEX pwned ON items (id, name)", id="create-index"),
    pytest.param((), "DROP INDEX items_name", id="drop-index"),
    pytest.param((), "VACUUM", id="vacuum"),
    pytest.param((), "PRAGMA user_version = 7", id="pragma-user-version"),
    pytest.param((), "PRAGMA journal_mode = WAL", id="pragma-journal-mode"),
    pytest.param((), "SELECT 1; DELETE FROM items", id="two-statements"),
    pytest.param(
        ("PRAGMA query_only = 0",), "INSERT INTO items VALUES (9, 'mallory')", id="query-only-off-then-insert"
    ),
    pytest.param(("PRAGMA query_only = 0",), "DELETE FROM items", id="query-only-off-then-delete"),
    pytest.param(("PRAGMA query_only = 0",), "DROP TABLE items", id="query-only-off-then-drop"),
    pytest.param(
        ("BEGIN IMMEDIATE",), "INSERT INTO items VALUES (9, 'mallory')", id="begin-immediate-then-insert"
    ),
]


@pytest.mark.parametrize(("setup", "statement"), SQLITE_WRITES)
def test_sqlite_connection_refuses_writes(
    sqlite_db: FileDatabase, setup: tuple[str, ...], statement: str
) -> None:
    for sql in setup:
        try_run(sqlite_db.adapter, sql)
    with pytest.raises(DatasourceError):
        run(sqlite_db.adapter, statement)
    sqlite_db.assert_untouched()


def test_sqlite_attach_then_write_fails(sqlite_db: FileDatabase) -> None:
    target = sqlite_db.root / "attached.sqlite"
    try_run(sqlite_db.adapter, f"ATTACH DATABASE '{target}' AS evil")
    with pytest.raises(DatasourceError):
        run(sqlite_db.adapter, "CREATE TABLE evil.loot AS SELECT * FROM items")
    sqlite_db.adapter.close()
    assert not target.exists() or target.stat().st_size == 0, "no table may be written to an attached file"
    assert files_under(sqlite_db.root)[sqlite_db.path.name] == sqlite_db.before[sqlite_db.path.name]


def test_sqlite_attach_creates_no_file(sqlite_db: FileDatabase) -> None:
    try_run(sqlite_db.adapter, f"ATTACH DATABASE '{sqlite_db.root / 'attached.sqlite'}' AS evil")
    sqlite_db.assert_untouched()


def test_sqlite_query_only_cannot_be_turned_off(sqlite_db: FileDatabase) -> None:
    try_run(sqlite_db.adapter, "PRAGMA query_only = 0")
    try:
        state = run(sqlite_db.adapter, "PRAGMA query_only")
    except DatasourceError:
        return  # refusing to even read the pragma is fine too
    assert state == [(1,)], "PRAGMA query_only = 0 stayed in effect on the pooled connection"


def test_sqlite_query_only_off_then_attach_cannot_write_a_new_file(sqlite_db: FileDatabase) -> None:
    try_run(sqlite_db.adapter, "PRAGMA query_only = 0")
    try_run(sqlite_db.adapter, f"ATTACH DATABASE '{sqlite_db.root / 'attached.sqlite'}' AS evil")
    with pytest.raises(DatasourceError):
        run(sqlite_db.adapter, "CREATE TABLE evil.loot AS SELECT * FROM items")
    sqlite_db.assert_untouched()


def test_sqlite_vacuum_into_writes_no_file(sqlite_db: FileDatabase) -> None:
    try_run(sqlite_db.adapter, "PRAGMA query_only = 0")
    with pytest.raises(DatasourceError):
        run(sqlite_db.adapter, f"VACUUM INTO '{sqlite_db.root / 'copy.sqlite'}'")
    sqlite_db.assert_untouched()


# --- DuckDB: read_only + enable_external_access=false + lock_configuration ----------------------

DUCKDB_WRITES = [
    pytest.param((), "INSERT INTO items VALUES (9, 'mallory')", id="insert"),
    pytest.param((), "UPDATE items SET name = 'mallory'", id="update"),
    pytest.param((), "DELETE FROM items", id="delete"),
    pytest.param((), "CREATE TABLE pwned (x INTEGER)", id="create-table"),
    pytest.param((), "CREATE VIEW pwned AS SELECT * FROM items", id="create-view"),
    pytest.param((), "DROP TABLE items", id="drop-table"),
    pytest.param((), "ALTER TABLE items ADD COLUMN pwned INTEGER", id="alter-table"),
    pytest.param((), "CREATE INDEX pwned ON items (name)", id="create-index"),
    pytest.param((), "SELECT nextval('items_seq')", id="nextval"),
    pytest.param((), "SELECT 1; DELETE FROM items", id="two-statements"),
    pytest.param((), "ATTACH ':memory:' AS scratch", id="attach-memory"),
    pytest.param((), "SET enable_external_access = true", id="set-external-access"),
    pytest.param((), "RESET enable_external_access", id="reset-external-access"),
    pytest.param((), "SET lock_configuration = false", id="unlock-configuration"),
    pytest.param((), "INSTALL httpfs", id="install-extension"),
    pytest.param((), "LOAD httpfs", id="load-extension"),
    pytest.param((), "SELECT * FROM read_csv('{root}/outside.csv')", id="read-file"),
    pytest.param(
        ("SET enable_external_access = true",), "COPY items TO '{root}/after-set.csv'", id="set-then-copy"
    ),
]


@pytest.mark.parametrize(("setup", "statement"), DUCKDB_WRITES)
def test_duckdb_connection_refuses_writes(
    duckdb_db: FileDatabase, setup: tuple[str, ...], statement: str
) -> None:
    for sql in setup:
        try_run(duckdb_db.adapter, sql.format(root=duckdb_db.root))
    with pytest.raises(DatasourceError):
        run(duckdb_db.adapter, statement.format(root=duckdb_db.root))
    duckdb_db.assert_untouched()


@pytest.mark.parametrize(
    ("statement", "target"),
    [
        pytest.param("ATTACH '{target}' AS evil", "attached.duckdb", id="attach-new-file"),
        pytest.param("COPY items TO '{target}' (HEADER)", "items.csv", id="copy-to-file"),
        pytest.param(
            "COPY (SELECT * FROM items) TO '{target}' (FORMAT PARQUET)", "items.parquet", id="copy-query"
        ),
        pytest.param("EXPORT DATABASE '{target}'", "dump", id="export-database"),
    ],
)
def test_duckdb_cannot_create_files(duckdb_db: FileDatabase, statement: str, target: str) -> None:
    path = duckdb_db.root / target
    with pytest.raises(DatasourceError):
        run(duckdb_db.adapter, statement.format(target=path))
    assert not path.exists()
    duckdb_db.assert_untouched()


def test_duckdb_statements_it_accepts_leave_the_file_alone(duckdb_db: FileDatabase) -> None:
    # DuckDB accepts these on a read-only connection: CHECKPOINT is a no-op, TEMP tables live in memory.
    run(duckdb_db.adapter, "CHECKPOINT")
    run(duckdb_db.adapter, "CREATE TEMP TABLE scratch AS SELECT * FROM items")
    duckdb_db.assert_untouched()


# --- PostgreSQL: BEGIN READ ONLY per statement, prepared, default_transaction_read_only=on ------

PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/{db}"
PG_ADAPTER_URL = "postgresql+psycopg://{user}@127.0.0.1:5432/{db}"


@dataclass
class PgDatabase:
    """A throwaway database (table `items`, sequence `items_id_seq`) and an unprivileged reader role."""

    name: str
    reader: str

    def adapter(self, user: str | None = None) -> Adapter:
        """The adapter, connected as the SELECT-only reader unless another user is named."""
        return adapter_class("postgresql")("pg", PG_ADAPTER_URL.format(user=user or self.reader, db=self.name))

    def state(self) -> tuple:
        import psycopg

        with psycopg.connect(PG_ADMIN_URL.format(db=self.name)) as conn:
            rows = conn.execute("SELECT id, name FROM items ORDER BY id").fetchall()
            tables = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
            ).fetchone()
            sequence = conn.execute("SELECT last_value, is_called FROM items_id_seq").fetchone()
        return rows, tables, sequence


@pytest.fixture(scope="module")
def pg_db() -> Iterator[PgDatabase]:
    psycopg = pytest.importorskip(
        "psycopg", reason="psycopg is not installed (pip install nl2sql-engine[postgres])"
    )
    try:
        admin = psycopg.connect(PG_ADMIN_URL.format(db="postgres"), autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL is not reachable on 127.0.0.1:5432 as postgres: {str(exc).strip()}")
    suffix = uuid.uuid4().hex[:12]
    db = PgDatabase(name=f"nl2sql_test_{suffix}", reader=f"nl2sql_reader_{suffix}")
    with admin:
        try:
            admin.execute(f'CREATE DATABASE "{db.name}"')
            admin.execute(f'CREATE ROLE "{db.reader}" LOGIN')
            with psycopg.connect(PG_ADMIN_URL.format(db=db.name), autocommit=True) as conn:
                conn.execute("CREATE TABLE items (id serial PRIMARY KEY, name text NOT NULL)")
                conn.cursor().executemany(
                    "INSERT INTO items (name) VALUES (%s)", [(name,) for _, name in ROWS]
                )
                conn.execute(f'GRANT SELECT ON items TO "{db.reader}"')
            yield db
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{db.name}" WITH (FORCE)')
            admin.execute(f'DROP ROLE IF EXISTS "{db.reader}"')


@pytest.fixture
def server_dir() -> Iterator[Path]:
    """A directory the server process (another OS user) could write into: COPY TO targets go here."""
    path = Path(tempfile.mkdtemp(prefix="nl2sql_copy_"))
    os.chmod(path, 0o777)  # world-writable on purpose: the test proves the server still writes nothing
    yield path
    shutil.rmtree(path, ignore_errors=True)


PG_WRITES = [
    pytest.param((), "INSERT INTO items (name) VALUES ('mallory')", id="insert"),
    pytest.param((), "UPDATE items SET name = 'mallory'", id="update"),
    pytest.param((), "DELETE FROM items", id="delete"),
    pytest.param((), "TRUNCATE items", id="truncate"),
    pytest.param((), "CREATE TABLE pwned (x int)", id="create-table"),
    pytest.param((), "CREATE TEMP TABLE pwned (x int)", id="create-temp-table"),
    pytest.param((), "DROP TABLE items", id="drop-table"),
    pytest.param((), "ALTER TABLE items ADD COLUMN pwned int", id="alter-table"),
    pytest.param((), "SELECT nextval('items_id_seq')", id="nextval"),
    pytest.param((), "SET TRANSACTION READ WRITE", id="set-transaction-read-write"),
    pytest.param(
        ("SET TRANSACTION READ WRITE",), "INSERT INTO items (name) VALUES ('mallory')", id="rw-then-insert"
    ),
    pytest.param((), "COMMIT; INSERT INTO items (name) VALUES ('mallory')", id="commit-then-insert-one-call"),
    pytest.param(("COMMIT",), "INSERT INTO items (name) VALUES ('mallory')", id="commit-then-insert"),
    pytest.param(
        ("SET default_transaction_read_only = off",),
        "INSERT INTO items (name) VALUES ('mallory')",
        id="set-default-off-then-insert",
    ),
    pytest.param(
        ("SELECT set_config('default_transaction_read_only', 'off', false)",),
        "INSERT INTO items (name) VALUES ('mallory')",
        id="set-config-off-then-insert",
    ),
    pytest.param(
        ("SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE",),
        "DELETE FROM items",
        id="session-read-write-then-delete",
    ),
    pytest.param(("RESET ALL",), "DELETE FROM items", id="reset-all-then-delete"),
    pytest.param((), "COPY items FROM '/nonexistent/items.csv'", id="copy-from-file"),
    pytest.param((), "DO $$ BEGIN DELETE FROM items; END $$", id="do-block"),
]


@pytest.mark.postgres
class TestPostgreSQL:
    @pytest.mark.parametrize(("setup", "statement"), PG_WRITES)
    def test_connection_refuses_writes(
        self, pg_db: PgDatabase, setup: tuple[str, ...], statement: str
    ) -> None:
        before = pg_db.state()
        adapter = pg_db.adapter()
        try:
            for sql in setup:
                try_run(adapter, sql)
            with pytest.raises(DatasourceError):
                run(adapter, statement)
            # The same pooled session, one statement later, is still read-only.
            with pytest.raises(DatasourceError):
                run(adapter, "INSERT INTO items (name) VALUES ('mallory')")
        finally:
            adapter.close()
        assert pg_db.state() == before

    def test_session_stays_read_only_after_attempts_to_unset_it(self, pg_db: PgDatabase) -> None:
        adapter = pg_db.adapter()
        try:
            for sql in (
                "SET default_transaction_read_only = off",
                "SELECT set_config('default_transaction_read_only', 'off', false)",
                "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE",
            ):
                try_run(adapter, sql)
                assert run(adapter, "SHOW default_transaction_read_only") == [("on",)]
                assert run(adapter, "SHOW transaction_read_only") == [("on",)]
        finally:
            adapter.close()

    @pytest.mark.parametrize(
        "statement",
        [
            pytest.param("COPY items TO '{target}'", id="copy-to-file"),
            pytest.param("COPY (SELECT 1) TO PROGRAM 'touch {target}'", id="copy-to-program"),
        ],
    )
    def test_reader_role_cannot_write_server_files(
        self, pg_db: PgDatabase, server_dir: Path, statement: str
    ) -> None:
        target = server_dir / "out.csv"
        adapter = pg_db.adapter(pg_db.reader)
        try:
            assert len(run(adapter, "SELECT * FROM items")) == len(ROWS)
            with pytest.raises(DatasourceError):
                run(adapter, statement.format(target=target))
        finally:
            adapter.close()
        assert not target.exists()

    @pytest.mark.parametrize(
        "statement",
        [
            pytest.param("COPY items TO '{target}'", id="copy-to-file"),
            pytest.param("COPY (SELECT 1) TO PROGRAM 'touch {target}'", id="copy-to-program"),
        ],
    )
    def test_superuser_url_cannot_write_server_files(
        self, pg_db: PgDatabase, server_dir: Path, statement: str
    ) -> None:
        target = server_dir / "out.csv"
        adapter = pg_db.adapter("postgres")
        try:
            with pytest.raises(DatasourceError, match="superuser"):
                run(adapter, statement.format(target=target))
        finally:
            adapter.close()
        assert not target.exists()
