"""``geckonum_autometrics``: do auto-eval metrics score correctly generated images higher (GeckoNum §6, Table 3)?

Each image of a generator (the release's, ``model=geckonum_release``) is scored by every metric
(``countboard.numeracy.autometrics``: CLIPScore and a counter-based score) and split by the human study into
correct (every Task 1 question's mode answer is the asked number) and incorrect images, as the paper splits them.
Per metric: the two-sided Mann–Whitney U p-value (✓ where p < 0.05, Table 3's layout) and the AUROC with its
bootstrap interval (``countboard.metrics.discrimination``); the two score distributions as a figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from countboard.config import instantiate_node
from countboard.errors import ConfigError
from countboard.metrics.discrimination import auroc, auroc_interval, mann_whitney
from countboard.models.base import Generator
from countboard.numeracy.autometrics import ClipScore, CounterScore
from countboard.numeracy.datasets.prompts import PromptSet
from countboard.numeracy.release import image_id, read_annotations, split_image_id
from countboard.numeracy.scoring import score_annotations
from countboard.results import RunContext, Task, TaskResult
from countboard.tracking.tags import RunTags

SIGNIFICANCE = 0.05
METRIC_KEYS = (ClipScore.key, CounterScore.key)


class GeckoNumAutoMetrics(Task):
    """Auto-eval metrics judged against human correctness (see the module docstring).

    Args:
        evaluator: Config node of the counter of the counter-based score.
        human_labels: Zip or folder with ``task_1_<generator>.csv`` (the release's annotations).
        human_generator: The generator in those CSVs (the model's name).
        clip_model_id: CLIP checkpoint of CLIPScore.
        clip_w: CLIPScore's weight ``w``.
        seeds: Seeds of a generator that makes images (a released generator uses every seed it has).
        local_files_only: CLIP from the local cache only.
    """

    name = "geckonum_autometrics"
    family = "generator_autometrics"
    model_kinds = ("generator",)
    dataset_kinds = ("image_prompts",)
    node_kinds = {"evaluator": ("counter",)}
    path_params = ("human_labels",)
    operational_params = {"local_files_only": "whether the hub may be asked for weights already cached"}

    def __init__(self, evaluator: dict[str, Any], human_labels: str, human_generator: str | None = None,
                 clip_model_id: str = "openai/clip-vit-large-patch14", clip_w: float = 2.5,
                 seeds: Sequence[int] = (0,), local_files_only: bool = False):
        if not isinstance(evaluator, dict):
            from omegaconf import OmegaConf

            evaluator = OmegaConf.to_container(evaluator, resolve=True)
        self.evaluator_cfg = dict(evaluator)
        self.evaluator_name = str(evaluator.get("name", "counter"))
        self.human_labels, self.human_generator = str(human_labels), human_generator
        self.clip_model_id, self.clip_w = clip_model_id, float(clip_w)
        self.seeds, self.local_files_only = [int(s) for s in seeds], bool(local_files_only)
        self._scorers = None

    def scorers(self, device: str) -> list:
        if self._scorers is None:
            counter = instantiate_node({"task.evaluator": self.evaluator_cfg}, "task.evaluator", device=device)
            self._scorers = [ClipScore(self.clip_model_id, self.clip_w, device, self.local_files_only),
                             CounterScore(counter)]
        return self._scorers

    def units(self, model: Generator, dataset: PromptSet, ctx: RunContext) -> list[str]:
        released = getattr(model, "available_seeds", None)
        seeds = (released() if released is not None else None) or self.seeds
        return [image_id(s.prompt_id, seed) for s in dataset.specs if s.exact for seed in seeds]

    def run_units(self, model: Generator, dataset: PromptSet, unit_ids: Sequence[str], ctx: RunContext
                  ) -> list[dict]:
        images, failed = {}, {}
        for u in unit_ids:  # one at a time: an image the release lacks fails its unit only
            pid, seed = split_image_id(u)
            try:
                images[u] = model.generate_batch([dataset.by_id[pid]], [seed])[0]
            except (OSError, ValueError) as exc:
                failed[u] = f"{type(exc).__name__}: {exc}"
        done = [u for u in unit_ids if u in images]
        specs = [images[u].prompt for u in done]
        pixels = [images[u].image for u in done]
        scores = {s.key: s.score(pixels, specs) if done else np.zeros(0) for s in self.scorers(ctx.device)}
        records = []
        for k, u in enumerate(done):
            rec = {"unit_id": u, "prompt_id": specs[k].prompt_id, "seed": images[u].seed,
                   "prompt_type": specs[k].prompt_type}
            records.append(rec | {f"score_{key}": float(v[k]) for key, v in scores.items()})
        return records + [{"unit_id": u, "error": e} for u, e in failed.items()]

    def human_correct(self, dataset: PromptSet) -> pd.Series:
        """1/0 per image id: every Task 1 question of the image answered with its number (the mode)."""
        if not self.human_generator:
            raise ConfigError("task.human_generator must name the generator in the annotation CSVs")
        ann = read_annotations(self.human_labels, 1)
        ann = ann[ann["model"].astype(str) == self.human_generator]
        units = score_annotations(ann, dataset.frame(), 1, generators=[self.human_generator]).units
        if units.empty:
            raise ConfigError(f"no Task 1 labels of generator {self.human_generator!r} in {self.human_labels}")
        return units.groupby(units["image_id"].astype(str))["correct"].all().astype(float)

    def summarize(self, records: pd.DataFrame, model: Generator, dataset: PromptSet, ctx: RunContext
                  ) -> TaskResult:
        correct = self.human_correct(dataset)
        units = records.assign(human_correct=records["unit_id"].map(correct)).dropna(subset=["human_correct"])
        y = units["human_correct"].to_numpy(float)
        rows, metrics = [], {"autometrics_n_images": float(len(units)), "autometrics_n_correct": float(y.sum())}
        for key in METRIC_KEYS:
            s = units[f"score_{key}"].to_numpy(float)
            u, p = mann_whitney(s, y)
            lo, hi = auroc_interval(s, y)
            rows.append({"metric": key, "generator": self.human_generator, "n_correct": int(y.sum()),
                         "n_incorrect": int((1 - y).sum()), "mean_correct": float(np.nanmean(s[y == 1])),
                         "mean_incorrect": float(np.nanmean(s[y == 0])), "u": u, "p_value": p,
                         "significant": bool(p < SIGNIFICANCE), "auroc": auroc(s, y), "auroc_low": lo,
                         "auroc_high": hi})
            metrics |= {f"autometrics_{key}_auroc": rows[-1]["auroc"], f"autometrics_{key}_auroc_low": lo,
                        f"autometrics_{key}_auroc_high": hi, f"autometrics_{key}_p_value": p}
        table = pd.DataFrame(rows)
        return TaskResult(metrics={k: float(v) for k, v in metrics.items() if np.isfinite(v)},
                          tables={"table3": table, "scores": units},
                          figures={"score_distributions": distributions(units)},
                          tags=RunTags(evaluator=self.evaluator_name).to_tags())


def distributions(units: pd.DataFrame):
    """Histograms of each metric's scores for correct and incorrect images (matplotlib figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(METRIC_KEYS), figsize=(4 * len(METRIC_KEYS), 3))
    for ax, key in zip(np.atleast_1d(axes), METRIC_KEYS, strict=True):
        for label, name in ((1.0, "correct"), (0.0, "incorrect")):
            vals = units.loc[units["human_correct"] == label, f"score_{key}"].dropna()
            ax.hist(vals, bins=20, alpha=0.6, label=f"{name} ({len(vals)})")
        ax.set_title(key)
        ax.legend()
    fig.tight_layout()
    return fig
