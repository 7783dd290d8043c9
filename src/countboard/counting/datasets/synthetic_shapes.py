"""Synthetic shapes: a deterministic counting dataset written in the FSC-147 layout.

Each class is a coloured shape ("red circles", "blue squares", ...). Test and validation images hold one class;
the training split also has multi-class images (annotated per class with ``points_per_class``). The generator is
deterministic from its seed: image ``k`` of a split depends only on ``(seed, split, k)``.

``draw_objects`` renders objects of a class at given positions on any canvas and ``render_scene`` places a whole
scene; both are reused by other generators (e.g. procedural text-to-image renderings).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from countboard.counting.datasets import fsc147
from countboard.counting.datasets.fsc147 import FSC147Dataset
from countboard.errors import ConfigError

#: Class name -> (shape, RGB colour). Shapes and colours both differ between classes.
SHAPE_CLASSES: dict[str, tuple[str, tuple[int, int, int]]] = {
    "red circles": ("circle", (215, 40, 40)),
    "blue squares": ("square", (40, 80, 215)),
    "green triangles": ("triangle", (35, 160, 60)),
    "yellow stars": ("star", (235, 195, 25)),
    "purple crosses": ("cross", (135, 55, 175)),
    "orange rings": ("ring", (245, 130, 20)),
    "cyan diamonds": ("diamond", (25, 185, 200)),
    "pink hexagons": ("hexagon", (240, 105, 180)),
    "brown crescents": ("crescent", (125, 75, 35)),
    "black pentagons": ("pentagon", (30, 30, 30)),
}
CONFIG_FILE = "synthetic_shapes.json"
#: Bumped whenever the same settings would render different data; stored with the data.
GENERATOR_VERSION = 2


def _regular(n: int, r: float, rot: float, c: float) -> list[tuple[float, float]]:
    return [(c + r * math.cos(rot + 2 * math.pi * k / n), c + r * math.sin(rot + 2 * math.pi * k / n))
            for k in range(n)]


def _shape_mask(shape: str, diameter: int, rot: float) -> Image.Image:
    """``L`` mask of one object in a ``(diameter, diameter)`` patch."""
    d = max(int(diameter), 3)
    mask = Image.new("L", (d, d), 0)
    draw = ImageDraw.Draw(mask)
    r, c = (d - 1) / 2, (d - 1) / 2
    if shape in ("circle", "ring", "crescent"):
        draw.ellipse([0, 0, d - 1, d - 1], fill=255)
        if shape == "ring":
            t = max(d * 0.22, 1.5)
            draw.ellipse([t, t, d - 1 - t, d - 1 - t], fill=0)
        elif shape == "crescent":
            off = d * 0.35
            ox, oy = off * math.cos(rot), off * math.sin(rot)
            draw.ellipse([ox - 1, oy - 1, d - 1 + ox + 1, d - 1 + oy + 1], fill=0)
    elif shape == "square":
        draw.polygon(_regular(4, r * 1.05, rot + math.pi / 4, c), fill=255)
    elif shape == "diamond":
        pts = [(c + dx * math.cos(rot) - dy * math.sin(rot), c + dx * math.sin(rot) + dy * math.cos(rot))
               for dx, dy in ((0, -r), (0.55 * r, 0), (0, r), (-0.55 * r, 0))]
        draw.polygon(pts, fill=255)
    elif shape in ("triangle", "pentagon", "hexagon"):
        draw.polygon(_regular({"triangle": 3, "pentagon": 5, "hexagon": 6}[shape], r, rot, c), fill=255)
    elif shape == "star":
        outer, inner = _regular(5, r, rot, c), _regular(5, r * 0.42, rot + math.pi / 5, c)
        draw.polygon([p for pair in zip(outer, inner, strict=True) for p in pair], fill=255)
    elif shape == "cross":
        w = r * 0.36
        arms = [(-w, -r), (w, -r), (w, -w), (r, -w), (r, w), (w, w), (w, r), (-w, r), (-w, w), (-r, w), (-r, -w),
                (-w, -w)]
        draw.polygon([(c + x * math.cos(rot) - y * math.sin(rot), c + x * math.sin(rot) + y * math.cos(rot))
                      for x, y in arms], fill=255)
    else:
        raise ConfigError(f"unknown shape {shape!r}")
    return mask


def draw_objects(canvas: np.ndarray, class_name: str, centers: np.ndarray, diameters: float | np.ndarray,
                 rng: np.random.Generator | None = None) -> np.ndarray:
    """Draw objects of ``class_name`` centred at ``centers`` onto ``canvas`` (in place).

    Args:
        canvas: ``(H, W, 3)`` uint8 RGB array, modified in place.
        class_name: A key of ``SHAPE_CLASSES``.
        centers: ``(K, 2)`` object centres ``(x, y)`` in pixels.
        diameters: One diameter in pixels for all objects, or ``(K,)``.
        rng: Draws rotations and slight colour jitter; ``None`` draws every object upright in the class colour.

    Returns:
        ``(K, 4)`` boxes ``(y0, x0, y1, x1)`` of the drawn objects.

    Example:
        >>> canvas = np.full((64, 64, 3), 255, np.uint8)
        >>> draw_objects(canvas, "red circles", np.array([[20.0, 20.0], [44.0, 40.0]]), 12).shape
        (2, 4)
    """
    if class_name not in SHAPE_CLASSES:
        raise ConfigError(f"unknown shape class {class_name!r}; known classes: {', '.join(SHAPE_CLASSES)}")
    shape, colour = SHAPE_CLASSES[class_name]
    centers = np.asarray(centers, dtype=np.float64).reshape(-1, 2)
    diam = np.broadcast_to(np.asarray(diameters, dtype=np.float64), (len(centers),))
    img = Image.fromarray(canvas)
    boxes = np.zeros((len(centers), 4))
    for k, ((x, y), d) in enumerate(zip(centers, diam, strict=True)):
        d_int = max(int(round(d)), 3)
        rot = float(rng.uniform(0, 2 * math.pi)) if rng is not None else -math.pi / 2
        jitter = rng.integers(-18, 19, size=3).tolist() if rng is not None else [0, 0, 0]
        fill = tuple(min(max(v + j, 0), 255) for v, j in zip(colour, jitter, strict=True))
        x0, y0 = int(round(x - (d_int - 1) / 2)), int(round(y - (d_int - 1) / 2))
        img.paste(fill, (x0, y0, x0 + d_int, y0 + d_int), _shape_mask(shape, d_int, rot))
        boxes[k] = (y0, x0, y0 + d_int, x0 + d_int)
    canvas[...] = np.asarray(img)
    return boxes


@dataclass
class SceneStyle:
    """Look of a generated scene.

    Attributes:
        size_range: Object diameters in pixels, drawn uniformly (shrunk when many objects must fit).
        overlap: Allowed overlap in ``[0, 1)``: centres keep at least ``(1 - overlap) * (r_i + r_j)`` apart.
        clutter: ``[0, 1]``: background noise and grey distractor strokes (never counted).
        background: Base background colour.
    """

    size_range: tuple[float, float] = (12.0, 26.0)
    overlap: float = 0.0
    clutter: float = 0.3
    background: tuple[int, int, int] = (236, 232, 222)


@dataclass
class Scene:
    image: np.ndarray
    points: dict[str, np.ndarray]
    boxes: dict[str, np.ndarray]


def _background(size: tuple[int, int], style: SceneStyle, rng: np.random.Generator) -> np.ndarray:
    h, w = size
    base = (np.array(style.background) + rng.integers(-12, 13, size=3)).astype(np.float32)
    noise = rng.standard_normal((h, w, 1), dtype=np.float32)
    noise *= np.float32(14 * style.clutter)
    canvas = np.clip(noise + base, 0, 255).astype(np.uint8)
    n_strokes = int(round(25 * style.clutter))
    if n_strokes:
        pil = Image.fromarray(canvas)
        draw = ImageDraw.Draw(pil)
        for _ in range(n_strokes):
            x0, y0 = rng.uniform(0, w), rng.uniform(0, h)
            x1, y1 = x0 + rng.normal(0, w / 6), y0 + rng.normal(0, h / 6)
            grey = int(rng.integers(150, 215))
            draw.line([x0, y0, x1, y1], fill=(grey, grey, grey), width=int(rng.integers(1, 3)))
        canvas = np.asarray(pil).copy()
    return canvas


def place_objects(n: int, size: tuple[int, int], style: SceneStyle, rng: np.random.Generator,
                  occupied: list[tuple[float, float, float]] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Centres ``(n, 2)`` and diameters ``(n,)`` of objects that fit the canvas and respect ``style.overlap``.

    ``occupied`` (``(x, y, radius)`` of objects placed earlier) is extended in place. An object that finds no
    free spot after repeated shrinking is placed anyway, so the count is always exactly ``n``.
    """
    h, w = size
    occupied = [] if occupied is None else occupied
    lo, hi = style.size_range
    fit = math.sqrt(0.3 * h * w / max(n + len(occupied), 1))
    hi_eff = max(min(hi, fit), min(lo, fit), 4.0)
    lo_eff = min(lo, hi_eff)
    centers, diams = np.zeros((n, 2)), np.zeros(n)
    for k in range(n):
        d = rng.uniform(lo_eff, hi_eff)
        for attempt in range(400):
            if attempt and attempt % 50 == 0:
                d = max(d * 0.85, 4.0)
            r = d / 2
            x, y = rng.uniform(r, w - r), rng.uniform(r, h - r)
            if all(math.hypot(x - ox, y - oy) >= (1 - style.overlap) * (r + orr) for ox, oy, orr in occupied):
                break
        centers[k], diams[k] = (x, y), d
        occupied.append((x, y, r))
    return centers, diams


