"""The statistics a report and the gate read: the Wilson score interval and McNemar's exact test.

Both are a few lines of exact arithmetic, so there is no SciPy.

>>> tuple(round(x, 3) for x in wilson_interval(27, 47))
(0.433, 0.705)
>>> round(mcnemar_exact(10, 0), 5)
0.00195
>>> mcnemar_exact(5, 5)
1.0
"""

from __future__ import annotations

import math

#: The two-sided 95% normal quantile.
Z95 = 1.959964


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval (95% by default) of `successes` out of `n`; (0.0, 0.0) when n is 0.

    >>> wilson_interval(0, 0)
    (0.0, 0.0)
    >>> tuple(round(x, 3) for x in wilson_interval(10, 10))
    (0.722, 1.0)
    """
    if n <= 0:
        return 0.0, 0.0
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be between 0 and n ({n}), not {successes}")
    p = successes / n
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact(lost: int, gained: int) -> float:
    """McNemar's exact two-sided p-value on the discordant pairs (1.0 when there are none).

    Under "both runs are equally good" each flip is a fair coin, so this is the two-sided binomial
    test of min(lost, gained) in lost + gained at p = 0.5, capped at 1.0.

    >>> mcnemar_exact(0, 0)
    1.0
    >>> round(mcnemar_exact(1, 6), 4)
    0.125
    """
    if lost < 0 or gained < 0:
        raise ValueError("lost and gained are counts of cases: neither can be negative")
    n = lost + gained
    if n == 0:
        return 1.0
    k = min(lost, gained)
    tail = sum(math.comb(n, i) for i in range(k + 1))
    return min(1.0, 2 * tail / 2**n)
