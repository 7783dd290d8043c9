"""The grounding task: records, summary, artifacts, bad input, and an end-to-end sweep on the synthetic set."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from countboard.errors import DataNotFoundError
from countboard.grounding.datasets.public import GroundingDataset, GroundingSample
from countboard.grounding.datasets.synthetic import SyntheticGrounding
from countboard.grounding.models.baselines import BoxOracle, CenterPrior
from countboard.grounding.tasks.grounding import GroundingTask
from countboard.metrics.grounding import grounding_metrics
from countboard.models.base import Counter, GroundingModel
from countboard.results import RunContext
from countboard.schema import load_schema


@pytest.fixture(scope="module")
def dataset():
    return SyntheticGrounding(n_samples=10, image_size=(96, 96), size_range=(16, 28))


def _ctx(tmp_path: Path, batch_size: int = 4) -> RunContext:
    return RunContext(device="cpu", seed=0, batch_size=batch_size, work_dir=tmp_path, progress=False)


def _run(model, dataset, tmp_path, batch_size=4):
    task = GroundingTask(n_examples=2, hist_bins=10)
    records = task.run_units(model, dataset, task.units(model, dataset, _ctx(tmp_path)), _ctx(tmp_path, batch_size))
    return task, records


def test_summary_matches_per_sample_metrics(dataset, tmp_path):
    task, records = _run(CenterPrior(), dataset, tmp_path)
    df = pd.DataFrame(records)
    assert len(df) == 10 and "error" not in df
    maps = CenterPrior().heatmaps(dataset.samples)
    for s, m, (_, row) in zip(dataset.samples, maps, df.iterrows(), strict=True):
        assert row["unit_id"] == s.sample_id
        assert row["iou_soft"] == pytest.approx(grounding_metrics(m, s.box)["iou_soft"])
    result = task.summarize(df, CenterPrior(), dataset, _ctx(tmp_path))
    for key in ("iou_soft", "dice_soft", "iou_binary", "dice_binary", "wdp", "wdp_binary", "io_ratio"):
        assert result.metrics[key] == pytest.approx(df[key].mean())
    hits, unc = int(df["pg_hit"].sum()), int(df["pg_uncertain"].sum())
    assert result.metrics["pg_accuracy"] == pytest.approx(hits / 10)
    assert result.metrics["pg_hits"] == hits and result.metrics["pg_uncertain_count"] == unc
    assert result.tags == {"pg_accuracy_k_of_n": f"{hits} / 10", "pg_uncertainty_k_of_n": f"{unc} / 10",
                           "explainer_method": "center_prior", "bootstrap": "percentile, 2000 resamples, seed 0",
                           "explainer_detail": CenterPrior().explainer_detail()}
    for key in ("iou_soft", "io_ratio", "pg_accuracy", "pg_uncertainty"):  # bootstrap intervals over the 10 samples
        assert result.metrics[f"{key}__low"] <= result.metrics[key] <= result.metrics[f"{key}__high"]
    assert df["iou_soft"].min() <= result.metrics["iou_soft__low"] < result.metrics["iou_soft__high"] \
        <= df["iou_soft"].max()
    hist = result.tables["grounding_histograms"]
    assert set(hist["metric"]) == {"iou_soft", "io_ratio"}
    assert hist.groupby("metric")["count"].sum().tolist() == [10, 10]
    assert result.figures["grounding_histograms"][:4] == b"\x89PNG"
    assert isinstance(result.figures["grounding_example_01"], Image.Image)
    schema = load_schema()
    assert all(schema.metric(k).family == "grounding" for k in result.metrics)


def test_oracle_beats_centre_prior(dataset, tmp_path):
    summaries = {}
    for model in (BoxOracle(), CenterPrior()):
        task, records = _run(model, dataset, tmp_path)
        summaries[type(model).__name__] = task.summarize(pd.DataFrame(records), model, dataset, _ctx(tmp_path))
    oracle, prior = summaries["BoxOracle"].metrics, summaries["CenterPrior"].metrics
    assert oracle["pg_accuracy"] == 1.0 and oracle["pg_uncertainty"] == 0.0
    assert oracle["iou_soft"] > prior["iou_soft"] and oracle["io_ratio"] > prior["io_ratio"]
    assert oracle["wdp"] < prior["wdp"]


class _Flaky(GroundingModel):
    """Box-centred spikes, except: NaN map for 'nan', exception for 'boom', constant map for 'flat'."""

    def heatmaps(self, samples):
        out = []
        for s in samples:
            if s.phrase == "boom":
                raise RuntimeError("model exploded")
            m = np.zeros(s.image.shape[:2], np.float32)
            y0, x0, y1, x1 = (int(v) for v in s.box)
            m[min((y0 + y1) // 2, 31), min((x0 + x1) // 2, 31)] = 1.0
            if s.phrase == "nan":
                m[0, 0] = np.nan
            if s.phrase == "flat":
                m[:] = 0.3
            if s.phrase == "small":
                m = m[:16]
            out.append(m)
        return out


def test_bad_units_fail_alone(tmp_path):
    img = np.zeros((32, 32, 3), np.uint8)
    phrases = ["ok", "nan", "boom", "outside", "flat", "ok2", "small"]
    samples = [GroundingSample(f"u{k}", p, (40, 40, 50, 50) if p == "outside" else (4, 4, 12, 12), image=img)
               for k, p in enumerate(phrases)]
    task, records = _run(_Flaky(), GroundingDataset(samples), tmp_path, batch_size=3)
    by_id = {r["unit_id"]: r for r in records}
    assert sorted(by_id) == [f"u{k}" for k in range(7)]
    assert "NaN" in by_id["u1"]["error"]
    assert by_id["u2"]["error"] == "RuntimeError: model exploded"
    assert "outside the 32x32 image" in by_id["u3"]["error"]
    assert by_id["u4"]["empty_map"] == 1.0 and by_id["u4"]["iou_soft"] == 0.0
    assert by_id["u0"]["pg_hit"] == 1.0 and by_id["u5"]["io_ratio"] == 1.0
    assert "shape (16, 32) for an image of size (32, 32)" in by_id["u6"]["error"]


class _BoxCounter(Counter):
    """A counter whose density for any prompt is a unit spike at the image centre."""

    def decode(self, features, prompts):
        out = []
        for item in features:
            d = np.zeros(item.size, np.float32)
            d[item.size[0] // 2, item.size[1] // 2] = 1.0
            out.append(d)
        return out


def test_counter_density_maps_are_grounded(tmp_path):
    img = np.zeros((20, 20, 3), np.uint8)
    ds = GroundingDataset([GroundingSample("a", "dogs", (5, 5, 15, 15), image=img),
                           GroundingSample("b", "cats", (0, 0, 4, 4), image=img)])
    task, records = _run(_BoxCounter(), ds, tmp_path)
    assert [r["pg_hit"] for r in records] == [1.0, 0.0]
    assert [r["io_ratio"] for r in records] == [1.0, 0.0]
    result = task.summarize(pd.DataFrame(records), _BoxCounter(), ds, _ctx(tmp_path))
    assert result.tags["explainer_method"] == "density_map"


class _NearTie(GroundingModel):
    """Peak 1.0 inside the box and 0.996 far outside it: a tie only within a tolerance."""

    explainer_method = "test_near_tie"

    def heatmaps(self, samples):
        maps = []
        for s in samples:
            m = np.zeros(s.image.shape[:2], np.float32)
            m[4, 10], m[4, 110] = 1.0, 0.996
            maps.append(m)
        return maps


def test_tie_tolerance_reaches_the_metric(tmp_path):
    ds = GroundingDataset([GroundingSample("a", "x", (0, 0, 8, 60), image=np.zeros((20, 120, 3), np.uint8))])
    exact = GroundingTask().run_units(_NearTie(), ds, ["a"], _ctx(tmp_path))
    loose = GroundingTask(tie_tol=0.005).run_units(_NearTie(), ds, ["a"], _ctx(tmp_path))
    assert exact[0]["pg_uncertain"] == 0.0 and loose[0]["pg_uncertain"] == 1.0
    from countboard.errors import ConfigError

    with pytest.raises(ConfigError, match="task.tie_tol"):
        GroundingTask(tie_tol=-0.1)


@pytest.mark.parametrize(("overrides", "error"), [
    (["model=box_oracle", "dataset=synthetic_grounding"], None),
    (["model=center_prior", "dataset=flickr30k_entities"], "final_flickr_mergedGT_test.json"),
    (["model=clip_tiny_random", "dataset=refcoco_plus_testa"], "refs(unc).p"),
    (["model=box_oracle", "dataset=refcoco_plus_testb"], "refs(unc).p"),
    (["model=box_oracle", "dataset=spatialsense", "dataset.setting=object"], "annotations.json"),
    (["model=clip_gscorecam", "dataset=flickr30k_entities", "dataset.layout=raw"], "test.txt"),
])
def test_configs_compose_and_instantiate(overrides, error, tmp_path):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from countboard.config import instantiate_node, register_configs
    from countboard.paths import conf_dir

    register_configs()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            cfg = compose("config", overrides=[*overrides, "task=grounding", f"data_dir={tmp_path}",
                                                "dataset.max_samples=2"])
    finally:
        GlobalHydra.instance().clear()
    assert instantiate_node(cfg, "task").family == "grounding"
    assert cfg.model.kind == "vlm"
    if error is None:
        assert len(instantiate_node(cfg, "dataset")) == 2
        return
    with pytest.raises(Exception, match=error.replace("(", r"\(").replace(")", r"\)")) as err:
        instantiate_node(cfg, "dataset")
    assert isinstance(err.value, DataNotFoundError) or isinstance(err.value.__cause__, DataNotFoundError)
    if "spatialsense" in overrides[1]:
        assert cfg.dataset.name == "spatialsense_object"


def test_blip_and_clip_configs_name_the_published_checkpoints():
    from omegaconf import OmegaConf

    from countboard.paths import conf_dir

    assert OmegaConf.load(conf_dir() / "model" / "clip_gradcam.yaml").model_id == "openai/clip-vit-base-patch16"
    assert OmegaConf.load(conf_dir() / "model" / "blip_gradcam.yaml").model_id == "Salesforce/blip-itm-base-coco"


@pytest.mark.slow
def test_sweep_end_to_end_on_synthetic_grounding(tmp_path):
    from tests.conftest import run_sweep, store_runs

    run_sweep(["-m", "model=box_oracle,clip_tiny_random", "dataset=synthetic_grounding",
               "dataset.n_samples=12", "dataset.image_size=[96,96]", "dataset.size_range=[16,28]",
               "task=grounding", "task.n_examples=2", "batch_size=6"], tmp_path)
    store = tmp_path / "mlruns"
    runs = store_runs(store)
    cells = runs[runs["tags.countboard.role"] == "cell"].set_index("tags.model")
    assert sorted(cells.index) == ["box_oracle", "clip_tiny_random"]
    assert set(cells["status"]) == {"FINISHED"} and set(cells["tags.family"]) == {"grounding"}
    assert (cells["metrics.n_samples"] == 12).all() and (cells["metrics.n_failed_samples"] == 0).all()
    assert cells.loc["box_oracle", "tags.pg_accuracy_k_of_n"] == "12 / 12"
    assert cells.loc["box_oracle", "tags.explainer_method"] == "box_oracle"
    assert cells.loc["clip_tiny_random", "tags.explainer_method"] == "gradcam"
    assert "upsample bicubic_clip" in cells.loc["clip_tiny_random", "tags.explainer_detail"]
    assert cells.loc["box_oracle", "metrics.io_ratio"] > cells.loc["clip_tiny_random", "metrics.io_ratio"]
    for model in cells.index:
        for key in ("iou_soft", "dice_soft", "iou_binary", "dice_binary", "wdp", "wdp_binary", "io_ratio",
                    "pg_accuracy", "pg_uncertainty"):
            assert 0.0 <= cells.loc[model, f"metrics.{key}"] <= 1.0, (model, key)
    art = next(store.glob(f"artifacts/*/{cells.loc['clip_tiny_random', 'run_id']}/artifacts"))
    samples = pd.read_parquet(art / "samples.parquet")
    assert len(samples) == 12 and {"iou_soft", "io_ratio", "pg_uncertain"} <= set(samples.columns)
    assert (art / "tables" / "grounding_histograms.parquet").is_file()
    assert sorted(p.name for p in (art / "figures").iterdir()) == [
        "grounding_example_00.png", "grounding_example_01.png", "grounding_histograms.png"]


def _records_through_loader(model, dataset, tmp_path, workers: int, batch_size=3, every: int = 3) -> list[dict]:
    """The records as the engine computes them: chunks of ``every`` units, one input stream over all chunks."""
    from countboard.inputs import InputStream

    task = GroundingTask()
    ctx = _ctx(tmp_path, batch_size)
    units = task.units(model, dataset, ctx)
    chunks = [units[i:i + every] for i in range(0, len(units), every)]
    out = []
    with InputStream(dataset.load, [k for c in chunks for k in task.input_keys(model, dataset, c, ctx)],
                     workers) as ctx.inputs:
        for chunk in chunks:
            out += task.run_units(model, dataset, chunk, ctx)
    return out


def test_samples_are_read_through_the_loader_with_the_same_records(dataset, tmp_path):
    """Images on disk, one missing and one corrupt: the same records with 0 or 2 loader workers, equal to those
    of the same samples held in memory, and the unreadable ones fail alone with the reader's message."""
    on_disk = []
    for k, s in enumerate(dataset.samples):
        path = tmp_path / f"{s.sample_id}.png"
        if k == 3:
            path.write_bytes(b"not a png")
        elif k != 6:
            Image.fromarray(s.image).save(path)
        on_disk.append(GroundingSample(s.sample_id, s.phrase, s.box, image_path=path, meta=dict(s.meta)))
    files = GroundingDataset(on_disk)
    for model in (_Flaky(), _BoxCounter()):
        plain = _records_through_loader(model, files, tmp_path, workers=0)
        assert _records_through_loader(model, files, tmp_path, workers=2) == plain
        assert _records_through_loader(model, files, tmp_path, workers=2, batch_size=1, every=4) == plain
        by_id = {r["unit_id"]: r for r in plain}
        bad = {dataset.samples[3].sample_id, dataset.samples[6].sample_id}
        assert by_id[dataset.samples[6].sample_id]["error"] == (
            f"FileNotFoundError: image of sample {dataset.samples[6].sample_id} not found at "
            f"{tmp_path / (dataset.samples[6].sample_id + '.png')}")
        assert by_id[dataset.samples[3].sample_id]["error"].startswith("UnidentifiedImageError: cannot identify")
        in_memory = {r["unit_id"]: r for r in GroundingTask().run_units(model, dataset, dataset.ids(), _ctx(tmp_path))}
        assert {u: r for u, r in by_id.items() if u not in bad} == {u: r for u, r in in_memory.items()
                                                                    if u not in bad}
    # a reference model reads no pixels: nothing is decoded, and a sample whose size is declared is scored even
    # when its image is missing, as it always was
    sized = GroundingDataset([GroundingSample(s.sample_id, s.phrase, s.box, image_path=s.image_path,
                                              meta={**s.meta, "image_size": (96, 96)}) for s in on_disk])
    assert GroundingTask().input_keys(CenterPrior(), sized, sized.ids(), _ctx(tmp_path)) == []
    records = _records_through_loader(CenterPrior(), sized, tmp_path, workers=2)
    assert "error" not in pd.DataFrame(records) and records == GroundingTask().run_units(
        CenterPrior(), dataset, dataset.ids(), _ctx(tmp_path))
