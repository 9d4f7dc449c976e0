"""Two locks: every read of a denied table is refused by the guard, and again by the database with the guard off.

Statements are generated from the positions a table can stand in (FROM, JOIN, `IN (subquery)`, SQLite's
`IN table`, scalar subqueries, EXISTS, CTEs, set operations, derived tables, LATERAL, table-valued functions)
and the spellings of its name (bare, quoted, another case, schema-qualified), for each role of the demo.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nl2sql.adapters import adapter_class
from nl2sql.config import Config
from nl2sql.datasources import DatasourceCatalog, check_sql_scope
from nl2sql.errors import GENERIC_REFUSAL, DatasourceError, SecurityViolation, SQLRejected
from nl2sql.policies import Scope, scope

DEMO_ROLES = ("admin", "analyst", "viewer", "support")


@dataclass(frozen=True)
class Dialect:
    name: str
    default_schema: str
    #: Positions beyond the common ones ({t}: the table as written, {name}: its bare name).
    extra_positions: tuple[str, ...]


SQLITE = Dialect("sqlite", "main", ("SELECT 1 IN {t}", "SELECT 1 NOT IN {t}",
                                    "SELECT * FROM pragma_table_info('{name}')",
                                    "SELECT 1 WHERE 'x' IN pragma_table_info('{name}')"))
DUCKDB = Dialect("duckdb", "main", ("SELECT * FROM (SELECT 1 AS k) a, LATERAL (SELECT * FROM {t}) l",
                                    "SELECT * FROM query_table('{name}')",
                                    "SELECT * FROM duckdb_columns() WHERE table_name = '{name}'"))
POSTGRES = Dialect("postgresql", "public", ("SELECT * FROM (SELECT 1 AS k) a, LATERAL (SELECT * FROM {t}) l",
                                            "SELECT 1 WHERE EXISTS (TABLE {t})"))

POSITIONS = (
    "SELECT * FROM {t}",
    "SELECT COUNT(*) FROM {t}",
    "SELECT * FROM (SELECT 1 AS k) a JOIN {t} d ON 1 = 1",
    "SELECT * FROM (SELECT 1 AS k) a LEFT JOIN {t} d ON 1 = 1",
    "SELECT * FROM (SELECT 1 AS k) a CROSS JOIN {t}",
    "SELECT * FROM (SELECT 1 AS k) a, {t}",
    "SELECT 1 WHERE 1 IN (SELECT 1 FROM {t})",
    "SELECT (SELECT COUNT(*) FROM {t}) AS n",
    "SELECT EXISTS (SELECT 1 FROM {t}) AS e",
    "SELECT CASE WHEN 1 = 1 THEN (SELECT COUNT(*) FROM {t}) END AS c",
    "SELECT k FROM (SELECT 1 AS k UNION ALL SELECT 2) u ORDER BY (SELECT COUNT(*) FROM {t}) + k",
    "WITH x AS (SELECT * FROM {t}) SELECT COUNT(*) FROM x",
    "SELECT 1 AS n UNION SELECT COUNT(*) FROM {t}",
    "SELECT 1 AS n UNION ALL SELECT COUNT(*) FROM {t}",
    "SELECT 1 AS n EXCEPT SELECT COUNT(*) FROM {t}",
    "SELECT 1 AS n INTERSECT SELECT COUNT(*) FROM {t}",
    "SELECT * FROM (SELECT * FROM {t}) s",
    "SELECT * FROM (SELECT * FROM (SELECT * FROM {t}) s1) s2",
)


def spellings(name: str, dialect: Dialect) -> list[str]:
    """The ways to write one table's name."""
    quoted = f'"{name}"'
    return [name, quoted, name.lower(), name.upper(), f"{dialect.default_schema}.{quoted}",
            f'"{dialect.default_schema}".{name}']


