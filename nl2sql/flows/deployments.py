"""The project's deployments, declared once: `prefect.yaml` lists the same ones for a work pool (`prefect deploy
--all`; a test holds the two equal), and `nl2sql serve` serves them from one process (no work pool).

Paths in parameters (suites, the baseline records) are relative to the working directory, the repository's root;
the project is `$NL2SQL_CONFIG` (or `./nl2sql.yaml`) unless a run names one in `config`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Nightly schedules are in UTC.
TIMEZONE = "UTC"


@dataclass(frozen=True)
class DeploymentSpec:
    """One deployment: its name, the flow (`path/to/file.py:function`), what it is for, fixed parameters, and a
    cron schedule (UTC) where it runs by itself."""

    name: str
    entrypoint: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)
    cron: str | None = None

    @property
    def flow_name(self) -> str:
        """The flow's name (`prefect deployment run 'FLOW/DEPLOYMENT'`)."""
        return load_flow(self.entrypoint).name


DEPLOYMENTS: tuple[DeploymentSpec, ...] = (
    DeploymentSpec("ask", "nl2sql/flows/ask.py:ask",
                   "Answer a question for a user and role: every step a task run, the SQL and row counts as the "
                   "run's artifact; a run held for an approver waits in Suspended for the Resume form."),
    DeploymentSpec("index-build", "nl2sql/flows/index.py:index_build",
                   "Build (or incrementally rebuild) the schema index of each datasource."),
    DeploymentSpec("drift-check", "nl2sql/flows/drift.py:drift_check",
                   "Nightly: the live schema and data against the live index build; schema.drifted per new drift.",
                   cron="0 2 * * *"),
    DeploymentSpec("storage-purge", "nl2sql/flows/purge.py:storage_purge",
                   "Nightly: traces, resolved approvals, cached plans, old index builds and audit files past their "
                   "retention deleted; retention.purged with counts.",
                   cron="0 4 * * *"),
    DeploymentSpec("eval-retrieval", "nl2sql/flows/evals.py:eval_run",
                   "Nightly: retrieval and routing on the Chinook suite, gated against benchmarks/ (Failed when "
                   "the gate fails).",
                   parameters={"mode": "retrieval", "suite": "suites/chinook.yaml", "baseline": "benchmarks"},
                   cron="0 3 * * *"),
    DeploymentSpec("eval-plans", "nl2sql/flows/evals.py:eval_run",
                   "For CI: every gold plan of the Chinook suite, gated against benchmarks/ (Failed when a case "
                   "fails or the gate fails).",
                   parameters={"mode": "plans", "suite": "suites/chinook.yaml", "baseline": "benchmarks"}),
    DeploymentSpec("eval-full", "nl2sql/flows/evals.py:eval_full",
                   "By hand: real models on the Chinook suite, capped in dollars (max_cost_usd, required), gated "
                   "against benchmarks/."),
)


def load_flow(entrypoint: str) -> Any:
    """The flow an entrypoint names."""
    from prefect.flows import load_flow_from_entrypoint

    return load_flow_from_entrypoint(entrypoint)


def take_over_from_work_pools() -> list[str]:
    """Delete the deployments of the same names that a work pool runs (`prefect deploy --all`), so that this
    process serves them: a served deployment cannot also be a work pool's. Their past runs stay. The names."""
    from prefect import get_client
    from prefect.exceptions import ObjectNotFound

    taken = []
    with get_client(sync_client=True) as client:
        for spec in DEPLOYMENTS:
            name = f"{spec.flow_name}/{spec.name}"
            try:
                existing = client.read_deployment_by_name(name)
            except ObjectNotFound:
                continue
            if existing.work_pool_name:
                client.delete_deployment(existing.id)
                taken.append(name)
    return taken


def serve_deployments(config: Path, *, limit: int | None = None) -> None:
    """Serve every deployment from this process until interrupted: schedules run, and runs started from the UI or
    `prefect deployment run` run here, each on `config` unless it names another."""
    from prefect import serve
    from prefect.schedules import Cron

    os.environ["NL2SQL_CONFIG"] = str(config.resolve())
    served = [load_flow(spec.entrypoint).to_deployment(
        name=spec.name, description=spec.description, parameters=spec.parameters,
        schedules=[Cron(spec.cron, timezone=TIMEZONE)] if spec.cron else None) for spec in DEPLOYMENTS]
    serve(*served, limit=limit, print_starting_message=True)
