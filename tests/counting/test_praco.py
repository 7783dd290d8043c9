"""PrACo tasks on a generated split: units, records, metrics, artifacts and bad input."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from countboard.counting.datasets import fsc147
from countboard.counting.datasets.synthetic_shapes import SyntheticShapes
from countboard.counting.models.class_blind import ClassBlindCounter
from countboard.counting.models.oracle import OracleCounter
from countboard.counting.tasks.classic import ClassicCounting
from countboard.counting.tasks.praco import PAIR_SEP, PracoMosaic, PracoNegative
from countboard.errors import ConfigError, DataNotFoundError
from countboard.results import RunContext
from countboard.schema import load_schema

SMALL = dict(image_size=(48, 48), size_range=(5.0, 8.0), count_range=(1, 10),
             images_per_class={"train": 0, "val": 0, "test": 2}, multi_class_images=0, n_classes=5)


@pytest.fixture(scope="module")
def shapes_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("praco") / "shapes"
    SyntheticShapes(root, **SMALL)
    return root


@pytest.fixture
def shapes(shapes_root):
    return SyntheticShapes(shapes_root, **SMALL)


@pytest.fixture
def ctx(tmp_path):
    return RunContext(device="cpu", seed=0, batch_size=3, work_dir=tmp_path, progress=False)


def run(task, model, dataset, ctx, units=None):
    units = list(task.units(model, dataset, ctx)) if units is None else units
    records = task.run_units(model, dataset, units, ctx)
    assert [r["unit_id"] for r in records] == units
    ok = pd.DataFrame([r for r in records if "error" not in r])
    return records, task.summarize(ok, model, dataset, ctx)


class SpyOracle(OracleCounter):
    def __init__(self):
        super().__init__()
        self.encoded, self.decoded = [], []

    def encode_images(self, items):
        self.encoded.extend(it.image_id for it in items)
        return super().encode_images(items)

    def decode(self, features, prompts):
        self.decoded.append(list(prompts))
        return super().decode(features, prompts)

    def decode_counts(self, features, prompts):
        self.decoded.append(list(prompts))
        return super().decode_counts(features, prompts)


def test_negative_encodes_once_and_decodes_all_prompts(shapes, ctx):
    spy = SpyOracle()
    records, result = run(PracoNegative(), spy, shapes, ctx)
    assert sorted(spy.encoded) == sorted(shapes.image_ids)
    # counts only: one decode_counts call per batch of images, with every class name for each image of the batch
    assert [p for call in spy.decoded for p in call] == list(shapes.classes) * len(shapes)
    assert len(spy.decoded) == -(-len(shapes) // ctx.batch_size)
    assert len(records) == 10 and all(len(r["counts"]) == 5 for r in records)
    assert result.metrics["nmn"] == 0.0 and result.metrics["pccn"] == 100.0
    assert result.metrics["mae"] == 0.0 and result.metrics["n_gt_zero"] == 0
    wide = result.tables["negative_counts"]
    assert list(wide.columns) == ["image_id", "class_name", "gt", *shapes.classes]
    diag = [row[row["class_name"]] for _, row in wide.iterrows()]
    np.testing.assert_array_equal(diag, wide["gt"])
    long = result.tables["negative_matrix"]
    assert list(long.columns) == ["class_name", "prompt", "image_id", "gt", "count"]
    assert len(long) == 10 * 5
    own = long["class_name"] == long["prompt"]
    np.testing.assert_array_equal(long.loc[own, "count"], long.loc[own, "gt"])
    assert (long.loc[~own, "count"] == 0).all()
    assert result.figures["negative_matrix"][:4] == b"\x89PNG"


def test_negative_class_blind_nmn_is_one(shapes, ctx):
    _, result = run(PracoNegative(), ClassBlindCounter(), shapes, ctx)
    assert result.metrics["nmn"] == pytest.approx(1.0)
    assert result.metrics["pccn"] == 0.0
    assert result.metrics["mean_negative_count"] == pytest.approx(np.mean(shapes.counts))


def test_mosaic_oracle_and_class_blind(shapes, ctx):
    task = PracoMosaic(n_figures=2)
    units = task.units(None, shapes, ctx)
    assert len(units) == 10 * 4 and all(PAIR_SEP in u for u in units)
    _, oracle = run(task, OracleCounter(), shapes, ctx)
    for key in ("cnt_precision", "cnt_recall", "cnt_f1", "cnt_f1_of_means", "loc_f1_micro_8x8", "loc_f1_macro_2x2"):
        assert oracle.metrics[key] == 1.0, key
    assert oracle.metrics["count_drift_mean"] == 0.0
    assert (oracle.metrics["mosaic_io_ratio"], oracle.metrics["mosaic_wdp"]) == (1.0, 0.0)  # all mass on top
    _, blind = run(PracoMosaic(n_figures=0), ClassBlindCounter(), shapes, ctx)
    pairs = blind.tables["mosaic_pairs"]
    expected_p = (pairs["gt"] / (pairs["gt"] + pairs["partner_id"].map(shapes.count_of))).groupby(
        pairs["image_id"]).mean().mean()
    assert blind.metrics["cnt_precision"] == pytest.approx(expected_p)
    assert blind.metrics["cnt_recall"] == 1.0
    assert blind.metrics["loc_precision_micro_4x4"] == pytest.approx(expected_p)
    # io_ratio = sigmoid(log(S_in / S_out)) = S_in / (S_in + S_out) per mosaic, averaged over mosaics
    share = pairs["gt"] / (pairs["gt"] + pairs["partner_id"].map(shapes.count_of))
    assert blind.metrics["mosaic_io_ratio"] == pytest.approx(share.mean())
    assert blind.metrics["mosaic_wdp"] > 0


class ForbidDensity(OracleCounter):
    """An oracle that refuses to count once ``summarize`` starts: what it needs must come from the records."""

    closed = False

    def density(self, items, prompts):
        if self.closed:
            raise AssertionError("summarize ran the model")
        return super().density(items, prompts)


def test_mosaic_summarize_does_not_run_the_model(shapes, ctx):
    task, model = PracoMosaic(n_figures=3), ForbidDensity()
    units = list(task.units(model, shapes, ctx))
    records = [r for half in (units[:17], units[17:]) for r in task.run_units(model, shapes, half, ctx)]
    model.closed = True
    result = task.summarize(pd.DataFrame(records), model, shapes, ctx)
    assert sorted(result.figures) == ["mosaic_00", "mosaic_01", "mosaic_02"]
    assert "figure_png" not in result.tables["mosaic_pairs"]
    # the figures stand at evenly spaced units of the whole list, whatever the chunks
    picked = result.tables["mosaic_pairs"].dropna(subset=["figure"])["unit_id"].tolist()
    assert picked == [units[0], units[len(units) // 2], units[-1]]


def test_mosaic_artifacts(shapes, ctx):
    _, result = run(PracoMosaic(n_figures=2), OracleCounter(), shapes, ctx)
    pairs = result.tables["mosaic_pairs"]
    assert {"image_id", "class_name", "other_class", "partner_id", "gt", "c_pos", "c_neg", "c_single",
            "drift", "figure"} <= set(pairs.columns)
    assert sorted(pairs["figure"].dropna()) == ["00", "01"]
    assert (pairs["class_name"] != pairs["other_class"]).all()
    assert (pairs["partner_id"].map(shapes.class_of) == pairs["other_class"]).all()
    upper = result.tables["mosaic_upper"]
    assert upper.shape == (10, 2 + 5)
    assert upper[shapes.classes].isna().sum().sum() == 10
    assert result.arrays["mosaic_cells"]["pred"].shape == (40, 8, 8)
    assert sorted(result.figures) == ["mosaic_00", "mosaic_01"]
    assert all(png[:4] == b"\x89PNG" for png in result.figures.values())
    schema = load_schema()
    for key in result.metrics:
        assert schema.metric(key).family == "counters"


def test_mosaic_horizontal_and_tile_size(shapes, ctx):
    _, result = run(PracoMosaic(orientation="horizontal", tile_size=(32, 40), n_figures=1), OracleCounter(),
                    shapes, ctx)
    assert result.metrics["cnt_f1"] == 1.0 and result.metrics["loc_f1_macro_8x8"] == 1.0


def test_mosaic_partner_that_fails_to_load_is_reported(tmp_path, shapes_root, ctx):
    root = tmp_path / "broken"
    shutil.copytree(shapes_root, root)
    ds = SyntheticShapes(root, **SMALL)
    task = PracoMosaic(n_figures=0)
    units = task.units(None, ds, ctx)
    victim = ds.images_of(ds.classes[1])[0]
    (root / fsc147.IMAGE_DIR / victim).write_bytes(b"not an image")
    records, result = run(task, OracleCounter(), ds, ctx, units)
    failed = [r for r in records if "error" in r]
    assert failed and all(victim in r["error"] for r in failed)
    assert len(failed) < len(units)
    assert result.metrics["cnt_f1"] == 1.0


def test_mosaic_whose_single_count_fails_says_why(shapes, ctx):
    """``c_ii`` (the positive image alone) failing for one image: that image's mosaics fail with the reason, the
    batch it was in is counted again image by image, the other mosaics are scored."""
    victim = shapes.image_ids[0]

    class FailsAlone(OracleCounter):
        def count(self, items, prompts):
            if any(it.image_id == victim for it in items):
                raise ValueError("the model cannot count this image")
            return super().count(items, prompts)

    task = PracoMosaic(n_figures=0)
    units = task.units(None, shapes, ctx)
    records, result = run(task, FailsAlone(), shapes, ctx, units)
    failed = [r for r in records if "error" in r]
    assert failed and len(failed) < len(units)
    assert all(r["unit_id"].startswith(victim) for r in failed)
    assert all(f"counting the positive image {victim!r} alone failed (ValueError: the model cannot count this "
               "image)" in r["error"] for r in failed)
    assert result.metrics["cnt_f1"] == 1.0


def test_negative_unreadable_image_and_unknown_class(tmp_path, shapes_root, ctx):
    root = tmp_path / "broken"
    shutil.copytree(shapes_root, root)
    ds = SyntheticShapes(root, **SMALL)
    victim = ds.image_ids[3]
    (root / fsc147.IMAGE_DIR / victim).write_bytes(b"\x00" * 10)
    records, result = run(PracoNegative(), OracleCounter(), ds, ctx)
    assert [r["unit_id"] for r in records if "error" in r] == [victim]
    assert "failed to load" in records[3]["error"]
    assert result.metrics["pccn"] == 100.0
    with pytest.raises(ConfigError, match="not classes of this dataset split"):
        PracoNegative(classes=["red circles", "unicorns"]).units(None, ds, ctx)


def test_single_class_split_is_refused(shapes_root, ctx):
    ds = SyntheticShapes(shapes_root, **SMALL, max_images=1)
    for task in (PracoNegative(), PracoMosaic()):
        with pytest.raises(ConfigError, match="at least 2 classes"):
            task.units(None, ds, ctx)
    with pytest.raises(ConfigError, match="at least 2 distinct"):
        PracoNegative(classes=["red circles", "red circles"]).units(None, ds, ctx)


def test_class_subset(shapes, ctx):
    task = PracoNegative(classes=["red circles", "blue squares"])
    records, result = run(task, OracleCounter(), shapes, ctx)
    assert len(records) == 4 and all(len(r["counts"]) == 2 for r in records)
    assert result.metrics["nmn"] == 0.0


def test_gt_zero_is_left_out_and_counted(tmp_path, ctx):
    cfg = {**SMALL, "count_range": (0, 2), "images_per_class": {"train": 0, "val": 0, "test": 4}}
    ds = SyntheticShapes(tmp_path / "zeros", **cfg)
    n_zero = int((ds.counts == 0).sum())
    assert n_zero > 0
    _, neg = run(PracoNegative(), ClassBlindCounter(), ds, ctx)
    assert neg.metrics["n_gt_zero"] == n_zero
    assert neg.metrics["nmn"] == pytest.approx(1.0)
    _, classic = run(ClassicCounting(), OracleCounter(), ds, ctx)
    points = {k: v for k, v in classic.metrics.items() if "__" not in k}
    assert points == {"mae": 0.0, "rmse": 0.0, "mape": 0.0, "n_gt_zero": float(n_zero), "n_images": len(ds.counts),
                      "exact_accuracy": 1.0, **PERFECT_ERRORS, "n_images_all": len(ds.counts)}
    _, mosaic = run(PracoMosaic(n_figures=0), OracleCounter(), ds, ctx)
    assert mosaic.metrics["cnt_recall"] == 1.0


#: The count errors of ``metrics.count_errors`` when every count is right (gt 0 included: sMAPE 0, nMAE 0).
PERFECT_ERRORS = {"off_by_one_acc": 100.0, "nmae": 0.0, "smape": 0.0, "relaxed_acc_5": 100.0, "relaxed_acc_10": 100.0}


def test_classic(shapes, ctx):
    _, result = run(ClassicCounting(), ClassBlindCounter(), shapes, ctx)
    n = len(shapes.image_ids)
    # every count right: each bootstrap interval is the point itself
    assert result.metrics == {"mae": 0.0, "rmse": 0.0, "mape": 0.0, "n_gt_zero": 0.0, "n_images": n,
                              **{f"{k}__{side}": 0.0 for k in ("mae", "rmse", "mape") for side in ("low", "high")},
                              "exact_accuracy": 1.0, "exact_accuracy__low": 1.0, "exact_accuracy__high": 1.0,
                              **PERFECT_ERRORS, "n_images_all": n,
                              **{f"{k}__{side}": v for k, v in PERFECT_ERRORS.items() for side in ("low", "high")}}
    assert result.tags == {"bootstrap": "percentile, 2000 resamples, seed 0"}


@pytest.mark.slow
def test_sweep_end_to_end(tmp_path):
    from tests.conftest import run_sweep, store_runs

    small = ["dataset.images_per_class={train:0,val:0,test:2}", "dataset.multi_class_images=0",
             "dataset.image_size=[64,64]", "dataset.size_range=[6,10]", "dataset.count_range=[1,15]",
             "dataset.n_classes=5"]
    run_sweep(["-m", "model=oracle,class_blind", "dataset=synthetic_shapes", "task=praco_negative,praco_mosaic",
               *small], tmp_path)
    store = tmp_path / "mlruns"
    cells = store_runs(store)
    cells = cells[cells["tags.countboard.role"] == "cell"].set_index(["tags.model", "tags.task"])
    assert len(cells) == 4 and set(cells["status"]) == {"FINISHED"}
    assert set(cells["tags.family"]) == {"counters"}
    schema = load_schema()
    negative_keys = ["nmn", "pccn", "mae", "rmse", "mape", "n_gt_zero", "mean_negative_count"]
    mosaic_keys = [m.key for m in schema.family_metrics("counters")
                   if m.key.startswith(("cnt_", "loc_", "count_")) and m.bound_of is None]
    assert len(mosaic_keys) == 4 + 18 + 2
    for model in ("oracle", "class_blind"):
        for task, keys in (("praco_negative", negative_keys), ("praco_mosaic", mosaic_keys)):
            for key in keys:
                value = cells.loc[(model, task), f"metrics.{key}"]
                assert not np.isnan(value), (model, key)
                iv = schema.metric(key).interval
                if iv is not None:  # its bootstrap interval, logged beside it, holds the value
                    low, high = (cells.loc[(model, task), f"metrics.{b}"] for b in (iv.low, iv.high))
                    assert low <= value + 1e-12 and value <= high + 1e-12, (model, key, low, value, high)
    oracle_neg, blind_neg = cells.loc[("oracle", "praco_negative")], cells.loc[("class_blind", "praco_negative")]
    assert (oracle_neg["metrics.nmn"], oracle_neg["metrics.pccn"]) == (0.0, 100.0)
    assert blind_neg["metrics.nmn"] == pytest.approx(1.0)
    oracle_mos = cells.loc[("oracle", "praco_mosaic")]
    assert [oracle_mos[f"metrics.cnt_{k}"] for k in ("precision", "recall", "f1")] == [1.0, 1.0, 1.0]
    assert cells.loc[("class_blind", "praco_mosaic"), "metrics.cnt_precision"] < 1.0
    assert cells.loc[("oracle", "praco_mosaic"), "metrics.n_samples"] == 10 * 4
    art = next(store.glob(f"artifacts/*/{oracle_mos['run_id']}/artifacts"))
    pairs = pd.read_parquet(art / "tables" / "mosaic_pairs.parquet")
    assert len(pairs) == 40 and len(list((art / "figures").glob("mosaic_*.png"))) == 8
    neg_art = next(store.glob(f"artifacts/*/{oracle_neg['run_id']}/artifacts"))
    assert pd.read_parquet(neg_art / "tables" / "negative_counts.parquet").shape == (10, 3 + 5)
    assert pd.read_parquet(neg_art / "tables" / "negative_matrix.parquet").shape == (10 * 5, 5)
    official = [m.key for m in schema.family_metrics("counters")
                if m.key.startswith("official_") and not m.key.startswith("official_mc_")]
    assert len(official) == 8 + 24
    for key in official:
        task = "praco_negative" if key in ("official_avg_np", "official_avg_nmn", "official_pccn", "official_mae",
                                           "official_rmse") else "praco_mosaic"
        assert not np.isnan(cells.loc[("oracle", task), f"metrics.{key}"]), key
    for art_dir in (art, neg_art):
        final = pd.read_csv(art_dir / "files" / "final_metrics_test.csv")
        assert final.shape == (1, 1 + 32)


@pytest.mark.parametrize("overrides", [
    ["model=oracle", "dataset=synthetic_shapes", "task=praco_negative"],
    ["model=class_blind", "dataset=fsc147", "task=praco_mosaic"],
    ["model=oracle", "dataset=fsc147", "task=classic"],
])
def test_configs_compose_and_instantiate(overrides, tmp_path):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from countboard.config import instantiate_node, register_configs
    from countboard.paths import conf_dir

    register_configs()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            cfg = compose("config", overrides=[*overrides, f"data_dir={tmp_path}"])
    finally:
        GlobalHydra.instance().clear()
    task = instantiate_node(cfg, "task")
    model = instantiate_node(cfg, "model", device="cpu")
    assert task.family == "counters" and model.kind == "counter"
    if cfg.dataset.name == "fsc147":
        assert cfg.dataset.root == f"{tmp_path}/FSC147_384_V2"
        with pytest.raises(Exception, match="LearningToCountEverything") as err:
            instantiate_node(cfg, "dataset")
        assert isinstance(err.value, DataNotFoundError) or isinstance(err.value.__cause__, DataNotFoundError)


# ------------------------------------------------------------------ the released scorer's values (issue 14)
def test_official_values_beside_the_paper_ones(shapes, ctx):
    _, neg = run(PracoNegative(), OracleCounter(), shapes, ctx)
    assert neg.metrics["official_avg_np"] == 1.0 and neg.metrics["official_avg_nmn"] == 0.0
    assert neg.metrics["official_pccn"] == 100.0
    final = pd.read_csv(neg.files["final_metrics_test.csv"])
    assert final.loc[0, "PCCN"] == 100.0 and np.isnan(final.loc[0, "AvgCntRecall"])
    _, oracle = run(PracoMosaic(n_figures=0), OracleCounter(), shapes, ctx)
    for n in (4, 16, 64):
        for avg in ("macro", "micro"):
            assert oracle.metrics[f"official_localized_f_score_{avg}_div{n}"] == 1.0
            assert oracle.metrics[f"official_localized_total_mae_{avg}_div{n}"] == 0.0
    _, blind = run(PracoMosaic(n_figures=0), ClassBlindCounter(), shapes, ctx)
    assert blind.metrics["official_avg_cnt_precision"] == pytest.approx(blind.metrics["cnt_precision"])
    assert blind.metrics["official_avg_cnt_recall"] == 1.0
    # released localized precision: sum tp / sum pred per mosaic = gt / (gt + partner count), like the paper's micro
    assert blind.metrics["official_localized_precision_micro_div4"] == pytest.approx(
        blind.tables["mosaic_pairs"].eval("gt / (gt + c_neg)").mean())


def test_official_rounding(shapes, ctx):
    _, blind = run(PracoMosaic(n_figures=0, official_rounding=True), ClassBlindCounter(), shapes, ctx)
    value = blind.metrics["official_avg_cnt_precision"]
    assert value == round(value, 3) and blind.metrics["cnt_precision"] != round(blind.metrics["cnt_precision"], 3)


def test_official_mosaic_preset_and_pairs_file(shapes, ctx, tmp_path):
    import random

    from countboard.counting.datasets.mosaic import official_partners

    task = PracoMosaic(mosaic="official", n_figures=0)
    units = task.units(None, shapes, ctx)
    records, result = run(task, OracleCounter(), shapes, ctx)
    assert result.metrics["cnt_f1"] == 1.0 and result.tags["praco.mosaic"] == "official"
    rng = random.Random(123)   # the authors' draw, written out: images in order, other classes in order
    expected = {}
    for i in shapes.image_ids:
        for c in shapes.classes:
            if c != shapes.class_of(i):
                expected[(i, c)] = rng.choice(shapes.images_of(c))
    assert official_partners(shapes, shapes.classes) == expected
    assert {(r["image_id"], r["other_class"]): r["partner_id"] for r in records} == expected
    pairs = tmp_path / "mosaic_image_pairs.csv"
    first = shapes.image_ids[0]
    others = [c for c in shapes.classes if c != shapes.class_of(first)]
    pairs.write_text("," + ",".join(shapes.classes) + "\n" + first + "," + ",".join(
        "" if c == shapes.class_of(first) else shapes.images_of(c)[-1] for c in shapes.classes) + "\n")
    task = PracoMosaic(pairs_file=str(pairs), n_figures=0)
    mine = [u for u in units if u.startswith(first + PAIR_SEP)]
    records, _ = run(task, OracleCounter(), shapes, ctx, units=mine)
    assert [r["partner_id"] for r in records] == [shapes.images_of(c)[-1] for c in others]
    with pytest.raises(ConfigError, match="square vertical collage"):
        PracoMosaic(mosaic="official", orientation="horizontal")


def test_official_mosaic_is_square_with_the_pil_default_filter():
    from PIL import Image

    from countboard.counting.datasets.mosaic import build_official_mosaic
    from countboard.items import ImageItem

    rng = np.random.default_rng(0)
    a = ImageItem("a", rng.integers(0, 255, (41, 60, 3), dtype=np.uint8), {"x": np.array([[30.0, 20.0]])}, {}, "x")
    b = ImageItem("b", rng.integers(0, 255, (50, 33, 3), dtype=np.uint8), {}, {}, "y")
    m = build_official_mosaic(a, b)
    assert m.item.size == (40, 41) and m.seam == 20
    top = np.asarray(Image.fromarray(a.image).resize((41, 20)))
    np.testing.assert_array_equal(m.item.image[:20], top)
    np.testing.assert_allclose(m.item.points["x"], [[30.0 * 41 / 60, 20.0 * 20 / 41]])
