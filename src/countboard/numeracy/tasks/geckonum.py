"""``geckonum_autoeval``: a generator's numeracy judged by a counter, corrected with human labels (BCC).

Images are generated (or read back from ``image_dir``), one per exact-count prompt × seed, then the evaluator
(any ``Counter``) answers every count question GeckoNum's Task 1 asks about the prompt
(``PromptSpec.count_questions``: one per entity, plus the bare noun of colour prompts and the relations of
spatial prompts) by counting the question's noun phrase. As in the paper, a *question* (image-question pair) is
the scored unit by default (``unit="question"``): it is a success for the evaluator (classify and count, CC) when
the rounded count equals the number asked for; ``unit="image"`` scores an image, right when all its questions
are. A random subset of ``n_human`` images carries human answers to the same questions, simulated (for
generators that know what they drew: a person who miscounts a question with probability ``human_error``) or read
from annotations in GeckoNum's Task 1 CSV layout (imported, or exported by the annotation page). Bayesian
classify and count (``countboard.quantify``) corrects the CC rate for the evaluator's true- and false-positive
rates measured on that subset, overall and per prompt type.
"""

from __future__ import annotations

import io
import json
import logging
import os
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from PIL import Image

from countboard.config import instantiate_node
from countboard.decode import decode_image
from countboard.errors import ConfigError
from countboard.items import GeneratedImage, ImageItem
from countboard.models.base import Generator, unparsed
from countboard.numeracy.datasets.prompts import PromptSet, PromptSpec
from countboard.numeracy.release import image_id, read_annotations
from countboard.numeracy.scoring import score_annotations
from countboard.numeracy.tasks.geckonum_bcc import bcc_cells, bcc_report, replicate_report
from countboard.results import RunContext, Task, TaskResult
from countboard.tracking import failpoints
from countboard.tracking import tags as tg
from countboard.tracking.tags import RunTags

__all__ = ["GeckoNumAutoEval", "bcc_cells", "bcc_report", "question_frame", "sample_units", "simulate_answers",
           "simulate_human"]

ANNOTATION_COLUMNS = ["image_id", "prompt_id", "seed", "prompt", "prompt_type", "nouns", "questions"]
SIMULATED = "simulated"

log = logging.getLogger("countboard")


def parse_unit(unit_id: str) -> tuple[int, int]:
    """``(prompt_id, seed)`` of a unit id ``geckonum_<prompt_id>_<seed>``."""
    *_, pid, seed = unit_id.split("_")
    return int(pid), int(seed)


def sample_units(unit_ids: Sequence[str], n: int, seed: int, salt: int) -> list[str]:
    """A seeded random subset of ``n`` unit ids (all when fewer), in the order of ``unit_ids``.

    Example:
        >>> sample_units(["a", "b", "c"], 5, 0, 1)
        ['a', 'b', 'c']
    """
    ids = sorted(unit_ids)
    if n >= len(ids):
        return sorted(unit_ids, key=list(unit_ids).index)
    rng = np.random.default_rng([seed, salt])
    keep = set(np.asarray(ids)[rng.choice(len(ids), size=n, replace=False)])
    return [u for u in unit_ids if u in keep]


def simulate_answers(
    targets: Sequence[int], drawn: Sequence[int], error: float, rng: np.random.Generator
) -> list[int]:
    """1 per question where a simulated person's count equals the number asked for, else 0.

    The person reports the drawn count, off by one (either way) with probability ``error`` per question.

    Example:
        >>> simulate_answers([2, 3], [2, 4], 0.0, np.random.default_rng(0))
        [1, 0]
    """
    reported = [d + (int(rng.choice((-1, 1))) if rng.random() < error else 0) for d in drawn]
    return [int(r == t) for r, t in zip(reported, targets, strict=True)]


def simulate_human(
    targets: Sequence[int], drawn: Sequence[int], error: float, rng: np.random.Generator
) -> int:
    """1 when a simulated person answers every question with the number asked for (``simulate_answers``).

    Example:
        >>> simulate_human([2, 3], [2, 3], 0.0, np.random.default_rng(0))
        1
    """
    return int(all(simulate_answers(targets, drawn, error, rng)))


