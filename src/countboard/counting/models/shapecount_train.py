"""Training of ``shapecount`` on synthetic shapes (the command is ``countboard train-counter``).

Recipes:

- ``naive``: single-class training images, each prompted with its own class (FSC-147-style training).
- ``aware``: all training images (multi-class ones included), one target per present class, plus
  ``negatives_per_image`` prompts of absent classes per image and epoch with an all-zero target.

The image encoder runs once per image of a batch and the prompt head once per (image, prompt) pair. Targets are
per-cell point counts, smoothed with a Gaussian of ``sigma`` cells and renormalised (the sum stays the count).
Prompt embeddings of all shape class names are computed once with MiniLM and stored in the checkpoint.

Each training runs on one torch thread: the network is small, and two threads on two cores spent about eight
times the CPU per step of one (docs/benchmarks.md). :func:`train_recipes` trains several recipes at once, one
process each; a recipe's weights do not depend on whether it trained alone or beside another.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from scipy import ndimage

from countboard.counting.models.shapecount import (
    ShapeCountArch,
    ShapeCountNet,
    images_to_tensor,
    points_to_grid,
    save_checkpoint,
)
from countboard.counting.models.shapecount_recipes import RECIPES, TRAIN_EPOCHS
from countboard.counting.models.text_encoder import embed_texts
from countboard.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    """Training settings (train times of the defaults on 2 CPU cores: docs/benchmarks.md)."""

    recipe: str = "aware"
    epochs: int = TRAIN_EPOCHS
    batch_size: int = 16
    lr: float = 2e-3
    weight_decay: float = 1e-4
    negatives_per_image: int = 2
    sigma: float = 1.0
    count_loss_weight: float = 0.05
    seed: int = 0
    threads: int = 1
    arch: ShapeCountArch = field(default_factory=ShapeCountArch)

    def __post_init__(self) -> None:
        if self.recipe not in RECIPES:
            raise ConfigError(f"recipe {self.recipe!r}: choose one of {', '.join(RECIPES)}")
        if isinstance(self.arch, dict):
            self.arch = ShapeCountArch(**self.arch)


@dataclass
class TrainingSet:
    """Images with one smoothed target grid per present class, and the class names prompts are drawn from."""

    images: torch.Tensor  # (N, 3, h, w) encoder input (``ShapeCountNet.prepare``)
    targets: list[dict[str, np.ndarray]]
    classes: list[str]


def build_training_set(items, classes: list[str], cfg: TrainConfig) -> TrainingSet:
    """Select the images of ``cfg.recipe`` and compute their target grids."""
    if cfg.recipe == "naive":
        items = [it for it in items if len(it.points) == 1]
    if not items:
        raise ConfigError(f"no training images for recipe {cfg.recipe!r}")
    sizes = {it.size for it in items}
    if len(sizes) != 1:
        raise ConfigError(f"training images must share one size, found {sorted(sizes)}")
    (h, w), stride = sizes.pop(), cfg.arch.stride
    grid_hw = (-(-h // stride), -(-w // stride))
    targets = []
    for it in items:
        per_class = {}
        for name, pts in it.points.items():
            grid = points_to_grid(pts, grid_hw, stride)
            if cfg.sigma > 0 and grid.sum() > 0:
                smooth = ndimage.gaussian_filter(grid, cfg.sigma, mode="constant")
                grid = (smooth * grid.sum() / smooth.sum()).astype(np.float32)
            per_class[name] = grid
        targets.append(per_class)
    prepared = torch.cat([ShapeCountNet(cfg.arch).prepare(images_to_tensor(items[k:k + 64]))
                          for k in range(0, len(items), 64)])
    return TrainingSet(prepared, targets, list(classes))


def _pairs(ts: TrainingSet, batch: np.ndarray, cfg: TrainConfig, rng: np.random.Generator):
    """(row in batch, class, target grid) for every prompt of the batch's images."""
    pairs = []
    for row, i in enumerate(batch):
        present = ts.targets[i]
        for name, grid in present.items():
            pairs.append((row, name, grid))
        if cfg.recipe == "aware":
            absent = [c for c in ts.classes if c not in present]
            k = min(cfg.negatives_per_image, len(absent))
            zero = np.zeros_like(next(iter(present.values())))
            for name in rng.choice(absent, size=k, replace=False) if k else []:
                pairs.append((row, str(name), zero))
    return pairs


