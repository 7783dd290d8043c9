"""``praco_zoo``: the published counters through the authors' interface, on a fake checkout (no weights).

Every one of the ten calling conventions is run through the project's tasks; the records equal what the fake
returns; the missing checkout, weights and packages are one line before any run; a sweep over all ten exports the
released layout, read back with the authors' layout rules (the reader of ``tests/counting/test_released.py``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from countboard.counting.datasets.praco_multiclass import SyntheticMulticlass
from countboard.counting.models.praco_zoo import PUBLISHED, PracoZooCounter, _to_collage, checkout_revision
from countboard.counting.released.layout import map_name
from countboard.counting.tasks.praco import PracoMosaic, PracoNegative
from countboard.counting.tasks.praco_multiclass import PracoMulticlass
from countboard.errors import ConfigError, DataNotFoundError
from countboard.results import RunContext
from tests.counting.test_released import _read
from tests.fixtures.praco_checkout import EXTRA_NAMES, expected_count, write_fake_checkout

NAMES = [n for n in PUBLISHED if n not in EXTRA_NAMES]     # the ten of IMPLEMENTED_MODELS


SHAPES = {"images_per_class": {"train": 0, "val": 0, "test": 1}, "multi_class_images": 0, "image_size": (40, 48),
          "size_range": (4.0, 6.0), "count_range": (1, 4), "n_classes": 3}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return SyntheticMulticlass(tmp_path_factory.mktemp("zoo") / "mc", n_images=3, n_classes=3,
                               image_size=(40, 48), count_range=(1, 4))


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    from countboard.counting.datasets.synthetic_shapes import SyntheticShapes

    return SyntheticShapes(tmp_path_factory.mktemp("zoo") / "shapes", **SHAPES)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory, dataset, shapes):
    assert shapes.classes == dataset.classes     # ZSC's prompts index one class list
    return write_fake_checkout(tmp_path_factory.mktemp("zoo") / "PrACo", dataset.classes,
                               images={i: shapes.class_of(i) for i in shapes.image_ids})


@pytest.fixture
def ctx(tmp_path):
    return RunContext(device="cpu", seed=0, batch_size=2, work_dir=tmp_path, progress=False)


def _records(task, model, dataset, ctx):
    records = task.run_units(model, dataset, task.units(model, dataset, ctx), ctx)
    assert not [r for r in records if "error" in r], records
    return records


@pytest.mark.parametrize("name", NAMES)
def test_each_calling_convention_through_the_tasks(name, checkout, dataset, shapes, ctx):
    model = PracoZooCounter(counter=name, repo=str(checkout))
    assert model.name == name and model.caches_image_features is False
    tags = model.run_tags()
    assert tags["praco.repo_revision"] == checkout_revision(checkout) and len(tags["praco.repo_revision"]) == 40
    # negative-label test: the fake's count of every (image, class); DAVE also gets the image's class
    for record in _records(PracoNegative(), model, shapes, ctx):
        item = shapes.load(record["image_id"])
        want = [expected_count(item.image, c, name, positives=[item.class_name]) for c in shapes.classes]
        np.testing.assert_allclose(record["counts"], want, rtol=1e-6, err_msg=name)
    items = {i: dataset.load(i) for i in dataset.image_ids}
    # multi-class test: DAVE gets every class of the image and multiclass_main.py's per_cluster_thresh
    multi = _records(PracoMulticlass(keep_maps=True), model, dataset, ctx)
    for record in multi:
        item = items[record["image_id"]]
        present = [c for c in dataset.classes if dataset.counts_of(item.image_id)[c] > 0]
        want = [expected_count(item.image, c, name, positives=present, multi=True) for c in dataset.classes]
        np.testing.assert_allclose(record["counts"], want, rtol=1e-6, err_msg=name)
    summary = PracoMulticlass(keep_maps=True).summarize(pd.DataFrame(multi), model, dataset, ctx)
    maps = summary.arrays["density_maps"]
    first = Path(dataset.image_ids[0]).stem
    # the map is resized to the image, its sum kept (the fake's map sums to the base count)
    dmap = maps[f"{first}_{dataset.classes[0]}"]
    assert dmap.shape == items[dataset.image_ids[0]].size
    assert float(dmap.sum()) == pytest.approx(expected_count(items[dataset.image_ids[0]].image,
                                                             dataset.classes[0], "CLIP-Count"), rel=1e-5)
    assert "mc_localized_recall_micro_div4" in summary.metrics
    # mosaic test: infer(collage, prompt) for every counter; the halves add up to the map's sum
    task = PracoMosaic(tile_size=(20, 24), keep_maps=True, n_figures=0)
    mosaic = _records(task, model, shapes, ctx)
    for record in mosaic:
        total = record["upper"] + record["lower"]
        base = total - len(record["class_name"])
        assert 0 <= base <= 256 / 16, (name, record)
    kept = task.summarize(pd.DataFrame(mosaic), model, shapes, ctx).arrays["density_maps"]
    record = mosaic[0]
    upper = kept[map_name(record["image_id"], record["other_class"], "upper")[:-4]]
    assert upper.shape == (20, 24) and float(upper.sum()) == pytest.approx(record["upper"], rel=1e-5)
    assert len(kept) == 2 * len(mosaic)


def test_dave_gets_the_arguments_of_the_benchmark(checkout, dataset, ctx):
    model = PracoZooCounter(counter="DAVE", repo=str(checkout), dave_per_cluster_thresh=False,
                            dave_take_min_score=True)
    image_id = dataset.image_ids[0]
    item = dataset.load(image_id)
    model.model.calls.clear()
    model.decode([item] * len(dataset.classes), dataset.classes)
    present = [c for c in dataset.classes if dataset.counts_of(image_id)[c] > 0]
    assert len(present) > 1
    assert model.model.calls == [(c, present, False, True) for c in dataset.classes]
    model.model.calls.clear()
    model.density([item], [dataset.classes[0]])             # the mosaic call: no text_positive
    assert model.model.calls == [(dataset.classes[0], None, False, False)]
    model.model.calls.clear()
    single = dataset.load(dataset.image_ids[1])
    single = type(single)(single.image_id, single.image, {single.class_name: single.points[single.class_name]},
                          class_name=single.class_name)
    counts = model.count([single], [single.class_name])     # Test 1's call: the image's class as text_positive
    assert model.model.calls == [(single.class_name, single.class_name, False, False)]
    assert counts.tolist() == [pytest.approx(expected_count(single.image, single.class_name, "DAVE",
                                                            positives=[single.class_name]))]


def test_missing_checkout_weights_and_packages_are_one_line(tmp_path, checkout):
    with pytest.raises(DataNotFoundError, match="git clone https://github.com/ciampluca/PrACo"):
        PracoZooCounter.preflight({"counter": "CountGD", "repo": str(tmp_path / "nowhere")})
    with pytest.raises(ConfigError, match="not a published PrACo counter; use one of CounTX, CLIP-Count"):
        PracoZooCounter.preflight({"counter": "CountGD3", "repo": str(checkout)})
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataNotFoundError, match="models/loader.py"):
        PracoZooCounter.preflight({"counter": "CountGD", "repo": str(empty)})
    copy = tmp_path / "copy"
    shutil.copytree(checkout, copy)
    (copy / "models" / "CountGD" / "checkpoints" / "checkpoint_best_regular_fsc147_filtered.pth").unlink()
    PracoZooCounter.preflight({"counter": "CountGD", "repo": str(copy)})   # the unfiltered weights are there
    with pytest.raises(DataNotFoundError, match=r"checkpoint_best_regular_fsc147_filtered\.pth.*CountGD weights "
                       r"are missing.*3\. Download Pre-Trained Weights"):
        PracoZooCounter.preflight({"counter": "CountGD", "repo": str(copy), "load_filtered_checkpoints": True})
    module = copy / "models" / "PseCo_model.py"
    module.write_text("import albumentations_not_installed_here\n" + module.read_text())
    with pytest.raises(ConfigError, match="PseCo needs the Python package 'albumentations_not_installed_here'.*"
                       "section 'Installation'"):
        PracoZooCounter.preflight({"counter": "PseCo", "repo": str(copy)})
    assert checkout_revision(tmp_path) == "unknown"


@pytest.mark.slow
def test_sweep_over_the_ten_conventions_exports_the_released_layout(tmp_path, checkout, dataset, shapes):
    from countboard.cli import main
    from countboard.tracking.store import open_store
    from tests.conftest import run_sweep, store_runs

    model = ["model=praco_zoo", f"model.name={','.join(NAMES)}", f"model.repo={checkout}"]
    small = ["dataset=synthetic_shapes", f"dataset.root={shapes.root}", "dataset.images_per_class={train:0,val:0,test:1}",
             "dataset.multi_class_images=0", "dataset.image_size=[40,48]", "dataset.size_range=[4,6]",
             "dataset.count_range=[1,4]", "dataset.n_classes=3"]
    run_sweep(["-m", *model, "task=praco_negative,praco_mosaic", *small], tmp_path, timeout=900)
    run_sweep(["-m", *model, "task=praco_multiclass", "task.keep_maps=true", "dataset=synthetic_multiclass",
               f"dataset.root={dataset.root}", "dataset.n_images=3", "dataset.n_classes=3",
               "dataset.image_size=[40,48]", "dataset.count_range=[1,4]"], tmp_path, timeout=900)
    store = tmp_path / "mlruns"
    runs = store_runs(store)
    cells = runs[runs["tags.countboard.role"] == "cell"]
    assert len(cells) == 30 and set(cells["status"]) == {"FINISHED"}
    assert set(cells["tags.praco.repo_revision"]) == {checkout_revision(checkout)}
    assert set(cells["tags.model"]) == set(NAMES)
    # a missing checkout stops the sweep before any run is created
    proc = run_sweep(["model=praco_zoo", "model.repo=/nonexistent/PrACo", "task=praco_negative", *small], tmp_path,
                     store=tmp_path / "other", check=False)
    assert proc.returncode != 0 and "git clone https://github.com/ciampluca/PrACo" in proc.stderr
    assert not (tmp_path / "other" / "mlflow.db").exists() or len(store_runs(tmp_path / "other")) == 0

    tracker = open_store(str(store))
    cells = cells.set_index(["tags.model", "tags.task"])
    for name in NAMES:
        ids = [cells.loc[(name, t), "run_id"] for t in ("praco_negative", "praco_mosaic")]
        out = tmp_path / "exported"
        assert main(["export-praco", *ids, "--out", str(out), "--store", str(store)]) == 0
        test1 = _read(out / name / f"Inference_Test1_{name}_test.csv")
        counts = pd.read_parquet(tracker.download(ids[0], "tables/negative_counts.parquet", tmp_path / name))
        for row in counts.to_dict("records"):
            item = shapes.load(row["image_id"])
            for c in shapes.classes:
                want = expected_count(item.image, c, name, positives=[item.class_name])
                assert float(test1[row["image_id"]][c]) == pytest.approx(round(want, 2), abs=0.006), (name, c)
        upper = _read(out / name / f"Inference_Test2_Upper_{name}_test.csv")
        assert set(upper) == set(counts["image_id"])
        mc_id = cells.loc[(name, "praco_multiclass"), "run_id"]
        assert main(["export-praco", mc_id, "--out", str(out / "mc"), "--store", str(store)]) == 0
        grid = _read(out / "mc" / name / f"multiclass_{name}_test1.csv")
        assert set(grid) == set(dataset.image_ids)
        for image_id, row in grid.items():
            item = dataset.load(image_id)
            present = [c for c in dataset.classes if dataset.counts_of(image_id)[c] > 0]
            want = [expected_count(item.image, c, name, positives=present, multi=True) for c in dataset.classes]
            assert [float(row[c]) for c in dataset.classes] == pytest.approx(want, abs=0.006), name
        assert len(list((out / "mc" / name / "density_maps").glob("*.npy"))) == 3 * 3


@pytest.mark.parametrize(("native", "collage"), [((384, 384), (200, 150)), ((97, 61), (300, 420)), ((5, 3), (8, 6))])
def test_mosaic_halves_are_the_returned_maps_halves(native, collage):
    """benchmark.py: ``half_height = density.size(0) // 2``; the counts are the sums above and below it. The map
    resized to the collage keeps them (and the left / right halves, cut at half the width), not only the total."""
    rng = np.random.default_rng(sum(native))
    density = rng.gamma(0.3, 1.0, native) * np.linspace(0.2, 3.0, native[0])[:, None]
    out = _to_collage(density, collage)
    h, w = collage
    assert out.shape == collage and out.dtype == np.float32
    for got, want in ((out[:h // 2].sum(), density[:native[0] // 2].sum()),
                      (out[h // 2:].sum(), density[native[0] // 2:].sum()),
                      (out[:, :w // 2].sum(), density[:, :native[1] // 2].sum()),
                      (out[:, w // 2:].sum(), density[:, native[1] // 2:].sum())):
        assert got == pytest.approx(want, rel=1e-5)
    from countboard.metrics.praco_official import resize_keep_sum

    plain = resize_keep_sum(density, collage)  # a plain resize moves mass across the seam
    assert abs(plain[:h // 2].sum() - density[:native[0] // 2].sum()) > 1e-4 * density.sum()


def test_mosaic_halves_of_sparse_and_signed_maps():
    """A map of points 2x the collage (the resize samples past most of them) and a signed map whose resized
    quadrant nearly cancels: the halves are still benchmark.py's, and no value grows beyond the map's own."""
    rng = np.random.default_rng(7)
    points = np.zeros((96, 144))
    points[rng.integers(0, 96, 40), rng.integers(0, 144, 40)] = 1.0
    signed = rng.normal(0.0, 1.0, (6, 6))
    for density, collage in ((points, (48, 72)), (signed, (14, 14))):
        out = _to_collage(density, collage)
        h, nh = collage[0], density.shape[0]
        assert out[:h // 2].sum() == pytest.approx(density[:nh // 2].sum(), abs=1e-4)
        assert out[h // 2:].sum() == pytest.approx(density[nh // 2:].sum(), abs=1e-4)
        assert np.abs(out).max() <= 2 * np.abs(density).max() + 1.0


def _benchmark_py_test1_calls(shapes) -> list[tuple]:
    """The calls benchmark.py's run_negative_label_test makes of CountGD++, written out as it does them: global
    ``random`` seeded with 123, one ``random.choice`` per (image, class) among that class's images."""
    import random

    from tests.fixtures.praco_checkout import EXEMPLAR_BOX

    img_classes = {i: shapes.class_of(i) for i in shapes.image_ids}
    size = {i: (k + 1, 2) for k, i in enumerate(img_classes)}
    state = random.getstate()
    random.seed(123)
    calls = []
    try:
        for image in shapes.image_ids:
            own = img_classes[image]
            for cls in shapes.classes:
                img2 = random.choice([k for k, v in img_classes.items() if v == cls])
                if cls == own:
                    calls.append((own[:-1], None, size[image], None, [EXEMPLAR_BOX[0]], None))
                else:
                    calls.append((cls[:-1], own[:-1], size[img2], size[image], [EXEMPLAR_BOX[0]], [EXEMPLAR_BOX[0]]))
    finally:
        random.setstate(state)
    return calls