#: Scored units of ``geckonum_autoeval``: image-question pairs (the paper's) or whole images.
UNIT_KINDS = ("question", "image")


def _counted_right(count: float, target: int) -> bool:
    """The evaluator's count rounds to the number asked for; no count (the counter failed) is never right."""
    return bool(np.isfinite(count)) and round(count) == target


def _fill_answers(answers: list[str | None], said, idx) -> None:
    """Put the raw answers of a model asked in words (``AnsweredCounts.answers``) at the question indices."""
    for k, a in zip(idx, getattr(said, "answers", None) or (), strict=False):
        answers[k] = a


def _unparsed_answers(said, owners: list[str]) -> dict[str, str]:
    """``{image id: why}`` for the images whose evaluator (a model asked in words) gave an answer stating no count:
    its count is NaN (never right) and the raw answer is kept in the message."""
    out: dict[str, str] = {}
    for k, owner in enumerate(owners):
        bad = unparsed(said, k, k + 1)
        if bad and owner not in out:
            out[owner] = bad
    return out


def _count_questions(evaluator, items: list, prompts: list[str], owners: list[str]
                     ) -> tuple[np.ndarray, dict[str, str]]:
    """The evaluator's count per question, batched; when the batch raises, image by image, so that an image the
    counter fails on gets NaN counts and its error (``{image id: error}``) instead of ending the job."""
    return _answered_questions(evaluator, items, prompts, owners)[:2]


def _answered_questions(evaluator, items: list, prompts: list[str], owners: list[str]
                        ) -> tuple[np.ndarray, dict[str, str], list[str | None]]:
    """``_count_questions``, with the raw answer to each question of a model asked in words (else None)."""
    answers: list[str | None] = [None] * len(items)
    if not items:
        return np.zeros(0), {}, answers
    try:
        said = evaluator.count(items, prompts)
        _fill_answers(answers, said, range(len(items)))
        counts, errors = _finite_counts(np.asarray(said, dtype=np.float64), owners, _unparsed_answers(said, owners))
        return counts, errors, answers
    except Exception:  # find the images it fails on
        pass
    counts, errors = np.full(len(items), np.nan), {}
    for u in dict.fromkeys(owners):
        idx = [k for k, o in enumerate(owners) if o == u]
        try:
            said = evaluator.count([items[k] for k in idx], [prompts[k] for k in idx])
            counts[idx] = said
            _fill_answers(answers, said, idx)
            errors.update(_unparsed_answers(said, [u] * len(idx)))
        except Exception as exc:
            errors[u] = f"{type(exc).__name__}: {exc}"
            log.warning("the evaluator failed on %s: %s", u, errors[u])
    counts, errors = _finite_counts(counts, owners, errors)
    return counts, errors, answers


def _finite_counts(counts: np.ndarray, owners: list[str], errors: dict[str, str]
                   ) -> tuple[np.ndarray, dict[str, str]]:
    """A NaN or infinite count is the evaluator failing on that image (listed with the others it failed on, never
    read as a count)."""
    for k in np.flatnonzero(~np.isfinite(counts)):
        if owners[k] not in errors:
            errors[owners[k]] = f"the evaluator returned a non-finite count ({counts[k]}) for one of its questions"
            log.warning("the evaluator failed on %s: %s", owners[k], errors[owners[k]])
    counts[~np.isfinite(counts)] = np.nan
    return counts, errors


