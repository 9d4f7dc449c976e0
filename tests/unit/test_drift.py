"""The drift check on copies of the demo databases: a real build, a real change, a real great-expectations run."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from nl2sql.config.models import Config
from nl2sql.datasources import adapter_class
from nl2sql.index import StateStore
from nl2sql.index.build import build_datasource
from nl2sql.index.drift import check_drift
from nl2sql.index.embed import shared_embedder
from nl2sql.policies import scope


@pytest.fixture
def built(demo_dir: Path, demo_config: Config, tmp_path: Path):
    """(datasource id) → (its database copy, an adapter over it, a store holding its live build)."""
    opened = []

    def build(datasource_id: str):
        name = "chinook.sqlite" if datasource_id == "chinook" else f"{datasource_id}.sqlite"
        path = tmp_path / name
        shutil.copyfile(demo_dir / "data" / name, path)
        store = StateStore(tmp_path / "state")
        adapter = adapter_class("sqlite")(datasource_id, f"sqlite:///{path}")
        opened.append(adapter)
        ds = demo_config.datasource(datasource_id)
        build_datasource(adapter, store, shared_embedder(), profile=demo_config.settings.profile,
                         verified=[], description=ds.description)
        return path, adapter, store

    yield build
    for adapter in opened:
        adapter.close()


def check(demo_config: Config, adapter, store: StateStore, datasource_id: str, role: str | None = None, **kwargs):
    caller = scope(demo_config.policies, role, datasource_id) if role else None
    return check_drift(adapter, store, demo_config.datasource(datasource_id), policies=demo_config.policies,
                       caller=caller, **kwargs)


def test_nothing_changed_is_unchanged_and_every_expectation_holds(built, demo_config: Config) -> None:
    _, adapter, store = built("support")
    report = check(demo_config, adapter, store, "support")
    assert report.status == "unchanged", report.markdown()
    assert report.expectations and not report.failed_expectations
    kinds = {(e.table, e.column, e.kind) for e in report.expectations}
    assert {("tickets", "priority", "value_set"), ("tickets", "status", "column_exists"),
            ("tickets", "ticket_id", "unique")} <= kinds


def test_a_renamed_column_drifts_and_names_the_verified_query_it_breaks(built, demo_config: Config) -> None:
    path, adapter, store = built("support")
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE tickets RENAME COLUMN status TO state")
    report = check(demo_config, adapter, store, "support",
                   cases=[("open_tickets", "SELECT COUNT(*) FROM tickets WHERE status = 'open'"),
                          ("all_tickets", "SELECT COUNT(*) FROM tickets")])
    assert report.status == "drifted"
    assert report.diff.removed_columns == ["tickets.status"] and report.diff.added_columns == ["tickets.state"]
    impacted = report.impact.verified_queries
    assert [q.question for q in impacted] == ["How many {priority} tickets are still open?"]
    assert "reads tickets.status, which was renamed to tickets.state" in impacted[0].reasons
    assert [c.case_id for c in report.impact.eval_cases] == ["open_tickets"]
    failed = {(e.column, e.kind) for e in report.failed_expectations}
    assert ("status", "column_exists") in failed and ("status", "value_set") in failed
    text = report.markdown()
    assert "column renamed: `tickets.status` → `tickets.state`" in text and "How many {priority} tickets" in text
    assert report.diff.summary() == "1 column renamed"


def test_a_renamed_column_names_the_example_question_it_breaks(built, demo_config: Config) -> None:
    path, adapter, store = built("support")
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE agents RENAME COLUMN hired_on TO started_on")
    report = check(demo_config, adapter, store, "support", expectations=False)
    assert report.status == "drifted"
    [example] = report.impact.example_questions
    assert (example.position, example.question) == (1, "Which agent was hired most recently, and on what date?")
    assert any("agents.hired_on" in reason for reason in example.reasons)
    assert report.event_fields()["impact"]["example_questions"] == 1  # type: ignore[index]
    assert "## Example questions impacted" in report.markdown()


def test_renames_and_expectations_keep_the_tables_own_spelling(built, demo_config: Config) -> None:
    path, adapter, store = built("chinook")
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE Employee RENAME COLUMN Title TO JobTitle")
        conn.execute("ALTER TABLE Customer DROP COLUMN Fax")
        conn.execute("ALTER TABLE Customer ADD COLUMN FaxNumber INTEGER")  # another type: not a rename
    report = check(demo_config, adapter, store, "chinook")
    assert report.diff.summary() == "1 column renamed, 1 column added, 1 column dropped"
    assert [(r.table, r.before, r.after) for r in report.diff.renamed_columns] == [("Employee", "Title", "JobTitle")]
    assert {e.table for e in report.failed_expectations} == {"Customer", "Employee"}
    text = report.markdown()
    assert "- column renamed: `Employee.Title` → `Employee.JobTitle`" in text
    assert "- column added: `Customer.FaxNumber`" in text and "- column dropped: `Customer.Fax`" in text
    assert "`Employee.Title` value set" in text and "employee." not in text and "customer." not in text


def test_a_rename_whose_values_differ_reads_as_dropped_and_added(built, demo_config: Config) -> None:
    path, adapter, store = built("chinook")
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE Employee RENAME COLUMN Title TO JobTitle")
        conn.execute("UPDATE Employee SET JobTitle = 'Staff ' || EmployeeId")  # none of the recorded titles
    report = check(demo_config, adapter, store, "chinook", expectations=False)
    assert report.diff.renamed_columns == []
    assert report.diff.summary() == "1 column added, 1 column dropped"


def test_a_category_value_gone_fails_its_expectation(built, demo_config: Config) -> None:
    path, adapter, store = built("support")
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM ticket_messages WHERE ticket_id IN (SELECT ticket_id FROM tickets WHERE priority = 'urgent')")
        conn.execute("DELETE FROM satisfaction_surveys WHERE ticket_id IN "
                     "(SELECT ticket_id FROM tickets WHERE priority = 'urgent')")
        conn.execute("DELETE FROM tickets WHERE priority = 'urgent'")
    report = check(demo_config, adapter, store, "support")
    assert report.status == "drifted" and report.diff.empty
    [failed] = [e for e in report.failed_expectations if e.column == "priority"]
    assert failed.kind == "value_set" and failed.detail == "no longer holds 'urgent'"
    assert report.event_fields() == {"datasource_id": "support", "changes": {}, "impact": {
        "verified_queries": 0, "example_questions": 0, "policy_patterns": 0, "eval_cases": 0},
        "failed_expectations": 1}


def test_a_viewer_sees_no_drift_in_tables_it_may_not_read(built, demo_config: Config) -> None:
    path, adapter, store = built("chinook")
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE Employee ADD COLUMN Salary REAL")
    viewer = check(demo_config, adapter, store, "chinook", role="viewer")
    assert viewer.status == "unchanged", viewer.markdown()
    assert "Employee" not in viewer.model_dump_json()
    admin = check(demo_config, adapter, store, "chinook", role="admin", expectations=False)
    assert admin.status == "drifted" and admin.diff.added_columns == ["Employee.Salary"]


def test_a_dropped_table_leaves_a_policy_pattern_matching_nothing(built, demo_config: Config) -> None:
    path, adapter, store = built("chinook")
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("ALTER TABLE Employee RENAME TO Staff")
    report = check(demo_config, adapter, store, "chinook", expectations=False)
    assert report.status == "drifted" and report.diff.removed_tables == ["Employee"]
    assert [(p.role, p.kind, p.pattern) for p in report.impact.policy_patterns] == [
        ("analyst", "deny", "chinook.Employee")]
    analyst = check(demo_config, adapter, store, "chinook", role="analyst", expectations=False)
    assert analyst.impact.policy_patterns == []  # patterns name denied tables: admins only


def test_no_live_build_is_not_indexed(demo_config: Config, tmp_path: Path, demo_dir: Path) -> None:
    adapter = adapter_class("sqlite")("support", f"sqlite:///{demo_dir / 'data' / 'support.sqlite'}")
    try:
        report = check(demo_config, adapter, StateStore(tmp_path / "state"), "support")
    finally:
        adapter.close()
    assert report.status == "not_indexed" and "nl2sql index build" in (report.message or "")


def test_great_expectations_is_imported_by_the_drift_check_alone() -> None:
    import subprocess
    import sys

    code = ("import sys, nl2sql.cli.main, nl2sql.flows.ask, nl2sql.flows.index, nl2sql.flows.drift, "
            "nl2sql.index.drift; print('great_expectations' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