def render_scene(counts: dict[str, int], size: tuple[int, int], rng: np.random.Generator,
                 style: SceneStyle | None = None) -> Scene:
    """Render a scene with ``counts[c]`` objects of each class ``c`` (exact counts).

    Example:
        >>> scene = render_scene({"red circles": 3, "blue squares": 2}, (96, 96), np.random.default_rng(0))
        >>> {c: len(p) for c, p in scene.points.items()}
        {'red circles': 3, 'blue squares': 2}
    """
    style = style or SceneStyle()
    canvas = _background(size, style, rng)
    occupied: list[tuple[float, float, float]] = []
    points, boxes = {}, {}
    for class_name, n in counts.items():
        centers, diams = place_objects(int(n), size, style, rng, occupied)
        boxes[class_name] = draw_objects(canvas, class_name, centers, diams, rng)
        points[class_name] = centers
    return Scene(image=canvas, points=points, boxes=boxes)


@dataclass
class ShapesConfig:
    """What ``generate`` writes; stored beside the data so a root is never silently reused for other settings."""

    seed: int = 0
    n_classes: int = 8
    image_size: tuple[int, int] = (256, 256)
    images_per_class: dict[str, int] = field(default_factory=lambda: {"train": 40, "val": 2, "test": 3})
    multi_class_images: int = 100
    max_classes_per_image: int = 3
    count_range: tuple[int, int] = (1, 60)
    style: SceneStyle = field(default_factory=SceneStyle)

    def __post_init__(self) -> None:
        if not 1 <= self.n_classes <= len(SHAPE_CLASSES):
            raise ConfigError(f"n_classes={self.n_classes}: choose 1..{len(SHAPE_CLASSES)} (shape classes available)")
        lo, hi = self.count_range
        if not 0 <= lo <= hi:
            raise ConfigError(f"count_range={self.count_range}: need 0 <= low <= high")
        if isinstance(self.style, dict):
            self.style = SceneStyle(**self.style)

    @property
    def classes(self) -> list[str]:
        return list(SHAPE_CLASSES)[: self.n_classes]

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "generator_version": GENERATOR_VERSION}, sort_keys=True, default=list)


