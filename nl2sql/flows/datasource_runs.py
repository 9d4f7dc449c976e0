"""What the flows over datasources (index build, drift check, purge) open first: the project and the datasources
asked for (each checked), and an event bus forwarding to Prefect under the flow run's id."""

from __future__ import annotations

from collections.abc import Callable

from prefect.runtime import flow_run

from nl2sql.config import Config, config_path
from nl2sql.events import EventBus
from nl2sql.events.prefect_events import forward_to_prefect
from nl2sql.events.prefect_logs import guard_prefect_logs
from nl2sql.project import load_project


def run_name(verb: str) -> Callable[[], str]:
    """A flow run's name: the verb and the datasources it is about (`index chinook, support`)."""
    def name() -> str:
        ids = flow_run.get_parameters().get("datasource_ids")
        return f"{verb} " + (", ".join(ids) if ids else "all datasources")

    return name


def open_datasource_run(config: str | None, datasource_ids: list[str] | None) -> tuple[Config, list[str]]:
    """(the project, the datasource ids: all by default, each one known), Prefect's logs guarded."""
    guard_prefect_logs()
    cfg = load_project(config_path(config))
    ids = datasource_ids or [d.id for d in cfg.datasources]
    for ds in ids:
        cfg.datasource(ds)
    return cfg, ids


def run_bus(forward: Callable[..., None] = forward_to_prefect, trace_id: str | None = None) -> EventBus:
    """An event bus under the flow run's id (or `trace_id`), forwarding to Prefect."""
    bus = EventBus(trace_id=trace_id or str(flow_run.get_id()))
    bus.subscribe(forward)
    return bus
