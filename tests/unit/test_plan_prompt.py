"""The planner is shown the plan language in every structured-output mode, and its worked example is a valid plan
over tables of no configured datasource (it teaches the shape, nothing an eval measures)."""

from __future__ import annotations

import json

import pytest

from nl2sql.config import Config
from nl2sql.pipeline import prompts
from nl2sql.plan import PlanModel


def plan_prefix(dialect: str) -> prompts.SharedPrefix:
    return prompts.shared_prefix("shop", "plan", dialect, "t(a)")


def worked_example() -> PlanModel:
    text = prompts.planner_messages(plan_prefix("sqlite"), "q")[0].content
    return PlanModel.model_validate(json.loads(text[text.index(" is\n{") + 4:]))


def test_the_planner_prompt_shows_the_plan_language_and_a_valid_example() -> None:
    system = prompts.planner_messages(plan_prefix("duckdb"), "q")[0].content
    assert '"kind":"aggregate"' in system and "Dialect: duckdb." in system
    plan = worked_example()
    assert plan.from_.alias == "o" and plan.joins[0].table.alias == "c"


def test_the_worked_example_reads_no_table_of_the_demo(demo_config: Config, demo_index) -> None:
    tables = {t.table for t in [worked_example().from_, *(j.table for j in worked_example().joins)]}
    demo_tables = {t.name.lower() for ds in demo_config.datasources
                   for t in demo_index.live(ds.id).snapshot.tables}
    assert not {t.lower() for t in tables} & demo_tables


def test_the_refiner_continues_the_planners_conversation_with_the_plan_language() -> None:
    asked = prompts.planner_messages(plan_prefix("sqlite"), "q")
    messages = prompts.refiner_messages(asked, '{"select":[]}', ["E: x"], fmt="plan")
    assert messages[:2] == asked and '"kind":"aggregate"' in messages[0].content
    assert messages[2].content == '{"select":[]}' and messages[3].content.startswith(prompts.PLAN_REFINER_TURN)


@pytest.mark.parametrize(("answer", "sql", "cannot"), [
    ("SELECT a.Name AS name FROM Artist a", "SELECT a.Name AS name FROM Artist a", None),
    ("```sql\nSELECT ';' AS x FROM t;\n```\nThis picks the semicolon.", "SELECT ';' AS x FROM t", None),
    ("Here is the SELECT statement you need:\nSELECT 1 AS one;\nIt returns one.", "SELECT 1 AS one", None),
    ("WITH t AS (SELECT 1 AS x) SELECT x FROM t", "WITH t AS (SELECT 1 AS x) SELECT x FROM t", None),
    ('{"sql": "SELECT 2 AS two", "cannot_answer": null}', "SELECT 2 AS two", None),
    ("CANNOT ANSWER", "", "CANNOT ANSWER"),
    ("Cannot answer: no table holds the weather.", "", "Cannot answer: no table holds the weather."),
    ("I do not know.", "", None),  # neither a statement nor a verdict: the refiner is shown the empty statement
    ("SELECT 'open", "SELECT 'open", None),  # an unclosed literal is left for the parser to report
])
def test_the_sql_formats_plain_text_answer_is_read_for_its_one_statement(answer: str, sql: str,
                                                                         cannot: str | None) -> None:
    read = prompts.sql_answer(answer)
    assert (read.sql, read.cannot_answer) == (sql, cannot)