def test_countgdplusplus_is_called_as_benchmark_py_calls_it(checkout, shapes, ctx):
    model = PracoZooCounter(counter="CountGDPlusPlus", repo=str(checkout), told_negative_class=True)
    assert model.name == "CountGDPlusPlus" and model.load_filtered_checkpoints is False
    calls = model.model.calls
    calls.clear()
    records = _records(PracoNegative(), model, shapes, ctx)
    assert calls == _benchmark_py_test1_calls(shapes)
    assert any(c[1] is not None for c in calls) and any(c[1] is None for c in calls)
    for record in records:
        item = shapes.load(record["image_id"])
        want = [expected_count(item.image, c, "CountGDPlusPlus", positives=[item.class_name]) for c in shapes.classes]
        np.testing.assert_allclose(record["counts"], want, rtol=1e-6)
    # the mosaic: told the other tile's class, with the two tiles' exemplars
    sizes = {(k + 1, 2): i for k, i in enumerate(shapes.image_ids)}
    calls.clear()
    mosaic = _records(PracoMosaic(tile_size=(20, 24), n_figures=0), model, shapes, ctx)
    told = [c for c in calls if c[1] is not None]
    assert len(told) == len(mosaic)
    for record, call in zip(mosaic, told, strict=True):
        assert call[:2] == (record["class_name"][:-1], record["other_class"][:-1])
        assert sizes[call[2]] == record["image_id"] and shapes.class_of(sizes[call[3]]) == record["other_class"]
    # its single counts (and classic): the image's class alone, no negative
    assert {c[1] for c in calls if c not in told} == {None}
    # the authors' hard-coded prompt fix reaches the wrapper
    assert model.model.get_text_prompt("legos", "7611.jpg") == "yellow lego stud"