def statements(name: str, dialect: Dialect) -> list[str]:
    """Every statement of the positions × spellings that reads the table `name`."""
    out = []
    out.append(f"WITH {name} AS (SELECT * FROM {name}) SELECT * FROM {name}")  # a CTE named like the table
    for template in POSITIONS + dialect.extra_positions:
        if "{t}" in template:
            out += [template.format(t=t, name=name) for t in spellings(name, dialect)]
        else:
            out.append(template.format(name=name))
    return out


def denied_tables(config: Config, tables: dict[str, list[str]]) -> list[tuple[str, str, str]]:
    """(role, datasource, table) for every table of the demo a role may not read."""
    return [(role, ds, table) for role in DEMO_ROLES for ds, names in tables.items()
            for table in names if not scope(config.policies, role, ds).allows(table)]


def assert_refused(run: Callable[[], object], table: str) -> None:
    """Refused with the generic sentence (a catalog or table function may instead be refused by the guard as
    such, by a message that names no table)."""
    try:
        run()
    except SecurityViolation as exc:
        assert str(exc) == GENERIC_REFUSAL
    except SQLRejected as exc:
        assert table.lower() not in str(exc).lower()
    else:
        pytest.fail("the statement ran")


@pytest.fixture(scope="module")
def demo_tables(demo_config: Config) -> dict[str, list[str]]:
    with DatasourceCatalog(demo_config) as catalog:
        return {ds: [t.name for t in catalog.get(ds).reflect().tables] for ds in catalog.ids}


@pytest.fixture(scope="module")
def demo_catalog(demo_config: Config) -> Iterator[DatasourceCatalog]:
    with DatasourceCatalog(demo_config) as catalog:
        yield catalog


DIALECTS = {"chinook": SQLITE, "support": SQLITE, "webanalytics": DUCKDB}


def test_every_role_has_denied_tables_to_try(demo_config: Config, demo_tables: dict[str, list[str]]) -> None:
    roles = {role for role, _, _ in denied_tables(demo_config, demo_tables)}
    assert roles == {"analyst", "viewer", "support"}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_guard_refuses_every_read_of_a_denied_table(data: st.DataObject, demo_config: Config,
                                                        demo_tables: dict[str, list[str]]) -> None:
    role, ds, table = data.draw(st.sampled_from(denied_tables(demo_config, demo_tables)))
    sql = data.draw(st.sampled_from(statements(table, DIALECTS[ds])))
    caller = scope(demo_config.policies, role, ds)
    assert_refused(lambda: check_sql_scope(sql, DIALECTS[ds].name, caller), table)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_database_refuses_every_read_of_a_denied_table_with_the_guard_off(
        data: st.DataObject, demo_config: Config, demo_tables: dict[str, list[str]],
        demo_catalog: DatasourceCatalog) -> None:
    role, ds, table = data.draw(st.sampled_from(denied_tables(demo_config, demo_tables)))
    sql = data.draw(st.sampled_from(statements(table, DIALECTS[ds])))
    caller = scope(demo_config.policies, role, ds)
    adapter = demo_catalog.get(ds)
    with pytest.raises((SecurityViolation, DatasourceError)) as refused:
        adapter._run(sql, row_limit=5, timeout_s=5, scope=caller)
    if isinstance(refused.value, SecurityViolation):
        assert str(refused.value) == GENERIC_REFUSAL
    else:  # SQLite will not read a table through a CTE of its own name: it refuses the statement as circular
        assert "circular reference" in str(refused.value)


