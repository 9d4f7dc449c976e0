"""The hooks package: the runner's rules, the built-ins, approval requests, configuration errors, estimates."""

from __future__ import annotations

from pathlib import Path

import pytest

from nl2sql.config import Config
from nl2sql.config.models import HookConfig
from nl2sql.errors import ConfigError
from nl2sql.hooks import (
    Allow,
    ApprovalAnswer,
    ApprovalRequest,
    Deny,
    HookBinding,
    HookContext,
    HookRunner,
    Modify,
    NeedsApproval,
    approval_problem,
    build_hooks,
)
from nl2sql.hooks.builtin import (
    QuestionRewriter,
    QuestionRewriterOptions,
    RowLimit,
    RowLimitOptions,
    SqlReview,
    SqlReviewOptions,
)
from nl2sql.plan import PlanModel

PLAN = PlanModel.model_validate({"select": [{"expr": {"kind": "column", "table": None, "column": "Name"}}],
                                 "from": {"table": "Genre", "alias": None}})


def request(**changes: object) -> ApprovalRequest:
    fields = {"question": "How much did we earn?", "asker": "ann", "hook": "sql_review", "datasource_id": "chinook",
              "sub_query_id": "sq1", "sql": "SELECT SUM(Total) FROM Invoice", "reason": "reads chinook.Invoice",
              "approver_roles": ["dba"], **changes}
    return ApprovalRequest.build(**fields)  # type: ignore[arg-type]


def answer(req: ApprovalRequest, **changes: object) -> ApprovalAnswer:
    return ApprovalAnswer(**{"approve": True, "approver": "root", "role": "dba", "request_id": req.id,
                             "sql_sha256": req.sql_sha256, **changes})


def test_a_request_id_is_pinned() -> None:
    # the id is a contract: changing the fields it covers or their encoding breaks stored requests
    assert request().id == "3304e6118efb0c0e211a4ea8b256cba98af00cd6ff78dcec3505f95a0d81e9e6"
    assert request().id == request(reason="another reason", approver_roles=["admin"]).id  # display fields only
    assert request(sql="SELECT 1").id != request().id and request(asker="bob").id != request().id


def test_an_answer_stands_only_for_its_request_sql_and_roles() -> None:
    req = request()
    assert approval_problem(req, answer(req), ["dba"]) is None
    assert "another request" in approval_problem(req, answer(req, request_id="x" * 64), ["dba"])
    assert "not the SQL" in approval_problem(req, answer(req, sql_sha256="0" * 64), ["dba"])
    assert "may not approve" in approval_problem(req, answer(req, role="analyst"), ["dba"])
    edited = req.model_copy(update={"sql": "SELECT * FROM Employee"})
    assert "changed" in approval_problem(edited, answer(edited), ["dba"])


def ctx(**fields: object) -> dict:
    return {"trace_id": "t", "question": "q", **fields}


def binding(name: str, hook, points: set[str], on_error: str = "closed") -> HookBinding:  # type: ignore[no-untyped-def]
    return HookBinding(name, hook, frozenset(points), on_error, ("admin",))  # type: ignore[arg-type]


def test_hooks_run_in_order_and_the_first_deny_stops_the_point() -> None:
    calls: list[str] = []
    runner = HookRunner([binding("a", lambda c: calls.append("a") or Allow(), {"run.before"}),
                         binding("b", lambda c: calls.append("b") or Deny(reason="no"), {"run.before"}),
                         binding("c", lambda c: calls.append("c") or Allow(), {"run.before"})])
    verdict = runner.run("run.before", **ctx())
    assert calls == ["a", "b"] and isinstance(verdict.stop, Deny) and verdict.hook == "b"


@pytest.mark.parametrize(("point", "decision"), [
    ("plan.after", NeedsApproval(reason="x")),            # only execute.before asks for approval
    ("run.before", Modify(plan=PLAN)),                    # run.before may change the question only
    ("execute.before", Modify(question="other")),         # execute.before changes nothing
])
def test_a_decision_a_point_does_not_accept_is_a_hook_failure(point: str, decision: object) -> None:
    verdict = HookRunner([binding("h", lambda c: decision, {point})]).run(point, **ctx())
    assert verdict.error == f"The h hook failed at {point}." and not verdict.allowed


