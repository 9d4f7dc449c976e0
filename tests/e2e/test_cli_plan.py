"""`nl2sql plan render|run` on the demo project."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from nl2sql.errors import GENERIC_REFUSAL
from tests.e2e.test_cli import normalise, run_cli

REVENUE_PER_COUNTRY = {
    "select": [
        {"expr": {"kind": "column", "table": "i", "column": "billingcountry"}, "alias": "country"},
        {"expr": {"kind": "aggregate", "func": "sum", "arg": {"kind": "column", "table": "i", "column": "total"}},
         "alias": "revenue"},
    ],
    "from": {"table": "invoice", "alias": "i"},
    "group_by": [{"kind": "column", "table": "i", "column": "BillingCountry"}],
    "order_by": [{"expr": {"kind": "column", "table": None, "column": "revenue"}, "direction": "desc"},
                 {"expr": {"kind": "column", "table": None, "column": "country"}}],
}


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"plan": REVENUE_PER_COUNTRY}))
    return path


def test_render_validates_and_keeps_reflected_case(capsys, demo_dir: Path, plan_file: Path) -> None:
    code, out, err = run_cli(capsys, "-c", str(demo_dir / "nl2sql.yaml"), "plan", "render", str(plan_file),
                             "--dialect", "postgres", "-d", "chinook", "-r", "analyst")
    assert code == 0, err
    assert 'SUM(i."Total")' in out and 'FROM "Invoice" AS i' in out and "NULLS LAST" in out


def test_run_matches_hand_written_sql(capsys, demo_dir: Path, plan_file: Path) -> None:
    code, out, err = run_cli(capsys, "-c", str(demo_dir / "nl2sql.yaml"), "plan", "run", str(plan_file),
                             "-d", "chinook", "-r", "analyst", "--json")
    assert code == 0, err
    got = [list(r.values()) for r in json.loads(out)["rows"]]
    with sqlite3.connect(demo_dir / "data" / "chinook.sqlite") as conn:
        expected = conn.execute("SELECT BillingCountry, SUM(Total) AS revenue FROM Invoice "
                                "GROUP BY BillingCountry ORDER BY revenue DESC, BillingCountry").fetchall()
    assert normalise(got) == normalise(expected)


def test_run_refused_for_a_role_without_the_table(capsys, demo_dir: Path, plan_file: Path) -> None:
    code, out, err = run_cli(capsys, "-c", str(demo_dir / "nl2sql.yaml"), "plan", "run", str(plan_file),
                             "-d", "chinook", "-r", "viewer")
    assert code == 1 and out == ""
    assert GENERIC_REFUSAL in " ".join(err.split()) and "invoice" not in err.lower()


def test_invalid_plan_names_the_key(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"select": [], "from": {"table": 3}}))
    code, _, err = run_cli(capsys, "plan", "render", str(bad))
    assert code == 2 and "PLAN_FILE_INVALID" in err and "from.table" in err


def test_forget_drops_the_cached_plans_of_a_datasource(capsys, demo_dir: Path) -> None:
    from nl2sql.config import load_config
    from nl2sql.index.store import StateStore

    config = load_config(demo_dir / "nl2sql.yaml")
    store = StateStore(config.state_dir)
    for key, datasource in (("a", "chinook"), ("b", "chinook"), ("c", "support")):
        store.cache_plan(f"forget-{key}", datasource, "fp", json.dumps(REVENUE_PER_COUNTRY))
    args = ("-c", str(demo_dir / "nl2sql.yaml"), "plan", "forget")
    code, out, err = run_cli(capsys, *args, "-d", "chinook", "--json")
    assert code == 0, err
    assert json.loads(out) == {"forgotten": 2, "datasource": "chinook"}
    assert store.cached_plan("forget-c") is not None and store.cached_plan("forget-a") is None
    code, out, _ = run_cli(capsys, *args)
    assert code == 0 and "Forgot 1 cached plan." in out
    code, _, err = run_cli(capsys, *args, "-d", "nowhere")
    assert code == 2 and "Unknown datasource 'nowhere'" in err
