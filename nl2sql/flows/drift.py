"""The drift-check flow: per datasource, reflect the live schema → diff it against the live build → impact →
data expectations → a report (a markdown artifact per datasource), and `schema.drifted` once per distinct drift
(counts only). Its state: Completed whatever it found (the statuses are in its result); Failed only for a fault."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from nl2sql.blocks import load_datasource_url
from nl2sql.config import Config
from nl2sql.datasources import DatasourceCatalog
from nl2sql.errors import NL2SQLError
from nl2sql.evaluation.suite import load_suite
from nl2sql.events.prefect_events import forward_to_prefect
from nl2sql.flows.datasource_runs import open_datasource_run, run_bus, run_name
from nl2sql.index.drift import EXIT_CODES, DriftReport
from nl2sql.index.store import StateStore
from nl2sql.policies import scope
from nl2sql.tasks.drift import check_datasource


def gold_sql_of(config: Config, suites: list[str] | None, datasource_id: str) -> list[tuple[str, str]]:
    """(case id, gold SQL) of the approved cases about a datasource in the suites (default: `evals.suites`,
    relative to the configuration file)."""
    out = []
    for path in suites if suites is not None else config.evals.suites:
        located = Path(path) if Path(path).is_absolute() else config.base_dir / path
        out += [(c.id, c.sql) for c in load_suite(located).select() if c.sql and c.datasource == datasource_id]
    return out


@flow(name="drift-check", flow_run_name=run_name("drift"), log_prints=False)
def drift_check(datasource_ids: list[str] | None = None, config: str | None = None, role: str | None = None,
                suites: list[str] | None = None, expectations: bool = True) -> dict[str, Any]:
    """Check each datasource's live schema and data against its live index build (as `role` may see it; no role:
    everything, and `schema.drifted` for each drift not seen by the previous check)."""
    cfg, ids = open_datasource_run(config, datasource_ids)
    store, bus = StateStore(cfg.state_dir), run_bus(forward_to_prefect)
    reports: list[DriftReport] = []
    with DatasourceCatalog(cfg, block_loader=load_datasource_url) as catalog:
        for ds in ids:
            try:
                adapter = catalog.get(ds)
            except NL2SQLError as exc:
                reports.append(DriftReport(datasource_id=ds, status="failed", message=str(exc)))
                continue
            caller = scope(cfg.policies, role, ds) if role else None
            reports.append(check_datasource(adapter, store, cfg.datasource(ds), policies=cfg.policies,
                                            caller=caller, cases=gold_sql_of(cfg, suites, ds),
                                            sample_rows=cfg.settings.profile.sample_rows, expectations=expectations))
    for report in reports:
        create_markdown_artifact(report.markdown(values=cfg.settings.prefect.artifact_rows),
                                 key=f"drift-{report.datasource_id.replace('_', '-')}",
                                 description=f"Drift check of {report.datasource_id}: {report.status}")
        if role is None and store.record_drift_check(report.datasource_id, report.status, report.drift_sha256()):
            bus.publish("schema.drifted", **report.event_fields())
    return {"reports": [r.model_dump(mode="json") for r in reports],
            "exit_code": max((EXIT_CODES[r.status] for r in reports), default=0)}
