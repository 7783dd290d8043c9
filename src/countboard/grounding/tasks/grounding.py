"""Task ``grounding``: Q-GroundCAM metrics of a model's activation maps against phrase boxes.

Unit = one (image, phrase, box) sample. The model is a ``GroundingModel`` (GradCAM of a VLM, or a reference
baseline) or a ``Counter``, whose density map for the phrase serves as its activation map. Per unit the record holds
every metric of ``countboard.metrics.grounding``; the summary logs their means, the pointing-game accuracy and
uncertainty (fractions, counts, and ``"k / N"`` tags as in the paper's table), histogram data of ``iou_soft`` and
``io_ratio``, and overlays of the first examples. The run's ``explainer_method`` and ``explainer_detail`` tags say
how the maps were made (GradCAM, gScoreCAM, cross-attention GradCAM and its block, a density map), so rows made
with different explainers are never read as one method.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw

from countboard.errors import ConfigError, CountboardError
from countboard.grounding.datasets.public import GroundingSample
from countboard.items import ImageItem
from countboard.metrics import bootstrap
from countboard.metrics.grounding import grounding_metrics
from countboard.results import RunContext, Task, TaskResult
from countboard.tracking import tags as tg

log = logging.getLogger("countboard")
MEAN_KEYS = ("iou_soft", "dice_soft", "iou_binary", "dice_binary", "wdp", "wdp_binary", "io_ratio")
HIST_KEYS = ("iou_soft", "io_ratio")
#: Errors that fail one unit (unreadable image, bad box, non-finite map) instead of the whole job.
UNIT_ERRORS = (OSError, ValueError, RuntimeError)


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


def model_heatmaps(model: Any, samples: Sequence[GroundingSample]) -> list[np.ndarray]:
    """Activation maps of ``samples``: ``model.heatmaps`` for grounding models, density maps for counters."""
    if hasattr(model, "heatmaps"):
        return list(model.heatmaps(samples))
    if hasattr(model, "density"):
        items = [ImageItem(image_id=s.sample_id, image=s.load_image()) for s in samples]
        return [np.asarray(d, dtype=np.float32) for d in model.density(items, [s.phrase for s in samples])]
    raise ConfigError(f"model {type(model).__name__} has neither heatmaps() nor density(); the grounding task "
                      "needs a grounding model (kind vlm) or a counter")


def explainer_tags(model: Any) -> dict[str, str]:
    """``explainer_method`` (how the maps were made) and ``explainer_detail`` (its settings) of a model.

    Grounding models declare them; a counter's map is its density map.
    """
    if hasattr(model, "explainer_method"):
        detail = model.explainer_detail() if hasattr(model, "explainer_detail") else ""
        return {tg.EXPLAINER_METHOD: str(model.explainer_method), tg.EXPLAINER_DETAIL: str(detail)}
    if hasattr(model, "density"):
        return {tg.EXPLAINER_METHOD: "density_map", tg.EXPLAINER_DETAIL: f"{type(model).__name__} density"}
    return {tg.EXPLAINER_METHOD: "unspecified", tg.EXPLAINER_DETAIL: type(model).__name__}


def _record(sample: GroundingSample, heatmap: np.ndarray, tau: float, delta: float, tie_tol: float) -> dict:
    heatmap = np.asarray(heatmap)
    expected = sample.image.shape[:2] if sample.image is not None else sample.meta.get("image_size")
    if expected is not None and tuple(heatmap.shape) != tuple(expected):
        raise ValueError(f"activation map of shape {tuple(heatmap.shape)} for an image of size {tuple(expected)}: "
                         "maps must be at image resolution for the box to line up")
    m = grounding_metrics(heatmap, sample.box, tau=tau, delta=delta, tie_tol=tie_tol)
    y0, x0, y1, x1 = sample.box
    return {"unit_id": sample.sample_id, "phrase": sample.phrase, "box_y0": float(y0), "box_x0": float(x0),
            "box_y1": float(y1), "box_x1": float(x1), "map_h": int(heatmap.shape[0]),
            "map_w": int(heatmap.shape[1]), **{k: float(v) for k, v in m.items()}}


def overlay(image: np.ndarray, heatmap: np.ndarray, box: Sequence[float], caption: str) -> Image.Image:
    """The image blended with the normalised heatmap (jet), the box in white and the phrase underneath."""
    from matplotlib import colormaps

    h = np.asarray(heatmap, dtype=np.float64)
    span = h.max() - h.min()
    h = (h - h.min()) / span if span > 0 else np.zeros_like(h)
    colour = (colormaps["jet"](h)[..., :3] * 255).astype(np.float64)
    blended = (0.55 * image.astype(np.float64) + 0.45 * colour).clip(0, 255).astype(np.uint8)
    canvas = Image.new("RGB", (blended.shape[1], blended.shape[0] + 18), (255, 255, 255))
    canvas.paste(Image.fromarray(blended), (0, 0))
    draw = ImageDraw.Draw(canvas)
    y0, x0, y1, x1 = box
    draw.rectangle([x0, y0, x1 - 1, y1 - 1], outline=(255, 255, 255), width=2)
    draw.text((3, blended.shape[0] + 3), caption[:80], fill=(0, 0, 0))
    return canvas


def histogram_table(records: pd.DataFrame, bins: int) -> pd.DataFrame:
    """Long table ``metric, bin_lo, bin_hi, count`` of the metrics in ``HIST_KEYS`` on ``[0, 1]``."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    rows = []
    for key in HIST_KEYS:
        counts, _ = np.histogram(records[key].to_numpy(dtype=np.float64), bins=edges)
        rows += [{"metric": key, "bin_lo": edges[i], "bin_hi": edges[i + 1], "count": int(c)}
                 for i, c in enumerate(counts)]
    return pd.DataFrame(rows)


