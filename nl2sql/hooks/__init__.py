"""Hooks at the six points of a question's run.

The points are marked in the pipeline's declaration; this runner lets every run through until
hooks are configured (the `hooks` section), so the declaration already has them where they sit.
"""

from __future__ import annotations

from typing import Any

from nl2sql.config.models import HOOK_POINTS, HookConfig


class HookRunner:
    """Calls the configured hooks of a point in config order (none configured: every point allows)."""

    def __init__(self, hooks: list[HookConfig] | None = None) -> None:
        self.hooks = list(hooks or [])

    def at(self, point: str) -> list[HookConfig]:
        """The hooks that run at a point."""
        assert point in HOOK_POINTS, point
        return [h for h in self.hooks if h.points is None or point in h.points]

    def run(self, point: str, state: Any, sub_query: Any = None) -> None:
        """Run the point's hooks over the state (Allow when there are none)."""
        self.at(point)


__all__ = ["HOOK_POINTS", "HookRunner"]
