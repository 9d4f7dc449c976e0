"""The inline executor: the declared steps in-process (sub-queries on threads), for evals and library callers."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from nl2sql.pipeline.result import QueryResult
from nl2sql.pipeline.run import drive, fail_run, finish_run, invoke_step, start_run
from nl2sql.pipeline.runtime import Runtime


def run_parallel(jobs: Sequence[tuple[str, Callable[[], None]]]) -> None:
    """Run (label, job) pairs side by side on threads that carry the caller's context (the trace id): the inline
    executor's way, with no Prefect run to hand them to."""
    if len(jobs) == 1:
        jobs[0][1]()
        return
    with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="nl2sql-sub-query") as pool:
        futures = [pool.submit(contextvars.copy_context().run, job) for _, job in jobs]
        for future in futures:
            future.result()


def ask_inline(runtime: Runtime, question: str, *, roles: Sequence[str] = (), user_id: str | None = None,
               datasource_id: str | None = None, execute: bool = True, in_words: bool = True,
               trace_id: str | None = None) -> QueryResult:
    """Ask a question in-process: the same steps as the `ask` flow, with no Prefect run."""
    ctx, state = start_run(runtime, question, roles=roles, user_id=user_id, datasource_id=datasource_id,
                           execute=execute, in_words=in_words, trace_id=trace_id)
    try:
        with ctx.trace.entered():
            drive(ctx, state, invoke_step, run_parallel)
            return finish_run(ctx, state)
    except BaseException as exc:
        fail_run(ctx, state, exc)
        raise
