"""The eval flow: one task run per case and role (the inline executor inside it, never a task per step), the
report as Prefect artifacts (a markdown board and a table of failures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.runtime import flow_run
from prefect.states import Failed, State

from nl2sql.blocks import load_datasource_url
from nl2sql.config import config_path
from nl2sql.evaluation.gate import eval_exit_code
from nl2sql.evaluation.records import gate_against
from nl2sql.evaluation.report import DETAIL_KEYS, EvalReport
from nl2sql.evaluation.run import evaluate, load_llm
from nl2sql.events.prefect_logs import guard_prefect_logs
from nl2sql.project import load_project
from nl2sql.tasks.evals import run_as_task


def _run_name() -> str:
    params = flow_run.get_parameters()
    return f"eval {params.get('mode')} {str(params.get('suite', '')).rsplit('/', 1)[-1]}"


def without_details(report: EvalReport) -> EvalReport:
    """The report as Prefect's artifacts show it by default: each failure by its ids and the names of the scores
    it failed (its details, such as an error message or a gold value, may quote rows)."""
    boards = {}
    for name, board in report.boards.items():
        scores = {(r["case_id"], r["role"], r["pass_index"]): r["scores"] for r in board.records}
        failures = []
        for f in board.failures:
            failed = [n for n, s in scores.get((f["case_id"], f["role"], f["pass"]), {}).items() if s["passed"] is False]
            failures.append({"case_id": f["case_id"], "role": f["role"], "pass": f["pass"],
                             "why": ", ".join(failed) or "no score",
                             **{k: f[k] for k in DETAIL_KEYS if k in f}})  # codes and counts: no values
        boards[name] = board.model_copy(update={"failures": failures, "records": [], "faithfulness": None})
    return report.model_copy(update={"boards": boards})


@flow(name="eval-run", flow_run_name=_run_name, log_prints=False)
def eval_run(mode: str, suite: str, config: str | None = None, roles: list[str] | None = None,
             llm: list[str] | None = None, passes: int = 1, max_cost_usd: float | None = None,
             ids: list[str] | None = None, tags: list[str] | None = None, limit: int | None = None,
             examples: str | None = None, baseline: str | None = None) -> dict[str, Any] | State:
    """Run an eval suite in a mode (plans, retrieval, full), report it, and gate it against `baseline` (a record,
    a report or a folder of records, relative to the working directory). The run is Failed when its exit code
    is not 0 (a regression, a failing case in mode plans, a series break, the dollar cap); its result is the
    report either way, with `gate` and `exit_code`."""
    guard_prefect_logs()
    cfg = load_project(config_path(config))
    configs = dict(load_llm(spec) for spec in llm) if llm else None
    report = evaluate(mode, cfg, suite, roles=roles, llm=configs, passes=passes,  # type: ignore[arg-type]
                      max_cost_usd=max_cost_usd, ids=ids, tags=tags, limit=limit, run_job=run_as_task,
                      block_loader=load_datasource_url, examples=examples)
    shown = report if cfg.settings.prefect.artifact_rows else without_details(report)
    create_markdown_artifact(shown.markdown(), key=f"eval-{mode}", description="The eval's boards")
    failures = [{"config": b.config, **f} for b in shown.boards.values() for f in b.failures]
    if failures:
        create_table_artifact(failures, key=f"eval-{mode}-failures", description="Runs that did not pass")
    out = report.model_dump(mode="json")
    gate = None
    if baseline is not None:
        gate = gate_against(out, Path(baseline), max_regressions=cfg.evals.gate.max_regressions,
                            alpha=cfg.evals.gate.alpha)
        create_markdown_artifact("\n".join(["# Gate", "", *gate.lines(bool(out["suite"].get("selection")))]),
                                 key=f"eval-{mode}-gate", description="The eval's gate")
    out["gate"] = None if gate is None else gate.model_dump(mode="json")
    out["exit_code"], why = eval_exit_code(out, gate)
    if out["exit_code"]:
        return Failed(message=why, data=out)
    return out


@flow(name="eval-full", flow_run_name=lambda: f"eval full {flow_run.get_parameters().get('suite', '')}",
      log_prints=False)
def eval_full(max_cost_usd: float, suite: str = "suites/chinook.yaml", config: str | None = None,
              roles: list[str] | None = None, llm: list[str] | None = None, passes: int = 1,
              baseline: str | None = "benchmarks") -> State:
    """Mode full on real models, stopped at `max_cost_usd` (dollars; required: a run without a cap never starts),
    gated against `baseline`; Failed when the gate fails."""
    return eval_run(mode="full", suite=suite, config=config, roles=roles, llm=llm, passes=passes,
                    max_cost_usd=max_cost_usd, baseline=baseline, return_state=True)
