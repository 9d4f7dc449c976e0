"""Property: every valid plan becomes SQL that parses, passes the guard, reads exactly its tables, and runs.

Random valid PlanModels over Chinook (see `tests.support.plan_strategies`) are validated against
the SQLite and the DuckDB snapshot, generated for both dialects, parsed with sqlglot, guarded,
checked to read exactly the plan's tables (FROM, joins and sub-plans), and executed on both
engines. The default run draws 150 plans (`NL2SQL_PLAN_EXAMPLES` changes that); the slow test draws
1,000 others. Two deterministic companions: every keyword of SQLite, DuckDB and sqlglot works as a
table and output alias; plans that once broke must be accepted and run; and plans an engine refuses
must be refused by the validator first.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
import sqlglot
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from sqlglot.dialects.dialect import Dialect

from nl2sql.config import Config
from nl2sql.datasources import Adapter, SchemaSnapshot, adapter_class, guard_sql, tables_read
from nl2sql.errors import NL2SQLError
from nl2sql.plan import DIALECTS as ALL_DIALECTS
from nl2sql.plan import PlanModel, PlanValidationError, generate_sql, validate_plan
from nl2sql.plan.keywords import SQLITE
from nl2sql.policies import Scope, scope
from tests.support.plan_strategies import World, plan_tables, plans

DIALECTS = ("sqlite", "duckdb")
DEFAULT_EXAMPLES = int(os.environ.get("NL2SQL_PLAN_EXAMPLES", "150"))
SLOW_EXAMPLES = 1_000
ROW_LIMIT = 200
TIMEOUT_S = 10


class Engines:
    """The adapters, their snapshots, the admin scope, and the world the strategy draws from."""

    def __init__(self, adapters: dict[str, Adapter], snapshots: dict[str, SchemaSnapshot], scope: Scope,
                 world: World) -> None:
        self.adapters, self.snapshots, self.scope, self.world = adapters, snapshots, scope, world

    def __repr__(self) -> str:  # short, for Hypothesis' report of a failing example
        return "Engines(sqlite, duckdb)"


@pytest.fixture(scope="module")
def engines(chinook_path: Path, duckdb_chinook_path: Path, demo_config: Config) -> Iterator[Engines]:
    adapters = {
        "sqlite": adapter_class("sqlite")("chinook", f"sqlite:///{chinook_path}"),
        "duckdb": adapter_class("duckdb")("chinook", f"duckdb:///{duckdb_chinook_path}"),
    }
    snapshots = {name: adapter.reflect() for name, adapter in adapters.items()}
    world = World.from_adapter(adapters["sqlite"], snapshots["sqlite"])
    yield Engines(adapters, snapshots, scope(demo_config.policies, "admin", "chinook"), world)
    for adapter in adapters.values():
        adapter.close()


def check_plan(engines: Engines, plan: PlanModel) -> None:
    """The whole property for one plan, on both engines."""
    note(f"plan: {plan.model_dump_json(by_alias=True, exclude_defaults=True)}")
    expected = plan_tables(plan)
    for dialect in DIALECTS:
        try:
            validated = validate_plan(plan, engines.snapshots[dialect], engines.scope)
        except PlanValidationError as exc:
            pytest.fail(f"a valid plan was rejected by the validator ({dialect} snapshot):\n{exc}")
        sql = generate_sql(validated.plan, dialect)
        note(f"{dialect}: {sql}")
        sqlglot.parse_one(sql, read=dialect)
        tree = guard_sql(sql, dialect)
        read = {t.name.lower() for t in tables_read(tree)}
        assert read == expected, f"{dialect} SQL reads {sorted(read)}, the plan reads {sorted(expected)}"
        run_accepted(engines, validated.plan, dialect, sql)


def run_accepted(engines: Engines, plan: PlanModel, dialect: str, sql: str) -> None:
    """Run an accepted plan's SQL: it must run, within the row limit, and return one column per item the
    plan selects (named by its alias, where it has one)."""
    try:
        result = engines.adapters[dialect].execute(sql, row_limit=ROW_LIMIT, timeout_s=TIMEOUT_S)
    except NL2SQLError as exc:
        pytest.fail(f"an accepted plan's SQL does not run on {dialect}:\n{sql}\n{exc}")
    assert result.row_count <= ROW_LIMIT
    names = [column.name for column in result.columns]
    assert len(names) == len(plan.select), f"{dialect} returns {names} for {len(plan.select)} selected items"
    aliased = [(item.alias, name) for item, name in zip(plan.select, names, strict=True) if item.alias]
    assert all(alias == name for alias, name in aliased), f"{dialect} names the aliased columns {aliased}"


COMMON = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


@settings(max_examples=DEFAULT_EXAMPLES, **COMMON)
@given(data=st.data())
def test_valid_plans_generate_guarded_sql_that_runs(engines: Engines, data: st.DataObject) -> None:
    check_plan(engines, data.draw(plans(engines.world), label="plan"))


@pytest.mark.slow
@settings(max_examples=SLOW_EXAMPLES, **COMMON)
@given(data=st.data())
def test_many_valid_plans_generate_guarded_sql_that_runs(engines: Engines, data: st.DataObject) -> None:
    check_plan(engines, data.draw(plans(engines.world), label="plan"))


# --- keywords as names ------------------------------------------------------------------------------



def keyword_names() -> list[str]:
    """Every keyword of SQLite, DuckDB, and sqlglot's tokenizers (the guard re-parses with sqlglot)."""
    words = {w.lower() for w in SQLITE}
    with duckdb.connect() as con:
        words |= {row[0].lower() for row in con.execute("SELECT keyword_name FROM duckdb_keywords()").fetchall()}
    for dialect in ALL_DIALECTS:
        words |= {k.lower() for k in Dialect.get_or_raise(dialect).tokenizer_class.KEYWORDS
                  if re.fullmatch(r"[A-Za-z_]+", k)}
    return sorted(words)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_keyword_works_as_table_and_output_alias(engines: Engines, dialect: str) -> None:
    failures = []
    for word in keyword_names():
        plan = PlanModel.model_validate({
            "select": [{"expr": {"kind": "column", "table": word, "column": "Name"}, "alias": word}],
            "from": {"table": "Genre", "alias": word},
            "order_by": [{"expr": {"kind": "column", "table": None, "column": word}}],
            "limit": 1,
        })
        sql = generate_sql(validate_plan(plan, engines.snapshots[dialect], engines.scope).plan, dialect)
        try:
            engines.adapters[dialect].execute(sql, row_limit=1, timeout_s=TIMEOUT_S)
        except NL2SQLError as exc:
            failures.append(f"{word}: {sql}\n    {exc}")
    assert not failures, f"{len(failures)} keywords break as aliases:\n" + "\n".join(failures)


