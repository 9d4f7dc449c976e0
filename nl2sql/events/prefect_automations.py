"""The project's Prefect automations, applied in one place (`nl2sql automations apply`, idempotent: each is
created, or brought up to date by its name):

- a statement waits for an approver (`approval.requested`) → POST to `settings.approvals.webhook_url`;
- a schema drifted (`schema.drifted`) → run the `eval-retrieval` deployment (retrieval measured on the new schema);
- an eval or drift-check run failed → POST to `settings.prefect.failures_webhook_url`.

An automation whose webhook is not configured, or whose deployment is not deployed, is skipped with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

AUTOMATION_NAME = "nl2sql: a statement waits for an approver"
DRIFT_AUTOMATION_NAME = "nl2sql: a schema drifted, measure retrieval"
FAILURES_AUTOMATION_NAME = "nl2sql: an eval or drift check failed"
WEBHOOK_BLOCK = "nl2sql-approvers"
FAILURES_WEBHOOK_BLOCK = "nl2sql-failures"
#: The deployment a drift runs (`flow/deployment`).
DRIFT_DEPLOYMENT = "eval-run/eval-retrieval"
#: The flows whose Failed runs are told.
WATCHED_FLOWS = ("eval-run", "eval-full", "drift-check")
#: What the approvers' webhook receives (JSON; the values come from the event and its flow run).
PAYLOAD = (
    '{"event": "approval.requested", "run_id": {{ flow_run.id | string | tojson }}, '
    '"run_name": {{ flow_run.name | tojson }}, "run_url": {{ flow_run | ui_url | tojson }}, '
    '"reason": {{ event.payload.reason | tojson }}, "datasource": {{ event.payload.datasource_id | tojson }}, '
    '"hook": {{ event.payload.hook | tojson }}, "approver_roles": {{ event.payload.approver_roles | tojson }}, '
    '"asker": {{ event.payload.asker | tojson }}, "request_id": {{ event.payload.request_id | tojson }}}'
)
#: What the failures' webhook receives: which flow, which run, its state's message (a gate's reason, a fault's
#: type), the link.
FAILURES_PAYLOAD = (
    '{"event": "flow-run.failed", "flow": {{ flow.name | tojson }}, "run_id": {{ flow_run.id | string | tojson }}, '
    '"run_name": {{ flow_run.name | tojson }}, "run_url": {{ flow_run | ui_url | tojson }}, '
    '"message": {{ flow_run.state.message | tojson }}}'
)


@dataclass(frozen=True)
class Applied:
    """What `apply_automations` did with one automation."""

    name: str
    automation_id: UUID | None = None
    created: bool = False
    skipped: str | None = None


def _upsert(name: str, description: str, trigger: Any, actions: list[Any]) -> tuple[UUID, bool]:
    """Create the automation, or bring the one of that name up to date: (its id, whether it was created)."""
    from prefect.automations import Automation

    try:
        existing = Automation.read(name=name)
    except ValueError:
        return Automation(name=name, description=description, trigger=trigger, actions=actions).create().id, True
    existing.trigger, existing.actions, existing.enabled = trigger, actions, True
    existing.update()
    return existing.id, False


def _on_each(event: str, **match_related: Any) -> Any:
    """A trigger that fires once for every `event` (optionally only for related resources matching)."""
    from prefect.events.schemas.automations import EventTrigger, Posture

    return EventTrigger(expect={event}, posture=Posture.Reactive, threshold=1, within=0,
                        **({"match_related": match_related} if match_related else {}))


def _webhook(block: str, url: str) -> UUID:
    """A webhook block saved under `block` (the URL kept secret in Prefect's API); its id."""
    from prefect.blocks.webhook import Webhook
    from pydantic import SecretStr

    Webhook(method="POST", url=SecretStr(url), headers={"Content-Type": "application/json"}).save(block,
                                                                                                   overwrite=True)
    return Webhook.load(block)._block_document_id


def apply_approval_automation(webhook_url: str) -> tuple[UUID, bool]:
    """approval.requested → the approvers' webhook: (its id, whether it was created)."""
    from prefect.events.actions import CallWebhook

    actions = [CallWebhook(block_document_id=_webhook(WEBHOOK_BLOCK, webhook_url), payload=PAYLOAD)]
    return _upsert(AUTOMATION_NAME, "Calls settings.approvals.webhook_url when a question's SQL needs an approver.",
                   _on_each("nl2sql.approval.requested"), actions)


def apply_drift_automation() -> tuple[UUID, bool] | None:
    """schema.drifted → a run of eval-retrieval: (its id, whether it was created); None when that deployment is
    not deployed."""
    from prefect import get_client
    from prefect.events.actions import RunDeployment
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            deployment = client.read_deployment_by_name(DRIFT_DEPLOYMENT)
        except ObjectNotFound:
            return None
    actions = [RunDeployment(source="selected", deployment_id=deployment.id)]
    return _upsert(DRIFT_AUTOMATION_NAME, "Runs eval-retrieval when a drift check finds a new drift.",
                   _on_each("nl2sql.schema.drifted"), actions)


def apply_failures_automation(webhook_url: str, flows: Sequence[str] = WATCHED_FLOWS) -> tuple[UUID, bool]:
    """A Failed run of an eval or drift-check flow → the failures' webhook: (its id, whether it was created)."""
    from prefect.events.actions import CallWebhook

    trigger = _on_each("prefect.flow-run.Failed", **{"prefect.resource.role": "flow",
                                                       "prefect.resource.name": list(flows)})
    actions = [CallWebhook(block_document_id=_webhook(FAILURES_WEBHOOK_BLOCK, webhook_url), payload=FAILURES_PAYLOAD)]
    return _upsert(FAILURES_AUTOMATION_NAME, "Calls settings.prefect.failures_webhook_url when an eval or drift "
                   "check run fails.", trigger, actions)


def apply_automations(approvals_webhook: str | None, failures_webhook: str | None) -> list[Applied]:
    """Every automation of the project, each created, updated or skipped (with why)."""
    out = []
    if approvals_webhook:
        out.append(Applied(AUTOMATION_NAME, *apply_approval_automation(approvals_webhook)))
    else:
        out.append(Applied(AUTOMATION_NAME, skipped="settings.approvals.webhook_url is not set"))
    drift = apply_drift_automation()
    out.append(Applied(DRIFT_AUTOMATION_NAME, *drift) if drift else Applied(
        DRIFT_AUTOMATION_NAME, skipped=f"the deployment {DRIFT_DEPLOYMENT} is not deployed (`prefect deploy --all` "
        "or `nl2sql serve`)"))
    if failures_webhook:
        out.append(Applied(FAILURES_AUTOMATION_NAME, *apply_failures_automation(failures_webhook)))
    else:
        out.append(Applied(FAILURES_AUTOMATION_NAME, skipped="settings.prefect.failures_webhook_url is not set"))
    return out
