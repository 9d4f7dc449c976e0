"""The `nl2sql` CLI on the demo project: same rows as the engines' own clients, refusals, exit codes."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from nl2sql.errors import GENERIC_REFUSAL
from tests.support.cli import run_cli


def sql_json(capsys: pytest.CaptureFixture[str], config: Path, datasource: str, role: str, sql: str) -> list[list]:
    code, out, err = run_cli(capsys, "-c", str(config), "sql", sql, "-d", datasource, "-r", role, "--json",
                             "--limit", "100000")
    assert code == 0, err
    payload = json.loads(out)
    return [list(r.values()) for r in payload["rows"]]


def canon(value: object) -> object:
    """One spelling per value: numbers as floats (JSON turns Decimals into strings), the rest as text."""
    if value is None:
        return None
    try:
        return round(float(str(value)), 6)
    except ValueError:
        return str(value).replace("T", " ")


def normalise(rows: list) -> list[list[object]]:
    return [[canon(v) for v in row] for row in rows]


CHINOOK_QUERIES = [
    "SELECT strftime('%Y', InvoiceDate) AS year, ROUND(SUM(Total), 2) AS revenue FROM Invoice GROUP BY year ORDER BY year",
    "SELECT c.CustomerId, c.FirstName, c.LastName, ROUND(SUM(i.Total), 2) AS spent FROM Customer c "
    "JOIN Invoice i ON i.CustomerId = c.CustomerId GROUP BY c.CustomerId ORDER BY spent DESC, c.CustomerId LIMIT 5",
    "SELECT g.Name, COUNT(*) AS tracks FROM Track t JOIN Genre g ON g.GenreId = t.GenreId GROUP BY g.Name ORDER BY 2 DESC, 1",
    "SELECT Title FROM Album WHERE Title LIKE '%Rock%' ORDER BY Title",
    "SELECT Name, Composer FROM Track WHERE Composer IS NULL ORDER BY TrackId LIMIT 20",
]
SUPPORT_QUERIES = [
    "SELECT priority, status, COUNT(*) FROM tickets GROUP BY 1, 2 ORDER BY 1, 2",
    "SELECT a.name, ROUND(AVG(s.score), 3) FROM satisfaction_surveys s JOIN tickets t USING (ticket_id) "
    "JOIN agents a ON a.agent_id = t.agent_id GROUP BY a.name ORDER BY 2 DESC, 1",
    "SELECT COUNT(*) FROM tickets WHERE priority = 'urgent' AND status IN ('open', 'pending')",
]
WEB_QUERIES = [
    "SELECT utm_campaign, COUNT(*) AS orders, SUM(amount) AS revenue FROM web_orders o "
    "JOIN sessions s USING (session_id) WHERE utm_campaign IS NOT NULL GROUP BY 1 ORDER BY 2 DESC, 1",
    "SELECT referrer, COUNT(*) FROM sessions GROUP BY 1 ORDER BY 2 DESC, 1",
    "SELECT date_trunc('month', ordered_at) AS month, SUM(amount) FROM web_orders GROUP BY 1 ORDER BY 1",
]


@pytest.mark.parametrize("sql", CHINOOK_QUERIES)
def test_sql_matches_sqlite3_on_chinook(capsys, demo_dir: Path, sql: str) -> None:
    with sqlite3.connect(demo_dir / "data" / "chinook.sqlite") as conn:
        expected = conn.execute(sql).fetchall()
    assert normalise(sql_json(capsys, demo_dir / "nl2sql.yaml", "chinook", "analyst", sql)) == normalise(expected)


@pytest.mark.parametrize("sql", SUPPORT_QUERIES)
def test_sql_matches_sqlite3_on_support(capsys, demo_dir: Path, sql: str) -> None:
    with sqlite3.connect(demo_dir / "data" / "support.sqlite") as conn:
        expected = conn.execute(sql).fetchall()
    assert normalise(sql_json(capsys, demo_dir / "nl2sql.yaml", "support", "support", sql)) == normalise(expected)


@pytest.mark.parametrize("sql", WEB_QUERIES)
def test_sql_matches_duckdb_on_webanalytics(capsys, demo_dir: Path, sql: str) -> None:
    with duckdb.connect(str(demo_dir / "data" / "webanalytics.duckdb"), read_only=True) as conn:
        expected = conn.execute(sql).fetchall()
    got = sql_json(capsys, demo_dir / "nl2sql.yaml", "webanalytics", "analyst", sql)
    assert len(expected) > 0
    assert normalise(got) == normalise(expected)


@pytest.mark.parametrize(
    ("role", "datasource", "sql"),
    [
        ("viewer", "chinook", "SELECT * FROM Invoice"),
        ("viewer", "chinook", "SELECT t.Name FROM Track t JOIN InvoiceLine il ON il.TrackId = t.TrackId"),
        ("analyst", "chinook", "SELECT FirstName FROM Employee"),
        ("analyst", "chinook", "WITH e AS (SELECT * FROM employee) SELECT COUNT(*) FROM e"),
        ("support", "chinook", "SELECT * FROM Album"),
        ("viewer", "support", "SELECT COUNT(*) FROM tickets"),
        ("support", "webanalytics", "SELECT 1"),
    ],
)
def test_out_of_scope_gets_the_generic_refusal(capsys, demo_dir: Path, role: str, datasource: str, sql: str) -> None:
    code, out, err = run_cli(capsys, "-c", str(demo_dir / "nl2sql.yaml"), "sql", sql, "-d", datasource, "-r", role)
    assert code == 1
    assert out == ""  # no rows
    assert "SECURITY_VIOLATION" in err and GENERIC_REFUSAL in " ".join(err.split())
    for name in ("Invoice", "InvoiceLine", "Employee", "tickets", "Album"):
        assert name.lower() not in err.lower()


def test_usage_errors_exit_2_with_one_message(capsys, demo_dir: Path) -> None:
    config = str(demo_dir / "nl2sql.yaml")
    cases = [
        (["-c", config, "sql", "SELECT 1", "-d", "chinok"], "Did you mean 'chinook'"),
        (["-c", config, "sql", "SELECT 1", "-d", "chinook", "-r", "viewr"], "Did you mean 'viewer'"),
        (["-c", config, "sql", "DROP TABLE Album", "-d", "chinook", "-r", "admin"], "SQL_REJECTED"),
        (["-c", str(demo_dir / "missing.yaml"), "datasources", "list"], "nl2sql init --demo"),
        (["-c", config, "sql"], "Missing argument"),
    ]
    for argv, fragment in cases:
        code, _, err = run_cli(capsys, *argv)
        assert code == 2, (argv, err)
        assert fragment in " ".join(err.split()), (argv, err)
        assert "Traceback" not in err


def test_schema_shows_only_what_the_role_may_see(capsys, demo_dir: Path) -> None:
    code, out, _ = run_cli(capsys, "-c", str(demo_dir / "nl2sql.yaml"), "schema", "chinook", "-r", "support", "--json")
    assert code == 0
    tables = json.loads(out)
    assert [t["name"] for t in tables] == ["Customer"]
    assert tables[0]["foreign_keys"] == []  # Customer → Employee would name a table the role may not see


def test_datasources_list(capsys, demo_dir: Path) -> None:
    code, out, _ = run_cli(capsys, "-c", str(demo_dir / "nl2sql.yaml"), "datasources", "list", "--json")
    assert code == 0
    assert [(d["id"], d["dialect"]) for d in json.loads(out)] == [
        ("chinook", "sqlite"), ("support", "sqlite"), ("webanalytics", "duckdb")]


def test_console_script_end_to_end(tmp_path: Path) -> None:
    """The installed `nl2sql` script: init the demo, query it, and a refusal without a traceback."""
    exe = Path(sys.executable).with_name("nl2sql")
    subprocess.run([exe, "init", "--demo", tmp_path / "demo"], check=True, capture_output=True)
    config = tmp_path / "demo" / "nl2sql.yaml"
    ok = subprocess.run([exe, "-c", config, "sql", "SELECT COUNT(*) AS n FROM Track", "-d", "chinook", "--json"],
                        capture_output=True, text=True)
    assert ok.returncode == 0 and json.loads(ok.stdout)["rows"] == [{"n": 3503}]
    refused = subprocess.run([exe, "-c", config, "sql", "SELECT * FROM Customer", "-d", "chinook"],
                             capture_output=True, text=True)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr and refused.stdout == ""
    again = subprocess.run([exe, "init", "--demo", tmp_path / "demo"], capture_output=True, text=True)
    assert again.returncode == 2 and "--force" in again.stderr
    for datasource in ("chinook", "webanalytics"):  # a repeated column name loses no column, and warns nothing
        twice = subprocess.run([exe, "-c", config, "sql", "SELECT 1 AS x, 2 AS x, 3 AS x_1", "-d", datasource,
                                "-r", "admin", "--json"], capture_output=True, text=True)
        assert twice.returncode == 0 and twice.stderr == "", twice.stderr
        assert json.loads(twice.stdout)["rows"] == [{"x": 1, "x_2": 2, "x_1": 3}]


def test_retrieve_shows_the_pair_a_two_part_question_goes_to(tmp_path: Path, demo_dir: Path, demo_index) -> None:
    """The installed script's `retrieve` on a question about two things: both databases picked, and why."""
    import yaml

    config = yaml.safe_load((demo_dir / "nl2sql.yaml").read_text())
    config.setdefault("storage", {})["state_dir"] = str(demo_index.store.state_dir)  # the session's built index
    (tmp_path / "nl2sql.yaml").write_text(yaml.safe_dump(config))
    for name in ("data", "verified"):
        if (demo_dir / name).exists():
            (tmp_path / name).symlink_to(demo_dir / name)
    exe = Path(sys.executable).with_name("nl2sql")
    question = "Playlists next to the browsers visitors use"
    shown = subprocess.run([exe, "-c", tmp_path / "nl2sql.yaml", "retrieve", question, "-r", "admin"],
                           capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert "its parts went to chinook and webanalytics" in " ".join(shown.stdout.split())
    as_json = subprocess.run([exe, "-c", tmp_path / "nl2sql.yaml", "retrieve", question, "-r", "admin", "--json"],
                             capture_output=True, text=True)
    routing = json.loads(as_json.stdout)["routing"]
    assert routing["picks"][:2] == ["chinook", "webanalytics"] and routing["pair"] == ["chinook", "webanalytics"]
