"""The question's steps, declared once and in order, with the six hook points where they sit.

Both executors run this declaration: the Prefect flow (`flows/ask.py`, each step a task run) and
the inline executor (`pipeline/inline.py`, in-process, for evals and library callers).

    run.before → curated_matcher → resolver → datasources.after → decomposer
      → per sub-query, in parallel: schema_retrieval → planner (or the plan cache) → plan.after
           → validator → generator → execute.before → executor → execute.after → sanity
           (a validation or database error, or a result check's VALUE_NOT_FOUND or JOIN_FAN_OUT: refiner, then
            again from the validator, up to max_retries; a check's finding retries once, and its result stands
            when no corrected plan runs)
      → aggregator → synthesizer → answer.after
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nl2sql.pipeline import steps


@dataclass(frozen=True)
class Step:
    """One step: a plain function over the state, or a hook point (fn None)."""

    name: str
    fn: Callable[..., Any] | None = None
    per_sub_query: bool = False
    when: Callable[..., bool] | None = None  # (state, sub_query) → whether the step applies; default always

    def applies(self, state: Any, sub_query: Any = None) -> bool:
        """Whether this step has anything to do for the state (a skipped step runs no task and no events)."""
        return self.when is None or self.when(state, sub_query)

    @property
    def is_hook_point(self) -> bool:
        """Whether this step is one of the six hook points."""
        return self.fn is None


def _not_answered(state: Any, sub_query: Any = None) -> bool:
    return not state.sub_queries  # a verified query already answers


def _generated(state: Any, sub_query: Any) -> bool:
    return sub_query.verified is None


def _to_plan(state: Any, sub_query: Any) -> bool:
    return sub_query.verified is None and sub_query.plan is None  # a resumed run's plan is pinned


def _not_resumed(state: Any, sub_query: Any = None) -> bool:
    return not state.resumed  # the hooks before execute.before decided before the run was suspended


def _executing(state: Any, sub_query: Any) -> bool:
    return state.execute


def _checking(state: Any, sub_query: Any) -> bool:
    return state.sanity_checks and sub_query.result is not None and sub_query.error is None


def _combining(state: Any, sub_query: Any = None) -> bool:
    inputs = {state.combine.left, state.combine.right} if state.combine is not None else set()
    return bool(inputs) and state.execute and not any(sq.dropped for sq in state.sub_queries if sq.id in inputs)


def hook_point(name: str, *, per_sub_query: bool = False, when: Callable[..., bool] | None = None) -> Step:
    """A hook point in the declaration."""
    return Step(name, None, per_sub_query, when)


@dataclass(frozen=True)
class Pipeline:
    """Steps before the sub-queries, each sub-query's steps, the refiner loop, and steps after."""

    before: tuple[Step, ...]
    sub_query: tuple[Step, ...]
    refiner: Step
    retry_from: str
    refinable: frozenset[str]
    after: tuple[Step, ...]

    def steps(self) -> list[Step]:
        """Every step, in order (the refiner after the sub-query steps)."""
        return [*self.before, *self.sub_query, self.refiner, *self.after]


ASK = Pipeline(
    before=(
        hook_point("run.before", when=_not_resumed),
        Step("curated_matcher", steps.match_curated),
        Step("resolver", steps.resolve_datasources, when=_not_answered),
        hook_point("datasources.after", when=_not_resumed),
        Step("decomposer", steps.decompose, when=_not_answered),
    ),
    sub_query=(
        Step("schema_retrieval", steps.retrieve_schema, per_sub_query=True, when=_generated),
        Step("planner", steps.plan_sub_query, per_sub_query=True, when=_to_plan),
        hook_point("plan.after", per_sub_query=True, when=_not_resumed),
        Step("validator", steps.validate, per_sub_query=True, when=_generated),
        Step("generator", steps.generate, per_sub_query=True, when=_generated),
        hook_point("execute.before", per_sub_query=True),
        Step("executor", steps.execute, per_sub_query=True, when=_executing),
        hook_point("execute.after", per_sub_query=True),
        Step("sanity", steps.check_result, per_sub_query=True, when=_checking),
    ),
    refiner=Step("refiner", steps.refine, per_sub_query=True),
    retry_from="validator",
    # errors a corrected plan can fix; a refusal, a timeout or a model failure never goes to the refiner
    refinable=frozenset({"PLAN_INVALID", "PLAN_UNSUPPORTED", "DATASOURCE_ERROR", "SQL_REJECTED", "VALUE_NOT_FOUND",
                         "JOIN_FAN_OUT"}),
    after=(
        Step("aggregator", steps.aggregate, when=_combining),
        Step("synthesizer", steps.synthesize),
        hook_point("answer.after"),
    ),
)


#: A plan given in advance (a seeded eval case's): its sub-query's checks and run, no model, no refiner (a plan
#: that fails is dropped), nothing before or after.
SEED = Pipeline(
    before=(),
    sub_query=tuple(step for step in ASK.sub_query if step.name not in ("schema_retrieval", "planner")),
    refiner=ASK.refiner,
    retry_from="validator",
    refinable=frozenset(),
    after=(),
)
