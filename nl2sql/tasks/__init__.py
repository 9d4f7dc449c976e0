"""Prefect tasks: thin wrappers over the domain functions, made by one factory with the project's defaults."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from prefect import task
from prefect.cache_policies import NO_CACHE

F = TypeVar("F", bound=Callable[..., Any])


def step_task(fn: F, *, name: str | None = None, retries: int = 0, tags: Iterable[str] = (),
              task_run_name: str | None = None) -> Any:
    """A task for one step: named after the step, no input hashing or caching (inputs are live objects such
    as adapters and arrays), results kept in memory; retries only where a step is safe to repeat."""
    return task(fn, name=name or fn.__name__, cache_policy=NO_CACHE, persist_result=False, retries=retries,
                tags=list(tags), task_run_name=task_run_name)
