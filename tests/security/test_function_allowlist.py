"""The guard's function allow-list: what a statement may call, per dialect (nl2sql/datasources/guard.py).

Each list holds only its engine's built-ins and the SQL syntax sqlglot renders as a call; no list holds a
function that reads the catalog, the server's settings or identity, files or the network. Every built-in left
off is refused; every function the plan generator emits, every statement of the eval suites and every ordinary
statement of test_guard.py passes (and runs on its engine). What the second lock leaves open is shown with the
guard off and closed with it on: on PostgreSQL with a database role, the catalog probes tell a table the role
may not read from a missing one (and read its comments); on DuckDB, json_serialize_plan binds a statement the
binder check never sees. With the guard on, a denied table and a missing one get the same refusal.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import duckdb
import pytest
import sqlalchemy as sa
import yaml

from nl2sql.config import Config
from nl2sql.datasources.guard import ALLOWED_FUNCTIONS, allowed_functions, guard_sql, sqlglot_dialect
from nl2sql.errors import NL2SQLError, SecurityViolation, SQLRejected
from nl2sql.evaluation.suite import load_suite
from nl2sql.plan import PlanModel, generate_sql
from nl2sql.plan import model as m
from nl2sql.policies import scope
from tests.security.test_guard import ORDINARY

ROOT = Path(__file__).resolve().parents[2]
DIALECTS = ("sqlite", "duckdb", "postgresql")
GOLDEN_PLANS = sorted((ROOT / "tests" / "golden" / "plans").glob("*.yaml"))
SUITES = sorted((ROOT / "suites").glob("*.yaml"))

def words(text: str) -> list[str]:
    return text.split()


#: Functions that read outside the data or act on the server: no list may ever hold one.
NEVER_ALLOWED = words(
    """
    pg_sleep pg_sleep_for pg_sleep_until pg_read_file pg_read_binary_file pg_ls_dir pg_stat_file
    pg_terminate_backend pg_cancel_backend pg_reload_conf pg_rotate_logfile pg_switch_wal pg_create_restore_point
    pg_logical_emit_message pg_notify pg_promote pg_file_write pg_advisory_lock pg_stat_reset
    set_config setval nextval currval lastval txid_current pg_current_xact_id
    lo_import lo_export lo_unlink lo_create lo_from_bytea lo_put lo_open lo_write
    dblink dblink_exec dblink_connect dblink_send_query query_to_xml query_to_xml_and_xmlschema cursor_to_xml
    database_to_xml table_to_xml schema_to_xml ts_stat ts_rewrite gin_clean_pending_list brin_summarize_new_values
    to_regclass to_regtype to_regproc to_regprocedure to_regnamespace to_regrole to_regoper
    obj_description col_description shobj_description format_type pg_describe_object pg_identify_object
    has_table_privilege has_column_privilege has_any_column_privilege has_schema_privilege has_database_privilege
    has_function_privilege has_sequence_privilege pg_has_role pg_table_is_visible pg_get_viewdef pg_get_indexdef
    pg_get_constraintdef pg_get_functiondef pg_get_expr pg_get_userbyid pg_get_serial_sequence
    pg_relation_size pg_total_relation_size pg_table_size pg_relation_filepath pg_stat_get_live_tuples
    current_setting current_user session_user current_role current_database current_schema current_schemas
    current_catalog version inet_server_addr inet_server_port inet_client_addr inet_client_port pg_backend_pid
    pg_postmaster_start_time pg_conf_load_time pg_current_logfile
    load_extension readfile writefile edit fts3_tokenizer sqlite_version sqlite_source_id sqlite_compileoption_get
    sqlite_compileoption_used sqlite_offset sqlite_dbpage dbstat zipfile sqlar_compress last_insert_rowid changes
    total_changes
    read_csv read_csv_auto read_parquet parquet_scan read_json read_json_auto read_json_objects read_ndjson
    read_ndjson_auto read_text read_blob read_xlsx sniff_csv query query_table getenv json_execute_serialized_sql
    duckdb_tables duckdb_columns duckdb_settings duckdb_functions duckdb_databases duckdb_views duckdb_secrets
    pragma_version pragma_table_info pragma_database_list pragma_storage_info getvariable current_query
    json_serialize_plan json_serialize_sql json_deserialize_sql in_search_path stats error sleep_ms write_log
    enum_range which_secret
    """
)
#: Name prefixes of catalog, file and server functions, and the few ordinary functions that share one.
NEVER_PREFIXES = ("pg_", "duckdb_", "pragma_", "sqlite_", "has_", "to_reg", "read_", "lo_", "dblink", "txid_")
PREFIXED_BUT_PLAIN = {"pg_typeof", "pg_column_size", "pg_size_pretty", "pg_size_bytes"}
#: Names on a list that are SQL syntax rather than functions in an engine's own list (sqlglot renders them
#: as calls).
SQL_SYNTAX = {"cast", "try_cast", "extract", "exists", "coalesce", "nullif", "greatest", "least", "grouping",
              "trim", "ifnull", "row", "current_date", "current_time", "current_timestamp", "localtime",
              "localtimestamp"}
#: SQLite functions newer than the SQLite the tests run (3.41–3.44).
LATER_SQLITE = {"concat", "concat_ws", "octet_length", "string_agg", "timediff", "unhex"}
#: Built-ins off the list that still pass: sqlglot reads them as syntax or as an allowed function (SQLite's
#: match() is the MATCH operator; DuckDB's to_hex is hex, get_current_time is CURRENT_TIME, and `show(x)` a
#: column with aliases, which DuckDB itself refuses to parse).
PASS_AS_ANOTHER = {
    "sqlite": {"match"},
    "duckdb": {"filter", "to_hex", "apply", "get_current_time", "show"},
    "postgresql": {"char", "interval", "like", "overlaps"},
}
#: The arguments each built-in is tried with: sqlglot builds some typed functions only for some arities.
ARGUMENTS = ("", "x", "x, y", "x, y, z")


def sqlite_builtins() -> set[str]:
    with sqlite3.connect(":memory:") as conn:
        return {row[0].lower() for row in conn.execute("PRAGMA function_list")}


def duckdb_builtins() -> set[str]:
    with duckdb.connect() as conn:
        return {row[0].lower() for row in conn.execute("SELECT DISTINCT function_name FROM duckdb_functions()").fetchall()}


def passing_builtins(names: set[str], dialect: str) -> set[str]:
    """The built-ins off `dialect`'s list that the guard lets through when called with some arguments."""
    allowed = allowed_functions(dialect)
    passed = set()
    for name in sorted(n for n in names if n.lower() not in allowed and n.replace("_", "").isalnum()):
        for arguments in ARGUMENTS:
            try:
                guard_sql(f"SELECT {name}({arguments}) FROM t", dialect)
            except SQLRejected:
                continue
            passed.add(name)
    return passed


