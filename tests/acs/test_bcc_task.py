"""The bcc task: calibration subset, per-group counts, summary artifacts, bad config, end-to-end sweep."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import arviz as az
import numpy as np
import pandas as pd
import pytest

from countboard.acs.datasets.simulated import SimulatedACS, SimulatedClassifier
from countboard.acs.tasks.bcc import BCCTask
from countboard.errors import ConfigError
from countboard.quantify import BCCWarning, fit_bcc_batch, generator_comparison
from countboard.results import RunContext
from countboard.schema import load_schema

_WORK = tempfile.TemporaryDirectory(prefix="bcc-test-")  # the contexts' folders, removed when the module is freed


def make_ctx(seed: int = 0) -> RunContext:
    return RunContext(device="cpu", seed=seed, batch_size=8, work_dir=Path(tempfile.mkdtemp(dir=_WORK.name)),
                      progress=False)


@pytest.fixture(scope="module")
def setup():
    ds = SimulatedACS(n_items=1500, p=[0.3, 0.75], group_names=["low", "high"], seed=1)
    return ds, SimulatedClassifier(tpr=0.8, fpr=0.15, seed=4), BCCTask(n_human=100, draws=300, tune=300)


def test_units_are_groups_and_counts_match_a_loop(setup):
    ds, clf, task = setup
    ctx = make_ctx()
    assert list(task.units(clf, ds, ctx)) == ["low", "high"]
    records = task.run_units(clf, ds, ["low", "high"], ctx)
    items = ds.items()
    for rec in records:
        group = items[items["group"] == rec["unit_id"]].reset_index(drop=True)
        mask = task.human_subset(group, rec["unit_id"], ctx)
        d, h = clf.decide(group), group["human"].to_numpy()
        expect = dict(tp=0, fn=0, fp=0, tn=0, s_m=0, n_m=0)
        for i in range(len(group)):
            if mask[i]:
                key = ("tp" if d[i] else "fn") if h[i] == 1 else ("fp" if d[i] else "tn")
                expect[key] += 1
            else:
                expect["n_m"] += 1
                expect["s_m"] += int(d[i])
        assert {k: rec[k] for k in expect} == expect
        assert rec["tp"] + rec["fn"] + rec["fp"] + rec["tn"] == 100


def test_human_subset_is_seeded(setup):
    ds, _, task = setup
    group = ds.items()[ds.items()["group"] == "low"].reset_index(drop=True)
    a = task.human_subset(group, "low", make_ctx(0))
    assert a.sum() == 100
    np.testing.assert_array_equal(a, task.human_subset(group, "low", make_ctx(0)))
    assert not np.array_equal(a, task.human_subset(group, "low", make_ctx(1)))
    assert not np.array_equal(a, task.human_subset(group, "high", make_ctx(0)))


def test_bad_configs_raise_clear_errors(setup):
    ds, clf, _ = setup
    group = ds.items().iloc[:150].copy()
    with pytest.raises(ConfigError, match="lower task.n_human"):
        BCCTask(n_human=150).human_subset(group, "low", make_ctx())
    group.loc[group.index[:100], "human"] = np.nan
    with pytest.raises(ConfigError, match="50 items with a human label"):
        BCCTask(n_human=60).human_subset(group, "low", make_ctx())
    with pytest.raises(ConfigError):
        BCCTask(n_human=0)
    reserved = SimulatedACS(n_items=10, p=[0.5], group_names=["all"])
    with pytest.raises(ConfigError, match="reserved"):
        BCCTask().units(clf, reserved, make_ctx())


def test_summarize_logs_declared_metrics_and_artifacts(setup):
    ds, clf, task = setup
    ctx = make_ctx()
    records = pd.DataFrame(task.run_units(clf, ds, ["low", "high"], ctx))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BCCWarning)
        result = task.summarize(records, clf, ds, ctx)
    schema = load_schema()
    for key in result.metrics:
        assert schema.metric(key).family == "acs", key
    m = result.metrics
    assert m["acs_n_human"] == 200 and m["acs_n_items"] == 3000 and m["bcc_n_cells"] == 3
    assert m["acs_bcc_low"] < m["acs_bcc_mean"] < m["acs_bcc_high"]
    # the pooled truth is (0.3 + 0.75) / 2; CC is pulled towards the classifier's bias
    assert abs(m["acs_bcc_mean"] - 0.525) < 0.06
    cells = result.tables["bcc_cells"].set_index("cell")
    assert list(cells.index) == ["high", "low", "all"]
    assert (cells["generator"] == "simulated_generator").all()
    assert abs(cells.loc["low", "acs_bcc_mean"] - 0.3) < 0.08 and abs(cells.loc["high", "acs_bcc_mean"] - 0.75) < 0.08
    assert cells.loc["all", "bcc_tp"] == cells.loc[["low", "high"], "bcc_tp"].sum()
    assert not cells["no_human_positives"].any()
    assert result.arrays["bcc_draws"]["p"].shape == (3, 600)
    idata = az.from_netcdf(result.files["posterior.nc"])
    assert list(idata.posterior.coords["cell"].values) == ["high", "low", "all"]
    assert result.tags == {"generator": "simulated_generator", "attribute": "simulated_success", "bcc_method": "exact"}
    assert m["acs_failure_rate"] == 0 and m["bcc_mcse"] < 0.002 and "bcc_rhat" not in m


class UnequalGroups:
    """Two groups of 150 and 3,000 items (rates 0.1 and 0.9), human labels on every item."""

    generator, attribute = "uneven", "simulated_success"

    def __init__(self, failed_share: float = 0.0):
        small = SimulatedACS(n_items=150, p=[0.1], group_names=["small"], seed=3).items()
        large = SimulatedACS(n_items=3000, p=[0.9], group_names=["large"], seed=4).items()
        self.frame = pd.concat([small, large], ignore_index=True)
        if failed_share:  # blank generations: flagged, whatever the classifier or a human would say
            self.frame["failed"] = np.random.default_rng(0).random(len(self.frame)) < failed_share

    def items(self):
        return self.frame


def test_pooled_cell_weights_groups_by_their_items_not_their_labels():
    ds, clf, ctx = UnequalGroups(), SimulatedClassifier(tpr=0.85, fpr=0.1, seed=2), make_ctx()
    task = BCCTask(n_human=100)
    records = pd.DataFrame(task.run_units(clf, ds, ["small", "large"], ctx))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BCCWarning)
        result = task.summarize(records, clf, ds, ctx)
    truth = ds.items()["human"].mean()  # about (150 * 0.1 + 3000 * 0.9) / 3150 = 0.86
    cells = result.tables["bcc_cells"].set_index("cell")
    weights = np.array([3000, 150]) / 3150  # cells are sorted: large, small
    combined = weights @ cells.loc[["large", "small"], "acs_bcc_mean"].to_numpy()
    assert result.metrics["acs_bcc_mean"] == pytest.approx(combined, abs=1e-9)
    assert abs(result.metrics["acs_bcc_mean"] - truth) < 0.02
    assert result.metrics["acs_bcc_low"] < truth < result.metrics["acs_bcc_high"]
    # the summed counts (the former pooled cell) lean towards the small group: 100 of its 150 items are labelled
    summed = {c: int(records[c].sum()) for c in ("tp", "fn", "fp", "tn", "s_m", "n_m")}
    old = fit_bcc_batch(*summed.values())
    assert truth - old.mean[0] > 0.04
    draws = result.arrays["bcc_draws"]["p"]
    assert abs(draws[-1].mean() - combined) < 0.003
    idata = az.from_netcdf(result.files["posterior.nc"])
    assert idata.posterior["p"].sel(cell="all").mean() == pytest.approx(combined, abs=0.003)


def test_blank_outputs_count_as_failures_and_never_raise_the_rate():
    clf, ctx = SimulatedClassifier(tpr=0.85, fpr=0.1, seed=2), make_ctx()
    task = BCCTask(n_human=50)
    clean, blank = UnequalGroups(), UnequalGroups(failed_share=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BCCWarning)
        rates = {}
        for name, ds in (("clean", clean), ("blank", blank)):
            records = pd.DataFrame(task.run_units(clf, ds, ["small", "large"], ctx))
            rates[name] = task.summarize(records, clf, ds, ctx).metrics
    failed = blank.items()["failed"].mean()
    assert rates["blank"]["acs_failure_rate"] == pytest.approx(failed, abs=1e-9)
    assert rates["blank"]["acs_n_items"] == 3150  # failed outputs stay in the denominator
    for key in ("acs_bcc_mean", "acs_cc_mean"):
        assert rates["blank"][key] <= (1 - failed) * rates["clean"][key] + 0.03, key
        assert rates["blank"][key] < 0.6 * rates["clean"][key], key


def test_undecidable_items_are_failures():
    class Partial(SimulatedClassifier):
        def decide(self, items):
            d = super().decide(items).astype(float)
            d[::4] = np.nan  # could not judge every fourth item
            return d

    ds = SimulatedACS(n_items=400, p=[0.6], group_names=["g"], seed=1)
    rec = BCCTask(n_human=50).run_units(Partial(seed=1), ds, ["g"], make_ctx())[0]
    assert rec["n_failed"] == 100 and rec["tp"] + rec["fn"] + rec["fp"] + rec["tn"] + rec["n_m"] == 300
    group = ds.items().assign(failed=True)
    with pytest.raises(ConfigError, match="every item of group 'g' failed"):
        BCCTask(n_human=50).human_subset(group, "g", make_ctx(), group["failed"].to_numpy())


def test_method_is_checked_and_nuts_runs():
    with pytest.raises(ConfigError, match="task.method"):
        BCCTask(method="gibbs")
    ds = SimulatedACS(n_items=300, p=[0.6], group_names=["g"], seed=2)
    clf, ctx, task = SimulatedClassifier(seed=1), make_ctx(), BCCTask(n_human=40, draws=200, tune=200, method="nuts")
    records = pd.DataFrame(task.run_units(clf, ds, ["g"], ctx))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BCCWarning)
        result = task.summarize(records, clf, ds, ctx)
    assert result.tags["bcc_method"] == "nuts" and result.metrics["bcc_rhat"] < 1.1



@pytest.mark.filterwarnings("ignore:R-hat above")  # the prior-only TPR mixes slowly at 300 draws
def test_group_without_human_positives_is_fitted_and_flagged():
    ds = SimulatedACS(n_items=300, p=[0.0, 0.6], group_names=["none", "some"], seed=2)
    clf, task, ctx = SimulatedClassifier(tpr=0.8, fpr=0.1, seed=1), BCCTask(n_human=40, draws=300, tune=300), make_ctx()
    records = pd.DataFrame(task.run_units(clf, ds, ["none", "some"], ctx))
    assert records.set_index("unit_id").loc["none", ["tp", "fn"]].sum() == 0
    with pytest.warns(BCCWarning, match="no human positive"):
        result = task.summarize(records, clf, ds, ctx)
    cells = result.tables["bcc_cells"].set_index("cell")
    assert cells["no_human_positives"].to_dict() == {"none": True, "some": False, "all": False}
    assert "no_human_positives" not in result.metrics
    assert cells.loc["none", "acs_bcc_mean"] < cells.loc["some", "acs_bcc_mean"]

@pytest.mark.slow
def test_sweep_end_to_end_and_generator_comparison(tmp_path):
    from tests.conftest import run_sweep, store_runs

    run_sweep(["-m", "model=simulated_classifier", "dataset=acs_simulated", "task=bcc", "dataset.n_items=400",
               "dataset.generator=gen_a,gen_b", "dataset.p=[0.6]", "dataset.group_names=[g]", "task.n_human=60",
               "task.draws=200", "task.tune=200"], tmp_path)
    store = tmp_path / "mlruns"
    runs = store_runs(store)
    cells = runs[runs["tags.countboard.role"] == "cell"]
    assert len(cells) == 2 and set(cells["status"]) == {"FINISHED"} and set(cells["tags.family"]) == {"acs"}
    assert sorted(cells["tags.generator"]) == ["gen_a", "gen_b"]
    for _, run in cells.iterrows():
        art = next(store.glob(f"artifacts/*/{run['run_id']}/artifacts"))
        idata = az.from_netcdf(art / "files" / "posterior.nc")
        assert list(idata.posterior.coords["cell"].values) == ["g", "all"]
        table = pd.read_parquet(art / "tables" / "bcc_cells.parquet")
        assert list(table["cell"]) == ["g", "all"]
        assert run["metrics.acs_n_human"] == 60 and run["metrics.acs_n_items"] == 400
        assert run["metrics.acs_bcc_low"] < run["metrics.acs_bcc_mean"] < run["metrics.acs_bcc_high"]
    frame = pd.DataFrame({"generator": cells["tags.generator"], "classifier": cells["tags.model"],
                          "a": cells["metrics.bcc_alpha"], "b": cells["metrics.bcc_beta"]})
    matrix = generator_comparison(frame)
    assert list(matrix.index) == ["gen_a", "gen_b"]
    assert matrix.loc["gen_a", "gen_b"] + matrix.loc["gen_b", "gen_a"] == pytest.approx(1.0)
