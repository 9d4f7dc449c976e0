"""Example questions: the planner's worked examples, scoped per role like verified queries and never answered from;
an eval keeps them (they are the configuration a user runs) and refuses a project whose example asks a suite's
question."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nl2sql.config import Config
from nl2sql.config.models import ExampleQuestionConfig, PlannerSettings
from nl2sql.errors import ConfigError
from nl2sql.evaluation.run import eval_config, project_examples_checked
from nl2sql.evaluation.suite import load_suite
from tests.support.ask import ModelScript, ask_on, runtime_for, text_kind

SELF_JOIN = ExampleQuestionConfig(
    question="List each employee's job title beside the job title of their manager.",
    sql="SELECT e.Title, m.Title AS manager_title FROM Employee AS e LEFT JOIN Employee AS m "
        "ON m.EmployeeId = e.ReportsTo")
ZERO_COUNTS = ExampleQuestionConfig(
    question="How many albums does each artist have, counting artists with no album as zero?",
    sql="SELECT ar.Name, COUNT(al.AlbumId) AS albums FROM Artist AS ar LEFT JOIN Album AS al "
        "ON al.ArtistId = ar.ArtistId GROUP BY ar.ArtistId, ar.Name")
SQL_FORMAT = {"plan_cache": False, "planner": PlannerSettings(format="sql")}


def with_examples(config: Config, *examples: ExampleQuestionConfig) -> Config:
    """The project with these example questions on chinook (and none elsewhere)."""
    return config.model_copy(update={"datasources": [
        ds.model_copy(update={"example_questions": list(examples) if ds.id == "chinook" else []})
        for ds in config.datasources]})


def planner_examples(model: ModelScript) -> str:
    """The worked examples of the last `sql`-format planner prompt."""
    request = [r for r in model.fake.requests if model.fake.name_of(r) == "text" and text_kind(r) == "sql_planner"][-1]
    text = request["messages"][1]["content"]
    return text.split("-- Answered before on this database:", 1)[1].split("-- Using valid", 1)[0]


def test_each_caller_is_shown_the_example_questions_it_may_read_before_the_verified_queries(
        project: Config, model: ModelScript) -> None:
    question = "Which genres have tracks longer than ten minutes?"
    model.sql[question] = ("SELECT DISTINCT g.Name FROM Genre g JOIN Track t ON t.GenreId = g.GenreId "
                           "WHERE t.Milliseconds > 600000")
    config = with_examples(project, SELF_JOIN, ZERO_COUNTS)
    assert ask_on(runtime_for(config, **SQL_FORMAT), question, "admin").status == "success"
    admin = planner_examples(model)
    # the configuration's order, then the verified queries without parameters fill what is left of the 3
    assert admin.index(SELF_JOIN.question) < admin.index(ZERO_COUNTS.question) < admin.index(
        "How much did we earn in each year?")
    assert "manager_title" in admin
    assert ask_on(runtime_for(config, **SQL_FORMAT), question, "viewer").status == "success"
    viewer = planner_examples(model)
    # the viewer may not read employees: that example's question, SQL and table are never shown to it
    assert ZERO_COUNTS.question in viewer and SELF_JOIN.question not in viewer
    assert "Employee" not in viewer and "manager_title" not in viewer


def test_an_example_question_is_never_answered_from(project: Config, model: ModelScript) -> None:
    config = with_examples(project, ZERO_COUNTS)
    # the model leaves the artists without albums out; the answer is the model's, not the example's
    model.sql[ZERO_COUNTS.question] = ("SELECT ar.Name, COUNT(*) AS albums FROM Artist ar JOIN Album al "
                                       "ON al.ArtistId = ar.ArtistId GROUP BY ar.ArtistId, ar.Name")
    result = ask_on(runtime_for(config, **SQL_FORMAT), ZERO_COUNTS.question, "viewer")
    assert result.status == "success" and result.sub_queries[0].source == "planner"
    assert result.sub_queries[0].total_rows == 204  # the example's SQL gives 275 rows: every artist


def test_an_eval_keeps_the_example_questions_and_refuses_one_that_asks_a_suite_question(
        project: Config, tmp_path: Path) -> None:
    config = with_examples(project, ZERO_COUNTS)
    assert eval_config(config).datasource("chinook").example_questions == [ZERO_COUNTS]
    assert eval_config(config).datasource("chinook").verified_queries == []  # verified ones would answer
    suite_path = tmp_path / "suite.yaml"
    suite_path.write_text(yaml.safe_dump({"cases": [{
        "id": "zero_albums", "question": ZERO_COUNTS.question.upper(), "datasources": ["chinook"],
        "sql": ZERO_COUNTS.sql}]}))
    with pytest.raises(ConfigError) as refused:
        project_examples_checked(config, load_suite(suite_path))
    assert "datasources[0].example_questions[0]" in str(refused.value)
    assert "asks a question of the suite run" in str(refused.value)
    project_examples_checked(with_examples(project, SELF_JOIN), load_suite(suite_path))  # another question: kept
