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
from countboard.quantify import BCCWarning, generator_comparison
from countboard.results import RunContext
from countboard.schema import load_schema


def make_ctx(seed: int = 0) -> RunContext:
    return RunContext(device="cpu", seed=seed, batch_size=8, work_dir=Path(tempfile.mkdtemp(prefix="bcc-test-")),
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
    assert result.tags == {"generator": "simulated_generator", "attribute": "simulated_success"}



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