def _split_plan(cfg: ShapesConfig, split: str, split_no: int) -> list[dict[str, int]]:
    """Per-image class counts of one split (single-class images, then multi-class ones for ``train``)."""
    lo, hi = cfg.count_range
    plan = []
    for k in range(cfg.images_per_class.get(split, 0) * cfg.n_classes):
        rng = np.random.default_rng([cfg.seed, split_no, k, 0])
        plan.append({cfg.classes[k % cfg.n_classes]: int(rng.integers(lo, hi + 1))})
    if split == "train" and cfg.n_classes > 1:
        for k in range(cfg.multi_class_images):
            rng = np.random.default_rng([cfg.seed, split_no, k, 1])
            n_cls = int(rng.integers(2, min(cfg.max_classes_per_image, cfg.n_classes) + 1))
            chosen = rng.choice(cfg.n_classes, size=n_cls, replace=False)
            top = max(lo, hi // n_cls)
            plan.append({cfg.classes[c]: int(rng.integers(max(lo, 1), top + 1)) for c in chosen})
    return plan


def generate(root: str | Path, cfg: ShapesConfig) -> Path:
    """Write the dataset under ``root`` (atomically: a partly written root never appears). Returns ``root``."""
    root = Path(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
    try:
        (tmp / fsc147.IMAGE_DIR).mkdir()
        annotations, classes_of, splits = {}, {}, {}
        for split_no, split in enumerate(("train", "val", "test")):
            ids = []
            for k, counts in enumerate(_split_plan(cfg, split, split_no)):
                image_id = f"shapes_{split}_{k:05d}.jpg"
                scene = render_scene(counts, cfg.image_size, np.random.default_rng([cfg.seed, split_no, k, 2]),
                                     cfg.style)
                Image.fromarray(scene.image).save(tmp / fsc147.IMAGE_DIR / image_id, quality=92)
                main = max(counts, key=lambda c: counts[c])
                annotations[image_id] = _annotation(scene, main, cfg.image_size)
                classes_of[image_id] = main
                ids.append(image_id)
            splits[split] = ids
        (tmp / fsc147.ANNOTATION_FILE).write_text(json.dumps(annotations))
        (tmp / fsc147.CLASSES_FILE).write_text("".join(f"{i}\t{c}\n" for i, c in classes_of.items()))
        (tmp / fsc147.SPLITS_FILE).write_text(json.dumps(splits, indent=1))
        (tmp / fsc147.SPLIT_CLASSES_FILE).write_text(json.dumps({s: cfg.classes for s in splits}, indent=1))
        (tmp / CONFIG_FILE).write_text(cfg.to_json())
        try:
            os.rename(tmp, root)
        except OSError:
            if not (root / CONFIG_FILE).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def _annotation(scene: Scene, main: str, size: tuple[int, int]) -> dict:
    def corners(b):
        y0, x0, y1, x1 = (float(v) for v in b)
        return [[x0, y0], [x0, y1], [x1, y1], [x1, y0]]

    return {
        "H": size[0], "W": size[1],
        "points": scene.points[main].round(2).tolist(),
        "box_examples_coordinates": [corners(b) for b in scene.boxes[main][:3]],
        "points_per_class": {c: p.round(2).tolist() for c, p in scene.points.items()},
        "boxes_per_class": {c: b.tolist() for c, b in scene.boxes.items()},
    }


def ensure_generated(root: str | Path, cfg: ShapesConfig) -> Path:
    """Generate under ``root`` on first use; refuse a root that holds data generated with other settings."""
    root = Path(root)
    stored = root / CONFIG_FILE
    if not stored.is_file():
        if root.exists() and any(root.iterdir()):
            raise ConfigError(f"{root} exists and is not a synthetic_shapes dataset (no {CONFIG_FILE}); "
                              "set `dataset.root` to an empty or new folder")
        if root.exists():
            root.rmdir()
        return generate(root, cfg)
    if json.loads(stored.read_text()) != json.loads(cfg.to_json()):
        raise ConfigError(f"{root} holds synthetic_shapes generated with other settings or by another generator "
                          f"version ({stored}); set `dataset.root` to a new folder for these settings, or delete "
                          "the old one")
    return root


class SyntheticShapes(FSC147Dataset):
    """A split of the synthetic shapes dataset, generated under ``root`` on first use.

    Args:
        root: Where the data lives (generated there when absent).
        split: ``train``, ``val`` or ``test``.
        seed, n_classes, image_size, images_per_class, multi_class_images, max_classes_per_image, count_range:
            Generator settings (see ``ShapesConfig``).
        size_range, overlap, clutter: Scene style (see ``SceneStyle``).
        max_images: Keep the first ``n`` images of the split.

    Example:
        >>> ds = SyntheticShapes(tmp_path / "shapes", split="test")  # doctest: +SKIP
        >>> len(ds), ds.classes[:2]  # doctest: +SKIP
        (24, ['red circles', 'blue squares'])
    """

    name = "synthetic_shapes"

    def __init__(self, root: str | Path, split: str = "test", seed: int = 0, n_classes: int = 8,
                 image_size: tuple[int, int] = (256, 256), images_per_class: dict[str, int] | None = None,
                 multi_class_images: int = 100, max_classes_per_image: int = 3,
                 count_range: tuple[int, int] = (1, 60), size_range: tuple[float, float] = (12.0, 26.0),
                 overlap: float = 0.0, clutter: float = 0.3, max_images: int | None = None):
        per_class = {"train": 40, "val": 2, "test": 3}
        per_class.update(dict(images_per_class or {}))
        self.config = ShapesConfig(
            seed=seed, n_classes=n_classes, image_size=tuple(image_size), images_per_class=per_class,
            multi_class_images=multi_class_images, max_classes_per_image=max_classes_per_image,
            count_range=tuple(count_range),
            style=SceneStyle(size_range=tuple(size_range), overlap=overlap, clutter=clutter))
        ensure_generated(root, self.config)
        super().__init__(root, split=split, exclude=None, max_images=max_images)
