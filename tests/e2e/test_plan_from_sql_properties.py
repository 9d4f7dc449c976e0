"""Property: reading back the SQL of any plan gives the plan again, in SQLite, DuckDB and PostgreSQL.

Random plans over Chinook (`tests.support.plan_strategies`, names written loosely as a model
might: other cases, unqualified columns, keyword aliases) are rendered in each dialect and read
back with `plan_from_sql`; the result must equal the plan's canonical form
(`tests.support.plan_canonical`: what the generator writes the same way for two plans) and render
to the same SQL. No database runs: the world is reflected once from the SQLite copy. The default
run draws 150 plans (`NL2SQL_PLAN_EXAMPLES` changes that); the slow test draws 1,000 others.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from nl2sql.datasources import adapter_class
from nl2sql.plan import PlanModel, generate_sql, plan_from_sql
from tests.support.plan_canonical import canonical
from tests.support.plan_strategies import World, plans

DIALECTS = ("sqlite", "duckdb", "postgres")
DEFAULT_EXAMPLES = int(os.environ.get("NL2SQL_PLAN_EXAMPLES", "150"))
SLOW_EXAMPLES = 1_000
COMMON = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


@pytest.fixture(scope="module")
def world(chinook_path: Path) -> World:
    adapter = adapter_class("sqlite")("chinook", f"sqlite:///{chinook_path}")
    try:
        return World.from_adapter(adapter)
    finally:
        adapter.close()


def check_round_trip(plan: PlanModel) -> None:
    """plan → SQL → plan in every dialect."""
    note(f"plan: {plan.model_dump_json(by_alias=True, exclude_defaults=True)}")
    for dialect in DIALECTS:
        expected = canonical(plan, dialect)
        sql = generate_sql(plan, dialect)
        note(f"{dialect}: {sql}")
        back = plan_from_sql(sql, dialect)
        assert back == expected, (f"{dialect}: read back differs\n  want {expected.model_dump_json(exclude_defaults=True)}"
                                  f"\n   got {back.model_dump_json(exclude_defaults=True)}")
        assert generate_sql(back, dialect) == sql


@settings(max_examples=DEFAULT_EXAMPLES, **COMMON)
@given(data=st.data())
def test_plans_read_back_from_their_sql(world: World, data: st.DataObject) -> None:
    check_round_trip(data.draw(plans(world), label="plan"))


@pytest.mark.slow
@settings(max_examples=SLOW_EXAMPLES, **COMMON)
@given(data=st.data(), salt=st.integers(0, 2**16))
def test_many_plans_read_back_from_their_sql(world: World, data: st.DataObject, salt: int) -> None:
    check_round_trip(data.draw(plans(world), label="plan"))
