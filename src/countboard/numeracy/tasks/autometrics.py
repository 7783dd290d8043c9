"""``geckonum_autometrics``: do auto-eval metrics score correctly generated images higher (GeckoNum §6, Table 3)?

Each image of a generator (the release's, ``model=geckonum_release``) is scored by the metrics of ``metrics``
(``countboard.numeracy.autometrics``: CLIPScore and a counter-based score; ``countboard.numeracy.qa_scores``: DSG
and TIFA, asked to the VLM of ``vlm``) and split by the human study into correct (every Task 1 question's mode
answer is the asked number) and incorrect images, as the paper splits them. Per metric, over the images it scored
(a QA metric leaves an image whose every answer was unparsable NaN): the two-sided Mann–Whitney U p-value (✓ where
p < 0.05, Table 3's layout), the AUROC with its bootstrap interval (``countboard.metrics.discrimination``) and the
number of images; the two score distributions as a figure. What the VLM answered to each question of each image is
the table ``vlm_answers``.
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
from countboard.numeracy.qa_scores import DsgScore, TifaScore, ask_questions, release_questions
from countboard.numeracy.release import PROMPT_TYPES_BY_TASK, image_id, read_annotations, split_image_id
from countboard.numeracy.scoring import score_annotations
from countboard.results import RunContext, Task, TaskResult
from countboard.tracking.tags import RunTags

SIGNIFICANCE = 0.05
#: Every metric the task can run, in Table 3's order (the paper's CLIP, TIFA, DSG, then ours).
METRIC_KEYS = (ClipScore.key, TifaScore.key, DsgScore.key, CounterScore.key)
#: The metrics that ask the VLM of ``task.vlm``.
ASKED = (TifaScore.key, DsgScore.key)


class GeckoNumAutoMetrics(Task):
    """Auto-eval metrics judged against human correctness (see the module docstring).

    Args:
        evaluator: Config node of the counter of the counter-based score.
        vlm: Config node of the VLM that answers DSG's and TIFA's questions (a ``vlm`` model).
        metrics: The metrics to run, of ``METRIC_KEYS``.
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
    node_kinds = {"evaluator": ("counter",), "vlm": ("counter",)}
    path_params = ("human_labels",)
    operational_params = {"local_files_only": "whether the hub may be asked for weights already cached"}

    def __init__(self, evaluator: dict[str, Any], human_labels: str, human_generator: str | None = None,
                 clip_model_id: str = "openai/clip-vit-large-patch14", clip_w: float = 2.5,
                 seeds: Sequence[int] = (0,), local_files_only: bool = False, vlm: dict[str, Any] | None = None,
                 metrics: Sequence[str] = (ClipScore.key, CounterScore.key)):
        self.evaluator_cfg, self.vlm_cfg = _plain(evaluator), _plain(vlm) if vlm is not None else None
        self.evaluator_name = str(self.evaluator_cfg.get("name", "counter"))
        self.human_labels, self.human_generator = str(human_labels), human_generator
        self.clip_model_id, self.clip_w = clip_model_id, float(clip_w)
        self.seeds, self.local_files_only = [int(s) for s in seeds], bool(local_files_only)
        self.metrics = check_metrics(metrics, self.vlm_cfg)
        self._scorers: list | None = None
        self._asked: tuple[Any, list] | None = None

    @classmethod
    def preflight(cls, node: dict[str, Any]) -> None:
        """Before any run: ``check_metrics`` with the VLM's own check (its checkpoint, a processor that needs
        ``torchvision``), and what the chosen metrics load: CLIPScore's checkpoint, the counter's own check."""
        from countboard.models.base import preflight_node
        from countboard.models.hf_loading import check_weights_present

        chosen = check_metrics(node.get("metrics", (ClipScore.key, CounterScore.key)), node.get("vlm"))
        if ClipScore.key in chosen:
            check_weights_present(str(node.get("clip_model_id", "openai/clip-vit-large-patch14")),
                                  "CLIPScore's checkpoint task.clip_model_id", key="task.clip_model_id",
                                  local_files_only=bool(node.get("local_files_only", False)))
        if CounterScore.key in chosen:
            preflight_node(node.get("evaluator"), "task.evaluator")

    def scorers(self, device: str) -> list:
        """The image scorers of ``metrics`` (CLIPScore, the counter score), built once."""
        if self._scorers is None:
            self._scorers = []
            if ClipScore.key in self.metrics:
                self._scorers.append(ClipScore(self.clip_model_id, self.clip_w, device, self.local_files_only))
            if CounterScore.key in self.metrics:
                counter = instantiate_node({"task.evaluator": self.evaluator_cfg}, "task.evaluator", device=device)
                self._scorers.append(CounterScore(counter))
        return self._scorers

    def asked(self, device: str, specs: Sequence[Any]) -> tuple[Any, list]:
        """The VLM's adapter and the question scorers of ``metrics`` (DSG with the release's Task 3 questions when
        a prompt of ``specs`` is of a Task 3 type), built once."""
        if self._asked is None:
            model = instantiate_node({"task.vlm": self.vlm_cfg}, "task.vlm", device=device)
            adapter = model.asked  # check_metrics made sure it is a model asked in words
            scorers: list = []
            if TifaScore.key in self.metrics:
                scorers.append(TifaScore())
            if DsgScore.key in self.metrics:
                task3 = any(s.prompt_type in PROMPT_TYPES_BY_TASK[3] for s in specs)
                scorers.append(DsgScore(release_questions(self.human_labels) if task3 else None))
            self._asked = (adapter, scorers)
        return self._asked

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
        answered = self.ask(images, ctx, failed)
        done = [u for u in unit_ids if u in images and u not in failed]
        specs = [images[u].prompt for u in done]
        pixels = [images[u].image for u in done]
        scores = {s.key: s.score(pixels, specs) if done else np.zeros(0) for s in self.scorers(ctx.device)}
        records = []
        for k, u in enumerate(done):
            rec = {"unit_id": u, "prompt_id": specs[k].prompt_id, "seed": images[u].seed,
                   "prompt_type": specs[k].prompt_type}
            records.append(rec | {f"score_{key}": float(v[k]) for key, v in scores.items()} | answered.get(u, {}))
        return records + [{"unit_id": u, "error": e} for u, e in failed.items()]

    def ask(self, images: dict[str, Any], ctx: RunContext, failed: dict[str, str]) -> dict[str, dict]:
        """DSG's and TIFA's scores and answers per unit, the questions of a batch of images asked together; an
        image whose batch fails alone fails its unit (in ``failed``)."""
        if not set(ASKED) & set(self.metrics) or not images:
            return {}
        units = list(images)
        adapter, scorers = self.asked(ctx.device, [images[u].prompt for u in units])
        out: dict[str, dict] = {}

        def fn(batch: list[str]) -> list[dict]:
            return ask_questions(adapter, [images[u].image for u in batch], [images[u].prompt for u in batch],
                                 scorers)

        for batch, results in ctx.isolated(units, fn, reraise=(ConfigError,)):
            for u, res in zip(batch, results, strict=True):
                if isinstance(res, Exception):
                    failed[u] = f"{type(res).__name__}: {res}"
                else:
                    out[u] = res
        return out

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
        y_all = units["human_correct"].to_numpy(float)
        rows = []
        metrics = {"autometrics_n_images": float(len(units)), "autometrics_n_correct": float(y_all.sum())}
        keys = [k for k in METRIC_KEYS if k in self.metrics and f"score_{k}" in units]
        for key in keys:
            s_all = units[f"score_{key}"].to_numpy(float)
            s, y = s_all[np.isfinite(s_all)], y_all[np.isfinite(s_all)]  # the images the metric scored
            u, p = mann_whitney(s, y)
            lo, hi = auroc_interval(s, y)
            rows.append({"metric": key, "generator": self.human_generator, "n": int(len(s)),
                         "n_correct": int(y.sum()), "n_incorrect": int((1 - y).sum()),
                         "mean_correct": _mean(s[y == 1]), "mean_incorrect": _mean(s[y == 0]), "u": u,
                         "p_value": p, "significant": bool(p < SIGNIFICANCE), "auroc": auroc(s, y),
                         "auroc_low": lo, "auroc_high": hi})
            metrics |= {f"autometrics_{key}_auroc": rows[-1]["auroc"], f"autometrics_{key}_auroc_low": lo,
                        f"autometrics_{key}_auroc_high": hi, f"autometrics_{key}_p_value": p,
                        f"autometrics_{key}_n": float(len(s))}
        tables = {"table3": pd.DataFrame(rows), "scores": units.drop(columns="vlm_answers", errors="ignore")}
        if "vlm_answers" in units:
            tables["vlm_answers"] = answers_table(units)
        return TaskResult(metrics={k: float(v) for k, v in metrics.items() if np.isfinite(v)}, tables=tables,
                          figures={"score_distributions": distributions(units, keys)},
                          tags=RunTags(evaluator=self.evaluator_name).to_tags())


