"""The gold-plan model server of mode plans: a FakeLLMServer that answers every node from the suite.

Resolver (when the answerability check is on): the case's datasources. Decomposer: one sub-query per
datasource. Planner: the gold plan, or for an unanswerable case `cannot_answer` (so the planner's refusal
is what is scored); refiner: the gold plan. Synthesizer: a fixed sentence. Requests are matched to
cases by the question they carry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from nl2sql.evaluation.suite import EvalCase
from nl2sql.llm.fake import FakeAnswer, FakeLLMServer

FIXED_ANSWER = "The answer is in the rows."


def message_text(content: Any) -> str:
    """A message's text: its string, or its text blocks joined (Anthropic's form when a cache mark splits it)."""
    if isinstance(content, list):
        return "".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    return str(content)


def asked_question(body: Mapping[str, Any]) -> str:
    """The question a request is about (the first user message says `Question: …` on a line of its own, after
    any worked example's question)."""
    for message in body.get("messages", []):
        if message.get("role") == "user":
            found = re.findall(r"^Question: (.*)", message_text(message.get("content", "")), re.M)
            if found:
                return found[-1].strip()
    return ""


class GoldModel:
    """Scripts a fake server with the cases' gold answers (over the real wire, like a model)."""

    def __init__(self, server: FakeLLMServer, cases: Sequence[EvalCase], *,
                 usage: dict[str, Any] | None = None, plans: Mapping[str, dict] | None = None) -> None:
        self.server = server
        self.by_question = {" ".join(c.question.split()): c for c in cases}
        self.plans = dict(plans or {})  # case id → a plan served instead of the gold one
        self.usage = usage  # canned token counts for every answer (None: computed from sizes)
        for name, answer in (("Answerability", self._answerability), ("Decomposition", self._decomposition),
                             ("PlanModel", self._planner), ("RefinedPlan", self._plan),
                             ("text", lambda body: FIXED_ANSWER)):
            server.respond_with(name, self._with_usage(answer))

    def _with_usage(self, answer: Any) -> Any:
        if self.usage is None:
            return answer
        return lambda body: FakeAnswer(content=answer(body), usage=dict(self.usage))

    def case_of(self, body: Mapping[str, Any]) -> EvalCase | None:
        """The case a request is about."""
        return self.by_question.get(" ".join(asked_question(body).split()))

    def _answerability(self, body: Mapping[str, Any]) -> dict:
        case = self.case_of(body)
        if case is None or not case.answerable:
            return {"answerable": False, "datasource_ids": [], "reason": "No database holds this."}
        return {"answerable": True, "datasource_ids": list(case.datasources), "reason": "The gold case says so."}

    def _decomposition(self, body: Mapping[str, Any]) -> dict:
        case = self.case_of(body)
        datasources = case.datasources if case else []
        return {"sub_queries": [{"datasource_id": ds, "question": case.question if case else "",
                                 "expected_columns": []} for ds in datasources], "combine": None}

    def _planner(self, body: Mapping[str, Any]) -> dict:
        case = self.case_of(body)
        if case is not None and not case.answerable:
            return {"select": [], "from": {"table": "none", "alias": None}, "cannot_answer": "No table holds this."}
        return self._plan(body)

    def _plan(self, body: Mapping[str, Any]) -> dict:
        case = self.case_of(body)
        if case is None or case.plan is None:
            return {"select": [], "from": {"table": "__no_gold_plan__", "alias": None}}
        return self.plans.get(case.id, case.plan)
