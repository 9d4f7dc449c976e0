"""Caps on a run's model calls and dollars: the next call is refused once a cap is reached.

>>> budget = Budget(max_llm_calls=1)
>>> budget.before_call()
>>> budget.before_call()
Traceback (most recent call last):
...
nl2sql.llm.models.LimitReached: The question reached its limit of 1 model call (settings.pipeline.max_llm_calls).
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager, nullcontext

from nl2sql.llm.models import LimitReached


class Budget:
    """Counts calls and dollars; `before_call` raises LimitReached (and keeps raising it) once a cap is hit."""

    def __init__(self, max_llm_calls: int | None = None, max_cost_usd: float | None = None, *,
                 setting_prefix: str = "settings.pipeline", subject: str = "question") -> None:
        self.max_llm_calls = max_llm_calls
        self.max_cost_usd = max_cost_usd
        self.setting_prefix = setting_prefix
        self.subject = subject
        self.calls = 0
        self.spent_usd = 0.0
        self.unknown_cost_calls = 0
        self.stop: LimitReached | None = None
        self._lock = threading.Lock()

    def before_call(self) -> None:
        """Reserve one call, or raise LimitReached when a cap is already reached."""
        with self._lock:
            if self.stop is not None:
                raise self.stop
            if self.max_llm_calls is not None and self.calls >= self.max_llm_calls:
                plural = "call" if self.max_llm_calls == 1 else "calls"
                self.stop = LimitReached(
                    f"The {self.subject} reached its limit of {self.max_llm_calls} model {plural} "
                    f"({self.setting_prefix}.max_llm_calls).",
                    limit="max_llm_calls", setting=f"{self.setting_prefix}.max_llm_calls")
                raise self.stop
            if self.max_cost_usd is not None and self.spent_usd >= self.max_cost_usd:
                self.stop = LimitReached(
                    f"The {self.subject} reached its cost limit of ${self.max_cost_usd:.2f} "
                    f"({self.setting_prefix}.max_cost_usd).",
                    limit="max_cost_usd", setting=f"{self.setting_prefix}.max_cost_usd")
                raise self.stop
            self.calls += 1

    def calling(self) -> AbstractContextManager[object]:
        """Held while a call is in flight (a run's budget stands its clock still: the model's time is bounded
        apart)."""
        return nullcontext()

    def calls_left(self) -> int | None:
        """Model calls left under max_llm_calls (None: no cap on calls)."""
        with self._lock:
            return None if self.max_llm_calls is None else max(0, self.max_llm_calls - self.calls)

    def after_call(self, cost_usd: float | None) -> None:
        """Add a finished call's cost (an unknown cost is counted apart, never as 0 dollars silently)."""
        with self._lock:
            if cost_usd is None:
                self.unknown_cost_calls += 1
            else:
                self.spent_usd += cost_usd