def _plain(node: Any) -> dict[str, Any]:
    if not isinstance(node, dict):
        from omegaconf import OmegaConf

        node = OmegaConf.to_container(node, resolve=True)
    return dict(node)


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if len(values) else float("nan")


def check_metrics(metrics: Sequence[str], vlm: dict[str, Any] | None) -> tuple[str, ...]:
    """The metrics asked for, checked: known, at least one, and a VLM with a checkpoint for DSG and TIFA."""
    chosen = tuple(str(m) for m in ([metrics] if isinstance(metrics, str) else metrics))
    unknown = [m for m in chosen if m not in METRIC_KEYS]
    if unknown or not chosen:
        raise ConfigError(f"task.metrics={list(chosen)}: choose one or more of {', '.join(METRIC_KEYS)}, e.g. "
                          "task.metrics=[clipscore,tifa,dsg,counter]")
    asked = [m for m in chosen if m in ASKED]
    if asked:
        from hydra.utils import get_class

        from countboard.counting.models.vlm import VlmCounter

        vlm = vlm or {}
        try:
            cls = get_class(str(vlm.get("_target_")))
        except Exception:
            cls = None
        if not (isinstance(cls, type) and issubclass(cls, VlmCounter)):
            raise ConfigError(f"task.metrics has {', '.join(asked)}, which ask a VLM, but task.vlm "
                              f"({vlm.get('name')}) is not a model asked in words: choose one with "
                              "model@task.vlm=vlm_paligemma_3b_pt_448 (or another vlm_* preset)")
        if not vlm.get("model_id"):
            raise ConfigError(f"task.metrics has {', '.join(asked)}, which ask a VLM, but task.vlm.model_id is not "
                              "set: choose one with model@task.vlm=vlm_paligemma_3b_pt_448 (or another vlm_* "
                              "preset) or task.vlm.model_id=<hub id or folder>")
        from countboard.models.base import preflight_node

        preflight_node(vlm, "task.vlm")
    return tuple(dict.fromkeys(chosen))


def answers_table(units: pd.DataFrame) -> pd.DataFrame:
    """One row per question asked of an image: the unit, the question, the VLM's raw answer, what it was read as
    and what it counted in the metric's score."""
    import json

    rows = [{"unit_id": u, "human_correct": h, **a}
            for u, h, text in zip(units["unit_id"], units["human_correct"], units["vlm_answers"], strict=True)
            if isinstance(text, str) for a in json.loads(text)]
    return pd.DataFrame(rows)


def distributions(units: pd.DataFrame, keys: Sequence[str]):
    """Histograms of each metric's scores for correct and incorrect images (matplotlib figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, max(len(keys), 1), figsize=(4 * max(len(keys), 1), 3))
    for ax, key in zip(np.atleast_1d(axes), keys, strict=False):
        for label, name in ((1.0, "correct"), (0.0, "incorrect")):
            vals = units.loc[units["human_correct"] == label, f"score_{key}"].dropna()
            ax.hist(vals, bins=20, alpha=0.6, label=f"{name} ({len(vals)})")
        ax.set_title(key)
        ax.legend()
    fig.tight_layout()
    return fig
