"""The storage-purge flow: what retention lets go of, deleted nightly — run traces, resolved approvals, pinned
states and cached plans past `storage.max_age_days`, index builds beyond `storage.keep_builds` (never the live one)
and the records of failed and pruned ones, audit day files past their age — then `retention.purged` with counts."""

from __future__ import annotations

import time
from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from nl2sql.events.prefect_events import forward_to_prefect
from nl2sql.flows.datasource_runs import open_datasource_run, run_bus
from nl2sql.index.store import StateStore
from nl2sql.observers.audit import purge_audit_files

DAY_S = 86_400


@flow(name="storage-purge", log_prints=False)
def storage_purge(config: str | None = None, now: float | None = None) -> dict[str, int]:
    """Delete the state retention lets go of; counts by kind (`now`: a Unix time to purge as of, for a test)."""
    cfg, ids = open_datasource_run(config, None)
    store = StateStore(cfg.state_dir)
    clock = time.time() if now is None else now
    counts: dict[str, Any] = store.purge(clock - cfg.storage.max_age_days * DAY_S)
    counts["index_builds"] = sum(len(store.prune(ds, cfg.storage.keep_builds)) for ds in ids)
    counts["audit_files"] = purge_audit_files(cfg, clock)
    run_bus(forward_to_prefect).publish("retention.purged", counts=counts)
    create_markdown_artifact("\n".join(["# Storage purge", "", "| kind | deleted |", "|---|---|",
                                        *[f"| {k.replace('_', ' ')} | {v} |" for k, v in counts.items()]]),
                             key="storage-purge", description="What retention deleted")
    return counts
