"""The index build's stages (`index/build.BUILD`) as Prefect tasks: one task per stage, named after it."""

from __future__ import annotations

from typing import Any

from nl2sql.index.build import BUILD, Stage
from nl2sql.tasks import step_task

STAGE_TASKS: dict[str, Any] = {stage.name: step_task(stage.fn, name=stage.name, retries=stage.retries)
                               for stage in BUILD}


def run_stage(stage: Stage, *args: Any, **kwargs: Any) -> Any:
    """Run a build stage as a task run (`build_datasource`'s `run_stage` in the flow)."""
    return STAGE_TASKS[stage.name](*args, **kwargs)
