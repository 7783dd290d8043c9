"""PrACo tasks (Ciampi et al., "Mind the Prompt"): the negative-label test and the mosaic test.

- ``praco_negative``: one unit per test image; the image is encoded once and decoded with every class name of the
  split, giving one row of the images x classes count matrix.
- ``praco_mosaic``: one unit per (image, other class) pair; the image is stacked above a picture of the other class
  (drawn with a fixed seed), prompted with its own class, and the density map is split at the seam.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from countboard.counting.datasets.mosaic import (
    MOSAIC_PRESETS,
    Mosaic,
    build_mosaic,
    build_official_mosaic,
    mosaic_pairs,
    mosaic_partner,
    official_partners,
    points_to_density,
    read_pairs_file,
)
from countboard.counting.released import HALVES
from countboard.counting.released.layout import map_name
from countboard.counting.released.official import (
    SUMS_FIELD,
    final_metrics_file,
    finish,
    mosaic_official,
    stored_counts,
)
from countboard.counting.tasks.mosaic_sums import MapSums, device_sums, host_sums
from countboard.errors import ConfigError
from countboard.items import ImageDataset, ImageItem
from countboard.metrics import bootstrap
from countboard.metrics.bootstrap import UnitStatistic, interval_metrics
from countboard.metrics.counting import (
    GRIDS,
    count_drift,
    localized_mosaic_metrics,
    localized_units,
    mosaic_metrics,
    mosaic_units,
    negative_label_metrics,
    negative_label_units,
    pool_grid,
)
from countboard.metrics.praco_official import (
    OFFICIAL_GRIDS,
    official_cell_rows,
    official_mosaic_cells,
    official_negative_metrics,
)
from countboard.models.base import answer_fields, map_count, unparsed
from countboard.results import RunContext, Task, TaskResult
from countboard.tracking import tags as tg

log = logging.getLogger(__name__)
PAIR_SEP = "::"


def select_classes(dataset: ImageDataset, classes: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """The prompted classes and the images whose class is among them.

    ``classes=None`` prompts every class of the split; a name that is not a class of the split is refused.
    """
    split_classes = dataset.classes
    if classes is None:
        if len(split_classes) < 2:
            raise ConfigError(f"PrACo tests need at least 2 classes with images in the dataset split, it has "
                              f"{split_classes}; use a larger split (e.g. raise dataset.max_images)")
        return list(split_classes), dataset.image_ids
    absent = [c for c in classes if c not in split_classes]
    if absent:
        raise ConfigError(f"task.classes names {absent} that are not classes of this dataset split; "
                          f"its classes are: {', '.join(split_classes)}")
    if len(set(classes)) < 2:
        raise ConfigError(f"task.classes must name at least 2 distinct classes, got {list(classes)}")
    wanted = set(classes)
    return list(classes), [i for i in dataset.image_ids if dataset.class_of(i) in wanted]


def error_record(unit_id: str, what: str, exc: BaseException) -> dict:
    return {"unit_id": unit_id, "error": f"{what}: {type(exc).__name__}: {exc}"}


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _stack(column: pd.Series) -> np.ndarray:
    return np.stack([np.asarray(v, dtype=np.float64) for v in column]) if len(column) else np.zeros((0, 0))


def load_images(dataset: Any, unit_ids: Sequence[str], ctx: RunContext, records: dict[str, dict]
                ) -> list[ImageItem]:
    """The images of ``unit_ids`` (decoded ahead by the job's loader workers: ``ctx.load``); an image that cannot
    be read gets its error record in ``records`` and the others go on."""
    loaded: list[ImageItem] = []
    for uid in unit_ids:
        try:
            loaded.append(ctx.load(dataset, uid))
        except Exception as exc:  # unreadable image: reported, the others go on
            records[uid] = error_record(uid, f"image {uid} failed to load", exc)
    return loaded


def prompt_every_class(model: Any, dataset: Any, unit_ids: Sequence[str], classes: list[str], ctx: RunContext,
                       record: Callable[..., dict], with_maps: bool = False) -> list[dict]:
    """Each image encoded once and decoded with every name of ``classes``; ``record(item, counts)`` builds its
    record (``record(item, counts, maps)`` with ``with_maps``). Without maps, the pairs of a whole batch of images
    go through one ``decode_counts_later`` call, and the next batch is encoded and queued before this one's counts
    are read (the device works while the host builds records). An image that fails to load, encode or decode gets
    an error record; the others go on."""
    records: dict[str, dict] = {}
    loaded = load_images(dataset, unit_ids, ctx, records)
    pending = None
    for chunk, features in ctx.batches(loaded, model.encode_images):
        if isinstance(features, Exception):
            records.update({it.image_id: error_record(it.image_id, "encoding the image failed", features)
                            for it in chunk})
            continue
        read = None
        if not with_maps:  # counts only: every pair of the chunk in one call (one transfer from the device)
            try:
                read = counts_later(model, [f for f in features for _ in classes], list(classes) * len(chunk))
            except Exception:  # found again image by image, so that one bad image fails alone
                read = None
        ctx.queued()  # the device has work: the engine writes the previous units' checkpoint meanwhile
        if pending is not None:
            _record_batch(model, *pending, classes, record, with_maps, records)
        pending = (chunk, features, read)
    if pending is not None:
        _record_batch(model, *pending, classes, record, with_maps, records)
    return [records[u] for u in unit_ids]


def counts_later(model: Any, features: Sequence[Any], prompts: Sequence[str]) -> Callable[[], Any]:
    """``model.decode_counts_later``, or, for a model without it, its ``decode_counts`` computed now."""
    later = getattr(model, "decode_counts_later", None)
    if later is not None:
        return later(features, prompts)
    counts = model.decode_counts(features, prompts)
    return lambda: counts


def _record_batch(model: Any, chunk: list[ImageItem], features: list[Any], read: Callable | None,
                  classes: list[str], record: Callable[..., dict], with_maps: bool, records: dict[str, dict]) -> None:
    """The records of one encoded batch: its counts read (``read``, queued by ``decode_counts_later``), or decoded
    image by image when there is no read or it failed."""
    batched = flat = None
    if read is not None:
        try:
            flat = read()
            batched = np.asarray(flat, dtype=np.float64).reshape(len(chunk), len(classes))
        except Exception:  # found again image by image below, so that one bad image fails alone
            batched = None
    n = len(classes)
    for k, (item, feat) in enumerate(zip(chunk, features, strict=True)):
        maps = None
        try:
            if batched is not None:
                counts, said, lo = batched[k].tolist(), flat, k * n
            elif with_maps:
                maps = model.decode([feat] * n, classes)
                counts, said, lo = [map_count(m) for m in maps], None, 0
            else:
                said, lo = model.decode_counts([feat] * n, classes), 0
                counts = np.asarray(said, float).tolist()
        except Exception as exc:
            records[item.image_id] = error_record(item.image_id, "decoding failed", exc)
            continue
        bad = unparsed(said, lo, lo + n)
        if bad:  # a model asked in words that stated no count: the unit fails with its raw answer
            records[item.image_id] = {"unit_id": item.image_id, "error": bad}
            continue
        try:
            records[item.image_id] = {**(record(item, counts, maps) if with_maps else record(item, counts)),
                                      **answer_fields(said, lo, lo + n)}
        except Exception as exc:
            records[item.image_id] = error_record(item.image_id, "scoring the density maps failed", exc)


class PracoNegative(Task):
    """Negative-label test: every image prompted with every class name of its split.

    Args:
        classes: Prompt only these classes (and evaluate only their images); default: every class of the split.
        official_rounding: Score the ``official_*`` values on counts with 2 decimals and round them as the
            released scorer does (3 decimals, PCCN 2).
    """

    name = "praco_negative"
    family = "counters"
    model_kinds = ("counter",)
    dataset_kinds = ("counting",)
    model_outputs = ("counts", "pos_count", "neg_mean")
    writes_while_queued = True  # prompt_every_class says when the device has work

    def __init__(self, classes: Sequence[str] | None = None, official_rounding: bool = False):
        self.classes = list(classes) if classes is not None else None
        self.official_rounding = bool(official_rounding)

    def units(self, model: Any, dataset: ImageDataset, ctx: RunContext) -> list[str]:
        return select_classes(dataset, self.classes)[1]

    def input_keys(self, model: Any, dataset: ImageDataset, unit_ids: Sequence[str], ctx: RunContext) -> list[str]:
        return list(unit_ids)

    def run_units(self, model: Any, dataset: ImageDataset, unit_ids: Sequence[str], ctx: RunContext) -> list[dict]:
        classes, _ = select_classes(dataset, self.classes)

        def record(item: ImageItem, counts: list[float]) -> dict:
            pos = classes.index(item.class_name)
            return {"unit_id": item.image_id, "image_id": item.image_id, "class_name": item.class_name,
                    "gt": int(dataset.count_of(item.image_id)), "pos_count": counts[pos],
                    "neg_mean": float((sum(counts) - counts[pos]) / (len(counts) - 1)), "counts": counts}

        return prompt_every_class(model, dataset, unit_ids, classes, ctx, record)

    def summarize(self, records: pd.DataFrame, model: Any, dataset: ImageDataset, ctx: RunContext) -> TaskResult:
        classes, _ = select_classes(dataset, self.classes)
        counts = _stack(records["counts"])
        if counts.shape[1] != len(classes):
            raise ConfigError(f"records hold {counts.shape[1]} counts per image but the split has {len(classes)} "
                              "classes; the dataset changed since the checkpoints were written: rerun with force=true")
        gt = records["gt"].to_numpy(dtype=np.float64)
        pos_idx = np.array([classes.index(c) for c in records["class_name"]])
        metrics = negative_label_metrics(counts, gt, pos_idx)
        metrics.update(interval_metrics(negative_label_units(counts, gt, pos_idx)))
        metrics["n_images"] = len(gt)
        official = official_negative_metrics(stored_counts(counts, self.official_rounding), gt, pos_idx)
        metrics.update(finish(official, self.official_rounding))
        negatives = counts[~np.eye(len(classes), dtype=bool)[pos_idx]]
        metrics["mean_negative_count"] = float(negatives.mean()) if negatives.size else float("nan")
        if metrics["n_gt_zero"]:
            log.warning("%d images with ground truth 0 are left out of NMN and MAPE", metrics["n_gt_zero"])
        wide = pd.DataFrame(counts, columns=classes)
        wide.insert(0, "image_id", records["image_id"].to_numpy())
        wide.insert(1, "class_name", records["class_name"].to_numpy())
        wide.insert(2, "gt", records["gt"].to_numpy())
        long = wide.melt(id_vars=["image_id", "class_name", "gt"], var_name="prompt", value_name="count")
        long = long[["class_name", "prompt", "image_id", "gt", "count"]]
        return TaskResult(metrics=metrics, tables={"negative_matrix": long, "negative_counts": wide},
                          figures={"negative_matrix": _matrix_figure(counts, gt, classes, pos_idx)},
                          files=final_metrics_file(metrics, model, dataset, ctx.work_dir),
                          tags={tg.PRACO_N_CLASSES: str(len(classes)), tg.BOOTSTRAP: bootstrap.describe()})


#: The confusion figure shows at most this many classes (the most confused ones): its size, and the memory and time
#: to draw it, do not grow with the split's class count.
MAX_FIGURE_CLASSES = 40


def class_confusion(counts: np.ndarray, gt: np.ndarray, pos_idx: np.ndarray, n_classes: int) -> np.ndarray:
    """``(C, C)`` mean of count / ground truth over the images of each image class (rows) per prompted class
    (columns); NaN where a class has no image with a defined ratio. Memory: the matrix and one pass over the counts.

    Example:
        >>> class_confusion(np.array([[4.0, 2.0], [1.0, 3.0], [2.0, 6.0]]), np.array([4.0, 3.0, 3.0]),
        ...                 np.array([0, 1, 1]), 2).tolist()
        [[1.0, 0.5], [0.5, 1.5]]
    """
    rel = counts / np.where(gt > 0, gt, np.nan)[:, None]
    defined = np.isfinite(rel)
    sums, seen = np.zeros((n_classes, counts.shape[1])), np.zeros((n_classes, counts.shape[1]))
    np.add.at(sums, pos_idx, np.where(defined, rel, 0.0))
    np.add.at(seen, pos_idx, defined.astype(np.float64))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(seen > 0, sums / np.where(seen > 0, seen, 1.0), np.nan)


def most_confused(mean: np.ndarray, k: int = MAX_FIGURE_CLASSES) -> np.ndarray:
    """Indices (in class order) of the ``k`` classes with the largest confusion: the highest off-diagonal mean
    count / ground truth in the class's row (its images prompted with another class) or column (other images
    prompted with it). All classes when there are at most ``k``.

    Example:
        >>> m = np.array([[1.0, 0.0, 0.9], [0.1, 1.0, 0.0], [0.0, 0.0, 1.0]])
        >>> most_confused(m, 2).tolist()
        [0, 2]
    """
    c = len(mean)
    if c <= k:
        return np.arange(c)
    off = np.where(np.eye(c, dtype=bool), np.nan, mean)
    with np.errstate(all="ignore"):
        rows = np.where(np.isfinite(off).any(axis=1), np.nanmax(np.where(np.isnan(off), -np.inf, off), axis=1), -1)
        cols = np.where(np.isfinite(off).any(axis=0), np.nanmax(np.where(np.isnan(off), -np.inf, off), axis=0), -1)
    score = np.maximum(rows, cols)
    return np.sort(np.argsort(-score, kind="stable")[:k])


def _matrix_figure(counts: np.ndarray, gt: np.ndarray, classes: list[str], pos_idx: np.ndarray) -> bytes:
    """Counts per class averaged over the images of each class, divided by their ground truth (ideal: identity);
    beyond ``MAX_FIGURE_CLASSES`` classes only the most confused ones, as the title says."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    full = class_confusion(counts, gt, pos_idx, len(classes))
    shown = most_confused(full)
    mean = full[np.ix_(shown, shown)]
    names = [classes[i] for i in shown]
    k = len(shown)
    fig, ax = plt.subplots(figsize=(1 + 0.45 * k, 1 + 0.4 * k))
    top = float(np.nanmax(mean)) if np.isfinite(mean).any() else 1.5
    im = ax.imshow(mean, vmin=0, vmax=max(1.5, top), cmap="viridis")
    ax.set_xticks(range(k), names, rotation=90, fontsize=7)
    ax.set_yticks(range(k), names, fontsize=7)
    ax.set_xlabel("prompted class")
    ax.set_ylabel("image class")
    title = "count / ground truth (mean per image class)"
    if k < len(classes):
        title += f"\nthe {k} most confused of {len(classes):,} classes (largest off-diagonal value)"
    ax.set_title(title, fontsize=8)
    fig.colorbar(im, ax=ax, fraction=0.046)
    return _png(fig)