def histogram_png(table: pd.DataFrame) -> bytes:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 3))
    for ax, key in zip(fig.subplots(1, len(HIST_KEYS)), HIST_KEYS, strict=True):
        part = table[table["metric"] == key]
        ax.bar(part["bin_lo"], part["count"], width=part["bin_hi"] - part["bin_lo"], align="edge",
               edgecolor="black")
        ax.set_xlabel(key)
        ax.set_ylabel("samples")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return buf.getvalue()


class GroundingTask(Task):
    """Q-GroundCAM evaluation (see module docstring).

    Args:
        tau: Activation threshold of the pointing-game uncertainty.
        delta: Its NMS radius in pixels.
        tie_tol: Maxima within this of the top one count as tied in the uncertainty (0, the leaderboard's
            setting: exact ties, as the clipped bicubic maps of the paper produce).
        n_examples: Overlays of the first N successful samples.
        hist_bins: Histogram bins on ``[0, 1]``.
    """

    name = "grounding"
    family = "grounding"
    model_kinds = ("vlm", "counter")
    dataset_kinds = ("grounding",)
    # a map with NaN or infinite values fails its unit where its metrics are computed (``grounding_metrics``)
    operational_params = {"n_examples": "how many overlays are saved", "hist_bins": "bins of a saved histogram"}

    def __init__(self, tau: float = 0.7, delta: float = 50.0, tie_tol: float = 0.0, n_examples: int = 4,
                 hist_bins: int = 20):
        if tie_tol < 0:
            raise ConfigError(f"task.tie_tol={tie_tol}: must be >= 0 (0 counts exact ties only)")
        self.tau, self.delta, self.tie_tol = float(tau), float(delta), float(tie_tol)
        self.n_examples, self.hist_bins = int(n_examples), int(hist_bins)

    def units(self, model: Any, dataset: Any, ctx: RunContext) -> list[str]:
        return list(dataset.ids())

    def input_keys(self, model: Any, dataset: Any, unit_ids: Sequence[str], ctx: RunContext) -> list[str]:
        """Every sample of the chunk, decoded ahead by the job's loader workers (``dataset.load``); none for a
        model that reads no pixels (``reads_pixels``)."""
        return list(unit_ids) if getattr(model, "reads_pixels", True) else []

    def run_units(self, model: Any, dataset: Any, unit_ids: Sequence[str], ctx: RunContext) -> list[dict]:
        """Samples read through ``ctx.load`` (an unreadable image fails its unit alone), their maps in batches of
        the job's size; a batch whose model call fails is run again sample by sample, so a failure stays with its
        unit."""
        records: dict[str, dict] = {}
        loaded: list[tuple[GroundingSample, GroundingSample]] = []
        reads_pixels = getattr(model, "reads_pixels", True)
        for uid in unit_ids:
            try:
                loaded.append((dataset[uid], ctx.load(dataset, uid) if reads_pixels else dataset[uid]))
            except CountboardError:
                raise
            except Exception as exc:  # unreadable image: its unit fails, the others go on
                records[uid] = {"unit_id": uid, "error": _describe(exc)}
        # a configuration problem fails every unit alike: it stops the job with its message (``reraise``)
        for chunk, maps in ctx.isolated(loaded, lambda chunk: model_heatmaps(model, [s for _, s in chunk]),
                                        reraise=(CountboardError,)):
            for (sample, _), m in zip(chunk, maps, strict=True):
                # the dataset's own sample: its declared image size is what a map is checked against
                records[sample.sample_id] = self._unit_record(sample, m)
        return [records[u] for u in unit_ids]

    def _unit_record(self, sample: GroundingSample, heatmap: np.ndarray | Exception) -> dict:
        if isinstance(heatmap, Exception):
            return {"unit_id": sample.sample_id, "error": _describe(heatmap)}
        try:
            return _record(sample, heatmap, self.tau, self.delta, self.tie_tol)
        except UNIT_ERRORS as exc:
            return {"unit_id": sample.sample_id, "error": _describe(exc)}

    def _examples(self, model: Any, dataset: Any, records: pd.DataFrame) -> dict[str, Any]:
        figures: dict[str, Any] = {}
        ids = list(records["unit_id"].astype(str))[: self.n_examples]
        if not ids:
            return figures
        try:
            samples = [dataset[u] for u in ids]
            maps = model_heatmaps(model, samples)
            for k, (s, m) in enumerate(zip(samples, maps, strict=True)):
                row = records[records["unit_id"].astype(str) == s.sample_id].iloc[0]
                caption = f"{s.phrase} | IoU {row['iou_soft']:.2f} IO {row['io_ratio']:.2f}"
                figures[f"grounding_example_{k:02d}"] = overlay(s.load_image(), m, s.box, caption)
        except CountboardError:
            raise
        except Exception as exc:  # figures are a convenience: never lose the run's metrics over them
            log.warning("grounding: example overlays skipped (%s)", _describe(exc))
        return figures

    def summarize(self, records: pd.DataFrame, model: Any, dataset: Any, ctx: RunContext) -> TaskResult:
        n = len(records)
        hits = int(records["pg_hit"].sum())
        uncertain = int(records["pg_uncertain"].sum())
        metrics = {k: float(records[k].mean()) for k in MEAN_KEYS}
        metrics.update({
            "pg_accuracy": hits / n, "pg_uncertainty": uncertain / n, "pg_hits": float(hits),
            "pg_uncertain_count": float(uncertain), "n_grounding": float(n),
            "n_empty_maps": float(records["empty_map"].sum()),
        })
        units = {k: bootstrap.UnitStatistic((records[k].to_numpy(np.float64),), bootstrap.mean) for k in MEAN_KEYS}
        units["pg_accuracy"] = bootstrap.UnitStatistic((records["pg_hit"].to_numpy(np.float64),), bootstrap.mean)
        units["pg_uncertainty"] = bootstrap.UnitStatistic((records["pg_uncertain"].to_numpy(np.float64),),
                                                          bootstrap.mean)
        metrics.update(bootstrap.interval_metrics(units))
        hist = histogram_table(records, self.hist_bins)
        figures = {"grounding_histograms": histogram_png(hist), **self._examples(model, dataset, records)}
        tags = {tg.PG_ACCURACY_K_OF_N: f"{hits} / {n}", tg.PG_UNCERTAINTY_K_OF_N: f"{uncertain} / {n}",
                tg.BOOTSTRAP: bootstrap.describe(), **explainer_tags(model)}
        return TaskResult(metrics=metrics, tables={"grounding_histograms": hist}, figures=figures, tags=tags)