def question_frame(units: pd.DataFrame, human: dict[str, list[float]]) -> pd.DataFrame:
    """One row per image-question pair of image records: ``cc_success`` (rounded count = number asked for),
    ``true_success`` (drawn count, where known) and ``human`` (0/1, NaN without an answer).

    Example:
        >>> rec = pd.DataFrame({"unit_id": ["g_0_0"], "prompt_type": ["2-additive"], "targets": ["[2, 1]"],
        ...                     "evaluator_counts": ["[2.2, 2.0]"], "questions": ['["a?", "b?"]']})
        >>> question_frame(rec, {"g_0_0": [1.0, 0.0]})[["cc_success", "human"]].values.tolist()
        [[1.0, 1.0], [0.0, 0.0]]
    """
    rows = []
    has_drawn = "drawn" in units.columns
    for rec in units.itertuples(index=False):
        targets, counts = json.loads(rec.targets), json.loads(rec.evaluator_counts)
        questions = json.loads(rec.questions)
        drawn = json.loads(rec.drawn) if has_drawn and isinstance(rec.drawn, str) else None
        answers = human.get(rec.unit_id, [np.nan] * len(targets))
        for k, (t, c) in enumerate(zip(targets, counts, strict=True)):
            row = {"unit_id": rec.unit_id, "question_id": k, "question": questions[k],
                   "prompt_type": rec.prompt_type, "cc_success": float(_counted_right(c, t)), "human": answers[k]}  # fmt: skip
            if drawn is not None:
                row["true_success"] = float(drawn[k] == t)
            rows.append(row)
    return pd.DataFrame(rows)


