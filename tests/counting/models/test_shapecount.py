import numpy as np
import pandas as pd
import pytest
import torch

from countboard.counting.datasets.fsc147 import FSC147Dataset
from countboard.counting.datasets.synthetic_shapes import SyntheticShapes
from countboard.counting.models.shapecount import (
    ShapeCountCounter,
    ShapeCountNet,
    grid_to_density,
    load_checkpoint,
    local_checkpoint_path,
    points_to_grid,
    resolve_checkpoint,
    save_checkpoint,
)
from countboard.counting.models.shapecount_train import (
    TrainConfig,
    _pairs,
    build_training_set,
    train,
    trained_before,
)
from countboard.errors import ConfigError


@pytest.fixture(scope="module")
def tiny_shapes(tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes") / "tiny"
    SyntheticShapes(root, split="train", n_classes=3, image_size=(64, 64),
                    images_per_class={"train": 3, "val": 1, "test": 2}, multi_class_images=5, count_range=(1, 8),
                    size_range=(6.0, 10.0))
    return root


@pytest.fixture(scope="module")
def fake_table():
    """Fixed random unit vectors standing in for MiniLM (the unit tests need no text model)."""
    rng = np.random.default_rng(0)
    names = ["red circles", "blue squares", "green triangles", "yellow stars"]
    vecs = rng.normal(size=(len(names), 384)).astype(np.float32)
    return dict(zip(names, vecs / np.linalg.norm(vecs, axis=1, keepdims=True), strict=True))


@pytest.fixture(scope="module")
def tiny_checkpoint(tiny_shapes, fake_table, tmp_path_factory):
    ds = FSC147Dataset(tiny_shapes, split="train")
    cfg = TrainConfig(recipe="aware", epochs=2, batch_size=4)
    net, history = train(build_training_set(list(ds), ds.classes, cfg), fake_table, cfg)
    assert len(history) == 2 and all(np.isfinite(h["loss"]) for h in history)
    path = tmp_path_factory.mktemp("ckpt") / "checkpoints" / "shapecount_aware.pt"
    return save_checkpoint(path, net, "aware", fake_table, {"final_loss": history[-1]["loss"]})


def test_points_to_grid_matches_loop():
    rng = np.random.default_rng(0)
    pts = rng.uniform(0, [50, 30], size=(40, 2))
    grid = points_to_grid(pts, (4, 7), 8)
    expected = np.zeros((4, 7))
    for x, y in pts:
        expected[min(int(y // 8), 3), min(int(x // 8), 6)] += 1
    np.testing.assert_array_equal(grid, expected)


@pytest.mark.parametrize("size", [(16, 24), (13, 21), (1, 1)])
def test_grid_to_density_keeps_the_count(size):
    rng = np.random.default_rng(1)
    grid = rng.uniform(size=(-(-size[0] // 8), -(-size[1] // 8)))
    dens = grid_to_density(grid, size, 8)
    assert dens.shape == size and dens.dtype == np.float32
    assert dens.sum() == pytest.approx(grid.sum(), rel=1e-5)
    if size == (16, 24):  # exact tiling: each pixel holds 1/64 of its cell
        np.testing.assert_allclose(dens[9, 17], grid[1, 2] / 64, rtol=1e-6)


def test_training_sets_of_the_two_recipes(tiny_shapes):
    ds = FSC147Dataset(tiny_shapes, split="train")
    items = list(ds)
    naive = build_training_set(items, ds.classes, TrainConfig(recipe="naive"))
    aware = build_training_set(items, ds.classes, TrainConfig(recipe="aware"))
    assert len(naive.images) == sum(len(it.points) == 1 for it in items) == 9
    assert len(aware.images) == len(items) == 14
    for it, targets in zip(items, aware.targets, strict=True):
        assert set(targets) == set(it.points)
        for name, grid in targets.items():
            assert grid.sum() == pytest.approx(len(it.points[name]), rel=1e-5)
    rng = np.random.default_rng(0)
    pairs = _pairs(aware, np.arange(len(items)), TrainConfig(recipe="aware", negatives_per_image=1), rng)
    for row, name, grid in pairs:
        if name not in aware.targets[row]:
            assert grid.sum() == 0
    n_neg = sum(name not in aware.targets[row] for row, name, _ in pairs)
    assert n_neg == sum(len(t) < 3 for t in aware.targets)  # one absent class per image that has one
    assert all(name in naive.targets[row] for row, name, _ in _pairs(naive, np.arange(9), TrainConfig("naive"), rng))


def test_counter_batched_prompts_equal_per_pair_and_network(tiny_checkpoint, tiny_shapes):
    counter = ShapeCountCounter(recipe="aware", checkpoint=str(tiny_checkpoint), prompt_batch_size=2)
    items = list(FSC147Dataset(tiny_shapes, split="test"))[:2]
    odd = items[0].__class__("odd", items[0].image[:50, :37], class_name="red circles")  # size not a multiple of 8
    items.append(odd)
    prompts = ["red circles", "blue squares", "green triangles"]
    feats = counter.encode_images(items)
    pairs = [(i, p) for i in range(len(items)) for p in prompts]
    maps = counter.decode([feats[i] for i, _ in pairs], [p for _, p in pairs])
    net, table, _ = load_checkpoint(tiny_checkpoint)
    for (i, p), m in zip(pairs, maps, strict=True):
        assert m.shape == items[i].size
        np.testing.assert_allclose(m, counter.density([items[i]], [p])[0], rtol=1e-5, atol=1e-7)
        image = torch.from_numpy(items[i].image.copy()).permute(2, 0, 1)[None]
        with torch.no_grad():
            grid = net.decode(net.encode(image), torch.from_numpy(table[p])[None])[0]
        assert m.sum() == pytest.approx(float(grid.sum()), rel=1e-4)


def test_bf16_autocast_keeps_float32_maps_near_fp32(tiny_checkpoint, tiny_shapes):
    from countboard.models.precision import numerics

    counter = ShapeCountCounter(recipe="aware", checkpoint=str(tiny_checkpoint))
    items = list(FSC147Dataset(tiny_shapes, split="test"))[:2]
    prompts = ["red circles", "blue squares"]
    fp32 = counter.density(items, prompts)
    with numerics("cpu", "bf16"):
        bf16 = counter.density(items, prompts)
    for a, b in zip(fp32, bf16, strict=True):
        assert b.dtype == np.float32 and b.shape == a.shape
        assert float(b.sum()) == pytest.approx(float(a.sum()), rel=0.05)


def test_new_prompts_are_embedded_on_the_counters_device(tiny_checkpoint, monkeypatch):
    import countboard.counting.models.shapecount as sc

    seen = []

    def fake_embed(texts, device=None):
        seen.append(device)
        return np.ones((len(texts), 384), dtype=np.float32)

    monkeypatch.setattr(sc, "embed_texts", fake_embed)
    counter = ShapeCountCounter(recipe="aware", checkpoint=str(tiny_checkpoint))
    text = counter._text(["red circles", "purple hexagons"])
    assert seen == [counter.device] and text.device.type == "cpu" and text.shape == (2, 384)


def test_a_checkpoint_trained_with_the_same_settings_on_the_same_data_is_kept(tiny_shapes, fake_table, tmp_path):
    from dataclasses import asdict

    from countboard.counting.datasets.synthetic_shapes import CONFIG_FILE

    cfg = TrainConfig(recipe="naive", epochs=2)
    out = tmp_path / "checkpoints" / "shapecount_naive.pt"
    assert trained_before(tiny_shapes, cfg, out) is None  # nothing trained yet
    info = {"final_loss": 0.5, "config": asdict(cfg), "dataset_root": str(tiny_shapes),
            "dataset_config": (tiny_shapes / CONFIG_FILE).read_text()}
    save_checkpoint(out, ShapeCountNet(cfg.arch), "naive", fake_table, info)
    assert trained_before(tiny_shapes, cfg, out)["final_loss"] == 0.5
    assert trained_before(tiny_shapes, TrainConfig(recipe="naive", epochs=3), out) is None  # other settings
    other = tmp_path / "other"
    other.mkdir()
    (other / CONFIG_FILE).write_text((tiny_shapes / CONFIG_FILE).read_text() + "\n# regenerated\n")
    assert trained_before(other, cfg, out) is None  # other data
    out.write_bytes(b"not a checkpoint")
    assert trained_before(tiny_shapes, cfg, out) is None


def test_checkpoint_lookup(tiny_checkpoint, tmp_path):
    data_dir = tiny_checkpoint.parent.parent
    assert local_checkpoint_path(data_dir, "aware") == tiny_checkpoint
    assert resolve_checkpoint("aware", None, data_dir) == tiny_checkpoint
    with pytest.raises(ConfigError, match="train-counter --recipe naive"):
        resolve_checkpoint("naive", None, data_dir)
    with pytest.raises(ConfigError, match="naive, aware"):
        resolve_checkpoint("clever", None, data_dir)
    with pytest.raises(ConfigError, match="does not exist"):
        ShapeCountCounter(checkpoint=str(tmp_path / "missing.pt"))


@pytest.mark.slow
def test_minilm_embeddings_are_offline_and_semantic():
    from countboard.counting.models.text_encoder import embed_texts

    emb = embed_texts(["red circles", "a red circle", "blue squares"])
    assert emb.shape == (3, 384) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    assert emb[0] @ emb[1] > emb[0] @ emb[2]


@pytest.mark.slow
def test_trained_checkpoints_are_found_by_name_in_a_sweep(tmp_path):
    """`countboard train-counter` logs both recipes to the store; a sweep then loads them from MLflow by name."""
    from countboard.cli import main
    from tests.conftest import run_sweep, store_runs

    small = {"n_classes": 3, "image_size": [64, 64], "images_per_class": {"train": 3, "val": 0, "test": 2},
             "multi_class_images": 3, "count_range": [1, 8], "size_range": [6.0, 10.0]}
    data_dir, store = tmp_path / "data", tmp_path / "mlruns"
    root = data_dir / "synthetic_shapes"
    SyntheticShapes(root, split="train", **small)
    args = ["train-counter", "--recipe", "both", "--epochs", "1", "--data-dir", str(data_dir), "--store", str(store)]
    assert main(args) == 0
    assert main(args) == 0  # same settings: trained again but not logged twice
    runs = pd.DataFrame(_runs(store))
    assert sorted(runs["model"]) == ["shapecount_aware", "shapecount_naive"]
    assert set(runs["status"]) == {"FINISHED"}
    for recipe in ("naive", "aware"):
        local_checkpoint_path(data_dir, recipe).unlink()  # the sweep must find the checkpoints in MLflow

    overrides = [f"dataset.{k}={v}".replace("'", "").replace(" ", "") for k, v in small.items()]
    run_sweep(["-m", "model=shapecount_aware,shapecount_naive", "dataset=synthetic_shapes", "task=praco_negative",
               *overrides], tmp_path)
    cells = store_runs(store)
    cells = cells[cells["tags.countboard.role"] == "cell"].set_index("tags.model")
    assert sorted(cells.index) == ["shapecount_aware", "shapecount_naive"]
    assert set(cells["status"]) == {"FINISHED"}
    assert (cells["metrics.n_samples"] == 6).all() and cells["metrics.nmn"].notna().all()


def _runs(store):
    from countboard.tracking.store import open_store

    tracker = open_store(str(store))
    exp = tracker.client.get_experiment_by_name("countboard-training")
    runs = tracker.find_runs(exp.experiment_id, {"countboard.kind": "training"})
    return [{"run_id": r.run_id, "status": r.status, **r.tags} for r in runs]


@pytest.mark.slow
def test_aware_recipe_beats_naive_on_praco(tmp_path_factory):
    """Trained on the same small synthetic split, the prompt-aware recipe has lower NMN and higher CntP."""
    from countboard.counting.models.shapecount_train import shape_text_table
    from countboard.counting.tasks.praco import PracoMosaic, PracoNegative
    from countboard.results import RunContext

    root = tmp_path_factory.mktemp("praco") / "shapes"
    settings = dict(n_classes=4, image_size=(96, 96), images_per_class={"train": 12, "val": 1, "test": 2},
                    multi_class_images=24, count_range=(2, 12), size_range=(8.0, 12.0))
    train_ds = SyntheticShapes(root, split="train", **settings)
    test_ds = SyntheticShapes(root, split="test", **settings)
    table = shape_text_table(train_ds.classes)
    ctx = RunContext(device="cpu", seed=0, batch_size=8, work_dir=tmp_path_factory.mktemp("work"), progress=False)
    metrics = {}
    for recipe in ("naive", "aware"):
        cfg = TrainConfig(recipe=recipe, epochs=10, batch_size=8)
        net, _ = train(build_training_set(list(train_ds), train_ds.classes, cfg), table, cfg)
        path = save_checkpoint(tmp_path_factory.mktemp(recipe) / "ck.pt", net, recipe, table, {})
        counter = ShapeCountCounter(recipe=recipe, checkpoint=str(path))
        found = {}
        for task in (PracoNegative(), PracoMosaic(n_figures=0)):
            units = task.units(counter, test_ds, ctx)
            records = pd.DataFrame(task.run_units(counter, test_ds, units, ctx))
            assert "error" not in records
            found.update(task.summarize(records, counter, test_ds, ctx).metrics)
        metrics[recipe] = found
    assert metrics["aware"]["nmn"] < metrics["naive"]["nmn"]
    assert metrics["aware"]["cnt_precision"] > metrics["naive"]["cnt_precision"]


def test_recipes_trained_in_parallel_processes_equal_those_trained_in_turn(tiny_shapes, tmp_path):
    """Two processes of one thread each give the weights of the same trainings run one after the other here."""
    from countboard.counting.models import shapecount_train

    todo = [(TrainConfig(recipe=r, epochs=2, batch_size=4), tmp_path / mode / f"{r}.pt")
            for mode in ("turn", "parallel") for r in ("naive", "aware")]
    turn = shapecount_train.train_recipes(tiny_shapes, todo[:2], processes=1)
    parallel = shapecount_train.train_recipes(tiny_shapes, todo[2:], processes=2)
    for (p_turn, i_turn), (p_par, i_par) in zip(turn, parallel, strict=True):
        assert i_turn["final_loss"] == i_par["final_loss"] and i_turn["config"] == i_par["config"]
        a, b = torch.load(p_turn, weights_only=True), torch.load(p_par, weights_only=True)
        assert a["state_dict"].keys() == b["state_dict"].keys()
        assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
        assert torch.equal(a["text_embeddings"], b["text_embeddings"])
    assert turn[0][1]["recipe"] == "naive" and turn[1][1]["recipe"] == "aware"