@pytest.mark.parametrize(("ds", "sql"), [
    ("chinook", "SELECT (NULL,'Adams',NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL) IN Employee IS NULL"),
    ("chinook", "SELECT 1 IN sqlite_master"),
    ("chinook", "SELECT name FROM sqlite_master"),
    ("chinook", "SELECT * FROM pragma_database_list"),
    ("chinook", "SELECT * FROM dbstat"),
    ("chinook", "SELECT * FROM NoSuchTable"),
    ("webanalytics", "SELECT * FROM duckdb_tables()"),
    ("webanalytics", "SELECT * FROM no_such_table"),
    ("webanalytics", "SELECT json_serialize_plan('SELECT * FROM sessions') AS p"),  # a plan that scans nothing
    ("webanalytics", "SELECT current_setting('memory_limit') AS m"),
])
def test_the_probes_that_leaked_are_refused_by_both_locks(demo_config: Config, demo_catalog: DatasourceCatalog,
                                                          ds: str, sql: str) -> None:
    role = "viewer" if ds == "chinook" else "analyst"
    caller = scope(demo_config.policies, role, ds)
    if ds == "chinook" or "(" in sql:  # the analyst may read any table of webanalytics, had it one so named
        with pytest.raises((SecurityViolation, SQLRejected)) as by_guard:
            check_sql_scope(sql, DIALECTS[ds].name, caller)
        assert "employee" not in str(by_guard.value).lower()
    with pytest.raises(SecurityViolation) as by_database:
        demo_catalog.get(ds)._run(sql, row_limit=5, timeout_s=5, scope=caller)
    assert str(by_database.value) == GENERIC_REFUSAL


@pytest.mark.parametrize("ds", ["chinook", "webanalytics"])
def test_allowed_reads_still_run_under_the_database_lock(demo_config: Config, demo_catalog: DatasourceCatalog,
                                                         ds: str) -> None:
    role, sql = ("viewer", "SELECT g.Name, (SELECT COUNT(*) FROM Track t WHERE t.GenreId = g.GenreId) AS n "
                 "FROM Genre g WHERE g.GenreId IN (SELECT GenreId FROM Track) ORDER BY 1 LIMIT 3") \
        if ds == "chinook" else ("analyst", "WITH s AS (SELECT * FROM sessions) SELECT COUNT(*) AS n FROM s "
                                 "JOIN web_orders USING (session_id) WHERE amount > (SELECT 0) "
                                 "UNION ALL SELECT * FROM range(1)")
    result = demo_catalog.get(ds)._run(sql, row_limit=5, timeout_s=5, scope=scope(demo_config.policies, role, ds))
    assert result.row_count >= 1


def test_the_sqlite_lock_allows_a_view_in_scope_but_not_its_tables_alone(tmp_path) -> None:
    import sqlite3

    from nl2sql.config.models import PoliciesConfig

    path = tmp_path / "v.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript("CREATE TABLE secret (id INTEGER, salary INTEGER); INSERT INTO secret VALUES (1, 10);"
                           "CREATE VIEW headcount AS SELECT COUNT(*) AS n FROM secret;")
    policies = PoliciesConfig.model_validate({"roles": {"r": {"allow": ["db.headcount"]}}, "default_role": "r"})
    caller = scope(policies, "r", "db")
    adapter = adapter_class("sqlite")("db", f"sqlite:///{path}")
    assert adapter._run("SELECT n FROM headcount", row_limit=5, timeout_s=5, scope=caller).frame.iloc[0, 0] == 1
    with pytest.raises(SecurityViolation):
        adapter._run("SELECT salary FROM secret", row_limit=5, timeout_s=5, scope=caller)
    adapter.close()


def test_the_duckdb_lock_reads_reserved_names_as_duckdb_prints_them(tmp_path) -> None:
    """EXPLAIN prints `main."order"` for a reserved name: the lock reads the name unquoted, so a scope pattern
    matches it."""
    import duckdb

    from nl2sql.config.models import PoliciesConfig

    path = tmp_path / "r.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute('CREATE TABLE "order" (id INTEGER); INSERT INTO "order" VALUES (1); CREATE TABLE secret (id INTEGER)')
    policies = PoliciesConfig.model_validate({"roles": {"r": {"allow": ["db.ord*"]}}, "default_role": "r"})
    caller = scope(policies, "r", "db")
    adapter = adapter_class("duckdb")("db", f"duckdb:///{path}")
    try:
        assert adapter._run('SELECT id FROM "order"', row_limit=5, timeout_s=5, scope=caller).frame.iloc[0, 0] == 1
        with pytest.raises(SecurityViolation):
            adapter._run("SELECT id FROM secret", row_limit=5, timeout_s=5, scope=caller)
    finally:
        adapter.close()


