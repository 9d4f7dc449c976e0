"""Differential test of the plan generator: every Chinook plan gives the same rows on SQLite, DuckDB and PostgreSQL.

Each file under tests/data/plans/chinook is validated once against the SQLite snapshot (role admin),
rendered for each dialect, and run on the three copies of Chinook. SQLite is the reference: the
DuckDB and PostgreSQL rows must match it (`rows_match`, order only where the file says it
matters), and where a file carries hand-written SQLite SQL, the plan's SQLite rows must match the
rows of that SQL too. Adapters are built once per module, and SQLite rows are computed once per plan.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from nl2sql.config import Config
from nl2sql.datasources import Adapter, SchemaSnapshot, adapter_class
from nl2sql.datasources.compare import rows_match
from nl2sql.plan import PlanModel, generate_sql, validate_plan
from nl2sql.policies import Scope, scope

PLAN_DIR = Path(__file__).resolve().parent.parent / "data" / "plans" / "chinook"
PLAN_FILES = sorted(PLAN_DIR.glob("*.json"))
PLAN_IDS = [p.stem for p in PLAN_FILES]
NAMED = (
    "revenue_per_year",
    "top5_customers_by_spend",
    "customers_per_support_rep",
    "tracks_never_purchased",
    "longest_track_per_genre",
    "jazz_but_never_rock_customers",
    "genre_share_of_sales",
)
ROW_LIMIT = 10_000
Rows = list[tuple[Any, ...]]


@cache
def load(name: str) -> dict[str, Any]:
    """One plan file as a dict."""
    return json.loads((PLAN_DIR / f"{name}.json").read_text(encoding="utf-8"))


def run(adapter: Adapter, sql: str) -> Rows:
    """All rows of a statement (failing if the row limit cut them off)."""
    result = adapter.execute(sql, row_limit=ROW_LIMIT)
    assert not result.truncated, f"more than {ROW_LIMIT} rows from: {sql}"
    return list(result.frame.itertuples(index=False, name=None))


def show(rows: Rows, n: int = 8) -> str:
    """The first rows, for a failure message."""
    return "\n".join(repr(r) for r in rows[:n]) + (f"\n… ({len(rows)} rows)" if len(rows) > n else "")


# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sqlite_adapter(chinook_path: Path) -> Iterator[Adapter]:
    adapter = adapter_class("sqlite")("chinook", f"sqlite:///{chinook_path}")
    yield adapter
    adapter.close()


@pytest.fixture(scope="module")
def duckdb_adapter(duckdb_chinook_path: Path) -> Iterator[Adapter]:
    adapter = adapter_class("duckdb")("chinook", f"duckdb:///{duckdb_chinook_path}")
    yield adapter
    adapter.close()


@pytest.fixture(scope="module")
def postgresql_adapter(postgres_chinook_url: str) -> Iterator[Adapter]:
    adapter = adapter_class("postgresql")("chinook", postgres_chinook_url)
    yield adapter
    adapter.close()


@pytest.fixture(scope="module")
def snapshot(sqlite_adapter: Adapter) -> SchemaSnapshot:
    return sqlite_adapter.reflect()


@pytest.fixture(scope="module")
def admin_scope(demo_config: Config) -> Scope:
    return scope(demo_config.policies, "admin", "chinook")


@pytest.fixture(scope="module")
def resolved() -> dict[str, PlanModel]:
    """Validated (name-resolved) plans, filled as tests ask for them."""
    return {}


@pytest.fixture(scope="module")
def reference() -> dict[str, Rows]:
    """SQLite rows of each plan (the reference), filled as tests ask for them."""
    return {}


@pytest.fixture
def plan_for(resolved: dict[str, PlanModel], snapshot: SchemaSnapshot, admin_scope: Scope) -> Callable[[str], PlanModel]:
    """The plan of a file, validated against the SQLite snapshot with the admin role's scope."""

    def get(name: str) -> PlanModel:
        if name not in resolved:
            plan = PlanModel.model_validate(load(name)["plan"])
            resolved[name] = validate_plan(plan, snapshot, admin_scope).plan
        return resolved[name]

    return get


@pytest.fixture
def sqlite_rows(plan_for: Callable[[str], PlanModel], reference: dict[str, Rows],
                sqlite_adapter: Adapter) -> Callable[[str], Rows]:
    """The reference rows of a plan: its SQLite SQL run on the SQLite adapter."""

    def get(name: str) -> Rows:
        if name not in reference:
            reference[name] = run(sqlite_adapter, generate_sql(plan_for(name), "sqlite"))
        return reference[name]

    return get


# --- tests -------------------------------------------------------------------------------------


def test_plan_files_cover_the_named_questions() -> None:
    """Enough plan files, the named ones present with hand-written SQL, every file well-formed."""
    assert len(PLAN_FILES) >= 40, f"only {len(PLAN_FILES)} plan files in {PLAN_DIR}"
    for name in NAMED:
        assert (PLAN_DIR / f"{name}.json").is_file(), f"{name}.json is missing"
        assert load(name).get("sql"), f"{name}.json has no hand-written sql"
    for name in PLAN_IDS:
        doc = load(name)
        assert {"description", "question", "order_matters", "plan"} <= doc.keys(), name
        assert isinstance(doc["order_matters"], bool), name


@pytest.mark.parametrize("name", PLAN_IDS)
def test_plan_on_sqlite(name: str, sqlite_rows: Callable[[str], Rows], sqlite_adapter: Adapter) -> None:
    """The plan runs on SQLite, is (non-)empty as the file says, and matches the hand-written SQL."""
    doc = load(name)
    rows = sqlite_rows(name)
    if doc.get("expect_empty"):
        assert rows == [], show(rows)
    else:
        assert rows, f"{name}: the plan returned no rows on SQLite"
    if doc.get("sql"):
        expected = run(sqlite_adapter, doc["sql"])
        assert rows_match(rows, expected, order_matters=doc["order_matters"]), (
            f"{name}: plan rows differ from the hand-written SQL\nplan:\n{show(rows)}\nsql:\n{show(expected)}")


@pytest.mark.parametrize("engine", ["duckdb", pytest.param("postgresql", marks=pytest.mark.postgres)])
@pytest.mark.parametrize("name", PLAN_IDS)
def test_plan_matches_sqlite(name: str, engine: str, request: pytest.FixtureRequest,
                             plan_for: Callable[[str], PlanModel], sqlite_rows: Callable[[str], Rows]) -> None:
    """The plan, generated for `engine`, gives the rows it gives on SQLite."""
    doc = load(name)
    adapter: Adapter = request.getfixturevalue(f"{engine}_adapter")
    sql = generate_sql(plan_for(name), engine)
    rows = run(adapter, sql)
    if not doc.get("expect_empty"):
        assert rows, f"{name}: the plan returned no rows on {engine}:\n{sql}"
    expected = sqlite_rows(name)
    assert rows_match(expected, rows, order_matters=doc["order_matters"]), (
        f"{name}: {engine} rows differ from SQLite\n{engine} SQL: {sql}\n"
        f"sqlite:\n{show(expected)}\n{engine}:\n{show(rows)}")
