"""Running the hooks of a point in config order: each decision checked against the point's rules,
a hook's failure closed (the run ends HOOK_FAILED) or open (logged, the next hook runs)."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from nl2sql.hooks.context import Allow, Decision, Deny, HookContext, Modify, NeedsApproval
from nl2sql.hooks.points import POINT_RULES

log = logging.getLogger("nl2sql.hooks")
#: (hook, point, decision, reason, sub_query_id) → the hook.decision event.
OnDecision = Callable[[str, str, str, "str | None", "str | None"], None]


@dataclass(frozen=True)
class HookBinding:
    """One configured hook: its name, the callable, where it runs, its error policy and its approvers."""

    name: str
    hook: Callable[[HookContext], Decision]
    points: frozenset[str]
    on_error: Literal["closed", "open"] = "closed"
    approver_roles: tuple[str, ...] = ()


@dataclass
class HookVerdict:
    """What a point's hooks decided: the context after every Modify, and the decision that stopped it, if any."""

    context: HookContext
    modified: set[str] = field(default_factory=set)
    stop: Deny | NeedsApproval | None = None
    hook: str | None = None
    error: str | None = None

    @property
    def allowed(self) -> bool:
        """Whether the run goes on past this point."""
        return self.stop is None and self.error is None


def kind_of(decision: Decision) -> str:
    """A decision's name: allow, modify, deny or needs_approval."""
    return {Allow: "allow", Modify: "modify", Deny: "deny", NeedsApproval: "needs_approval"}[type(decision)]


class HookRunner:
    """Calls the hooks bound to a point, in config order."""

    def __init__(self, bindings: list[HookBinding] | None = None) -> None:
        self.bindings = list(bindings or [])

    def at(self, point: str) -> list[HookBinding]:
        """The hooks that run at a point."""
        return [b for b in self.bindings if point in b.points]

    def binding(self, name: str) -> HookBinding:
        """A configured hook by name."""
        return next(b for b in self.bindings if b.name == name)

    def run(self, point: str, *, on_decision: OnDecision | None = None,
            approved: Callable[[str, NeedsApproval], bool] | None = None, **fields: Any) -> HookVerdict:
        """Call the point's hooks over a context built from deep copies of `fields`."""
        rule = POINT_RULES[point]
        estimate = fields.pop("estimate_rows", None)
        ctx = HookContext(point=point, estimate_rows=estimate, **copy.deepcopy(fields))
        verdict = HookVerdict(ctx)
        sub_id = fields.get("sub_query_id")

        def publish(name: str, decision: str, reason: str | None) -> None:
            if on_decision is not None:
                on_decision(name, point, decision, reason, sub_id)

        for binding in self.at(point):
            try:
                decision = binding.hook(verdict.context)
                kind = kind_of(decision)
                if kind not in rule.decisions:
                    raise ValueError(f"{kind} is not a decision {point} accepts")
                if isinstance(decision, Modify):
                    changed = {k for k, v in decision.model_dump(exclude_none=True).items() if v is not None}
                    if not changed <= rule.modifies:
                        raise ValueError(f"a Modify at {point} may change only {', '.join(sorted(rule.modifies))}")
                    verdict.context = verdict.context.model_copy(
                        update={k: copy.deepcopy(getattr(decision, k)) for k in changed})
                    verdict.modified |= changed
            except Exception as exc:  # a hook's own failure: closed or open, by its config
                log.warning("hook %s failed at %s: %s", binding.name, point, exc)
                publish(binding.name, "error", f"{type(exc).__name__}")
                if binding.on_error == "closed":
                    verdict.hook, verdict.error = binding.name, f"The {binding.name} hook failed at {point}."
                    return verdict
                continue
            if isinstance(decision, NeedsApproval) and approved is not None and approved(binding.name, decision):
                publish(binding.name, "approved", decision.reason)
                continue
            publish(binding.name, kind, getattr(decision, "reason", None))
            if isinstance(decision, Deny | NeedsApproval):
                verdict.stop, verdict.hook = decision, binding.name
                return verdict
        return verdict
