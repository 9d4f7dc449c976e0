"""Candidates chosen by execution: the planner proposes several statements for a sub-query (its first answer, then
samples), each is read into a plan, validated under the caller's scope and run read-only within the usual bounds,
and the sub-query goes on with one of the largest group that agree on their result.

A model that writes the right statement more often than any one wrong one is right more often this way than with
its first answer alone; a statement that does not read, validate or run never wins over one that does.

>>> ran = [Candidate(0, "a", result=(1, ((0, 1.0, ""),))), Candidate(1, "b", result=(1, ((0, 2.0, ""),))),
...        Candidate(2, "c", result=(1, ((0, 2.0, ""),))), Candidate(3, "d", error_code="PLAN_INVALID")]
>>> choose_candidate(ran), group_sizes(ran)
(1, [2, 1])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Candidate:
    """One statement the planner proposed for a sub-query, and what became of it."""

    index: int  # 0: the planner's first answer; then its samples, in the order drawn
    written: str  # as the model wrote it (a statement, or a plan as JSON)
    error_code: str | None = None  # why it did not run: PLAN_UNSUPPORTED, PLAN_INVALID, SECURITY_VIOLATION, …
    result: tuple | None = None  # `compare.result_key` of its rows: equal keys, the same rows in any order
    rows: int = 0

    @property
    def ran(self) -> bool:
        """Whether it read, validated and ran."""
        return self.error_code is None and self.result is not None


def _groups(candidates: Sequence[Candidate]) -> list[list[Candidate]]:
    """The candidates that ran, grouped by result, each group in the order drawn, groups by their first member."""
    groups: dict[tuple, list[Candidate]] = {}
    for candidate in candidates:
        if candidate.ran:
            assert candidate.result is not None
            groups.setdefault(candidate.result, []).append(candidate)
    return sorted(groups.values(), key=lambda g: g[0].index)


def choose_candidate(candidates: Sequence[Candidate]) -> int:
    """The index of the candidate the sub-query goes on with: the first of the largest group that agree on their
    result; between groups of one size, a result with rows over an empty one, then the group drawn first (the
    planner's own answer before its samples); the first candidate when none ran (its error goes to the refiner).

    >>> tie = [Candidate(0, "a", result=(1, ())), Candidate(1, "b", result=(1, ((0, 2.0, ""),)), rows=1)]
    >>> choose_candidate(tie), choose_candidate(tie[:1]), choose_candidate([Candidate(0, "a", "PLAN_INVALID")])
    (1, 0, 0)
    """
    groups = _groups(candidates)
    if not groups:
        return candidates[0].index if candidates else 0
    best = max(groups, key=lambda g: (len(g), g[0].rows > 0, -g[0].index))
    return best[0].index


def group_sizes(candidates: Sequence[Candidate]) -> list[int]:
    """How many candidates agree on each result, largest first (those that did not run are in none)."""
    return sorted((len(g) for g in _groups(candidates)), reverse=True)
