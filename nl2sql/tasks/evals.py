"""The eval's one task: a case for one role (and model config, and pass), run by the inline executor and scored."""

from __future__ import annotations

from typing import Any

from prefect.utilities.annotations import quote

from nl2sql.evaluation.report import CaseRecord
from nl2sql.evaluation.run import EvalJob, EvalSession
from nl2sql.tasks import step_task


def _run_case(label: str, session: Any, job: EvalJob) -> CaseRecord:
    """One case for one role (and model config, and pass), scored."""
    return session.run(job)


run_case = step_task(_run_case, name="case", task_run_name="{label}")


def run_as_task(session: EvalSession, job: EvalJob) -> CaseRecord:
    """One job as a task run, named after its case, role, config and pass."""
    label = f"{job.case.id} · {job.role}" + (f" · {job.config_name}" if job.config_name != "default" else "") + (
        f" · pass {job.pass_index + 1}" if job.pass_index else "")
    # quote(): the session and job are live objects, not inputs for Prefect to walk or resolve
    return run_case(label, quote(session), quote(job))


def _seed_batch(label: str, seeding: Any, batch_no: int, wanted: int) -> None:
    """One batch of eval seeding: the seeder's calls and the check of each proposal."""
    seeding.batch(batch_no, wanted)


seed_batch = step_task(_seed_batch, name="seed batch", task_run_name="{label}")


def seed_batch_as_task(seeding: Any, batch_no: int, wanted: int) -> None:
    """One seeding batch as a task run, named after its number."""
    seed_batch(f"batch {batch_no} ({wanted} wanted)", quote(seeding), batch_no, wanted)