# --- plans an engine refuses must be refused by the validator first ---------------------------------


def col(table: str | None, column: str) -> dict[str, Any]:
    return {"kind": "column", "table": table, "column": column}


def lit(value: object) -> dict[str, Any]:
    return {"kind": "literal", "value": value}


TRACK = {"table": "Track", "alias": "t"}
#: Plans that once passed validation and then failed on an engine; now refused with these codes.
REFUSED = {
    # A literal key is read as a column position by the engines.
    "order_by_integer_literal": ({"select": [{"expr": col("t", "Name")}, {"expr": lit(5)}], "from": TRACK,
                                  "order_by": [{"expr": lit(5)}]}, "CONSTANT_KEY"),
    "group_by_integer_literal": ({"select": [{"expr": lit(2)}, {"expr": {"kind": "aggregate", "func": "count"}}],
                                  "from": TRACK, "group_by": [lit(2)]}, "CONSTANT_KEY"),
    # Ungrouped columns inside windows and HAVING: DuckDB refuses them, SQLite returns arbitrary values.
    "window_over_ungrouped_column": ({"select": [{"expr": col("t", "GenreId")},
                                                 {"expr": {"kind": "window", "func": "sum",
                                                           "arg": col("t", "Milliseconds")}}],
                                      "from": TRACK, "group_by": [col("t", "GenreId")]}, "GROUP_BY_MISMATCH"),
    "having_on_ungrouped_column": ({"select": [{"expr": col("t", "GenreId")}], "from": TRACK,
                                    "group_by": [col("t", "GenreId")],
                                    "having": {"kind": "compare", "op": ">", "left": col("t", "Milliseconds"),
                                               "right": lit(5)}}, "GROUP_BY_MISMATCH"),
    # Type checks on comparisons and LIKE: DuckDB refuses text = number and LIKE on an integer.
    "compare_text_with_number": ({"select": [{"expr": col("t", "Name")}], "from": TRACK,
                                  "where": {"kind": "compare", "op": "=", "left": col("t", "Name"),
                                            "right": lit(5)}}, "COMPARE_TYPE_MISMATCH"),
    "like_on_integer": ({"select": [{"expr": col("t", "Name")}], "from": TRACK,
                         "where": {"kind": "like", "expr": col("t", "Milliseconds"), "pattern": "2%"}}, "LIKE_NOT_TEXT"),
}


#: Plans that once broke and must keep running.
FIXED = {
    # DuckDB could not choose an overload for a text literal (the model says dates are text).
    "date_part_of_text_literal": {"select": [{"expr": {"kind": "date_part", "part": "year", "arg": lit("2011-06-30")}},
                                             {"expr": {"kind": "date_trunc", "unit": "month",
                                                       "arg": lit("2011-06-30")}}],
                                  "from": TRACK, "limit": 1},
}


@pytest.mark.parametrize(
    ("plan", "dialect"),
    [pytest.param(plan, dialect, id=f"{name}-{dialect}") for name, plan in FIXED.items() for dialect in DIALECTS],
)
def test_accepted_plans_run(engines: Engines, plan: dict[str, Any], dialect: str) -> None:
    """A plan that once broke is valid: the validator accepts it, and its SQL runs and returns its columns."""
    try:
        validated = validate_plan(PlanModel.model_validate(plan), engines.snapshots[dialect], engines.scope)
    except PlanValidationError as exc:
        pytest.fail(f"a valid plan was rejected by the validator ({dialect} snapshot):\n{exc}")
    run_accepted(engines, validated.plan, dialect, generate_sql(validated.plan, dialect))


@pytest.mark.parametrize(("plan", "code"), [pytest.param(p, c, id=n) for n, (p, c) in REFUSED.items()])
def test_plans_engines_refuse_are_refused_first(engines: Engines, plan: dict[str, Any], code: str) -> None:
    """What an engine would refuse, the validator refuses first, with a code and a message a model can use."""
    with pytest.raises(PlanValidationError) as info:
        validate_plan(PlanModel.model_validate(plan), engines.snapshots["duckdb"], engines.scope)
    assert code in info.value.codes
