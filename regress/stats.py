"""The comparison's statistics: how many times worse head is than base (direction-aware),
and whether two runs' samples differ (a two-sided Mann–Whitney U test). What the numbers
mean for a verdict (thresholds, alpha, CI overlap when no samples) is :mod:`regress.compare`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def worse_ratio(base: float, head: float, better: str) -> float:
    """How many times worse head is than base (> 1 = worse), in the metric's direction
    ``better`` (``"lower"`` or ``"higher"``); a head of 0 against a lower-is-better base
    above 0 is 0 (infinitely better), the reverse ``inf``."""
    worse, good = (head, base) if better == "lower" else (base, head)
    if worse == good:
        return 1.0
    if good == 0:
        return math.inf if worse > 0 else 0.0
    return worse / good


def mann_whitney_u(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Two-sided Mann–Whitney U test: ``(U of x, p-value)``.

    Exact null distribution when there are no ties and the samples are small (both ≤ 20),
    otherwise the normal approximation with tie and continuity corrections — the same
    results as ``scipy.stats.mannwhitneyu(x, y, method="exact"|"asymptotic")``.
    """
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError(f"mann_whitney_u needs two non-empty samples (got {n1} and {n2})")
    ranks, tie_sizes = _ranks(list(x) + list(y))
    u1 = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    u_big = max(u1, n1 * n2 - u1)
    if not any(t > 1 for t in tie_sizes) and max(n1, n2) <= 20:
        counts = _u_counts(n1, n2)
        p = 2 * sum(counts[math.ceil(u_big - 1e-9):]) / math.comb(n1 + n2, n1)
    else:
        n = n1 + n2
        tie_term = sum(t**3 - t for t in tie_sizes) / (n * (n - 1))
        sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term))
        if sigma == 0:  # every value identical: no evidence of a difference
            return u1, 1.0
        z = (u_big - n1 * n2 / 2 - 0.5) / sigma
        p = math.erfc(z / math.sqrt(2))  # 2 * P(Z > z)
    return u1, min(1.0, p)


def _ranks(values: list[float]) -> tuple[list[float], list[int]]:
    """Average ranks (1-based) and the sizes of each group of tied values."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    tie_sizes = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        tie_sizes.append(j - i + 1)
        i = j + 1
    return ranks, tie_sizes


def _u_counts(n1: int, n2: int) -> list[int]:
    """Number of arrangements of n1 x's and n2 y's giving each U = 0..n1*n2 (no ties).

    Recurrence on the largest value: it is an x (adds n2 to U) or a y (adds nothing).
    """
    # table[j] = counts for (i, j) at the current i
    table = [[1] for _ in range(n2 + 1)]  # i = 0: U is always 0
    for i in range(1, n1 + 1):
        new = [[1]]  # j = 0: U is always 0
        for j in range(1, n2 + 1):
            with_x = [0] * j + table[j]  # largest is an x: U += j
            with_y = new[j - 1]
            size = i * j + 1
            new.append([
                (with_x[u] if u < len(with_x) else 0) + (with_y[u] if u < len(with_y) else 0)
                for u in range(size)
            ])
        table = new
    return table[n2]
