"""The question's steps as Prefect tasks: one task per declared step, named after it, run by `flows/ask.py`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from prefect.utilities.annotations import quote

from nl2sql.errors import EngineFault, NL2SQLError
from nl2sql.pipeline.declaration import ASK, Step
from nl2sql.pipeline.run import invoke_step
from nl2sql.pipeline.runtime import RunContext
from nl2sql.pipeline.state import RunState, SubQuery
from nl2sql.pipeline.words import step_words
from nl2sql.tasks import step_task


def _run_step(label: str, step: Step, ctx: RunContext, state: RunState, sq: SubQuery | None) -> None:
    """One declared step (its errors are recorded on the state, so the task itself completes; an unexpected
    exception fails the task by its type alone: Prefect keeps the message as the task run's state)."""
    try:
        invoke_step(step, ctx, state, sq)
    except Exception as exc:
        if isinstance(exc, NL2SQLError):
            raise
        raise EngineFault(exc) from exc


#: One task per step of the declaration (hook points included), each run named as the CLI names the step
#: (`pipeline/words.py`): `ran · sq1 (chinook)`.
STEP_TASKS: dict[str, Any] = {
    step.name: step_task(_run_step, name=step.name, task_run_name="{label}") for step in ASK.steps()
}


def call_step_task(step: Step, ctx: RunContext, state: RunState, sq: SubQuery | None) -> None:
    """Run a step as a task run (a hook point with no hooks configured runs in place: there is nothing to show)."""
    if step.is_hook_point and not ctx.hooks.at(step.name):
        invoke_step(step, ctx, state, sq)
        return
    label = step_words(step.name, sq.id if sq else None, sq.datasource_id if sq else None)
    # quote(): the state and services are live objects, not inputs for Prefect to walk or resolve
    STEP_TASKS[step.name](label, quote(step), quote(ctx), quote(state), quote(sq))


def _run_sub_query(label: str, job: Callable[[], None]) -> None:
    job()


#: One task run per sub-query when there are several, its steps task runs inside it.
SUB_QUERY_TASK = step_task(_run_sub_query, name="sub-query", task_run_name="sub-query · {label}")


def submit_sub_queries(jobs: Sequence[tuple[str, Callable[[], None]]]) -> None:
    """Sub-queries side by side, each submitted as a task run that the flow's task runner places (not threads the
    engine starts); a single sub-query runs in place."""
    if len(jobs) == 1:
        jobs[0][1]()
        return
    futures = [SUB_QUERY_TASK.submit(label, quote(job)) for label, job in jobs]
    for future in futures:
        future.result()
