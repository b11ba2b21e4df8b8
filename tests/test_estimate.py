"""make grade (bench.estimate): the estimate places a speed-up over the naive kernel on
the ladder's tiers as the grader places a time on its ladder, and a real measurement of
this tree's conv2d on the graded layers gives a report with an estimate in it."""
import json

import pytest

from bench import estimate
from grading.scale import ladder_share

TIERS = {"device": "a test device", "measured": "today",
         "rungs": {"naive": {"share": 0.0, "speedup": 1.0}, "tiled": {"share": 0.5, "speedup": 4.0},
                   "blocked": {"share": 0.75, "speedup": 10.0}, "reference": {"share": 1.0, "speedup": 20.0}}}


def test_each_rung_gets_its_share_and_between_them_log_speed():
    for rung in TIERS["rungs"].values():
        assert estimate.estimate_share(rung["speedup"], TIERS) == pytest.approx(rung["share"])
    assert estimate.estimate_share(0.5, TIERS) == 0.0
    assert estimate.estimate_share(100.0, TIERS) == 1.0
    assert estimate.estimate_share(2.0, TIERS) == pytest.approx(0.25)  # halfway on log(speed-up)
    # The same scale as the grader's, which works on times.
    assert estimate.estimate_share(6.0, TIERS) == pytest.approx(
        ladder_share(1 / 6.0, [(1.0, 0.0), (1 / 4.0, 0.5), (1 / 10.0, 0.75), (1 / 20.0, 1.0)]))


def test_shipped_tiers_are_a_ladder():
    tiers = json.loads(estimate.TIERS.read_text())
    rungs = list(tiers["rungs"].values())
    assert [r["share"] for r in rungs] == sorted(r["share"] for r in rungs)
    assert rungs[0]["share"] == 0.0 and rungs[-1]["share"] == 1.0
    assert all(r["speedup"] > 0 for r in rungs) and tiers["device"] and tiers["measured"]


def test_measurement_and_report(ocl):
    best = estimate.measure(runs=1)
    assert set(best) == {"naive", "yours", "torch"} and all(len(v) == 5 and min(v) > 0 for v in best.values())
    text = estimate.report(best, TIERS)
    assert "performance points" in text and "estimate" in text
    assert "no estimate" in estimate.report(best, None)
