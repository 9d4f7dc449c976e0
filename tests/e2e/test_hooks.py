"""Hooks at the six points, through the inline executor with the fake model server: decisions, errors, scope."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import pytest
from pydantic import BaseModel, ConfigDict

from nl2sql.config import Config
from nl2sql.config.models import HookConfig
from nl2sql.events import Event
from nl2sql.hooks import HOOKS, Allow, Deny, HookContext, Modify
from nl2sql.llm.fake import FakeLLMServer
from nl2sql.pipeline import Runtime
from tests.support.ask import GENRES_PLAN, INVOICE_PLAN, ModelScript, ask_on, write_ask_project

CROSS = "Support tickets opened per customer, with the customer's country"


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    decision: str = "deny"
    scope: str = "run"
    sub_query: str | None = None


class ScriptedHook:
    """A hook whose decision comes from its options; it records the contexts it saw."""

    options_model: ClassVar[type[BaseModel]] = _Options
    points: ClassVar[frozenset[str]] = frozenset({"run.before", "datasources.after", "plan.after", "execute.before",
                                                  "execute.after", "answer.after"})
    seen: ClassVar[list[HookContext]] = []

    def __init__(self, options: _Options) -> None:
        self.options = options

    @classmethod
    def from_options(cls, options: BaseModel) -> ScriptedHook:
        return cls(options)  # type: ignore[arg-type]

    def __call__(self, ctx: HookContext):  # type: ignore[no-untyped-def]
        ScriptedHook.seen.append(ctx)
        if self.options.decision == "raise":
            raise RuntimeError("the hook broke")
        if self.options.decision == "mutate":  # changing the context in place changes nothing in the run
            if ctx.plan is not None:
                ctx.plan.limit = 1
            ctx.roles.append("admin")
            return Allow()
        if self.options.sub_query and ctx.sub_query_id != self.options.sub_query:
            return Allow()
        return Deny(reason="Not on my watch.", scope=self.options.scope)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def project(fake: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Config]:
    HOOKS["scripted"] = ScriptedHook
    yield write_ask_project(tmp_path_factory.mktemp("hooks"), fake, plan_cache=False)
    HOOKS.pop("scripted", None)


@pytest.fixture
def model(fake: FakeLLMServer) -> ModelScript:
    script = ModelScript(fake)
    script.plan("List every genre.", GENRES_PLAN)
    script.plan("What is the total of all invoices ever?", INVOICE_PLAN)
    script.split_by_customer(CROSS)
    ScriptedHook.seen.clear()
    return script


def ask_with(config: Config, hooks: list[dict], question: str, role: str = "analyst",
             events: list[Event] | None = None):
    configured = config.model_copy(update={"hooks": [HookConfig(**h) for h in hooks]})
    return ask_on(Runtime(configured, observers=[]), question, role, events)


@pytest.mark.parametrize("point", ["run.before", "datasources.after", "plan.after", "execute.before",
                                   "execute.after", "answer.after"])
def test_a_deny_at_each_point_ends_the_run_with_hook_denied(project: Config, model: ModelScript, point: str) -> None:
    events: list[Event] = []
    result = ask_with(project, [{"use": "scripted", "points": [point]}], "List every genre.", "viewer", events)
    assert result.status == "error" and [e.code for e in result.errors] == ["HOOK_DENIED"]
    assert result.errors[0].message == "Not on my watch." and result.errors[0].node == point
    assert not result.answer.content.startswith("The result")  # no answer from a denied run
    decisions = [e.data for e in events if e.name == "hook.decision"]
    assert [(d["point"], d["decision"]) for d in decisions] == [(point, "deny")]
    assert all(not sq.rows for sq in result.sub_queries)  # a denied run gives no rows
    assert not [e for e in events if e.name == "answer.delta"]


def test_a_sub_query_deny_drops_that_part_and_answers_the_rest(project: Config, model: ModelScript) -> None:
    result = ask_with(project, [{"use": "scripted", "points": ["execute.before"],
                                 "options": {"scope": "sub_query", "sub_query": "sq2"}}], CROSS)
    assert result.status == "success", result.errors
    chinook, support = result.sub_queries
    assert chinook.rows and not support.rows and support.error.code == "HOOK_DENIED"
    assert [w.code for w in result.warnings] == ["HOOK_DENIED"]


@pytest.mark.parametrize(("on_error", "status"), [("closed", "error"), ("open", "success")])
def test_a_hook_that_raises_fails_closed_or_open(project: Config, model: ModelScript, on_error: str,
                                                 status: str) -> None:
    events: list[Event] = []
    result = ask_with(project, [{"use": "scripted", "points": ["plan.after"], "on_error": on_error,
                                 "options": {"decision": "raise"}}], "List every genre.", "viewer", events)
    assert result.status == status
    if on_error == "closed":
        assert [e.code for e in result.errors] == ["HOOK_FAILED"]
        assert "scripted" in result.errors[0].message and "broke" not in result.errors[0].message
    assert [e.data["decision"] for e in events if e.name == "hook.decision"] == ["error"]


def test_a_hook_changing_its_context_in_place_changes_nothing(project: Config, model: ModelScript) -> None:
    result = ask_with(project, [{"use": "scripted", "points": ["plan.after"], "options": {"decision": "mutate"}}],
                      "What is the total of all invoices ever?", "viewer")
    assert [e.code for e in result.errors] == ["SECURITY_VIOLATION"]  # still the viewer, still refused


def test_a_modified_plan_goes_back_through_the_validator(project: Config, model: ModelScript) -> None:
    class Widen:
        options_model: ClassVar[type[BaseModel]] = _Options
        points: ClassVar[frozenset[str]] = frozenset({"plan.after"})

        @classmethod
        def from_options(cls, options: BaseModel) -> Widen:
            return cls()

        def __call__(self, ctx: HookContext) -> Modify:
            from nl2sql.plan import PlanModel

            return Modify(plan=PlanModel.model_validate(INVOICE_PLAN))

    HOOKS["widen"] = Widen
    try:
        result = ask_with(project, [{"use": "widen"}], "List every genre.", "viewer")
    finally:
        HOOKS.pop("widen")
    assert [e.code for e in result.errors] == ["SECURITY_VIOLATION"]


def test_the_question_rewriter_and_row_limit(project: Config, model: ModelScript) -> None:
    model.plan("List every genre.", GENRES_PLAN)
    result = ask_with(project, [
        {"use": "question_rewriter", "options": {"replacements": {"every music style": "every genre"}}},
        {"use": "row_limit", "options": {"max_rows": 5}}], "List every music style.", "viewer")
    assert result.status == "success", result.errors
    assert result.sub_queries[0].total_rows == 5 and "LIMIT 5" in result.sub_queries[0].sql


def test_deny_tables_stops_a_verified_query_too(project: Config, model: ModelScript) -> None:
    result = ask_with(project, [{"use": "deny_tables", "options": {"tables": ["chinook.Invoice"],
                                                                   "reason": "Revenue is reported monthly."}}],
                      "How much did we earn in each year?", "analyst")
    assert [e.code for e in result.errors] == ["HOOK_DENIED"]
    assert result.errors[0].message == "Revenue is reported monthly." and model.fake.calls() == 0


def test_sql_review_without_an_approver_leaves_the_run_needs_approval(project: Config, model: ModelScript) -> None:
    events: list[Event] = []
    result = ask_with(project, [{"use": "sql_review", "options": {"tables": ["chinook.Invoice*"]},
                                 "approver_roles": ["admin"]}], "How much did we earn in each year?", "analyst",
                      events)
    assert result.status == "needs_approval" and len(result.approvals) == 1
    request = result.approvals[0]
    assert request.reason == "reads chinook.Invoice" and request.sql == result.sub_queries[0].sql
    assert request.id == request.expected_id() and not result.sub_queries[0].rows
    names = [e.name for e in events]
    assert "approval.requested" in names and names[-1] == "run.finished"
