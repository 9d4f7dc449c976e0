"""The `eval-seed` flow: a model drafts eval cases over one datasource, one task run per batch, each proposal
checked by the engine under the caller's scope (`evaluation/seed.py`); the drafts are appended to a file of drafts,
never to a reviewed suite."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.runtime import flow_run
from prefect.states import Failed, State

from nl2sql.blocks import load_datasource_url, load_llm_block
from nl2sql.config import config_path
from nl2sql.evaluation.seed import Seeding, existing_questions
from nl2sql.events.prefect_logs import guard_prefect_logs
from nl2sql.pipeline.runtime import Runtime
from nl2sql.project import load_project
from nl2sql.tasks.evals import seed_batch_as_task


def report_lines(report: dict[str, Any]) -> list[str]:
    """The run's report in lines (counts and reasons, no question or row): the CLI's output and the artifact's."""
    cost = f" (${report['cost_usd']:.4f})" if report["cost_usd"] else ""
    lines = [f"{report['written']} of {report['wanted']} drafts written to {report['path']} from "
             f"{report['proposals']} proposals in {report['calls']} model calls{cost}.",
             f"Stopped: {report['stopped']}. {report['message']}"]
    if report["dropped"]:
        lines.append("Dropped: " + ", ".join(f"{n} {reason}" for reason, n in report["dropped"].items()) + ".")
    return lines


@flow(name="eval-seed", flow_run_name=lambda: f"eval seed {flow_run.get_parameters().get('datasource', '')}",
      log_prints=False)
def eval_seed(datasource: str, out: str, max_cost_usd: float, roles: list[str], count: int = 20,
              user_id: str | None = None, config: str | None = None) -> dict[str, Any] | State:
    """Draft `count` eval cases over `datasource` as a caller with `roles`, appended to `out` (a file of drafts).
    Failed when the run stopped before the count (the dollar cap, or a batch that got nothing usable); its result
    is the report either way."""
    guard_prefect_logs()
    runtime = Runtime(load_project(config_path(config)), block_loader=load_datasource_url,
                      llm_block_loader=load_llm_block)
    try:
        path = Path(out)
        seeding = Seeding(runtime, datasource, count=count, roles=roles, user_id=user_id, max_cost_usd=max_cost_usd,
                          out=path, existing=existing_questions(path))
        report = seeding.run(partial(seed_batch_as_task, seeding))  # each batch appends its drafts to `out`
    finally:
        runtime.close()
    result = report.as_dict()
    create_markdown_artifact("\n\n".join([f"# Eval seeding: {datasource}", *report_lines(result)]), key="eval-seed",
                             description="What the seeding wrote and dropped")
    if report.exit_code:
        return Failed(message=report.message, data=result)
    return result
