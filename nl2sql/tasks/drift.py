"""The drift check of one datasource as a Prefect task (`index/drift.check_drift`)."""

from __future__ import annotations

from nl2sql.index.drift import check_drift
from nl2sql.tasks import step_task

check_datasource = step_task(check_drift, name="drift-check-datasource",
                             task_run_name="drift · {datasource.id}")
