"""A demo project wired to the fake model server, and scripts that answer like a model would."""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from nl2sql.config import Config
from nl2sql.demo import init_demo
from nl2sql.evaluation.gold_llm import asked_question
from nl2sql.llm.fake import FakeAnswer, FakeLLMServer
from nl2sql.pipeline import Runtime
from nl2sql.pipeline.prompts import SQL_PLANNER_SYSTEM, SQL_REFINER_TURN, SYNTHESIZER_TURN
from nl2sql.project import load_project
from tests.support.index import build_demo_index

PLANS_DIR = Path(__file__).resolve().parent.parent / "data" / "plans" / "chinook"
#: USD per million tokens for the fake model, so runs have a cost.
FAKE_PRICE = {"input": 1.0, "output": 2.0}

CUSTOMERS_PLAN = yaml.safe_load("""
select:
  - {expr: {kind: column, table: c, column: CustomerId}, alias: customer_id}
  - {expr: {kind: column, table: c, column: Country}, alias: country}
from: {table: Customer, alias: c}
""")
TICKETS_PLAN = yaml.safe_load("""
select:
  - {expr: {kind: column, table: t, column: customer_id}, alias: customer_id}
  - {expr: {kind: aggregate, func: count, arg: null}, alias: tickets}
from: {table: tickets, alias: t}
group_by: [{kind: column, table: t, column: customer_id}]
""")
INVOICE_PLAN = yaml.safe_load("""
select:
  - {expr: {kind: aggregate, func: sum, arg: {kind: column, table: i, column: Total}}, alias: revenue}
from: {table: Invoice, alias: i}
""")
GENRES_PLAN = yaml.safe_load("""
select:
  - {expr: {kind: column, table: g, column: Name}, alias: genre}
from: {table: Genre, alias: g}
order_by: [{expr: {kind: column, table: g, column: GenreId}, direction: asc}]
""")
#: The sub-questions of a question split across the demo's two databases (see ModelScript.split_by_customer).
CUSTOMERS_QUESTION = "Each customer's id and country"
TICKETS_QUESTION = "Tickets per customer id"


def write_ask_project(target: Path, fake: FakeLLMServer, *, hooks: list[dict] | None = None,
                      approvals: dict | None = None, **pipeline: Any) -> Config:
    """The demo project with the fake server as every node's model, its index built into its state folder
    (and hooks, `settings.approvals` and `settings.pipeline` values written into its file)."""
    config_path = init_demo(target, env={})
    raw = yaml.safe_load(config_path.read_text())
    raw["llm"] = {"models": {"fake": {"provider": "openai", "model": "fake-model", "base_url": fake.base_url,
                                      "api_key": "fake-key"}},
                  "default": "fake", "prices": {"fake-model": FAKE_PRICE}}
    raw["observers"] = []
    if pipeline:
        raw.setdefault("settings", {})["pipeline"] = pipeline
    # the fake model is scripted with the gold plans: the planner writes plans unless a test asks for SQL
    raw.setdefault("settings", {}).setdefault("pipeline", {}).setdefault("planner", {}).setdefault("format", "plan")
    if approvals:
        raw.setdefault("settings", {})["approvals"] = approvals
    if hooks:
        raw["hooks"] = hooks
    config_path.write_text(yaml.safe_dump(raw, sort_keys=False, allow_unicode=True))
    config = load_project(config_path)
    build_demo_index(config, config.state_dir)
    return config


def with_settings(config: Config, **pipeline: Any) -> Config:
    """A copy of the configuration with some `settings.pipeline` values changed (same file, same state)."""
    settings = config.settings.model_copy(update={"pipeline": config.settings.pipeline.model_copy(update=pipeline)})
    return config.model_copy(update={"settings": settings})


def runtime_for(config: Config, **pipeline: Any) -> Runtime:
    """A runtime without observers (tests subscribe what they watch)."""
    return Runtime(with_settings(config, **pipeline) if pipeline else config, observers=[])


def ask_on(runtime: Runtime, question: str, role: str, events: list | None = None, **kwargs: Any):
    """Ask a question inline on `runtime` as `role` (its events appended to `events`), then close the runtime."""
    from nl2sql.pipeline import ask_inline

    if events is not None:
        runtime.listeners.append(events.append)
    try:
        return ask_inline(runtime, question, roles=[role], **kwargs)
    finally:
        runtime.close()


def gold_plans() -> dict[str, dict]:
    """The Chinook gold plans by question."""
    plans = {}
    for path in sorted(PLANS_DIR.glob("*.json")):
        record = json.loads(path.read_text())
        plans[record["question"]] = record["plan"]
    return plans