# --- the lists ----------------------------------------------------------------------------------------------


def test_every_dialect_has_a_list_and_the_lists_are_lower_case() -> None:
    assert {sqlglot_dialect(d) for d in DIALECTS} == set(ALLOWED_FUNCTIONS)
    for dialect, names in ALLOWED_FUNCTIONS.items():
        assert all(name == name.lower() for name in names), dialect
        assert len(names) >= 100, dialect


@pytest.mark.parametrize("dialect", DIALECTS)
def test_no_list_holds_a_function_that_reads_outside_the_data(dialect: str) -> None:
    allowed = allowed_functions(dialect)
    assert not allowed & set(NEVER_ALLOWED)
    assert sorted(n for n in allowed if n.startswith(NEVER_PREFIXES) and n not in PREFIXED_BUT_PLAIN) == []


@pytest.mark.parametrize("function", NEVER_ALLOWED)
def test_every_never_allowed_function_is_refused_in_every_dialect(function: str) -> None:
    for dialect in (*DIALECTS, "", "mysql"):  # "" and mysql: dialects without a list of their own
        with pytest.raises(SQLRejected) as refused:
            guard_sql(f"SELECT {function}('x') FROM t", dialect)
        assert refused.value.fix


@pytest.mark.parametrize(("dialect", "builtins"), [("sqlite", sqlite_builtins), ("duckdb", duckdb_builtins)])
def test_every_name_on_a_list_is_a_builtin_of_its_engine(dialect: str, builtins) -> None:
    unknown = allowed_functions(dialect) - builtins() - SQL_SYNTAX - (LATER_SQLITE if dialect == "sqlite" else set())
    assert sorted(unknown) == [], "not a built-in: a database's own function of that name would be called"


@pytest.mark.parametrize(("dialect", "builtins"), [("sqlite", sqlite_builtins), ("duckdb", duckdb_builtins)])
def test_every_builtin_off_the_list_is_refused(dialect: str, builtins) -> None:
    assert passing_builtins(builtins(), dialect) == PASS_AS_ANOTHER[dialect]