class GeckoNumAutoEval(Task):
    """Auto-evaluated numeracy of a generator with BCC correction (see the module docstring).

    Args:
        evaluator: Config node of the counter (``_target_`` plus its keys; ``name`` tags the run).
        seeds: Generation seeds per prompt.
        n_human: Images with a human label (a seeded random subset of the units).
        human_labels: ``"simulated"``, or a zip / folder with ``task_1_<generator>.csv`` in GeckoNum's layout.
        human_generator: The generator name in those CSVs (the model's config name).
        human_error: Per-question miscount probability of the simulated person.
        n_annotate: Images packed for the annotation page (``files/annotation_images.zip``).
        image_dir: Folder where images are written and read back, so reruns and other evaluators reuse them.
        bcc_draws: Posterior draws per chain of BCC.
        bcc_chains: Chains of BCC.
        bcc_level: Mass of the BCC credible interval (``autoeval_bcc_rate_low`` .. ``_high``).
        sample_seed: Seed of the human and annotation subsets.
        unit: ``"question"`` (default, the paper's image-question pairs) or ``"image"`` (all questions right).
        replicates: Replicate draws of the labelled subset for the validation against all human labels (0: none;
            ``countboard.quantify.validation``); with imported labels (or simulated ones, drawn for every unit).
        replicate_n: Labelled units per replicate of the headline coverage and error metrics.
        replicate_sizes: Labelled units per replicate of the error-vs-labels view.
    """

    name = "geckonum_autoeval"
    family = "generator_autoeval"
    model_kinds = ("generator",)
    dataset_kinds = ("image_prompts",)
    node_kinds = {"evaluator": ("counter",)}
    operational_params = {
        "n_annotate": "how many images are packed for the annotation page",
        "image_dir": "where images are cached on this machine",
        "bcc_draws": "the posterior's Monte Carlo precision, not what it estimates",
        "bcc_chains": "the posterior's Monte Carlo precision, not what it estimates",
        "sample_seed": "which items are drawn for human labels: a replicate",
        "replicates": "the Monte-Carlo precision of the coverage check, not what the run estimates",
    }
    path_params = ("human_labels",)

    @classmethod
    def preflight(cls, node: dict[str, Any]) -> None:
        """The evaluator's own check (its weights, its packages), before any run exists."""
        from countboard.models.base import preflight_node

        preflight_node(node.get("evaluator"), "task.evaluator")

    def __init__(self, evaluator: dict[str, Any], seeds: Sequence[int] = (0,), n_human: int = 100,
                 human_labels: str = SIMULATED, human_generator: str | None = None, human_error: float = 0.02,
                 n_annotate: int = 100, image_dir: str | None = None, bcc_draws: int = 500, bcc_chains: int = 2,
                 sample_seed: int = 0, unit: str = "question", bcc_level: float = 0.95, replicates: int = 0,
                 replicate_n: int = 100, replicate_sizes: Sequence[int] = (25, 50, 100, 200)):  # fmt: skip
        if not isinstance(evaluator, dict):
            from omegaconf import OmegaConf

            evaluator = OmegaConf.to_container(evaluator, resolve=True)
        if "_target_" not in evaluator:
            raise ConfigError(
                "task.evaluator needs a `_target_` (a Counter class), e.g. a model config of kind counter"
            )
        self.evaluator_cfg = dict(evaluator)
        self.evaluator_name = str(evaluator.get("name", evaluator["_target_"].rsplit(".", 1)[-1]))
        self.seeds = [int(s) for s in seeds]
        self.n_human, self.human_labels, self.human_generator = (
            int(n_human),
            str(human_labels),
            human_generator,
        )
        self.human_error, self.n_annotate = float(human_error), int(n_annotate)
        self.image_dir = Path(image_dir) if image_dir else None
        self.bcc_draws, self.bcc_chains, self.sample_seed = int(bcc_draws), int(bcc_chains), int(sample_seed)
        if not 0 < float(bcc_level) < 1:
            raise ConfigError(f"task.bcc_level must be between 0 and 1, got {bcc_level}")
        self.bcc_level = float(bcc_level)
        if unit not in UNIT_KINDS:
            raise ConfigError(f"task.unit must be one of {', '.join(UNIT_KINDS)}, got {unit!r}")
        self.unit = unit
        if int(replicates) < 0 or int(replicate_n) < 1:
            raise ConfigError(f"task.replicates must be >= 0 and task.replicate_n >= 1, got {replicates}, "
                              f"{replicate_n}")
        self.replicates, self.replicate_n = int(replicates), int(replicate_n)
        self.replicate_sizes = sorted({int(n) for n in replicate_sizes} | {self.replicate_n})
        self._evaluator = None

    def evaluator(self, device: str):
        """The counter, built on first use on ``device`` the way the job builds its model."""
        if self._evaluator is None:
            self._evaluator = instantiate_node({"task.evaluator": self.evaluator_cfg}, "task.evaluator",
                                               device=device)
        return self._evaluator

    def units(self, model: Generator, dataset: PromptSet, ctx: RunContext) -> list[str]:
        """Exact-count prompts × ``seeds``, or × every seed a released generator has images of (an image missing
        for one prompt is then a failed unit)."""
        released = getattr(model, "available_seeds", None)
        seeds = released() if released is not None else None
        seeds = self.seeds if seeds is None else seeds
        return [image_id(s.prompt_id, seed) for s in dataset.specs if s.exact for seed in seeds]

    def _cached(self, spec: PromptSpec, seed: int) -> GeneratedImage | None:
        if self.image_dir is None:
            return None
        path = self.image_dir / f"{image_id(spec.prompt_id, seed)}.png"
        if not path.is_file():
            return None
        side = (
            json.loads(path.with_suffix(".json").read_text()) if path.with_suffix(".json").is_file() else {}
        )
        points = {
            k: np.asarray(v, dtype=np.float64).reshape(-1, 2) for k, v in side.get("points", {}).items()
        }
        return GeneratedImage(spec, seed, decode_image(path), side.get("drawn"),
                              {"points": points})  # fmt: skip

    def images(
        self, model: Generator, dataset: PromptSet, unit_ids: Sequence[str]
    ) -> dict[str, GeneratedImage]:
        """Generated (or cached) images of the units, generated in batches of the model's ``batch_size``; with
        ``image_dir`` each image is saved as soon as its batch is made (by a writer thread, while the next batch
        is generated), so a killed job resumes at the next image."""
        out: dict[str, GeneratedImage] = {}
        todo: list[tuple[PromptSpec, int]] = []
        for u in unit_ids:
            pid, seed = parse_unit(u)
            spec = dataset.by_id[pid]
            cached = self._cached(spec, seed)
            if cached is not None:
                out[u] = cached
            else:
                todo.append((spec, seed))
        with ImageWriter(self.image_dir) as writer:
            for start in range(0, len(todo), model.batch_size):
                chunk = todo[start : start + model.batch_size]
                for im in model.generate_batch([p for p, _ in chunk], [s for _, s in chunk]):
                    writer.put(im)
                    out[image_id(im.prompt.prompt_id, im.seed)] = im
        return out

    def run_units(
        self, model: Generator, dataset: PromptSet, unit_ids: Sequence[str], ctx: RunContext
    ) -> list[dict]:
        try:
            images = self.images(model, dataset, unit_ids)
        except (ValueError, OSError) as exc:  # one bad prompt or missing image: one unit at a time, the others run
            if len(unit_ids) == 1:
                return [{"unit_id": unit_ids[0], "error": str(exc)}]
            return [r for u in unit_ids for r in self.run_units(model, dataset, [u], ctx)]
        items, prompts, owners = [], [], []
        for u in unit_ids:
            im = images[u]
            item = ImageItem(u, im.image, points=im.meta.get("points", {}))
            for q in im.prompt.count_questions():
                items.append(item)
                prompts.append(q.phrase)
                owners.append(u)
        counts, errors, answers = _answered_questions(self.evaluator(ctx.device), items, prompts, owners)
        records = []
        for u in unit_ids:
            im = images[u]
            spec = im.prompt
            got = [float(c) for c, o in zip(counts, owners, strict=True) if o == u]
            questions = spec.count_questions()
            targets = [q.target for q in questions]
            rec = {
                "unit_id": u, "prompt_id": spec.prompt_id, "seed": im.seed, "prompt_type": spec.prompt_type,
                "prompt": spec.prompt, "nouns": json.dumps([e.noun for e in spec.entities]),
                "questions": json.dumps([q.question for q in questions]),
                "targets": json.dumps(targets), "evaluator_counts": json.dumps(got),
                "cc_success": int(all(_counted_right(c, t) for c, t in zip(got, targets, strict=True))),
                "evaluator_error": errors.get(u),
            }  # fmt: skip
            if any(a is not None for a in answers):  # a model asked in words: its raw answers beside the counts
                rec["evaluator_answers"] = json.dumps([a for a, o in zip(answers, owners, strict=True) if o == u])
            if im.drawn_counts is not None:
                drawn = [sum(int(im.drawn_counts[n]) for n in q.nouns) for q in questions]
                rec["drawn"] = json.dumps(drawn)
                rec["true_success"] = int(drawn == targets)
            records.append(rec)
        return records

    def summarize(
        self, records: pd.DataFrame, model: Generator, dataset: PromptSet, ctx: RunContext
    ) -> TaskResult:
        units = records.sort_values("unit_id").reset_index(drop=True)
        answers = self.human_answers(units, dataset)
        if self.unit == "question":
            scored = question_frame(units, answers)
        else:
            scored = units.copy()
            scored["human"] = _image_labels(units, answers)
        cells = bcc_cells(scored, self.bcc_draws, self.bcc_chains, self.sample_seed, self.bcc_level)
        metrics, per_type = bcc_report(scored, cells=cells)
        metrics["autoeval_n_units"] = float(len(scored))
        metrics["autoeval_n_images"] = float(len(units))
        failed = units["evaluator_error"].notna() if "evaluator_error" in units else pd.Series(False, units.index)
        metrics["autoeval_evaluator_failure_rate"] = float(failed.mean()) if len(units) else 0.0
        metrics["autoeval_n_labelled_images"] = float(sum(np.isfinite(a).any() for a in answers.values()))
        files, sample = self.annotation_files(model, dataset, units, ctx)
        tables = {"per_prompt_type": per_type, "annotation_sample": sample,
                  "bcc_cells": cells.rename(columns={"prompt_type": "cell"})}
        if self.unit == "question":
            tables["questions"] = scored
        if self.replicates:
            validation, calibration = self.validate_on_all_labels(units, dataset)
            metrics |= validation
            tables["replicate_calibration"] = calibration
        if failed.any():  # shown beside the rates: these images count as not satisfied for CC and BCC
            tables["evaluator_failures"] = units.loc[failed, ["unit_id", "prompt_id", "seed", "evaluator_error"]]
        return TaskResult(metrics=metrics, tables=tables, files=files,
                          tags=RunTags(evaluator=self.evaluator_name,
                                       extra={tg.AUTOEVAL_UNIT: self.unit}).to_tags())

    def validate_on_all_labels(self, units: pd.DataFrame, dataset: PromptSet) -> tuple[dict[str, float],
                                                                                     pd.DataFrame]:
        """BCC, CC and the human-only posterior against the accuracy of every human label of the same units, over
        ``replicates`` random labelled subsets (``quantify.validation.replicate_calibration``): headline metrics at
        ``replicate_n`` labelled units and ``bcc_level``, and the calibration table for every size and level."""
        answers = self.human_answers(units, dataset, everyone=True)
        if self.unit == "question":
            scored = question_frame(units, answers)
        else:
            scored = units.copy()
            scored["human"] = _image_labels(units, answers)
        return replicate_report(scored, self.replicates, self.replicate_sizes, self.replicate_n, self.bcc_level,
                                self.sample_seed)

    def human_column(self, units: pd.DataFrame, dataset: PromptSet) -> np.ndarray:
        """0/1 human label of each image (row of ``units``: right when every answered question is), NaN where
        the image has none."""
        return _image_labels(units, self.human_answers(units, dataset))

    def human_answers(self, units: pd.DataFrame, dataset: PromptSet, everyone: bool = False
                      ) -> dict[str, list[float]]:
        """Human answers (1 right, 0 wrong, NaN unanswered) per question of each labelled image (of every image
        with ``everyone``)."""
        if self.human_labels == SIMULATED:
            if "drawn" not in units or units["drawn"].isna().any():
                raise ConfigError(
                    "human_labels=simulated needs a generator that reports what it drew (procedural); for other "
                    "generators pass task.human_labels=<folder or zip with task_1_<generator>.csv>"
                )
            labelled = set(units["unit_id"]) if everyone else set(
                sample_units(list(units["unit_id"]), self.n_human, self.sample_seed, 1))
            rng = np.random.default_rng([self.sample_seed, 2 + int(everyone)])
            return {
                row.unit_id: [float(a) for a in simulate_answers(json.loads(row.targets), json.loads(row.drawn),
                                                                 self.human_error, rng)]
                for row in units.itertuples(index=False) if row.unit_id in labelled
            }  # fmt: skip
        return self._imported_answers(units, dataset, everyone)

    def _imported_answers(self, units: pd.DataFrame, dataset: PromptSet, everyone: bool = False
                          ) -> dict[str, list[float]]:
        if not self.human_generator:
            raise ConfigError("task.human_generator must name the generator in the annotation CSVs")
        ann = read_annotations(self.human_labels, 1)
        ann = ann[ann["model"].astype(str) == self.human_generator]  # other generators' rows are not problems
        scored = score_annotations(ann, dataset.frame(), 1, generators=[self.human_generator]).units
        if scored.empty:
            raise ConfigError(
                f"no Task 1 labels of generator {self.human_generator!r} in {self.human_labels}"
            )
        correct = dict(zip(zip(scored["image_id"].astype(str), scored["question"].astype(str), strict=True),
                           scored["correct"].astype(float), strict=True))  # fmt: skip
        present = set(units["unit_id"])
        answered = [u for u in dict.fromkeys(scored["image_id"].astype(str)) if u in present]
        chosen = set(answered) if everyone else set(sample_units(answered, self.n_human, self.sample_seed, 1))
        return {
            row.unit_id: [correct.get((row.unit_id, q), np.nan) for q in _questions_of(row)]
            for row in units.itertuples(index=False) if row.unit_id in chosen
        }

    def annotation_files(self, model: Generator, dataset: PromptSet, units: pd.DataFrame, ctx: RunContext
                         ) -> tuple[dict[str, Path], pd.DataFrame]:  # fmt: skip
        """A seeded subset of ``n_annotate`` images as a zip, and its table (one row per image)."""
        chosen = sample_units(list(units["unit_id"]), self.n_annotate, self.sample_seed, 3)
        if not chosen:
            return {}, pd.DataFrame(columns=ANNOTATION_COLUMNS)
        images = self.images(model, dataset, chosen)
        path = Path(ctx.work_dir) / "annotation_images.zip"
        rows = []
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
            for u in chosen:
                im = images[u]
                buf = io.BytesIO()
                Image.fromarray(im.image).save(buf, format="PNG")
                zf.writestr(f"{u}.png", buf.getvalue())
                rows.append(annotation_row(u, im))
        return {"annotation_images.zip": path}, pd.DataFrame(rows, columns=ANNOTATION_COLUMNS)