def train(ts: TrainingSet, text_table: dict[str, np.ndarray], cfg: TrainConfig) -> tuple[ShapeCountNet, list[dict]]:
    """Train a fresh network; returns it (eval mode) and the per-epoch loss history."""
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    prev_threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    net = ShapeCountNet(cfg.arch)
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    steps = cfg.epochs * -(-len(ts.images) // cfg.batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=steps, pct_start=0.15)
    text = {k: torch.from_numpy(v) for k, v in text_table.items()}
    history = []
    try:
        net.train()
        for epoch in range(cfg.epochs):
            t0, total, n_pairs = time.perf_counter(), 0.0, 0
            order = rng.permutation(len(ts.images))
            for start in range(0, len(order), cfg.batch_size):
                batch = order[start:start + cfg.batch_size]
                images = ts.images[torch.from_numpy(batch)]
                flip = rng.integers(0, 4)
                pairs = _pairs(ts, batch, cfg, rng)
                target = torch.from_numpy(np.stack([g for _, _, g in pairs]))
                if flip & 1:
                    images, target = images.flip(-1), target.flip(-1)
                if flip & 2:
                    images, target = images.flip(-2), target.flip(-2)
                feats = net.encoder(images)
                rows = torch.tensor([r for r, _, _ in pairs])
                pred = net.decode(feats[rows], torch.stack([text[c] for _, c, _ in pairs]))
                sse = ((pred - target) ** 2).sum(dim=(1, 2)).mean()
                count_err = (pred.sum(dim=(1, 2)) - target.sum(dim=(1, 2))).abs().mean()
                loss = sse + cfg.count_loss_weight * count_err
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
                total += float(loss.detach()) * len(pairs)
                n_pairs += len(pairs)
            history.append({"epoch": epoch, "loss": total / n_pairs, "seconds": time.perf_counter() - t0})
            log.info("epoch %d/%d loss %.4f (%.1fs)", epoch + 1, cfg.epochs, history[-1]["loss"],
                     history[-1]["seconds"])
    finally:
        torch.set_num_threads(prev_threads)
    return net.eval(), history


def shape_text_table(classes: list[str]) -> dict[str, np.ndarray]:
    """MiniLM embeddings of every shape class name (and of ``classes``), computed once per training."""
    from countboard.counting.datasets.synthetic_shapes import SHAPE_CLASSES

    names = list(dict.fromkeys([*SHAPE_CLASSES, *classes]))
    return dict(zip(names, embed_texts(names), strict=True))


def trained_before(dataset_root: Path, cfg: TrainConfig, out: Path) -> dict | None:
    """The training info of the checkpoint at ``out`` when it was trained with ``cfg`` on the data now under
    ``dataset_root`` (same settings, same generated dataset: training again would give the same weights), else
    None."""
    from countboard.counting.datasets.synthetic_shapes import CONFIG_FILE

    stored = Path(dataset_root) / CONFIG_FILE
    if not (Path(out).is_file() and stored.is_file()):
        return None
    try:
        info = torch.load(out, map_location="cpu", weights_only=True).get("info") or {}
    except Exception:  # an unreadable file is trained again and overwritten
        return None
    same = info.get("config") == asdict(cfg) and info.get("dataset_config") == stored.read_text()
    return info if same and info.get("dataset_root") == str(dataset_root) else None


def train_recipe(dataset_root: Path, cfg: TrainConfig, out: Path) -> tuple[Path, dict]:
    """Train ``cfg.recipe`` on the ``train`` split under ``dataset_root``, save to ``out``.

    An existing synthetic_shapes root is used with whatever settings it was generated with; a missing one is
    generated with the defaults of ``conf/dataset/synthetic_shapes.yaml``. Returns the checkpoint path and a
    summary (final loss, seconds, training images, settings).
    """
    from countboard.counting.datasets.fsc147 import FSC147Dataset
    from countboard.counting.datasets.synthetic_shapes import CONFIG_FILE, SyntheticShapes

    t0, cpu0 = time.perf_counter(), time.process_time()
    dataset_root = Path(dataset_root)
    stored = dataset_root / CONFIG_FILE
    ds = FSC147Dataset(dataset_root, split="train") if stored.is_file() else SyntheticShapes(dataset_root, "train")
    ts = build_training_set(list(ds), ds.classes, cfg)
    table = shape_text_table(ds.classes)
    net, history = train(ts, table, cfg)
    info = {"recipe": cfg.recipe, "final_loss": history[-1]["loss"], "train_seconds": time.perf_counter() - t0,
            "train_cpu_seconds": time.process_time() - cpu0,
            "n_train_images": len(ts.images), "dataset_root": str(dataset_root), "config": asdict(cfg),
            "dataset_config": stored.read_text()}
    return save_checkpoint(out, net, cfg.recipe, table, info), info


def ensure_training_data(dataset_root: Path) -> None:
    """Generate synthetic_shapes under ``dataset_root`` with the defaults when it is absent (as ``train_recipe``
    would), so that recipes trained in parallel do not each generate it."""
    from countboard.counting.datasets.synthetic_shapes import CONFIG_FILE, SyntheticShapes

    if not (Path(dataset_root) / CONFIG_FILE).is_file():
        SyntheticShapes(dataset_root, "train")


def _worker_init(threads: int) -> None:
    """A training process: log lines as the CLI writes them, ``threads`` torch threads from the start (MiniLM too)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    torch.set_num_threads(threads)


def train_recipes(dataset_root: Path, todo: list[tuple[TrainConfig, Path]],
                  processes: int = 2) -> list[tuple[Path, dict]]:
    """:func:`train_recipe` for each ``(cfg, out)`` of ``todo``, up to ``processes`` at a time in fresh processes
    (one process: in this one, one after the other). Returns their results in the order of ``todo``."""
    dataset_root = Path(dataset_root)
    ensure_training_data(dataset_root)
    if processes <= 1 or len(todo) <= 1:
        return [train_recipe(dataset_root, cfg, out) for cfg, out in todo]
    threads = max(cfg.threads for cfg, _ in todo)
    with ProcessPoolExecutor(min(processes, len(todo)), mp_context=multiprocessing.get_context("spawn"),
                             initializer=_worker_init, initargs=(threads,)) as pool:
        futures = [pool.submit(train_recipe, dataset_root, cfg, out) for cfg, out in todo]
        return [f.result() for f in futures]