def test_a_refusal_names_the_function_and_says_how_to_fix_it() -> None:
    with pytest.raises(SQLRejected) as refused:
        guard_sql("SELECT name FROM users WHERE to_regclass('salaries') IS NOT NULL", "postgresql")
    assert refused.value.message.startswith("The function to_regclass() is not allowed")
    assert "to_regclass()" in refused.value.fix
    assert "salaries" not in str(refused.value)


# --- what must pass -----------------------------------------------------------------------------------------


def generator_plans() -> Iterator[tuple[str, PlanModel]]:
    """One plan per function, aggregate, window, date part and truncation unit the plan language has."""
    column = {"kind": "column", "table": "i", "column": "Total"}
    date = {"kind": "column", "table": "i", "column": "InvoiceDate"}
    text = {"kind": "column", "table": "i", "column": "BillingCity"}
    two = {"kind": "literal", "value": 2}
    args = {"round": [column, two], "coalesce": [text, {"kind": "literal", "value": "-"}],
            "nullif": [text, {"kind": "literal", "value": ""}], "concat": [text, text, text],
            "substr": [text, two, two], "replace": [text, {"kind": "literal", "value": "a"}, text],
            "instr": [text, {"kind": "literal", "value": "a"}], "power": [column, two], "mod": [column, two],
            "ceil": [column], "floor": [column], "sqrt": [column], "sign": [column], "date": [date],
            "datetime": [date], "days_between": [date, {"kind": "literal", "value": "2012-01-01"}],
            "format_date": [date, {"kind": "literal", "value": "%Y-%m"}], "current_date": [],
            "current_timestamp": []}
    items: list[tuple[str, dict]] = []
    for name in get_args(m.ScalarFunction):
        items.append((f"function-{name}", {"kind": "function", "name": name, "args": args.get(name, [text])}))
    for func in get_args(m.AggregateFunction):
        items.append((f"aggregate-{func}", {"kind": "aggregate", "func": func, "arg": column, "distinct": True}))
    for func in get_args(m.WindowFunction):
        arg = None if func in ("row_number", "rank", "dense_rank") else column
        items.append((f"window-{func}", {"kind": "window", "func": func, "arg": arg, "partition_by": [text],
                                         "order_by": [{"expr": date, "direction": "desc", "nulls": "last"}]}))
    for part in get_args(m.DatePart):
        for arg in (date, {"kind": "literal", "value": "2010-05-17"}):
            items.append((f"date_part-{part}", {"kind": "date_part", "part": part, "arg": arg}))
    for to in get_args(m.CastType):
        items.append((f"cast-{to}", {"kind": "cast", "arg": text, "to": to}))
    for unit in get_args(m.TruncUnit):
        for arg in (date, {"kind": "literal", "value": "2010-05-17"}):
            items.append((f"date_trunc-{unit}", {"kind": "date_trunc", "unit": unit, "arg": arg}))
    for name, expr in items:
        plan = {"select": [{"expr": expr, "alias": "v"}], "from": {"table": "Invoice", "alias": "i"},
                "where": {"kind": "like", "expr": text, "pattern": "%a%", "case_insensitive": True}}
        yield name, PlanModel.model_validate(plan)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_function_the_generator_emits_passes(dialect: str) -> None:
    for name, plan in generator_plans():
        sql = generate_sql(plan, dialect)
        try:
            guard_sql(sql, dialect)
        except SQLRejected as exc:
            pytest.fail(f"{name} ({dialect}): {sql}\n{exc}")


@pytest.mark.parametrize("path", GOLDEN_PLANS, ids=lambda p: p.stem)
def test_the_golden_plans_sql_passes(path: Path) -> None:
    expected = yaml.safe_load(path.read_text(encoding="utf-8"))["sql"]
    for dialect in DIALECTS:
        guard_sql(expected[sqlglot_dialect(dialect)], dialect)


def test_every_suite_statement_passes_for_its_datasource(demo_config: Config) -> None:
    dialects = {ds.id: ds.dialect for ds in demo_config.datasources}
    checked = 0
    for path in SUITES:
        for case in load_suite(path).cases:
            for sql in [case.sql, *case.alt_sql] if case.sql else case.alt_sql:
                for datasource in case.datasources:
                    try:
                        guard_sql(sql, dialects[datasource])
                    except SQLRejected as exc:
                        pytest.fail(f"{path.name} {case.id} ({dialects[datasource]}): {exc}")
                    checked += 1
    assert checked >= 60


def test_every_demo_verified_query_passes(demo_config: Config) -> None:
    queries = [(ds.dialect, q.sql) for ds in demo_config.datasources for q in ds.verified_queries]
    assert len(queries) >= 10
    for dialect, sql in queries:
        guard_sql(sql, dialect)