def test_countgdplusplus_preflight_and_protocol(tmp_path, checkout):
    from countboard.protocol import derive

    node = {"counter": "CountGDPlusPlus", "repo": str(checkout), "told_negative_class": True}
    PracoZooCounter.preflight(node)
    with pytest.raises(ConfigError, match="told_negative_class must be true for CountGDPlusPlus"):
        PracoZooCounter.preflight({**node, "told_negative_class": False})
    with pytest.raises(ConfigError, match="told_negative_class must be false for CountGD:"):
        PracoZooCounter.preflight({"counter": "CountGD", "repo": str(checkout), "told_negative_class": True})
    with pytest.raises(ConfigError, match="no multi-class convention.*multiclass_benchmark.py"):
        PracoZooCounter.preflight({**node, "task": "praco_multiclass"})
    copy = tmp_path / "copy"
    shutil.copytree(checkout, copy)
    (copy / "models" / "CountGDPlusPlus" / "checkpoints" / "countgd_plusplus.pth").unlink()
    with pytest.raises(DataNotFoundError, match=r"countgd_plusplus\.pth.*CountGDPlusPlus weights are missing"):
        PracoZooCounter.preflight({**node, "repo": str(copy)})
    (copy / "models" / "CountGDPlusPlus" / "checkpoints" / "countgd_plusplus.pth").write_bytes(b"")
    (copy / "models" / "CountGDPlusPlus" / "synthetic_exemplars" / "generated_exemplars.json").unlink()
    with pytest.raises(DataNotFoundError, match=r"generated_exemplars\.json.*synthetic exemplars are missing"):
        PracoZooCounter.preflight({**node, "repo": str(copy)})
    # told the negative class: its own protocol, and the label says so
    base = {"model._target_": "countboard.counting.models.praco_zoo.PracoZooCounter", "model.repo": "PrACo",
            "model.task": "praco_negative", "task._target_": "countboard.counting.tasks.praco.PracoNegative"}
    plain = derive({**base, "model.name": "CountGD", "model.counter": "CountGD"})
    told = derive({**base, "model.name": "CountGDPlusPlus", "model.counter": "CountGDPlusPlus",
                   "model.told_negative_class": "True"})
    assert plain.key != told.key and "model.told_negative_class=True" in told.label
    assert "task" not in plain.label


