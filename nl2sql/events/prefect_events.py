"""Forwarding engine events to Prefect as `nl2sql.<name>`, with the flow run as related resource.

Whoever reaches Prefect's API reads its events (Prefect OSS has no login), so only what an operator
may see is forwarded. Each forwarded event name lists the fields Prefect receives; an event name not
listed stays in process. The streamed answer (`answer.delta`) is made of row values and never leaves
the process; free text that may quote a value (an engine fault's message, a hook's reason written after
it read the rows, a result check's message) is left out of the events that carry it.

>>> from nl2sql.events.catalog import Event
>>> for_prefect(Event(name="answer.delta", data={"text": "alice@example.com"}, timestamp=0.0)) is None
True
>>> for_prefect(Event(name="run.failed", timestamp=0.0, data={"message": "could not convert 'x'",
...                   "code": "ValueError", "user_id": None, "roles": ["support"]}))
{'code': 'ValueError', 'user_id': None, 'roles': ['support']}
"""

from __future__ import annotations

from typing import Any

from nl2sql.events.catalog import Event


def _all(*names: str) -> frozenset[str]:
    return frozenset(names)


#: Events that stay in process: the streamed answer is the rows put in words.
KEPT_IN_PROCESS = frozenset({"answer.delta"})

#: The fields Prefect receives of each forwarded event (the others stay in process and in the audit log).
FORWARDED_FIELDS: dict[str, frozenset[str]] = {
    "run.started": _all("question", "user_id", "roles", "datasource_id", "execute"),
    "run.finished": _all("status", "error_codes", "warning_codes", "datasources", "tables", "llm_calls",
                         "cost_usd", "duration_ms"),
    "run.failed": _all("code", "user_id", "roles"),  # the message of an engine fault may quote a value
    "node.started": _all("node", "sub_query_id"),
    "node.finished": _all("node", "sub_query_id", "ok", "error_code", "duration_ms"),
    "result.manifest": _all("sub_query_id", "datasource_id", "columns", "total_rows", "truncated"),
    "llm.call": _all("node", "model", "provider", "ok", "error_code", "input_tokens", "output_tokens",
                     "cost_usd", "latency_ms"),
    "llm.parse_retry": _all("node", "attempt"),  # validation messages may echo what the model wrote
    "llm.changed": _all("nodes"),
    "plan_cache.lookup": _all("sub_query_id", "datasource_id", "hit"),
    "planner.candidates": _all("sub_query_id", "datasource_id", "drawn", "ran", "groups", "chosen", "failures"),
    "run.limit_reached": _all("limit", "setting", "message"),
    "policy.decision": _all("decision", "step", "datasource_id", "roles", "rule"),
    "hook.decision": _all("hook", "point", "decision", "sub_query_id"),  # a reason may quote the rows it saw
    # decided before the statement runs (no row is read yet); the approvers' automation sends the reason
    "approval.requested": _all("request_id", "hook", "datasource_id", "reason", "sql_sha256", "approver_roles",
                               "asker"),
    # the approver's comment was typed into Prefect's own Resume form
    "approval.resolved": _all("request_id", "outcome", "approver", "role", "reason"),
    "sanity.flagged": _all("sub_query_id", "code", "count", "retry"),
    "index.started": _all("datasource_id", "full"),
    "index.swapped": _all("datasource_id", "build_id", "replaced_build_id", "counts", "embedded", "cached",
                          "changed_tables"),
    # connecting, reflecting and writing the index read no rows; profiling errors are reduced to their type
    "index.failed": _all("datasource_id", "message"),
    "index.column_failed": _all("datasource_id", "table", "column", "stage", "message"),
    "datasource.failed": _all("datasource_id", "message", "fix"),
    "schema.drifted": _all("datasource_id", "changes", "impact", "failed_expectations"),  # counts only
    "retention.purged": _all("counts"),
}


def for_prefect(event: Event) -> dict[str, Any] | None:
    """The payload Prefect receives for an event (its forwarded fields), or None when it stays in process."""
    fields = FORWARDED_FIELDS.get(event.name)
    if fields is None or event.name in KEPT_IN_PROCESS:
        return None
    return {key: value for key, value in event.data.items() if key in fields}


def forwarded_whole(name: str) -> bool:
    """Whether Prefect receives every field of an event name (then its log line may go there too)."""
    from nl2sql.events.catalog import spec

    fields = FORWARDED_FIELDS.get(name)
    return name not in KEPT_IN_PROCESS and fields is not None and set(spec(name).model.model_fields) <= fields


def forward_to_prefect(event: Event) -> None:
    """Emit the event's forwarded fields on Prefect's event stream (inside a flow run, related to it)."""
    payload = for_prefect(event)
    if payload is None:
        return
    from prefect.events import emit_event
    from prefect.runtime import flow_run

    related = []
    run_id = flow_run.get_id()
    if run_id:
        related.append({"prefect.resource.id": f"prefect.flow-run.{run_id}", "prefect.resource.role": "flow-run"})
    subject = event.data.get("datasource_id") or "engine"
    emit_event(event=f"nl2sql.{event.name}", resource={"prefect.resource.id": f"nl2sql.datasource.{subject}"},
               payload=payload, related=related)