ORDINARY_TABLE = {
    "sqlite": "CREATE TABLE t (a INTEGER, b REAL, s TEXT, d TEXT, j TEXT)",
    "duckdb": "CREATE TABLE t (a INTEGER, b DOUBLE, s VARCHAR, d TIMESTAMP, j JSON, l INTEGER[])",
    "postgresql": "CREATE TABLE t (a int, b numeric, f double precision, s text, d timestamp, j jsonb, l int[])",
}


def ordinary(dialect: str) -> list[tuple[str, str]]:
    return [(name, sql) for name, d, sql in ORDINARY if d == dialect]


def test_the_ordinary_statements_run_on_sqlite_and_duckdb() -> None:
    with sqlite3.connect(":memory:") as lite, duckdb.connect() as duck:
        for conn, dialect in ((lite, "sqlite"), (duck, "duckdb")):
            conn.execute(ORDINARY_TABLE[dialect])
            assert len(ordinary(dialect)) >= 5
            for name, sql in ordinary(dialect):
                try:
                    conn.execute(sql).fetchall()
                except (sqlite3.Error, duckdb.Error) as exc:
                    pytest.fail(f"{name}: {exc}")


# --- what a database role still reveals -----------------------------------------------------------------------


def outcome(run) -> tuple[str, str]:
    """What a caller sees: the rows, or the error's kind and message."""
    try:
        return "rows", repr(run().frame.values.tolist())
    except NL2SQLError as exc:
        return type(exc).__name__, str(exc)


def test_duckdb_json_serialize_plan_is_refused_by_both_locks(tmp_path: Path) -> None:
    """`json_serialize_plan` binds the SQL text it is given: its plan scans nothing, yet it returns a denied table's
    columns. The guard refuses it by name; with the guard off, the DuckDB lock refuses it on DuckDB's own parse."""
    from nl2sql.adapters import adapter_class
    from nl2sql.config.models import PoliciesConfig

    path = tmp_path / "db.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE shown (x INTEGER); CREATE TABLE salaries (amount INTEGER, holder VARCHAR)")
        assert '"names":["amount","holder"]' in conn.execute(
            "SELECT json_serialize_plan('SELECT * FROM salaries')").fetchone()[0]  # what it would give away
    policies = PoliciesConfig.model_validate({"roles": {"r": {"allow": ["db.shown"]}}, "default_role": "r"})
    caller = scope(policies, "r", "db")
    adapter = adapter_class("duckdb")("db", f"duckdb:///{path}")
    probe = "SELECT json_serialize_plan('SELECT * FROM {t}')"
    try:
        for table in ("salaries", "no_such"):  # the guard off: the database lock, alike for both
            with pytest.raises(SecurityViolation):
                adapter._run(probe.format(t=table), row_limit=5, timeout_s=5, scope=caller)
        denied, missing = (outcome(lambda t=t: adapter.execute(probe.format(t=t), row_limit=5, timeout_s=5,
                                                               scope=caller)) for t in ("salaries", "no_such"))
    finally:
        adapter.close()
    assert denied == missing
    assert denied[0] == "SQLRejected"
    assert "salaries" not in denied[1]


# --- PostgreSQL (skipped, saying why, without a server on loopback) -----------------------------------------


@pytest.fixture(scope="module")
def pg_builtins() -> set[str]:
    from tests.support.postgres import SERVER_URL, server_available

    if reason := server_available():
        pytest.skip(reason)
    engine = sa.create_engine(SERVER_URL)
    with engine.connect() as conn:
        names = {row[0] for row in conn.exec_driver_sql("SELECT DISTINCT proname FROM pg_proc")}
    engine.dispose()
    return names


@pytest.mark.postgres
def test_every_name_on_the_postgresql_list_is_a_builtin(pg_builtins: set[str]) -> None:
    assert sorted(allowed_functions("postgresql") - pg_builtins - SQL_SYNTAX) == []


@pytest.mark.postgres
def test_every_postgresql_builtin_off_the_list_is_refused(pg_builtins: set[str]) -> None:
    assert passing_builtins(pg_builtins, "postgresql") == PASS_AS_ANOTHER["postgresql"]


