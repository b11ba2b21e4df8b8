"""The performance scale, shared by the grader (grading.performance) and `make grade`
(bench.estimate): the geometric mean over the layers, and the share of the performance
points for a time, given the ladder's rungs, log-linear between them.
"""
from __future__ import annotations

import math
from typing import Iterable, List, Sequence, Tuple


def geomean(values: Iterable[float]) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def ladder_share(t: float, rungs: Sequence[Tuple[float, float]]) -> float:
    """The share of the performance points for time t, given the rungs' (time, share),
    shares ascending from 0 to 1. Rungs not faster than every rung below them are left
    out; between the others the share is interpolated on log(time)."""
    points: List[Tuple[float, float]] = []
    for time_, share in rungs:
        if not points or time_ < points[-1][0]:
            points.append((time_, share))
    if t >= points[0][0]:
        return 0.0
    if t <= points[-1][0]:
        return points[-1][1]
    for (t_hi, s_lo), (t_lo, s_hi) in zip(points, points[1:]):
        if t_lo <= t < t_hi:
            return s_lo + (s_hi - s_lo) * math.log(t_hi / t) / math.log(t_hi / t_lo)
    return 0.0