def asked(body: Mapping[str, Any]) -> str:
    """The question (or sub-question) a request is about (its first user message says it), else its last message."""
    return asked_question(body) or body["messages"][-1]["content"]


def text_kind(body: Mapping[str, Any]) -> str:
    """Which node a plain-text request is from: `sql_planner`, `sql_refiner` or `synthesizer`."""
    system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
    last = body["messages"][-1]["content"]
    if system.startswith(SQL_PLANNER_SYSTEM.split("{dialect}")[0]) and "SELECT statement" in system.split("\n")[0]:
        if last.startswith(SYNTHESIZER_TURN):  # the answer, asked as the planner conversation's next turn
            return "synthesizer"
        return "sql_refiner" if last.startswith(SQL_REFINER_TURN) else "sql_planner"
    return "synthesizer"


class ModelScript:
    """Answers the resolver, decomposer, planner and synthesizer like a model would, from tables keyed by question."""

    def __init__(self, fake: FakeLLMServer) -> None:
        self.fake = fake
        self.routes: dict[str, list[str]] = {}
        self.unanswerable: set[str] = set()
        self.decompositions: dict[str, dict] = {}
        self.plans: dict[str, dict] = gold_plans()
        self.answers: dict[str, str] = {}
        #: the `sql` format's plain-text answers by question: the planner's and the refiner's
        self.sql: dict[str, str] = {}
        self.refined_sql: dict[str, str] = {}
        self.text_calls: Counter[str] = Counter()
        fake.reset()
        fake.respond_with("Answerability", self._answerability)
        fake.respond_with("Decomposition", lambda body: self.decompositions[asked(body)])
        fake.respond_with("PlanModel", self._planner)
        fake.respond_with("text", self._text)

    def _text(self, body: Mapping[str, Any]) -> str:
        kind = text_kind(body)
        self.text_calls[kind] += 1
        if kind == "sql_planner":
            return self.sql[asked(body)]
        if kind == "sql_refiner":
            return self.refined_sql[asked(body)]
        return self.answers.get(asked(body), "The result is shown below.")

    def _answerability(self, body: Mapping[str, Any]) -> dict:
        question = asked(body)
        if question in self.unanswerable:
            return {"answerable": False, "datasource_ids": [], "reason": "No database holds weather data."}
        return {"answerable": True, "datasource_ids": self.routes.get(question, ["chinook"]), "reason": "It does."}

    def _planner(self, body: Mapping[str, Any]) -> dict:
        question = asked(body)
        if question in self.unanswerable:
            return {"select": [], "from": {"table": "none"}, "cannot_answer": "No table holds weather data."}
        return copy.deepcopy(self.plans[question])

    def plan(self, question: str, plan: dict, *, route: list[str] | None = None) -> None:
        """The planner's plan for a question (and the resolver's datasources)."""
        self.plans[question] = plan
        if route:
            self.routes[question] = route

    def split_by_customer(self, question: str, *, combine: dict | None = None) -> None:
        """Route a question to chinook and support, split into each customer's id and country (CUSTOMERS_PLAN)
        and tickets per customer id (TICKETS_PLAN), the parts combined as `combine` says."""
        self.routes[question] = ["chinook", "support"]
        self.decompositions[question] = {
            "sub_queries": [
                {"datasource_id": "chinook", "question": CUSTOMERS_QUESTION, "expected_columns": []},
                {"datasource_id": "support", "question": TICKETS_QUESTION, "expected_columns": []}],
            "combine": combine}
        self.plans[CUSTOMERS_QUESTION] = CUSTOMERS_PLAN
        self.plans[TICKETS_QUESTION] = TICKETS_PLAN

    def queue(self, name: str, *answers: FakeAnswer | dict | str) -> None:
        """Answers served before the tables, in order (failures, bad JSON, delays)."""
        self.fake.answer(name, *answers)


def column(table: str | None, name: str) -> dict:
    """A column reference in a plan."""
    return {"kind": "column", "table": table, "column": name}


def select_plan(table: str, *columns: str, where: dict | None = None, order: str | None = None,
                extra: Callable[[dict], None] | None = None) -> dict:
    """A one-table plan selecting columns."""
    plan: dict = {"select": [{"expr": column(table, c), "alias": None} for c in columns],
                  "from": {"table": table, "alias": None}}
    if where:
        plan["where"] = where
    if order:
        plan["order_by"] = [{"expr": column(table, order), "direction": "asc"}]
    if extra:
        extra(plan)
    return plan