@pytest.mark.postgres
def test_the_ordinary_statements_run_on_postgresql(pg_builtins: set[str]) -> None:
    from tests.support.postgres import scratch_database

    with scratch_database("nl2sql_ordinary") as db:
        engine = sa.create_engine(db.admin_url)
        with engine.connect() as conn:
            conn.exec_driver_sql(ORDINARY_TABLE["postgresql"])
            for name, sql in ordinary("postgresql"):
                try:
                    with conn.begin_nested():
                        conn.exec_driver_sql(sql.replace("%", "%%")).all()
                except sa.exc.DBAPIError as exc:
                    pytest.fail(f"{name}: {exc}")
        engine.dispose()


#: The finding's probes, {t} the table's name as PostgreSQL writes it quoted.
CATALOG_PROBES = (
    "SELECT to_regclass('public.{t}') IS NOT NULL",
    "SELECT obj_description('{t}'::regclass), col_description('{t}'::regclass, 4)",
    "SELECT '{t}'::regclass",
    "SELECT CAST('{t}' AS regclass) IS NOT NULL",
    "SELECT has_column_privilege('{t}', 'EmployeeId', 'SELECT')",
    "SELECT has_table_privilege('{t}', 'SELECT')",
    "SELECT to_regtype('{t}') IS NOT NULL",
    "SELECT NULL::{t} IS NULL",
    "SELECT pg_catalog.to_regclass('{t}') IS NOT NULL",
)
DENIED, MISSING = '"Employee"', '"NoSuchTable"'


@pytest.fixture(scope="module")
def viewer_role(postgres_chinook_url: str, demo_config: Config) -> Iterator[tuple[object, object]]:
    """The Chinook copy behind the PostgreSQL adapter, and the viewer's scope with a database role holding
    SELECT on the viewer's tables only (and a comment on a table it may not read)."""
    from nl2sql.adapters import adapter_class
    from nl2sql.config.models import PoliciesConfig

    url = sa.make_url(postgres_chinook_url)
    role = f"{url.database}_viewer"[:63]
    admin = sa.create_engine(url.set(username="postgres"), isolation_level="AUTOCOMMIT")
    viewer = scope(demo_config.policies, "viewer", "chinook")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP ROLE IF EXISTS "{role}"')
        conn.exec_driver_sql(f'CREATE ROLE "{role}" NOLOGIN')
        conn.exec_driver_sql(f'GRANT USAGE ON SCHEMA public TO "{role}"')
        tables = [r[0] for r in conn.exec_driver_sql("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        for table in tables:
            if viewer.allows(table):
                conn.exec_driver_sql(f'GRANT SELECT ON "{table}" TO "{role}"')
        conn.exec_driver_sql(f'GRANT "{role}" TO "{url.username}"')
        conn.exec_driver_sql('COMMENT ON TABLE "Employee" IS \'staff, with their managers\'')
    raw = demo_config.policies.model_dump()
    raw["roles"]["viewer"]["database_role"] = {"chinook": role}
    caller = scope(PoliciesConfig.model_validate(raw), "viewer", "chinook")
    adapter = adapter_class("postgresql")("chinook", postgres_chinook_url)
    try:
        yield adapter, caller
    finally:
        adapter.close()
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP OWNED BY "{role}"')
            conn.exec_driver_sql(f'DROP ROLE IF EXISTS "{role}"')
        admin.dispose()


@pytest.mark.postgres
def test_the_database_role_alone_tells_a_denied_table_from_a_missing_one(viewer_role) -> None:
    adapter, caller = viewer_role
    probe = CATALOG_PROBES[0]
    seen = {t: outcome(lambda t=t: adapter._run(probe.format(t=t), row_limit=5, timeout_s=5, scope=caller))
            for t in (DENIED, MISSING)}
    assert seen[DENIED] == ("rows", "[[True]]") and seen[MISSING] == ("rows", "[[False]]")
    comments = adapter._run(CATALOG_PROBES[1].format(t=DENIED), row_limit=5, timeout_s=5, scope=caller)
    assert comments.frame.iloc[0, 0] == "staff, with their managers"
    with pytest.raises(NL2SQLError):  # while the rows stay out of reach
        adapter._run(f"SELECT * FROM {DENIED}", row_limit=5, timeout_s=5, scope=caller)


@pytest.mark.postgres
@pytest.mark.parametrize("probe", CATALOG_PROBES)
def test_a_catalog_probe_gets_one_refusal_for_a_denied_and_a_missing_table(viewer_role, probe: str) -> None:
    adapter, caller = viewer_role
    denied, missing = (outcome(lambda t=t: adapter.execute(probe.format(t=t), row_limit=5, timeout_s=5,
                                                           scope=caller)) for t in (DENIED, MISSING))
    assert denied == missing
    assert denied[0] == "SQLRejected"
    assert "employee" not in denied[1].lower()