#: Threads that encode and write PNGs beside the generator (at most the machine's cores).
WRITER_THREADS = 4


class ImageWriter:
    """Saves generated images into ``image_dir`` (None: saves nothing) on a pool of ``WRITER_THREADS`` threads beside
    the generator (PNG encoding releases the interpreter's lock, so the images of a batch are encoded at once while
    the next batch is generated).

    Each image is ``<image id>.png`` with its side file ``<image id>.json`` (what the generator drew), both
    written under a temporary name and renamed, the side file first: a PNG is there only when whole, so a job
    killed while writing reads every image it finds and makes the others again. PNGs are compressed at level 1
    (lossless like any level; the encoder's time is most of the write). Leaving the block waits for the writes and
    raises the first that failed.
    """

    def __init__(self, image_dir: Path | None):
        from concurrent.futures import ThreadPoolExecutor

        self.image_dir = image_dir
        threads = max(1, min(WRITER_THREADS, os.cpu_count() or 1))
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="image-writer") if image_dir is not None else None
        self._pending: list = []
        if image_dir is not None:
            image_dir.mkdir(parents=True, exist_ok=True)

    def put(self, im: GeneratedImage) -> None:
        if self._pool is not None:
            self._pending.append(self._pool.submit(self._write, im))

    def _write(self, im: GeneratedImage) -> None:
        path = self.image_dir / f"{image_id(im.prompt.prompt_id, im.seed)}.png"
        points = {k: np.asarray(v).tolist() for k, v in im.meta.get("points", {}).items()}
        side, tmp_side = path.with_suffix(".json"), path.with_name(f".{path.stem}.json.tmp")
        tmp_side.write_text(json.dumps({"drawn": im.drawn_counts, "points": points}))
        os.replace(tmp_side, side)
        tmp = path.with_name(f".{path.stem}.png.tmp")
        Image.fromarray(im.image).save(tmp, format="PNG", compress_level=1)
        os.replace(tmp, path)
        failpoints.hit("image_write")

    def __enter__(self) -> ImageWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is None:
            return
        try:
            for future in self._pending:
                future.result()
        finally:
            self._pool.shutdown(wait=True)


def annotation_row(image_id: str, im: GeneratedImage) -> dict:
    """One row of ``tables/annotation_sample.parquet``: the image's count questions, each with the noun it asks
    about (a bare noun shared by two coloured entities and the relation questions included)."""
    questions = im.prompt.count_questions()
    return {"image_id": image_id, "prompt_id": im.prompt.prompt_id, "seed": im.seed, "prompt": im.prompt.prompt,
            "prompt_type": im.prompt.prompt_type, "nouns": json.dumps([q.phrase for q in questions]),
            "questions": json.dumps([q.question for q in questions])}


def _questions_of(row) -> list[str]:
    return json.loads(row.questions)


def _image_labels(units: pd.DataFrame, answers: dict[str, list[float]]) -> np.ndarray:
    """Per image: 1 when every answered question is right, 0 otherwise, NaN when none is answered."""
    out = np.full(len(units), np.nan)
    for i, u in enumerate(units["unit_id"]):
        a = np.asarray(answers.get(u, []), dtype=float)
        a = a[np.isfinite(a)]
        if a.size:
            out[i] = float(a.all())
    return out
