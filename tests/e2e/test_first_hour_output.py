"""What a new user reads in the first hour, from the installed `nl2sql` in a subprocess: tables piped into a
script keep ids whole, and the drift check tells renames apart, in the tables' own spelling."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from nl2sql.index.store import StateStore
from nl2sql.project import load_project

NL2SQL = Path(sys.executable).parent / "nl2sql"


def piped(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed executable with stdout a pipe and COLUMNS unset (what a script or `| grep` sees)."""
    environment = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | (env or {})
    return subprocess.run([str(NL2SQL), *args], capture_output=True, text=True, timeout=300, env=environment,
                          stdin=subprocess.DEVNULL)


@pytest.fixture
def project(demo_dir: Path, tmp_path: Path) -> Path:
    target = tmp_path / "project"
    shutil.copytree(demo_dir, target, ignore=shutil.ignore_patterns(".nl2sql"))
    return target / "nl2sql.yaml"


def test_a_piped_approvals_list_keeps_the_run_id_whole(project: Path) -> None:
    run_id = str(uuid.uuid4())
    sql = "SELECT FirstName, LastName, Title, BirthDate, HireDate, Address, City, Country FROM Employee"
    StateStore(load_project(project).state_dir).save_approval(run_id, "a" * 64, {
        "asker": "alice", "reason": "reads a table under review (Employee)", "datasource_id": "chinook",
        "approver_roles": ["dba", "admin"], "sql": sql})
    proc = piped("-c", str(project), "approvals", "list")
    assert proc.returncode == 0, proc.stderr
    [line] = [line for line in proc.stdout.splitlines() if run_id in line]
    assert sql in line and "…" not in proc.stdout


@pytest.mark.slow
@pytest.mark.prefect
def test_drift_names_a_rename_and_spells_tables_as_they_are(project: Path, tmp_path: Path) -> None:
    env = {"PREFECT_HOME": str(tmp_path / "prefect-home")}
    built = piped("-c", str(project), "index", "build", "-d", "chinook", env=env)
    assert built.returncode == 0, built.stdout + built.stderr
    with sqlite3.connect(project.parent / "data" / "chinook.sqlite") as conn:
        conn.execute("ALTER TABLE Employee RENAME COLUMN Title TO JobTitle")
        conn.execute("ALTER TABLE Customer DROP COLUMN Fax")
        conn.execute("ALTER TABLE Customer ADD COLUMN FaxNumber INTEGER")  # another type: not a rename
    proc = piped("-c", str(project), "index", "check", "-d", "chinook", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "chinook: drifted (1 column renamed, 1 column added, 1 column dropped)" in out
    assert "column renamed: Employee.Title → Employee.JobTitle" in out
    assert "column added: Customer.FaxNumber" in out and "column dropped: Customer.Fax" in out
    assert "Employee.Title value set" in out and "Customer.Fax value set" in out
    assert "employee." not in out and "customer." not in out and "columns," not in out


@pytest.mark.slow
@pytest.mark.prefect
def test_a_question_asked_here_says_first_what_it_waits_for(project: Path) -> None:
    """No desk and no Prefect server: before the seconds Prefect's local server takes, one line says so."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    proc = subprocess.run([str(NL2SQL), "-c", str(project), "ask", "How much did we earn in each year?", "--role",
                           "analyst"], capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith("Starting the engine and Prefect's local server here") and "nl2sql serve" in first
    assert "2011" in proc.stdout  # and then the answer