def test_filtered_checkpoints_as_the_authors_entry_points(tmp_path, checkout, shapes, ctx):
    multi = PracoZooCounter(counter="CountGD", repo=str(checkout), task="praco_multiclass")
    single = PracoZooCounter(counter="CountGD", repo=str(checkout), task="praco_negative")
    assert multi.load_filtered_checkpoints is True and single.load_filtered_checkpoints is False
    assert multi.run_tags()["praco.filtered_checkpoints"] == "true"
    told = PracoZooCounter(counter="CountGD", repo=str(checkout), task="praco_multiclass",
                           load_filtered_checkpoints=False)
    assert told.run_tags()["praco.filtered_checkpoints"] == "false"
    copy = tmp_path / "copy"
    shutil.copytree(checkout, copy)
    (copy / "models" / "CountGD" / "checkpoints" / "checkpoint_best_regular_fsc147_filtered.pth").unlink()
    PracoZooCounter.preflight({"counter": "CountGD", "repo": str(copy), "task": "praco_negative"})
    with pytest.raises(DataNotFoundError, match="checkpoint_best_regular_fsc147_filtered"):
        PracoZooCounter.preflight({"counter": "CountGD", "repo": str(copy), "task": "praco_multiclass"})
    # GroundingRECFSC: the FSC-only checkpoint, never filtered (the authors' loader refuses it)
    with pytest.raises(ConfigError, match="GroundingRECFSC has no filtered checkpoint.*load_filtered_checkpoints=false"):
        PracoZooCounter.preflight({"counter": "GroundingRECFSC", "repo": str(checkout), "task": "praco_multiclass"})
    fsc = PracoZooCounter(counter="GroundingRECFSC", repo=str(checkout), task="praco_negative")
    assert fsc.name == "GroundingRECFSC" and fsc.run_tags()["praco.counter"] == "GroundingRECFSC"
    for record in _records(PracoNegative(), fsc, shapes, ctx):
        item = shapes.load(record["image_id"])
        want = [expected_count(item.image, c, "GroundingREC") for c in shapes.classes]
        np.testing.assert_allclose(record["counts"], want, rtol=1e-6)