# --- PostgreSQL: each role's statements run as a database role holding only its grants ----------------------


@pytest.fixture(scope="module")
def pg_roles(postgres_chinook_url: str, demo_config: Config) -> Iterator[tuple[str, dict[str, str]]]:
    """The Chinook copy with one NOLOGIN database role per demo role (SELECT on what the role may read), each
    granted to the reader the adapter connects as."""
    url = sa.make_url(postgres_chinook_url)
    admin = sa.create_engine(url.set(username="postgres", drivername="postgresql+psycopg"),
                             isolation_level="AUTOCOMMIT")
    names = {role: f"{url.database}_{role}"[:63] for role in ("analyst", "viewer", "support")}
    with admin.connect() as conn:
        tables = [r[0] for r in conn.exec_driver_sql(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'").all()]
        for role, name in names.items():
            conn.exec_driver_sql(f'DROP ROLE IF EXISTS "{name}"')
            conn.exec_driver_sql(f'CREATE ROLE "{name}" NOLOGIN')
            conn.exec_driver_sql(f'GRANT USAGE ON SCHEMA public TO "{name}"')
            caller = scope(demo_config.policies, role, "chinook")
            for table in tables:
                if caller.allows(table):
                    conn.exec_driver_sql(f'GRANT SELECT ON "{table}" TO "{name}"')
            conn.exec_driver_sql(f'GRANT "{name}" TO "{url.username}"')
    try:
        yield postgres_chinook_url, names
    finally:
        with admin.connect() as conn:
            for name in names.values():
                conn.exec_driver_sql(f'DROP OWNED BY "{name}"')
                conn.exec_driver_sql(f'DROP ROLE IF EXISTS "{name}"')
        admin.dispose()


def pg_scope(demo_config: Config, role: str, database_roles: dict[str, str]) -> Scope:
    from nl2sql.config.models import PoliciesConfig

    raw = demo_config.policies.model_dump()
    for name, db_role in database_roles.items():
        raw["roles"][name]["database_role"] = {"chinook": db_role}
    return scope(PoliciesConfig.model_validate(raw), role, "chinook")


@pytest.mark.postgres
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_postgresql_refuses_every_read_of_a_denied_table_with_the_guard_off(
        data: st.DataObject, demo_config: Config, demo_tables: dict[str, list[str]],
        pg_roles: tuple[str, dict[str, str]]) -> None:
    url, database_roles = pg_roles
    role, _, table = data.draw(st.sampled_from(
        [d for d in denied_tables(demo_config, {"chinook": demo_tables["chinook"]}) if d[0] != "admin"]))
    sql = data.draw(st.sampled_from(statements(table, POSTGRES)))
    caller = pg_scope(demo_config, role, database_roles)
    assert_refused(lambda: check_sql_scope(sql, "postgresql", caller), table)
    adapter = _pg_adapter(url)
    with pytest.raises(SecurityViolation) as refused:
        adapter._run(sql, row_limit=5, timeout_s=5, scope=caller)
    assert str(refused.value) == GENERIC_REFUSAL


@pytest.mark.postgres
def test_postgresql_runs_what_the_database_role_may_read(demo_config: Config,
                                                         pg_roles: tuple[str, dict[str, str]]) -> None:
    url, database_roles = pg_roles
    adapter = _pg_adapter(url)
    caller = pg_scope(demo_config, "viewer", database_roles)
    result = adapter._run('SELECT COUNT(*) FROM "Genre"', row_limit=5, timeout_s=5, scope=caller)
    assert result.frame.iloc[0, 0] == 25
    # without the lock's scope the reader's own grants apply: the same connection reads Employee
    assert adapter._run('SELECT COUNT(*) FROM "Employee"', row_limit=5, timeout_s=5).frame.iloc[0, 0] == 8


_PG_ADAPTERS: dict[str, object] = {}


def _pg_adapter(url: str):
    if url not in _PG_ADAPTERS:
        _PG_ADAPTERS[url] = adapter_class("postgresql")("chinook", url)
    return _PG_ADAPTERS[url]