class PracoMosaic(Task):
    """Mosaic test: each image above a picture of each other class, prompted with its own class.

    Args:
        orientation: ``vertical`` (positive on top, the paper's setting) or ``horizontal`` (positive on the left).
        tile_size: ``[H, W]`` both halves are resized to; default: the positive image's size.
        classes: Restrict to these classes (default: every class of the split).
        seed: Seed of the choice of negative images (default: the job's seed).
        n_figures: Mosaics saved as ``figures/mosaic_<k>.png`` (image, density map, counts of both halves).
        mosaic: ``default`` (the project's mosaics) or ``official`` (the authors' square collage, PIL's default
            filter, partners from Python's ``random`` seeded with 123, vertical; see ``countboard.counting.datasets.mosaic``).
        pairs_file: The release's ``mosaic_image_pairs.csv``: take the negative images from it.
        official_rounding: Score ``official_*`` on counts with 2 decimals and round as the released scorer.
        keep_maps: Store the predicted map of both halves of every mosaic (``arrays/density_maps.npz``, keys as
            the release names its files: ``<img id>_<class>_upper``), so that ``export-praco`` writes them.
    """

    name = "praco_mosaic"
    family = "counters"
    model_kinds = ("counter",)
    dataset_kinds = ("counting",)
    model_outputs = ("upper", "lower", "single", "pred_cells")
    operational_params = {"n_figures": "how many mosaics are saved as figures",
                          "keep_maps": "whether the predicted maps are saved as well"}
    path_params = ("pairs_file",)
    grid = max(GRIDS)
    #: The record reads both halves of each mosaic's map: a counter whose maps locate nothing is refused.
    needs_localisation = True

    def __init__(self, orientation: str = "vertical", tile_size: Sequence[int] | None = None,
                 classes: Sequence[str] | None = None, seed: int | None = None, n_figures: int = 8,
                 mosaic: str = "default", pairs_file: str | None = None, official_rounding: bool = False,
                 keep_maps: bool = False):
        if orientation not in ("vertical", "horizontal"):
            raise ConfigError(f"task.orientation={orientation!r}: use vertical or horizontal")
        if mosaic not in MOSAIC_PRESETS:
            raise ConfigError(f"task.mosaic={mosaic!r}: use one of {', '.join(MOSAIC_PRESETS)}")
        if mosaic == "official" and (orientation != "vertical" or tile_size is not None):
            raise ConfigError("task.mosaic=official builds the authors' square vertical collage: leave "
                              "task.orientation=vertical and task.tile_size=null")
        self.mosaic = mosaic
        self.pairs = read_pairs_file(pairs_file) if pairs_file else None
        self.official_rounding = bool(official_rounding)
        self.keep_maps = bool(keep_maps)
        self.orientation = orientation
        self.tile_size = tuple(int(v) for v in tile_size) if tile_size is not None else None
        self.classes = list(classes) if classes is not None else None
        self.seed = seed
        self.n_figures = int(n_figures)
        self._single: dict[str, float] = {}
        self._single_failed: dict[str, str] = {}
        self._official_partners: dict[tuple[str, str], str] | None = None
        self._figure_units: dict[str, int] | None = None

    def units(self, model: Any, dataset: ImageDataset, ctx: RunContext) -> list[str]:
        classes, ids = select_classes(dataset, self.classes)
        keep = set(ids)
        return [f"{i}{PAIR_SEP}{c}" for i, c in mosaic_pairs(dataset, classes) if i in keep]

    def _mosaic(self, dataset: ImageDataset, unit_id: str, ctx: RunContext, cache: dict) -> tuple[Mosaic, str]:
        image_id, other = unit_id.rsplit(PAIR_SEP, 1)
        partner = self._partner(dataset, image_id, other, ctx)
        for key, what in ((image_id, "image"), (partner, f"negative image (class {other!r})")):
            if key not in cache:
                try:
                    cache[key] = ctx.load(dataset, key)
                except Exception as exc:
                    cache[key] = RuntimeError(f"{what} {key} failed to load: {type(exc).__name__}: {exc}")
            if isinstance(cache[key], Exception):
                raise cache[key]
        if self.mosaic == "official":
            return build_official_mosaic(cache[image_id], cache[partner]), other
        return build_mosaic(cache[image_id], cache[partner], self.orientation, self.tile_size), other

    def input_keys(self, model: Any, dataset: ImageDataset, unit_ids: Sequence[str], ctx: RunContext) -> list[str]:
        """Each image and its partner, in the order ``run_units`` reads them (once per chunk)."""
        keys: dict[str, None] = {}
        for uid in unit_ids:
            image_id, other = uid.rsplit(PAIR_SEP, 1)
            keys[image_id] = None
            try:
                keys[self._partner(dataset, image_id, other, ctx)] = None
            except Exception:  # the unit fails with this reason in run_units
                continue
        return list(keys)

    def _partner(self, dataset: ImageDataset, image_id: str, other: str, ctx: RunContext) -> str:
        """The negative image: from ``pairs_file``, else the preset's draw."""
        if self.pairs is not None:
            if (image_id, other) not in self.pairs:
                raise RuntimeError(f"the pairs file has no negative image for {image_id!r} and class {other!r}")
            return self.pairs[(image_id, other)]
        if self.mosaic == "official":
            if self._official_partners is None:
                self._official_partners = official_partners(dataset, select_classes(dataset, self.classes)[0])
            return self._official_partners[(image_id, other)]
        return mosaic_partner(dataset, image_id, other, ctx.seed if self.seed is None else self.seed)

    def run_units(self, model: Any, dataset: ImageDataset, unit_ids: Sequence[str], ctx: RunContext) -> list[dict]:
        records: dict[str, dict] = {}
        cache: dict[str, ImageItem | Exception] = {}
        built: list[tuple[str, Mosaic, str]] = []
        for uid in unit_ids:
            try:
                mosaic, other = self._mosaic(dataset, uid, ctx, cache)
                built.append((uid, mosaic, other))
            except Exception as exc:  # reported; the other mosaics go on
                records[uid] = {"unit_id": uid, "error": str(exc) if isinstance(exc, RuntimeError)
                                else f"{type(exc).__name__}: {exc}"}
        self._count_singles(model, [cache[m.positive_id] for _, m, _ in built], ctx)
        picks = self._figure_picks(model, dataset, ctx)
        # a failed chunk is found again mosaic by mosaic, so that one bad mosaic fails alone
        for chunk, outs in ctx.isolated(built, lambda chunk: self._evaluate(model, chunk, picks)):
            for (uid, mosaic, other), out in zip(chunk, outs, strict=True):
                try:
                    if isinstance(out, Exception):
                        raise out
                    dmap, sums = out
                    records[uid] = self._record(uid, mosaic, other, sums, dataset, dmap)
                except Exception as exc:
                    records[uid] = error_record(uid, "counting the mosaic failed", exc)
                    continue
                if uid in picks:
                    self._add_figure(records[uid], mosaic, dmap, picks[uid])
        return [records[u] for u in unit_ids]

    def _needs_map(self, uid: str, mosaic: Mosaic, picks: dict[str, int]) -> bool:
        """Whether the mosaic's map must come to the host: drawn as a figure, kept (``keep_maps``), or halves of
        two sizes (the released scorer resizes one half to the other, which only the map allows)."""
        extent = mosaic.item.size[0 if self.orientation == "vertical" else 1]
        return self.keep_maps or uid in picks or 2 * mosaic.seam != extent

    def _evaluate(self, model: Any, chunk: list[tuple[str, Mosaic, str]], picks: dict[str, int]
                  ) -> list[tuple[np.ndarray | None, MapSums]]:
        """Per mosaic, the sums of its map that its record needs (``mosaic_sums``), and the map itself when it
        must come to the host (``_needs_map``): every map of the chunk is made and reduced where the counter
        computes (``Counter.reduce_maps``), and the results come to the host in one transfer."""
        needed = [self._needs_map(uid, mosaic, picks) for uid, mosaic, _ in chunk]

        def reduce(i: int, dmap: Any) -> list:
            mosaic = chunk[i][1]
            _check_size(dmap.shape, mosaic)
            return [dmap] if needed[i] else device_sums(dmap, mosaic.seam, self.orientation, self.grid)

        found = model.reduce_maps([m.item for _, m, _ in chunk], [m.item.class_name for _, m, _ in chunk], reduce)
        out = []
        for (_, mosaic, _), want, arrays in zip(chunk, needed, found, strict=True):
            if want:
                out.append((arrays[0], host_sums(arrays[0], mosaic.seam, self.orientation, self.grid)))
            else:
                out.append((None, MapSums.from_arrays(mosaic.item.size, arrays)))
        return out

    def _figure_picks(self, model: Any, dataset: ImageDataset, ctx: RunContext) -> dict[str, int]:
        """The units drawn as figures (evenly over all units) and their figure numbers."""
        if self._figure_units is None:
            units = self.units(model, dataset, ctx)
            n = min(self.n_figures, len(units))
            picks = np.linspace(0, len(units) - 1, n).round().astype(int) if n else []
            self._figure_units = {units[int(i)]: k for k, i in enumerate(picks)}
        return self._figure_units

    def _add_figure(self, record: dict, mosaic: Mosaic, dmap: np.ndarray, k: int) -> None:
        """Draw figure ``k`` of a unit picked for one while its density map is at hand."""
        try:
            record["figure"] = f"{k:02d}"
            record["figure_png"] = self._sample_figure(mosaic, dmap, record["gt"])
        except Exception as exc:  # a figure never costs the metrics
            record.pop("figure", None)
            log.warning("mosaic figure %d skipped: %s: %s", k, type(exc).__name__, exc)

    def _count_singles(self, model: Any, items: list[ImageItem], ctx: RunContext) -> None:
        """``c_ii``: each positive image alone, prompted with its own class (once per image per job). An image whose
        count fails is remembered with the reason (a failed batch is counted again image by image), and its
        mosaics fail with that reason."""
        todo = list({it.image_id: it for it in items if it.image_id not in self._single}.values())

        def count(chunk: list[ImageItem]) -> list[float]:
            return [float(c) for c in model.count(chunk, [it.class_name for it in chunk])]

        for chunk, counts in ctx.isolated(todo, count):
            for it, c in zip(chunk, counts, strict=True):
                if isinstance(c, Exception):
                    self._single_failed[it.image_id] = f"{type(c).__name__}: {c}"
                else:
                    self._single[it.image_id] = c

    def _single_count(self, image_id: str) -> float:
        if image_id not in self._single:
            reason = self._single_failed.get(image_id, "no count was made")
            raise RuntimeError(f"counting the positive image {image_id!r} alone failed ({reason})")
        return self._single[image_id]

    def _record(self, uid: str, mosaic: Mosaic, other: str, sums: MapSums, dataset: ImageDataset,
                dmap: np.ndarray | None = None) -> dict:
        """The mosaic's record from the sums of its map (and from the map itself when it is on the host)."""
        item = mosaic.item
        upper, lower = sums.halves
        pts = np.asarray(item.points.get(item.class_name, np.zeros((0, 2)))).reshape(-1, 2)
        axis = 1 if self.orientation == "vertical" else 0
        gt_map = points_to_density(pts[pts[:, axis] < mosaic.seam], item.size)
        grounding = sums.grounding(mosaic.seam, self.orientation)  # positive half as the box
        gt_pos = np.split(gt_map, [mosaic.seam], axis=1 - axis)[0]
        if dmap is None:  # halves of one size (``_needs_map``): the truth is the positive half's, then zeros
            truth = np.clip(np.asarray(gt_pos, np.float64), 0, None)
            cells = official_cell_rows(sums.official, np.concatenate([truth, np.zeros_like(truth)], axis=1 - axis))
        else:
            pred_pos, pred_neg = np.split(dmap, [mosaic.seam], axis=1 - axis)
            cells = official_mosaic_cells(pred_pos, pred_neg, gt_pos, self.orientation)
        kept = {}
        if self.keep_maps:
            buf = io.BytesIO()
            np.savez_compressed(buf, pos=pred_pos.astype(np.float32), neg=pred_neg.astype(np.float32))
            kept = {"maps_npz": buf.getvalue()}
        return {**grounding, **kept,
            "unit_id": uid, "image_id": mosaic.positive_id, "class_name": item.class_name, "other_class": other,
            "partner_id": mosaic.negative_id, "gt": int(dataset.count_of(mosaic.positive_id)),
            "upper": upper, "lower": lower, "single": self._single_count(mosaic.positive_id),
            "pred_cells": sums.cells.ravel().tolist(),
            "gt_cells": pool_grid(gt_map, self.grid).ravel().tolist(),
            SUMS_FIELD: np.concatenate([cells[n] for n in OFFICIAL_GRIDS]).tolist(),
        }

    def summarize(self, records: pd.DataFrame, model: Any, dataset: ImageDataset, ctx: RunContext) -> TaskResult:
        classes, ids = select_classes(dataset, self.classes)
        order = {i: k for k, i in enumerate(ids)}
        images = sorted(set(records["image_id"]), key=lambda i: order.get(i, len(order)))
        row = {i: k for k, i in enumerate(images)}
        col = {c: k for k, c in enumerate(classes)}
        r = records["image_id"].map(row).to_numpy()
        c = records["other_class"].map(col).to_numpy()
        upper = np.full((len(images), len(classes)), np.nan)
        lower = upper.copy()
        upper[r, c], lower[r, c] = records["upper"].to_numpy(float), records["lower"].to_numpy(float)
        gt = records.groupby("image_id")["gt"].first().reindex(images).to_numpy(float)
        single = records.groupby("image_id")["single"].first().reindex(images).to_numpy(float)
        drift = count_drift(upper, single)
        metrics = mosaic_metrics(upper, lower, gt)
        defined = drift[~np.isnan(drift)]
        metrics["count_drift_mean"] = float(defined.mean()) if defined.size else float("nan")
        metrics["count_drift_median"] = float(np.median(defined)) if defined.size else float("nan")
        units = mosaic_units(upper, lower, gt, single)
        for key in ("mosaic_io_ratio", "mosaic_wdp"):
            if key in records:
                metrics[key] = float(records[key].mean())
                values = records[key].to_numpy(float)  # per mosaic: summed per image, so images are resampled
                units[key] = UnitStatistic((np.bincount(r, np.nan_to_num(values), len(images)),
                                            np.bincount(r, ~np.isnan(values), len(images)).astype(float)),
                                           bootstrap.ratio)
        g = self.grid
        pred_cells = _stack(records["pred_cells"]).reshape(-1, g, g)
        gt_cells = _stack(records["gt_cells"]).reshape(-1, g, g)
        metrics.update(localized_mosaic_metrics(pred_cells, gt_cells, r))
        units.update(localized_units(pred_cells, gt_cells, r))
        metrics.update(interval_metrics(units))
        metrics["n_mosaic_images"] = len(images)
        metrics.update(mosaic_official(records, upper, lower, gt, images, classes, r, self.official_rounding))
        figures = {}
        if "figure_png" in records:
            drawn = records.dropna(subset=["figure_png"])
            figures = {f"mosaic_{k}": bytes(png) for k, png in zip(drawn["figure"], drawn["figure_png"], strict=True)}
        pairs = records.drop(columns=["pred_cells", "gt_cells", "figure_png", "maps_npz"], errors="ignore").rename(
            columns={"upper": "c_pos", "lower": "c_neg", "single": "c_single"})
        pairs["drift"] = drift[r, c]
        if "figure" not in pairs:
            pairs["figure"] = None
        tables = {"mosaic_pairs": pairs,
                  "mosaic_upper": _matrix_table(upper, images, classes, gt),
                  "mosaic_lower": _matrix_table(lower, images, classes, gt)}
        arrays = {"mosaic_cells": {"pred": pred_cells, "gt": gt_cells,
                                   "unit_id": records["unit_id"].to_numpy().astype(str)}}
        if self.keep_maps and "maps_npz" in records:
            arrays["density_maps"] = self._kept_maps(records)
        return TaskResult(metrics=metrics, tables=tables, figures=figures, arrays=arrays,
                          files=final_metrics_file(metrics, model, dataset, ctx.work_dir),
                          tags={tg.PRACO_ORIENTATION: self.orientation, tg.PRACO_MOSAIC: self.mosaic,
                                tg.BOOTSTRAP: bootstrap.describe()})

    def _kept_maps(self, records: pd.DataFrame) -> dict[str, np.ndarray]:
        """Both halves of every mosaic, named as the release names its map files (without ``.npy``)."""
        halves = HALVES[self.orientation]
        out = {}
        for image_id, other, blob in zip(records["image_id"], records["other_class"], records["maps_npz"],
                                         strict=True):
            if blob is None:
                continue
            with np.load(io.BytesIO(blob)) as npz:
                for half, key in zip(halves, ("pos", "neg"), strict=True):
                    out[map_name(str(image_id), str(other), half)[:-4]] = npz[key]
        return out

    def _sample_figure(self, mosaic: Mosaic, dmap: np.ndarray, gt: int) -> bytes:
        """The mosaic and its density map (PNG), titled with the counts of both halves."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from scipy.ndimage import gaussian_filter

        dmap = np.asarray(dmap, dtype=np.float64)
        up, low = mosaic.split(dmap)
        vertical = self.orientation == "vertical"
        h, w = mosaic.item.size
        fig, axes = plt.subplots(1, 2, figsize=(2 * 3.0 * w / max(h, w) + 0.4, 3.0 * h / max(h, w) + 0.6))
        axes[0].imshow(mosaic.item.image)
        axes[0].set_title(f"prompt: {mosaic.item.class_name}\n(gt {gt})", fontsize=7)
        # point-mass maps (detections, annotations) are invisible at figure scale without a blur
        axes[1].imshow(gaussian_filter(dmap, sigma=max(dmap.shape) / 150), cmap="jet")
        halves = ("top", "bottom") if vertical else ("left", "right")
        axes[1].set_title(f"{halves[0]} {up:.1f}\n{halves[1]} {low:.1f}", fontsize=7)
        for ax in axes:
            ax.axis("off")
            (ax.axhline if vertical else ax.axvline)(mosaic.seam - 0.5, color="white", lw=0.8)
        return _png(fig)


def _check_size(shape: tuple[int, ...], mosaic: Mosaic) -> None:
    if tuple(shape) != mosaic.item.size:
        raise ValueError(f"density map {tuple(shape)} does not match the mosaic size {mosaic.item.size}")


def _matrix_table(values: np.ndarray, images: list[str], classes: list[str], gt: np.ndarray) -> pd.DataFrame:
    table = pd.DataFrame(values, columns=classes)
    table.insert(0, "image_id", images)
    table.insert(1, "gt", gt)
    return table