@pytest.mark.slow
def test_sweep_runs_countgdplusplus_and_groundingrecfsc(tmp_path, checkout, shapes):
    from tests.conftest import run_sweep, store_runs

    small = ["dataset=synthetic_shapes", f"dataset.root={shapes.root}", "dataset.images_per_class={train:0,val:0,test:1}",
             "dataset.multi_class_images=0", "dataset.image_size=[40,48]", "dataset.size_range=[4,6]",
             "dataset.count_range=[1,4]", "dataset.n_classes=3"]
    for model in ("praco_countgdplusplus", "praco_groundingrecfsc"):   # a multirun applies model.repo to its default
        run_sweep(["-m", f"model={model}", f"model.repo={checkout}", "task=praco_negative,praco_mosaic,classic",
                   *small], tmp_path)
    runs = store_runs(tmp_path / "mlruns")
    cells = runs[runs["tags.countboard.role"] == "cell"]
    assert len(cells) == 6 and set(cells["status"]) == {"FINISHED"}
    assert set(cells["tags.model"]) == {"CountGDPlusPlus", "GroundingRECFSC"}
    assert set(cells["tags.praco.filtered_checkpoints"]) == {"false"}
    told = cells[cells["tags.model"] == "CountGDPlusPlus"]
    assert all("told_negative_class=True" in label for label in told["tags.protocol_label"])
    # the multi-class test: CountGD++ refused before any run, GroundingRECFSC unless told to load unfiltered weights
    for model in ("praco_countgdplusplus", "praco_groundingrecfsc"):
        proc = run_sweep([f"model={model}", f"model.repo={checkout}", "task=praco_multiclass",
                          "dataset=synthetic_multiclass", "dataset.n_images=3", "dataset.n_classes=3"], tmp_path,
                         store=tmp_path / "other", check=False)
        assert proc.returncode != 0 and ("no multi-class convention" in proc.stderr
                                         or "no filtered checkpoint" in proc.stderr), proc.stderr[-2000:]


@pytest.mark.parametrize("name", ["countboard.counting.models.praco_countgdpp", "countboard.counting.models.praco_zoo",
                                  "countboard.counting.datasets.mosaic"])
def test_docstring_examples(name):
    import doctest
    import importlib

    assert doctest.testmod(importlib.import_module(name)).failed == 0
