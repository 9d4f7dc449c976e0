"""The Prefect automation that tells approvers: approval.requested → a webhook call with the run's link."""

from __future__ import annotations

from uuid import UUID

AUTOMATION_NAME = "nl2sql: a statement waits for an approver"
WEBHOOK_BLOCK = "nl2sql-approvers"
#: What the webhook receives (JSON; the values come from the event and its flow run).
PAYLOAD = (
    '{"event": "approval.requested", "run_id": {{ flow_run.id | string | tojson }}, '
    '"run_name": {{ flow_run.name | tojson }}, "run_url": {{ flow_run | ui_url | tojson }}, '
    '"reason": {{ event.payload.reason | tojson }}, "datasource": {{ event.payload.datasource_id | tojson }}, '
    '"hook": {{ event.payload.hook | tojson }}, "approver_roles": {{ event.payload.approver_roles | tojson }}, '
    '"asker": {{ event.payload.asker | tojson }}, "request_id": {{ event.payload.request_id | tojson }}}'
)


def apply_approval_automation(webhook_url: str) -> tuple[UUID, bool]:
    """Create the automation (or bring the existing one up to date): (its id, whether it was created)."""
    from prefect.automations import Automation
    from prefect.blocks.webhook import Webhook
    from prefect.events.actions import CallWebhook
    from prefect.events.schemas.automations import EventTrigger, Posture
    from pydantic import SecretStr

    Webhook(method="POST", url=SecretStr(webhook_url), headers={"Content-Type": "application/json"}).save(
        WEBHOOK_BLOCK, overwrite=True)
    block_id = Webhook.load(WEBHOOK_BLOCK)._block_document_id
    trigger = EventTrigger(expect={"nl2sql.approval.requested"}, posture=Posture.Reactive, threshold=1, within=0)
    actions = [CallWebhook(block_document_id=block_id, payload=PAYLOAD)]
    try:
        existing = Automation.read(name=AUTOMATION_NAME)
    except ValueError:
        created = Automation(name=AUTOMATION_NAME, description="Calls settings.approvals.webhook_url when a "
                             "question's SQL needs an approver.", trigger=trigger, actions=actions).create()
        return created.id, True
    existing.trigger, existing.actions, existing.enabled = trigger, actions, True
    existing.update()
    return existing.id, False
