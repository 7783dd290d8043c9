"""Off-by-one accuracy, normalised MAE, CAPTURe's sMAPE and CountQA's relaxed accuracy: hand-computed cases, CAPTURe's
rule for a missing prediction, and a direct loop implementation on seeded random counts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from countboard.metrics import bootstrap
from countboard.metrics.count_errors import (
    count_error_metrics,
    count_error_units,
    normalised_errors,
    off_by_one_hits,
    relaxed_hits,
    smape_terms,
)

NAN = float("nan")


def loop_metrics(pred, gt):
    """The formulas written out, one image at a time (a missing prediction is None)."""
    obo, nmae, smape, r5, r10 = [], [], [], [], []
    for p, g in zip(pred, gt, strict=True):
        if p is None:
            obo.append(0)
            smape.append(100.0)
            r5.append(0)
            r10.append(0)
            continue
        obo.append(int(abs(math.floor(p + 0.5) - g) <= 1))
        nmae.append(abs(p - g) / (g + 0.1))
        smape.append(0.0 if p == g == 0 else 100 * abs(p - g) / (abs(p) + abs(g)))
        r5.append(int(abs(p - g) <= 0.05 * g + 1e-9))
        r10.append(int(abs(p - g) <= 0.10 * g + 1e-9))
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    return {"off_by_one_acc": 100 * mean(obo), "nmae": mean(nmae), "smape": mean(smape),
            "relaxed_acc_5": 100 * mean(r5), "relaxed_acc_10": 100 * mean(r10)}


def test_hand_computed_cases():
    pred, gt = [0.0, 4.0, 18.0, 100.0], [0, 2, 20, 110]
    m = count_error_metrics(pred, gt)
    # |round(p) - g|: 0, 2, 2, 10 -> only the first within one
    assert m["off_by_one_acc"] == 25.0
    # |p - g| / (g + 0.1): 0, 2/2.1, 2/20.1, 10/110.1
    assert m["nmae"] == pytest.approx((0 + 2 / 2.1 + 2 / 20.1 + 10 / 110.1) / 4)
    # 100 |p - g| / (|p| + |g|): 0 (both zero), 100 * 2/6, 100 * 2/38, 100 * 10/210
    assert m["smape"] == pytest.approx((0 + 100 * 2 / 6 + 100 * 2 / 38 + 100 * 10 / 210) / 4)
    # within 5 %: 0 (g = 0, p = 0), 100 vs 110 is 9.1 % off; within 10 %: 18 vs 20 (exactly 10 %) and 100 vs 110
    assert m["relaxed_acc_5"] == 25.0 and m["relaxed_acc_10"] == 75.0


def test_a_missing_count_is_wrong_and_scores_capture_s_100():
    assert smape_terms([NAN], [7]).tolist() == [100.0]
    assert off_by_one_hits([NAN], [1]).tolist() == relaxed_hits([NAN], [0], 10).tolist() == [0.0]
    assert np.isnan(normalised_errors([NAN], [3])[0])
    m = count_error_metrics([NAN, 3.0], [3, 3])
    assert m["smape"] == 50.0 and m["off_by_one_acc"] == 50.0 and m["nmae"] == 0.0  # nmae over the counted one


def test_rounding_and_boundaries():
    assert off_by_one_hits([2.5, 2.49, 5.5], [4, 4, 5]).tolist() == [1.0, 0.0, 1.0]  # half up: 3, 2, 6
    assert relaxed_hits([95.0, 105.0, 94.999], [100, 100, 100], 5).tolist() == [1.0, 1.0, 0.0]
    assert relaxed_hits([1.0], [0], 10).tolist() == [0.0]  # no tolerance around 0
    assert normalised_errors([1.0], [0]).tolist() == [10.0]  # g = 0 divides by 0.1, never left out


@pytest.mark.parametrize("seed", range(5))
def test_against_a_direct_loop(seed):
    rng = np.random.default_rng(seed)
    n = 40
    gt = rng.integers(0, 60, n)
    pred = np.where(rng.random(n) < 0.5, gt + rng.integers(-3, 4, n), gt * rng.uniform(0.8, 1.2, n)).astype(float)
    pred[rng.random(n) < 0.1] = NAN
    got = count_error_metrics(pred, gt)
    want = loop_metrics([None if np.isnan(p) else float(p) for p in pred], gt.tolist())
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key


def test_units_give_the_same_values_and_intervals_around_them():
    rng = np.random.default_rng(0)
    gt = rng.integers(1, 30, 50)
    pred = gt + rng.integers(-2, 3, 50).astype(float)
    units = count_error_units(pred, gt)
    assert {k: u.value() for k, u in units.items()} == pytest.approx(count_error_metrics(pred, gt))
    bounds = bootstrap.interval_metrics(units)
    for key, unit in units.items():
        assert bounds[key + "__low"] <= unit.value() <= bounds[key + "__high"], key


def test_shapes_must_match():
    with pytest.raises(ValueError, match="same length"):
        count_error_metrics([1.0, 2.0], [1])
