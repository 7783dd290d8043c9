"""The ten counters of the PrACo benchmark, run through the authors' own wrappers (github.com/ciampluca/PrACo).

A checkout of that repository (``model.repo``) holds one ``BaseModel`` subclass per counter
(``models/base_model.py``: ``get_text_prompt(text)``, ``infer(img, text, **kwargs) -> (count, density map)``) and
``models/loader.py`` (``load_model(model_name, img_directory, split_images, split_classes,
load_filtered_checkpoints=False, device=None, split='test')``). ``PracoZooCounter`` builds the counter with
``load_model`` and calls ``infer`` the way the authors' ``benchmark/benchmark.py`` and
``benchmark/multiclass_benchmark.py`` do:

- every prompt is ``get_text_prompt(class name)`` (each counter has its own convention: ``"the <class>"`` for
  CounTX, a class index for ZSC, ``["<class>."]`` for GroundingREC, a singular noun for CountGD, ...);
- negative-label test: ``infer(img, prompt)``, except DAVE: ``infer(img, text=prompt,
  text_positive=get_text_prompt(<the image's class>))``; the count is the returned count;
- multi-class test: the same, DAVE with ``text_positive=[prompts of every class in the image]``,
  ``per_cluster_thresh`` and ``take_min_score`` (``multiclass_main.py``'s defaults: ``True``, ``False``);
- mosaic test (``density``): ``infer(collage, prompt)`` for every counter; the halves are summed from the map,
  which keeps the sums of the returned map's halves as ``benchmark.py`` takes them (``_to_collage``);
- ``count`` (the ``classic`` task, the mosaic test's single-image counts): as the negative-label test.

The returned map is resized to the image (bilinear, sum kept) as every counter's map is. None of the published
wrappers separates image encoding from prompting (each ``infer`` encodes the image again), so
``caches_image_features`` is ``False`` and the negative test calls ``infer`` once per (image, prompt) pair, with a
progress bar. ``preflight`` checks the checkout, the weights ``load_model`` will open and the checkout's Python
dependencies before any run exists; ``run_tags`` records the checkout's git revision.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from countboard.counting.datasets.mosaic import mosaic_parts
from countboard.counting.models.praco_countgdpp import EXEMPLARS, EXEMPLARS_HELP, CountGDPlusPlusCalls
from countboard.counting.models.praco_countgdpp import NAME as COUNTGDPP
from countboard.errors import ConfigError, DataNotFoundError
from countboard.items import ImageItem
from countboard.models.base import CountedMap, Counter, check_one_prompt_each, map_count
from countboard.tracking import tags as tg

log = logging.getLogger(__name__)

PRACO_URL = "https://github.com/ciampluca/PrACo"
WEIGHTS_HELP = (f"download it as the README of {PRACO_URL} says (sections '3. Download Pre-Trained Weights' and "
                "'4. Download Model-specific Files')")
INSTALL_HELP = f"install the checkout's requirements (README of {PRACO_URL}, section 'Installation')"


@dataclass(frozen=True)
class Published:
    """What ``models/loader.py`` opens for one counter: its module and its weights, relative to ``models/``."""

    module: str
    weights: tuple[str, ...]
    filtered_weights: tuple[str, ...]
    #: Other files the wrapper reads (CountGD++'s synthetic exemplars).
    extra: tuple[str, ...] = ()


#: The ten counters of ``IMPLEMENTED_MODELS`` and the two more ``load_model`` builds (``GroundingRECFSC``, and
#: ``CountGDPlusPlus`` with its own interface: ``praco_countgdpp``), with the files ``load_model`` (or the
#: wrapper's defaults) opens. GroundingRECFSC has no filtered checkpoint (``load_model`` refuses it).
PUBLISHED: dict[str, Published] = {
    "CounTX": Published("countx_model", ("pretrained_models/paper-model.pth",),
                        ("CounTX/checkpoints/countx_fsc147_filtered_checkpoint-1000.pth",)),
    "CLIP-Count": Published("clipcount_model", ("CLIPCount/checkpoints/clipcount_pretrained.ckpt",),
                            ("CLIPCount/checkpoints/clipcount_fsc147_filtered.ckpt",)),
    "TFPOC": Published("TFPOC_model", ("pretrained_models/sam_vit_b_01ec64.pth",),
                       ("TFPOC/pretrain/fsc_filtered_sam_vit_b_01ec64.pth",)),
    "VLCounter": Published("vlcounter_model", ("VLCounter/checkpoints/182_best.pth", "VLCounter/pretrain/ViT-B-16.pt"),
                           ("VLCounter/checkpoints/fsc_filtered_vlcounter_283_best.pth",
                            "VLCounter/pretrain/ViT-B-16.pt")),
    "DAVE": Published("dave_model", ("DAVE/pretrained/DAVE_0_shot.pth", "DAVE/pretrained/verification.pth"),
                      ("pretrained_models/DAVE_FSC_filtered_0_shot.pth",
                       "pretrained_models/DAVE_FSC_filtered_verification.pth")),
    "ZSC": Published("ZSC_model", ("ZSC/checkpoints/model_best_original_training.pth",
                                   "ZSC/checkpoints/ZSC_public_checkpoint_regressor.pth",
                                   "ZSC/checkpoints/bmnet+_ep3_epoch300_no_refiner/fsc_vae_feats.npy"),
                     ("ZSC/checkpoints/ZSC_FSC_filtered_model_best.pth",
                      "ZSC/checkpoints/ZSC_public_checkpoint_regressor.pth",
                      "ZSC/checkpoints/bmnet+_ep3_epoch300_no_refiner/fsc_vae_feats.npy")),
    "PseCo": Published("PseCo_model", ("PseCo/checkpoints/point_decoder_vith.pth",
                                       "PseCo/checkpoints/MLP_small_box_w1_zeroshot.tar",
                                       "PseCo/checkpoints/clip_text_prompt.pth"),
                       ("PseCo/checkpoints/PseCo_fsc_filtered_point_decoder_vith.pth",
                        "PseCo/checkpoints/PseCo_fsc_filtered_cls_head-10000.tar",
                        "PseCo/checkpoints/PseCo_fsc_filtered_clip_text_prompt_test_split.pth")),
    "GroundingREC": Published("GroundingREC_model",
                              ("pretrained_models/GroundingREC_model_original_training_all_dataset.pth",),
                              ("pretrained_models/GroundingREC_FSC_filtered_model.pth",)),
    "CountGD": Published("countgd_model", ("CountGD/checkpoints/checkpoint_fsc147_best.pth",),
                         ("CountGD/checkpoints/checkpoint_best_regular_fsc147_filtered.pth",)),
    "FixedPointPromptCounting": Published("fixedpointpromptcounting_model", ("FixedPointPromptCounting/fxp.pth",),
                                          ("FixedPointPromptCounting/fxp_filtered.pth",)),
    "GroundingRECFSC": Published("GroundingREC_model",
                                 ("pretrained_models/GroundingREC_model_original_training_only_FSC.pth",), ()),
    COUNTGDPP: Published("countgdplusplus_model", ("CountGDPlusPlus/checkpoints/countgd_plusplus.pth",),
                         ("CountGDPlusPlus/checkpoints/checkpoint_best_regular_fsc147_filtered.pth",),
                         extra=(EXEMPLARS,)),
}
#: ``multiclass_main.py`` loads the filtered checkpoints unless told otherwise, ``main.py`` the unfiltered ones.
FILTERED_BY_DEFAULT_TASKS = frozenset({"praco_multiclass"})
#: The counter whose wrapper takes the image's own classes (``text_positive``) in the negative tests.
POSITIVE_PROMPTED = "DAVE"


def checkout_revision(repo: Path) -> str:
    """``git rev-parse HEAD`` of the checkout (``+dirty`` with local changes), or ``unknown`` without git."""
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}+dirty" if dirty else head


def _check_checkout(repo: Path) -> None:
    for rel in ("models/loader.py", "models/base_model.py"):
        if not (repo / rel).is_file():
            raise DataNotFoundError(repo / rel, "model.repo", f"Point model.repo at a checkout of {PRACO_URL} "
                                    "(git clone it; the counters' code is in its models/ folder).")


@contextlib.contextmanager
def in_checkout(repo: Path) -> Iterator[None]:
    """Import from and run in ``repo`` as the authors' scripts do (repository root as working directory, the root
    and ``models/`` on ``sys.path``); the ``models`` package of another checkout is forgotten first."""
    repo = repo.resolve()
    loaded = sys.modules.get("models")   # the checkout's models/ has no __init__.py: a namespace package
    if loaded is not None and repo / "models" not in {Path(p).resolve() for p in getattr(loaded, "__path__", [])}:
        for name in [n for n in sys.modules if n == "models" or n.startswith("models.") or n == "base_model"]:
            del sys.modules[name]
    for entry in (str(repo / "models"), str(repo)):   # first on the path, before another checkout's entries
        if entry in sys.path:
            sys.path.remove(entry)
        sys.path.insert(0, entry)
    cwd = os.getcwd()
    os.chdir(repo)
    try:
        yield
    finally:
        os.chdir(cwd)


def _import_counter_module(repo: Path, name: str) -> None:
    """Import the counter's wrapper module: a missing package of the checkout is one line."""
    module = f"models.{PUBLISHED[name].module}"
    with in_checkout(repo):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            raise ConfigError(f"{name} needs the Python package {exc.name!r}, which is not installed "
                              f"(imported by {repo / 'models' / (PUBLISHED[name].module + '.py')}): "
                              f"{INSTALL_HELP}") from None


