"""Forwarding engine events to Prefect as `nl2sql.<name>`, with the flow run as related resource."""

from __future__ import annotations

from nl2sql.events.catalog import Event


def forward_to_prefect(event: Event) -> None:
    """Emit the event on Prefect's event stream (inside a flow run, related to it)."""
    from prefect.events import emit_event
    from prefect.runtime import flow_run

    related = []
    run_id = flow_run.get_id()
    if run_id:
        related.append({"prefect.resource.id": f"prefect.flow-run.{run_id}", "prefect.resource.role": "flow-run"})
    subject = event.data.get("datasource_id") or "engine"
    emit_event(event=f"nl2sql.{event.name}", resource={"prefect.resource.id": f"nl2sql.datasource.{subject}"},
               payload=event.data, related=related)