def test_an_open_hook_failure_lets_the_next_hook_decide() -> None:
    def broken(c: HookContext) -> Allow:
        raise RuntimeError("secret detail")

    seen: list[tuple] = []
    runner = HookRunner([binding("broken", broken, {"answer.after"}, "open"),
                         binding("deny", lambda c: Deny(reason="no"), {"answer.after"})])
    verdict = runner.run("answer.after", on_decision=lambda *a: seen.append(a), **ctx())
    assert verdict.error is None and verdict.hook == "deny"
    assert [s[2] for s in seen] == ["error", "deny"] and "secret" not in str(seen)


def test_modifications_chain_and_the_context_is_a_copy() -> None:
    plan = PLAN.model_copy(deep=True)
    runner = HookRunner([binding("limit", RowLimit(RowLimitOptions(max_rows=5)), {"plan.after"}),
                         binding("look", lambda c: Allow() if c.plan.limit == 5 else Deny(reason="x"),
                                 {"plan.after"})])
    verdict = runner.run("plan.after", **ctx(plan=plan))
    assert verdict.allowed and verdict.context.plan.limit == 5 and plan.limit is None


def test_the_built_ins() -> None:
    rewriter = QuestionRewriter(QuestionRewriterOptions(replacements={"music style": "genre"}))
    assert rewriter(HookContext(point="run.before", trace_id="t", question="Top Music Style?")) == \
        Modify(question="Top genre?")
    limit = RowLimit(RowLimitOptions(max_rows=10))
    small = PLAN.model_copy(update={"limit": 3})
    assert limit(HookContext(point="plan.after", trace_id="t", question="q", plan=small)) == Allow()
    review = SqlReview(SqlReviewOptions(tables=["chinook.Invoice*"], max_rows=1000))
    base = {"point": "execute.before", "trace_id": "t", "question": "q"}
    assert isinstance(review(HookContext(**base, tables=["chinook.InvoiceLine"])), NeedsApproval)
    assert review(HookContext(**base, tables=["chinook.Track"], estimate_rows=lambda: 10)) == Allow()
    big = review(HookContext(**base, tables=["chinook.Track"], estimate_rows=lambda: 50_000))
    assert big == NeedsApproval(reason="estimated to read 50,000 rows (more than 1,000)")


def with_hooks(config: Config, *hooks: dict) -> Config:
    return config.model_copy(update={"hooks": [HookConfig(**h) for h in hooks]})


def test_hook_configuration_errors_name_the_key(demo_config: Config) -> None:
    with pytest.raises(ConfigError) as err:
        build_hooks(with_hooks(demo_config, {"use": "sql_reveiw"}, {"use": "row_limit", "options": {"max_row": 5}},
                               {"use": "row_limit", "points": ["execute.before"], "options": {"max_rows": 5}},
                               {"use": "deny_tables", "options": {"tables": ["x"]}},
                               {"use": "deny_tables", "options": {"tables": ["y"]}}))
    text = str(err.value)
    assert "hooks[0].use" in text and "sql_review" in text
    assert "hooks[1].options.max_row" in text
    assert "hooks[2].points" in text and "hooks[4].name" in text


def test_approver_roles_default_to_the_admin_roles(demo_config: Config) -> None:
    runner = build_hooks(with_hooks(demo_config, {"use": "sql_review", "options": {"tables": ["*"]}}))
    assert runner.binding("sql_review").approver_roles == ("admin",)
    assert runner.binding("sql_review").points == frozenset({"execute.before"})


def test_row_estimates_where_the_dialect_has_them(demo_config: Config, demo_dir: Path) -> None:
    from nl2sql.datasources import DatasourceCatalog

    with DatasourceCatalog(demo_config) as catalog:
        assert catalog.get("chinook").estimate_rows("SELECT * FROM Track") is None  # SQLite has no estimate
        estimate = catalog.get("webanalytics").estimate_rows("SELECT * FROM page_views")
        assert estimate is not None and estimate > 1000


@pytest.mark.postgres
def test_postgresql_estimates_rows(postgres_chinook_url: str) -> None:
    from nl2sql.adapters import adapter_class

    adapter = adapter_class("postgresql")("pg", postgres_chinook_url)
    try:
        assert adapter.estimate_rows('SELECT * FROM "Track"') > 0  # the planner's guess, before ANALYZE
    finally:
        adapter.close()