def _to_map(density: Any) -> np.ndarray:
    if hasattr(density, "detach"):
        density = density.detach().float().cpu().numpy()
    out = np.squeeze(np.asarray(density, np.float64))
    if out.ndim != 2:
        raise ValueError(f"the counter returned a density map of shape {np.shape(density)}, not (H, W)")
    return out


def _to_collage(density: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """The mosaic test's map: :func:`_to_image`, with each quadrant (cut at half the height and half the width)
    shifted to the sum of the same quadrant of the returned map.

    ``benchmark.py`` counts a mosaic's halves on the map the counter returns, cut at half its own size
    (``density[:h // 2]``, ``density[h // 2:]``); a map of another size than the collage, resized to it, would move
    some mass across the seam. With the quadrants' sums kept, both halves along either axis (the seam of a
    mosaic of two equal tiles is at half its size) count what the authors count. The difference is spread evenly
    over the quadrant's pixels (added, not multiplied: a quadrant whose resized sum is near 0 — a signed map, or a
    large map whose mass the resize sampled past — gets no extreme values).

    Example:
        >>> m = np.array([[4.0, 0.0], [0.0, 0.0], [0.0, 2.0]])  # 3 rows: benchmark.py's halves are rows [0] and [1, 2]
        >>> out = _to_collage(m, (6, 4))
        >>> round(float(out[:3].sum()), 6), round(float(out[3:].sum()), 6)
        (4.0, 2.0)
    """
    from countboard.metrics.praco_official import resize_keep_sum

    if density.shape == tuple(size):
        return density.astype(np.float32)
    out = np.array(resize_keep_sum(density, size), dtype=np.float64)
    h, w = size
    nh, nw = density.shape
    for rows, native_rows in ((slice(0, h // 2), slice(0, nh // 2)), (slice(h // 2, h), slice(nh // 2, nh))):
        for cols, native_cols in ((slice(0, w // 2), slice(0, nw // 2)), (slice(w // 2, w), slice(nw // 2, nw))):
            quadrant = out[rows, cols]
            if quadrant.size:
                quadrant += (density[native_rows, native_cols].sum() - quadrant.sum()) / quadrant.size
    return out.astype(np.float32)


def _to_image(density: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    from countboard.metrics.praco_official import resize_keep_sum

    return resize_keep_sum(density, size).astype(np.float32)


class PracoZooCounter(Counter):
    """One published counter through the authors' ``load_model`` and ``BaseModel.infer``.

    Args:
        counter: A name ``load_model`` builds (``CounTX``, ``CLIP-Count``, ``TFPOC``, ``VLCounter``, ``DAVE``,
            ``ZSC``, ``PseCo``, ``GroundingREC``, ``CountGD``, ``FixedPointPromptCounting``, ``GroundingRECFSC``,
            ``CountGDPlusPlus``).
        repo: The checkout of the PrACo repository.
        load_filtered_checkpoints: The authors' checkpoints retrained without the test classes' images; None (the
            default): as the authors' entry point of the task (``FILTERED_BY_DEFAULT_TASKS``).
        task: The task's name (``${task.name}`` in the config), which picks that default.
        told_negative_class: True for CountGD++ (and only for it): ``benchmark.py`` passes it the class not to
            count, which makes its runs a protocol of their own (``countboard.protocol``).
        split: ``load_model``'s ``split`` (ZSC reads its class list with it).
        prompt_convention: What ``get_text_prompt`` makes of a class name (documentation, from the config).
        needs_exemplars: Whether the counter takes exemplar boxes (documentation; none of the ten does in the
            benchmark: they are all prompted by text).
        dave_per_cluster_thresh: DAVE, multi-class test: ``per_cluster_thresh`` (``multiclass_main.py``: True).
        dave_take_min_score: DAVE, multi-class test: ``take_min_score`` (``multiclass_main.py``: False).
        device: Passed to ``load_model``.
    """

    caches_image_features = False
    operational_params = {"task": "the task is a column of its own; it only picks the default of "
                                  "load_filtered_checkpoints, which counts when set"}

    def __init__(self, counter: str, repo: str, load_filtered_checkpoints: bool | None = None, split: str = "test",
                 prompt_convention: str = "", needs_exemplars: bool = False, dave_per_cluster_thresh: bool = True,
                 dave_take_min_score: bool = False, task: str = "", told_negative_class: bool = False,
                 device: str = "cpu"):
        super().__init__(device)
        node = {"counter": counter, "repo": repo, "load_filtered_checkpoints": load_filtered_checkpoints,
                "task": task, "told_negative_class": told_negative_class}
        self.preflight(node)
        self.counter, self.repo = counter, Path(repo).resolve()
        self.prompt_convention, self.needs_exemplars = prompt_convention, bool(needs_exemplars)
        self.dave_options = {"per_cluster_thresh": bool(dave_per_cluster_thresh),
                             "take_min_score": bool(dave_take_min_score)}
        self.load_filtered_checkpoints = filtered_checkpoints(node)
        with in_checkout(self.repo):
            loader = importlib.import_module("models.loader")
            self.model = loader.load_model(counter, "", {split: []}, {split: []},
                                           load_filtered_checkpoints=self.load_filtered_checkpoints,
                                           device=device, split=split)
        if counter == "GroundingRECFSC":   # main.py names the run after the checkpoint, not the wrapper
            self.model.model_name = counter
        self.name = str(getattr(self.model, "model_name", counter))
        self.revision = checkout_revision(self.repo)
        self.countgdpp = (CountGDPlusPlusCalls(self.model, self.repo, split, self._in_checkout(self.model.infer))
                          if counter == COUNTGDPP else None)

    @classmethod
    def preflight(cls, node: Mapping[str, Any]) -> None:
        """The checkout, the counter's name, its weights and its Python dependencies, each one line when missing."""
        name, repo = str(node.get("counter")), Path(str(node.get("repo"))).expanduser()
        if name not in PUBLISHED:
            raise ConfigError(f"model.name={name!r} is not a published PrACo counter; use one of "
                              f"{', '.join(PUBLISHED)}")
        _check_conventions(name, node)
        if not repo.is_dir():
            raise DataNotFoundError(repo, "model.repo", f"git clone {PRACO_URL} and set model.repo to the folder "
                                    "(or $PRACO_REPO).")
        _check_checkout(repo)
        published = PUBLISHED[name]
        for rel in published.filtered_weights if filtered_checkpoints(node) else published.weights:
            path = repo / "models" / rel
            if not path.is_file():
                raise DataNotFoundError(path, "model.repo", f"{name} weights are missing: {WEIGHTS_HELP}.")
        for rel in published.extra:
            if not (repo / "models" / rel).is_file():
                raise DataNotFoundError(repo / "models" / rel, "model.repo",
                                        f"{name}'s synthetic exemplars are missing: {EXEMPLARS_HELP}.")
        _import_counter_module(repo, name)

    def run_tags(self) -> dict[str, str]:
        return {tg.PRACO_REPO_REVISION: self.revision, tg.PRACO_COUNTER: self.counter,
                tg.PRACO_FILTERED_CHECKPOINTS: str(self.load_filtered_checkpoints).lower()}

    def _in_checkout(self, fn):
        def call(*args, **kwargs):
            with in_checkout(self.repo):
                return fn(*args, **kwargs)
        return call

    def _infer_countgdpp(self, image: Any, item: ImageItem, prompt: str, negative: bool) -> tuple[float, np.ndarray]:
        """CountGD++'s call of ``benchmark.py`` (``praco_countgdpp``): Test 1's (also the single counts), or the
        mosaic's, whose lower tile is the image named second in the mosaic's id."""
        if negative:
            count, density = self.countgdpp.test1(image, item.image_id, prompt)
        else:
            parts = mosaic_parts(item.image_id)
            if parts is None:
                raise ValueError(f"image {item.image_id!r} is not a mosaic: CountGD++'s mosaic call needs the "
                                 "ids of both tiles")
            count, density = self.countgdpp.mosaic(image, *parts)
        return float(count), _to_map(density)

    def _infer(self, image: Any, class_name: str, positives: Sequence[str] | None) -> tuple[float, np.ndarray]:
        """One ``infer`` call as the benchmark makes it; ``positives``: the image's classes (negative tests)."""
        prompt = self.model.get_text_prompt(class_name)
        with in_checkout(self.repo):
            if positives is not None and POSITIVE_PROMPTED in self.name:
                if len(positives) == 1:
                    count, density = self.model.infer(
                        image, text=prompt, text_positive=self.model.get_text_prompt(positives[0]))
                else:
                    count, density = self.model.infer(
                        image, text=prompt, text_positive=[self.model.get_text_prompt(c) for c in positives],
                        **self.dave_options)
            else:
                count, density = self.model.infer(image, prompt)
        return float(count), _to_map(density)

    def decode(self, features: Sequence[ImageItem], prompts: Sequence[str]) -> list[np.ndarray]:
        """The negative tests' calls: the count is ``infer``'s, the map is resized to the image."""
        return self._run(features, prompts, negative=True)

    def density(self, items: Sequence[ImageItem], prompts: Sequence[str]) -> list[np.ndarray]:
        """The mosaic test's calls (``infer(collage, prompt)``): the count is the map's sum, as the authors take it."""
        check_one_prompt_each(items, prompts)
        return self._run(items, prompts, negative=False)

    def count(self, items: Sequence[ImageItem], prompts: Sequence[str]) -> np.ndarray:
        """Counts as Test 1 takes them (``infer``'s count, DAVE given the image's class): ``classic`` and the
        mosaic test's single-image counts."""
        return np.array([map_count(m) for m in self._run(items, prompts, negative=True)])

    def _run(self, items: Sequence[ImageItem], prompts: Sequence[str], negative: bool) -> list[np.ndarray]:
        from PIL import Image
        from tqdm.auto import tqdm

        check_one_prompt_each(items, prompts)
        images: dict[int, Any] = {}
        out = []
        pairs = tqdm(list(zip(items, prompts, strict=True)), desc=f"{self.counter}: (image, prompt) pairs",
                     disable=None if len(items) > 1 else True, leave=False)
        for item, prompt in pairs:
            if id(item) not in images:
                images[id(item)] = Image.fromarray(np.asarray(item.image, np.uint8)).convert("RGB")
            if self.countgdpp is not None:
                count, density = self._infer_countgdpp(images[id(item)], item, prompt, negative)
            else:
                count, density = self._infer(images[id(item)], prompt, _positives(item) if negative else None)
            if negative:
                out.append(CountedMap(_to_image(density, item.size), count))
            else:
                out.append(_to_collage(density, item.size))
        return out


def filtered_checkpoints(node: Mapping[str, Any]) -> bool:
    """Whether the filtered checkpoints are loaded: ``load_filtered_checkpoints`` when set, else as the authors'
    entry point of the task does (``multiclass_main.py``: filtered; ``main.py``: unfiltered).

    Example:
        >>> filtered_checkpoints({"task": "praco_multiclass"}), filtered_checkpoints({"task": "praco_negative"})
        (True, False)
        >>> filtered_checkpoints({"task": "praco_multiclass", "load_filtered_checkpoints": False})
        False
    """
    chosen = node.get("load_filtered_checkpoints")
    return str(node.get("task") or "") in FILTERED_BY_DEFAULT_TASKS if chosen is None else bool(chosen)


def _check_conventions(name: str, node: Mapping[str, Any]) -> None:
    """What the authors' code cannot run, refused in one line before any run exists."""
    if name == "GroundingRECFSC" and filtered_checkpoints(node):
        raise ConfigError("GroundingRECFSC has no filtered checkpoint (the authors' load_model refuses it; "
                          "multiclass_main.py loads filtered checkpoints by default): set "
                          "model.load_filtered_checkpoints=false")
    if name == COUNTGDPP and str(node.get("task") or "") == "praco_multiclass":
        raise ConfigError("CountGDPlusPlus has no multi-class convention: the authors' multiclass_benchmark.py calls "
                          "infer(img, prompt), which its wrapper does not take; run it on praco_negative, "
                          "praco_mosaic or classic")
    if bool(node.get("told_negative_class")) != (name == COUNTGDPP):
        raise ConfigError(f"model.told_negative_class must be {str(name == COUNTGDPP).lower()} for {name}: "
                          "benchmark.py tells CountGDPlusPlus, and only it, the class not to count "
                          "(use model=praco_countgdplusplus)")


def _positives(item: ImageItem) -> list[str]:
    """The image's own classes: every annotated class of a multi-class image, else its class."""
    annotated = [c for c, pts in item.points.items() if len(pts)]
    if len(annotated) > 1:
        return annotated
    if item.class_name is None:
        raise ConfigError(f"image {item.image_id!r} has no class: DAVE's negative test needs the image's class")
    return [item.class_name]
