"""A denied table inside the constructs analysts write — a set operation's branch, a common table, a derived table,
a cross join — as a model's SQL becomes a plan (`plan_from_sql`) and runs through the installed `nl2sql plan run`,
on SQLite, DuckDB and PostgreSQL: refused with the generic sentence, no row of it read. A common table named like the
denied table is the common table, never the table."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path

import pytest
import yaml

from nl2sql.demo import init_demo
from nl2sql.errors import GENERIC_REFUSAL
from nl2sql.plan import plan_from_sql
from nl2sql.project import load_project
from tests.support.index import build_demo_index

pytestmark = [pytest.mark.slow]

NL2SQL = Path(sys.executable).parent / "nl2sql"
#: Per datasource: (its sqlglot dialect, an allowed table and column, a denied table and column).
TABLES = {
    "chinook": ("sqlite", ("Genre", "Name"), ("Employee", "LastName")),
    "webanalytics": ("duckdb", ("sessions", "landing_page"), ("web_orders", "customer_id")),
    "chinook_pg": ("postgres", ("Genre", "Name"), ("Employee", "LastName")),
}
HOSTILE = {
    "union_branch": "SELECT a.{ac} FROM {a} a UNION SELECT d.{dc} FROM {d} d",
    "common_table": "WITH s AS (SELECT d.{dc} FROM {d} d) SELECT s.{dc} FROM s",
    "derived_table": "SELECT x.{dc} FROM (SELECT d.{dc} FROM {d} d) x",
    "cross_join": "SELECT a.{ac} FROM {a} a CROSS JOIN {d} d",
    "scalar_in_join": "SELECT a.{ac} FROM {a} a JOIN {a} b ON b.{ac} = a.{ac} AND EXISTS (SELECT 1 FROM {d} d)",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The demo with a PostgreSQL copy of chinook and a role that reads one table of each datasource."""
    from tests.support.postgres import copy_sqlite_database, scratch_database, server_available

    folder = tmp_path_factory.mktemp("constructs")
    config = init_demo(folder / "demo", env={})
    raw = yaml.safe_load(config.read_text())
    reason = server_available()
    with scratch_database() if reason is None else nullcontext() as database:
        allow = [f"{ds}.{a}" for ds, (_, (a, _), _) in TABLES.items() if database or ds != "chinook_pg"]
        raw["policies"]["roles"]["partial"] = {"description": "One table of each datasource.", "allow": allow}
        if database is not None:
            copy_sqlite_database(config.parent / "data" / "chinook.sqlite", database.admin_url)
            database.grant_read()
            raw["datasources"].append({"id": "chinook_pg", "url": database.reader_url,
                                       "description": "The music store, on PostgreSQL."})
        config.write_text(yaml.safe_dump(raw, sort_keys=False, allow_unicode=True))
        loaded = load_project(config)
        build_demo_index(loaded, loaded.state_dir)
        yield config


def run(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(NL2SQL), "-c", str(config), *args], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def run_plan(config: Path, tmp_path: Path, datasource: str, sql: str) -> subprocess.CompletedProcess[str]:
    dialect = TABLES[datasource][0]
    file = tmp_path / "plan.json"
    file.write_text(plan_from_sql(sql, dialect).model_dump_json(by_alias=True))
    return run(config, "plan", "run", str(file), "--datasource", datasource, "--role", "partial", "--json")


@pytest.mark.parametrize("datasource", list(TABLES))
@pytest.mark.parametrize("construct", list(HOSTILE))
def test_a_denied_table_inside_a_construct_reads_no_row(project: Path, tmp_path: Path, datasource: str,
                                                        construct: str) -> None:
    if datasource == "chinook_pg" and "chinook_pg" not in project.read_text():
        pytest.skip("no PostgreSQL server")
    _, (allowed, allowed_column), (denied, denied_column) = TABLES[datasource]
    sql = HOSTILE[construct].format(a=allowed, ac=allowed_column, d=denied, dc=denied_column)
    refused = run_plan(project, tmp_path, datasource, sql)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert GENERIC_REFUSAL in refused.stderr and denied not in refused.stderr
    assert "Traceback" not in refused.stderr and not refused.stdout.strip()


@pytest.mark.parametrize("datasource", list(TABLES))
def test_a_common_table_named_like_a_denied_table_is_the_common_table(project: Path, tmp_path: Path,
                                                                      datasource: str) -> None:
    if datasource == "chinook_pg" and "chinook_pg" not in project.read_text():
        pytest.skip("no PostgreSQL server")
    _, (allowed, allowed_column), (denied, denied_column) = TABLES[datasource]
    sql = (f"WITH {denied} AS (SELECT a.{allowed_column} AS {denied_column} FROM {allowed} a) "
           f"SELECT {denied}.{denied_column} FROM {denied}")
    ran = run_plan(project, tmp_path, datasource, sql)
    assert ran.returncode in (0, 1), ran.stdout + ran.stderr
    if ran.returncode == 1:  # refused: nothing read
        assert GENERIC_REFUSAL in ran.stderr and not ran.stdout.strip()
        return
    rows = [row[denied_column] for row in json.loads(ran.stdout)["rows"]]
    direct = run(project, "sql", f'SELECT "{allowed_column}" FROM "{allowed}"', "--datasource", datasource, "--role",
                 "partial", "--json", "--limit", "100000")
    allowed_values = {row[allowed_column] for row in json.loads(direct.stdout)["rows"]}
    assert rows and set(rows) <= allowed_values  # the allowed table's values, under the common table's name
