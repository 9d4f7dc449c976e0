"""The six points: which decisions each accepts and what a Modify may change there."""

from __future__ import annotations

from dataclasses import dataclass

from nl2sql.config.models import HOOK_POINTS


@dataclass(frozen=True)
class PointRule:
    """What a point accepts."""

    decisions: frozenset[str]
    modifies: frozenset[str] = frozenset()
    per_sub_query: bool = False


POINT_RULES: dict[str, PointRule] = {
    "run.before": PointRule(frozenset({"allow", "modify", "deny"}), frozenset({"question"})),
    "datasources.after": PointRule(frozenset({"allow", "modify", "deny"}), frozenset({"datasource_ids"})),
    "plan.after": PointRule(frozenset({"allow", "modify", "deny"}), frozenset({"plan"}), per_sub_query=True),
    "execute.before": PointRule(frozenset({"allow", "deny", "needs_approval"}), per_sub_query=True),
    "execute.after": PointRule(frozenset({"allow", "deny"}), per_sub_query=True),
    "answer.after": PointRule(frozenset({"allow", "deny"})),
}
assert tuple(POINT_RULES) == HOOK_POINTS
