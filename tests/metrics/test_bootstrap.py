"""Bootstrap intervals over a run's units: hand cases, scipy.stats.bootstrap as the independent check, and the unit
statistics of the counting metrics reproducing the metrics themselves."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from countboard.metrics import bootstrap as bs
from countboard.metrics.bootstrap import UnitStatistic, bootstrap_interval, interval_metrics, unit_intervals
from countboard.metrics.counting import (
    classic_metrics,
    classic_units,
    localized_mosaic_metrics,
    localized_units,
    mosaic_metrics,
    mosaic_units,
    negative_label_metrics,
    negative_label_units,
)
from countboard.metrics.praco_multiclass import multiclass_metrics, multiclass_units

NAN = float("nan")


def test_constant_units_give_a_zero_width_interval():
    s = UnitStatistic((np.full(7, 0.25),), bs.mean)
    assert bootstrap_interval(s) == (0.25, 0.25)
    assert bootstrap_interval(s, method="bca") == (0.25, 0.25)


def test_two_values_bound_the_interval_by_hand():
    # units {0, 1}: a resample's mean is 0, 0.5 or 1 with probabilities 1/4, 1/2, 1/4; the 90% percentile
    # interval takes the 5% and 95% quantiles of the resampled means: 0 and 1
    s = UnitStatistic((np.array([0.0, 1.0]),), bs.mean)
    assert bootstrap_interval(s, level=0.9) == (0.0, 1.0)
    # a 40% interval lies inside the middle mass (the 30% and 70% quantiles): 0.5 both
    assert bootstrap_interval(s, level=0.4) == (0.5, 0.5)


def test_fewer_than_two_units_give_no_interval():
    assert all(np.isnan(bootstrap_interval(UnitStatistic((np.array([3.0]),), bs.mean))))
    assert interval_metrics({"mae": UnitStatistic((np.array([3.0]),), bs.mean)}) == {}


def test_seeded_and_deterministic():
    x = np.random.default_rng(1).gamma(2.0, size=40)
    s = UnitStatistic((x,), bs.mean)
    assert bootstrap_interval(s, seed=3) == bootstrap_interval(s, seed=3)
    assert bootstrap_interval(s, seed=3) != bootstrap_interval(s, seed=4)


def test_undefined_units_drop_out_as_from_the_metric():
    x = np.array([1.0, NAN, 3.0, NAN, 2.0])
    s = UnitStatistic((x,), bs.mean)
    assert s.value() == 2.0
    lo, hi = bootstrap_interval(s, level=0.99)
    assert 1.0 <= lo <= 2.0 <= hi <= 3.0


def test_bad_options_are_refused():
    s = UnitStatistic((np.arange(5.0),), bs.mean)
    with pytest.raises(ValueError, match="method"):
        bootstrap_interval(s, method="basic")
    with pytest.raises(ValueError, match="level"):
        bootstrap_interval(s, level=1.5)
    with pytest.raises(ValueError, match="one row per unit"):
        unit_intervals({"a": s, "b": UnitStatistic((np.arange(4.0),), bs.mean)})


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_agrees_with_scipy_bootstrap_on_seeded_data(method):
    """The same statistic through scipy.stats.bootstrap (its own resampling): the bounds agree within the Monte
    Carlo error of 4,000 resamples."""
    rng = np.random.default_rng(0)
    x = rng.lognormal(0.0, 0.8, size=30)
    ours = bootstrap_interval(UnitStatistic((x,), bs.mean), level=0.9, n_resamples=4000, seed=0, method=method)
    ref = stats.bootstrap((x,), lambda a, axis=-1: a.mean(axis=axis), confidence_level=0.9, n_resamples=4000,
                          method=method, random_state=np.random.default_rng(5), vectorized=True)
    ci = ref.confidence_interval
    width = ci.high - ci.low
    assert ours[0] == pytest.approx(ci.low, abs=0.06 * width)
    assert ours[1] == pytest.approx(ci.high, abs=0.06 * width)


def test_paired_ratio_agrees_with_scipy():
    rng = np.random.default_rng(2)
    num, den = rng.random(25) * 3, rng.integers(1, 5, 25).astype(float)
    ours = bootstrap_interval(UnitStatistic((num, den), bs.ratio), n_resamples=4000)
    ref = stats.bootstrap((num, den), lambda a, b, axis=-1: a.sum(axis=axis) / b.sum(axis=axis), paired=True,
                          confidence_level=0.9, n_resamples=4000, method="percentile",
                          random_state=np.random.default_rng(9), vectorized=True).confidence_interval
    assert ours == pytest.approx((ref.low, ref.high), abs=0.06 * (ref.high - ref.low))


def test_the_interval_covers_the_mean_at_about_its_level():
    """Over 200 seeded samples of 24 units from a known distribution, the 90% interval covers the true mean in
    roughly 90% of them (percentile intervals undercover a little at n = 24)."""
    rng = np.random.default_rng(11)
    hits = 0
    for k in range(200):
        x = rng.beta(2, 5, size=24)
        lo, hi = bootstrap_interval(UnitStatistic((x,), bs.mean), n_resamples=400, seed=k)
        hits += lo <= 2 / 7 <= hi
    assert 0.8 <= hits / 200 <= 0.97


# --- the unit statistics reproduce the metrics they give intervals for ---------------------------------------------


def test_negative_and_classic_units_reproduce_the_metrics():
    rng = np.random.default_rng(4)
    counts = rng.poisson(3.0, size=(12, 4)).astype(float)
    pos_idx = rng.integers(0, 4, 12)
    gt = rng.integers(0, 8, 12).astype(float)
    metrics = negative_label_metrics(counts, gt, pos_idx)
    negatives = counts[~np.eye(4, dtype=bool)[pos_idx]]
    metrics["mean_negative_count"] = negatives.mean()
    for key, unit in negative_label_units(counts, gt, pos_idx).items():
        assert unit.value() == pytest.approx(metrics[key]), key
    pred = counts[:, 0]
    for key, unit in classic_units(pred, gt).items():
        assert unit.value() == pytest.approx(classic_metrics(pred, gt)[key]), key


def test_mosaic_units_reproduce_the_metrics():
    rng = np.random.default_rng(5)
    n, c = 9, 4
    upper = rng.random((n, c)) * 10
    lower = rng.random((n, c)) * 3
    own = rng.integers(0, c, n)
    upper[np.arange(n), own] = NAN
    lower[np.arange(n), own] = NAN
    gt = rng.integers(1, 10, n).astype(float)
    single = rng.integers(1, 10, n).astype(float)
    units = mosaic_units(upper, lower, gt, single)
    expected = mosaic_metrics(upper, lower, gt)
    drift = np.abs(upper - single[:, None]) / single[:, None]
    expected["count_drift_mean"] = np.nanmean(drift)
    expected["count_drift_median"] = np.nanmedian(drift)
    for key, unit in units.items():
        assert unit.value() == pytest.approx(expected[key]), key
    cells = rng.random((n * 3, 8, 8))
    truth = rng.random((n * 3, 8, 8))
    image = np.repeat(np.arange(n), 3)
    loc = localized_mosaic_metrics(cells, truth, image)
    for key, unit in localized_units(cells, truth, image).items():
        assert unit.value() == pytest.approx(loc[key]), key


def test_multiclass_units_reproduce_the_metrics():
    rng = np.random.default_rng(6)
    gt = rng.integers(0, 4, size=(15, 5)) * (rng.random((15, 5)) < 0.5)
    gt[0] = 0  # an image without a positive class is left out of everything
    gt[1] = 1  # one without a negative class is left out of MNP, NMN and PCCN
    pred = rng.poisson(2.0, size=(15, 5)).astype(float)
    metrics = multiclass_metrics(pred, gt)
    for key, unit in multiclass_units(pred, gt).items():
        assert unit.value() == pytest.approx(metrics[key], nan_ok=True), key


def test_many_statistics_share_resamples_and_stay_cheap():
    """Every metric of a 400-image run from one set of 2,000 resamples, in well under a second."""
    import time

    rng = np.random.default_rng(7)
    counts = rng.poisson(3.0, size=(400, 20)).astype(float)
    units = negative_label_units(counts, rng.integers(1, 9, 400), rng.integers(0, 20, 400))
    start = time.perf_counter()
    out = interval_metrics(units)
    assert time.perf_counter() - start < 1.0
    assert set(out) == {f"{k}{s}" for k in units for s in ("__low", "__high")}
    for key, unit in units.items():
        assert out[f"{key}__low"] <= unit.value() <= out[f"{key}__high"], key


def test_pooled_median_of_resamples_is_the_median_of_the_gathered_rows():
    # hand case: units [1, nan], [5, 3], [2, 4]; resample (0, 0, 1) pools 1, 1, 5, 3 -> (1 + 3) / 2
    u = bs.pooled_median_units([[1.0, NAN], [5.0, 3.0], [2.0, 4.0]])
    assert u.of_resamples(np.array([[0, 0, 1], [2, 2, 2], [1, 1, 0]])).tolist() == [2.0, 3.0, 3.0]
    rng = np.random.default_rng(11)
    for n, c, undefined in [(60, 7, 0.5), (9, 1, 0.0), (25, 4, 0.97), (4, 3, 1.0)]:
        x = np.round(rng.gamma(2.0, 0.3, (n, c)), 2)  # rounded: ties between units
        x[rng.random((n, c)) < undefined] = NAN
        idx = rng.integers(0, n, size=(300, n))
        fast = bs.pooled_median_units(x)
        np.testing.assert_array_equal(fast.of_resamples(idx), bs.pooled_median(x[idx]))
        slow = UnitStatistic((x,), bs.pooled_median)
        for method in bs.METHODS:  # the same bounds, to the last bit (NaN where undefined)
            np.testing.assert_array_equal(unit_intervals({"m": fast}, method=method)["m"],
                                          unit_intervals({"m": slow}, method=method)["m"])
