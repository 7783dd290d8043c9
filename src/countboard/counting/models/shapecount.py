"""``shapecount``: a small prompt-conditioned density counter, trained on synthetic shapes.

A four-layer CNN encodes the image (once, at half resolution) into a grid of features, one cell per 8 x 8 pixels
of the original. A prompt's MiniLM sentence embedding is mapped to per-channel FiLM scales and shifts of those
features, and a small convolutional head turns the modulated grid into non-negative counts per cell. The image
encoder is shared by all prompts of an image, so the negative-label test encodes each image once.

Two training recipes (``countboard train-counter``): ``naive`` sees single-class images with their own class
only (like FSC-147 training); ``aware`` also sees multi-class images, one target per present class, and prompts
of absent classes with an all-zero target. Checkpoints are found by path, in the local checkpoint folder, or in
the MLflow store (see :func:`resolve_checkpoint`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from countboard.counting.models.prompt_batching import group_by_image
from countboard.counting.models.shapecount_recipes import RECIPES, local_checkpoint_path
from countboard.counting.models.text_encoder import EMBED_DIM, embed_texts
from countboard.errors import ConfigError
from countboard.items import ImageItem
from countboard.models.base import Counter, check_one_prompt_each
from countboard.models.device_batch import device_step
from countboard.models.transfer import to_host

log = logging.getLogger(__name__)

@dataclass
class ShapeCountArch:
    """Network shape.

    Attributes:
        width: Channels of the image features and of the head.
        text_dim: Size of the prompt embedding (MiniLM: 384).
        input_scale: Images are resized by this factor before the encoder.
        stride: Pixels of the original image per output cell (the encoder's stride divided by ``input_scale``).
    """

    width: int = 32
    text_dim: int = EMBED_DIM
    input_scale: float = 0.5
    stride: int = 8


def _conv(c_in: int, c_out: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1), nn.BatchNorm2d(c_out), nn.ReLU())


class ShapeCountNet(nn.Module):
    """Image encoder, prompt-conditioned FiLM head, softplus counts per cell."""

    def __init__(self, arch: ShapeCountArch):
        super().__init__()
        if round(4 / arch.input_scale) != arch.stride:
            raise ConfigError(f"stride {arch.stride} must equal 4 / input_scale ({arch.input_scale})")
        self.arch = arch
        w = arch.width
        self.encoder = nn.Sequential(_conv(3, 32, 2), _conv(32, w, 2), _conv(w, w), _conv(w, w))
        self.film = nn.Sequential(nn.Linear(arch.text_dim, 128), nn.ReLU(), nn.Linear(128, 2 * w))
        self.head = nn.Sequential(nn.Conv2d(w, w, 1), nn.ReLU(), nn.Conv2d(w, 1, 1))
        # Start from a small positive density everywhere: a large initial count makes the first steps collapse
        # the softplus into its flat region.
        nn.init.constant_(self.head[-1].bias, -4.0)

    def prepare(self, images: torch.Tensor) -> torch.Tensor:
        """``(B, 3, H, W)`` uint8 images to the encoder's normalised, rescaled float input."""
        x = images.float() / 255.0 - 0.5
        if self.arch.input_scale != 1:
            x = F.interpolate(x, scale_factor=self.arch.input_scale, mode="bilinear", antialias=True,
                              align_corners=False)
        return x

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """``(B, 3, H, W)`` uint8 images to ``(B, C, ceil(H/stride), ceil(W/stride))`` features."""
        return self.encoder(self.prepare(images))

    def decode(self, feats: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """Counts per cell ``(B, h, w)`` for features ``(B, C, h, w)`` and prompt embeddings ``(B, D)``."""
        scale, shift = self.film(text).chunk(2, dim=-1)
        x = F.relu(feats * (1 + scale)[..., None, None] + shift[..., None, None])
        return F.softplus(self.head(x)[:, 0])


def images_to_tensor(items: Sequence[ImageItem]) -> torch.Tensor:
    """Same-size images as a ``(B, 3, H, W)`` uint8 tensor."""
    return torch.from_numpy(np.stack([it.image for it in items])).permute(0, 3, 1, 2).contiguous()


def grid_to_density(grid: np.ndarray, size: tuple[int, int], stride: int) -> np.ndarray:
    """Spread each cell's count uniformly over its ``stride x stride`` pixels, cropped to ``size``.

    Cells that stick out of the image lose the cropped part of their mass; the map is rescaled so that its sum
    stays the grid's sum (the model's count).

    Example:
        >>> grid_to_density(np.array([[4.0, 0.0]]), (2, 3), 2).round(2).tolist()
        [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]]
    """
    h, w = size
    dens = np.kron(grid.astype(np.float64), np.ones((stride, stride)) / stride**2)[:h, :w]
    total, kept = float(grid.sum()), float(dens.sum())
    if kept > 0:
        dens *= total / kept
    return dens.astype(np.float32)


def grid_density(grid: torch.Tensor, size: tuple[int, int], stride: int) -> torch.Tensor:
    """:func:`grid_to_density` on the grid's device (float64 arithmetic, a float32 map; equal to it up to the
    rounding of the float32 total). Nothing here waits for the device."""
    h, w = size
    dens = (grid.to(torch.float64) / stride**2).repeat_interleave(stride, 0).repeat_interleave(stride, 1)[:h, :w]
    total, kept = grid.sum().to(torch.float64), dens.sum()
    scale = torch.where(kept > 0, total / torch.where(kept > 0, kept, torch.ones_like(kept)), torch.ones_like(kept))
    return (dens * scale).to(torch.float32)


def points_to_grid(points: np.ndarray, grid_hw: tuple[int, int], stride: int) -> np.ndarray:
    """Count of ``(x, y)`` points per ``stride x stride`` cell.

    Example:
        >>> points_to_grid(np.array([[1.0, 1.0], [9.0, 2.0], [9.5, 3.0]]), (2, 2), 8).tolist()
        [[1.0, 2.0], [0.0, 0.0]]
    """
    grid = np.zeros(grid_hw, dtype=np.float32)
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    if len(pts):
        gy = np.clip((pts[:, 1] // stride).astype(int), 0, grid_hw[0] - 1)
        gx = np.clip((pts[:, 0] // stride).astype(int), 0, grid_hw[1] - 1)
        np.add.at(grid, (gy, gx), 1.0)
    return grid


def save_checkpoint(path: Path, net: ShapeCountNet, recipe: str, text_table: dict[str, np.ndarray],
                    info: dict) -> Path:
    """Write weights, architecture, recipe, the prompt-embedding table and training info to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    names = list(text_table)
    torch.save({"state_dict": net.state_dict(), "arch": asdict(net.arch), "recipe": recipe,
                "text_names": names,
                "text_embeddings": torch.from_numpy(np.stack([text_table[n] for n in names]).astype(np.float32)),
                "info": info}, path)
    return path


def load_checkpoint(path: str | Path) -> tuple[ShapeCountNet, dict[str, np.ndarray], dict]:
    """Network (eval mode), prompt-embedding table and the raw checkpoint dict."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"shapecount checkpoint {path} does not exist; train one with "
                          "`countboard train-counter --recipe aware` or set `model.checkpoint`")
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    net = ShapeCountNet(ShapeCountArch(**ckpt["arch"]))
    net.load_state_dict(ckpt["state_dict"])
    table = dict(zip(ckpt["text_names"], ckpt["text_embeddings"].numpy(), strict=True))
    return net.eval(), table, ckpt


def resolve_checkpoint(recipe: str, checkpoint: str | Path | None, data_dir: str | Path | None,
                       tracking_store: str | None = None) -> Path:
    """The checkpoint to load: ``checkpoint`` when given, else the local file, else the latest MLflow run.

    The MLflow lookup (through ``countboard.tracking``) finds the newest finished run tagged
    ``model=shapecount_<recipe>`` in ``tracking_store`` (a local store directory or a tracking URI) and downloads
    its checkpoint artifact.
    """
    if recipe not in RECIPES:
        raise ConfigError(f"model.recipe={recipe!r}: choose one of {', '.join(RECIPES)}")
    if checkpoint:
        path = Path(checkpoint).expanduser()
        if not path.is_file():
            raise ConfigError(f"model.checkpoint={checkpoint}: the file does not exist; point it to a shapecount "
                              f"checkpoint (`countboard train-counter --recipe {recipe}` writes one) or unset it")
        return path
    searched = []
    if data_dir is not None:
        local = local_checkpoint_path(data_dir, recipe)
        if local.is_file():
            return local
        searched.append(str(local))
    if tracking_store:
        from countboard.tracking.trained import find_logged_checkpoint

        found = find_logged_checkpoint(f"shapecount_{recipe}", str(tracking_store))
        if found is not None:
            return found
        searched.append(f"MLflow runs tagged model=shapecount_{recipe} in {tracking_store}")
    raise ConfigError(f"no shapecount checkpoint for recipe {recipe!r} (looked at: {'; '.join(searched) or 'nothing'})."
                      f" Train one with `countboard train-counter --recipe {recipe}`, or set `model.checkpoint`")


class ShapeCountCounter(Counter):
    """The trained ``shapecount`` network as a counter.

    Args:
        recipe: ``naive`` or ``aware`` (which checkpoint to look for).
        checkpoint: Explicit checkpoint path (overrides the lookup).
        data_dir: Data root whose ``checkpoints/`` folder holds locally trained checkpoints.
        tracking_store: Local MLflow store directory searched when no local checkpoint exists.
        tracking_uri: MLflow tracking URI (a server); searched instead of ``tracking_store`` when set.
        prompt_batch_size: Prompts per head batch.
        device: ``"cpu"`` or ``"cuda"``.

    Example:
        >>> counter = ShapeCountCounter(recipe="aware", data_dir="data")  # doctest: +SKIP
        >>> counter.count([item, item], ["red circles", "blue squares"])  # doctest: +SKIP
        array([17.2, 0.1])
    """

    caches_image_features = True

    operational_params = {k: "where the checkpoint is looked up on this machine"
                          for k in ("data_dir", "tracking_store", "tracking_uri")}
    path_params = ("checkpoint",)

    @classmethod
    def preflight(cls, node) -> None:
        """The checkpoint (``model.checkpoint``, the local file, or a training run in the store) and the bundled
        text encoder, before any run exists: a missing one is one line saying how to make it."""
        from countboard.counting.models.text_encoder import minilm_dir

        resolve_checkpoint(str(node.get("recipe", "aware")), node.get("checkpoint"), node.get("data_dir"),
                           node.get("tracking_uri") or node.get("tracking_store"))
        minilm_dir()

    def __init__(self, recipe: str = "aware", checkpoint: str | None = None, data_dir: str | None = None,
                 tracking_store: str | None = None, tracking_uri: str | None = None, prompt_batch_size: int = 64,
                 device: str = "cpu"):
        super().__init__(device=device)
        self.recipe = recipe
        self.checkpoint = resolve_checkpoint(recipe, checkpoint, data_dir, tracking_uri or tracking_store)
        net, table, _ = load_checkpoint(self.checkpoint)
        self.net = net.to(device)
        self.stride = net.arch.stride
        self.prompt_batch_size = int(prompt_batch_size)
        self._table = {k: torch.from_numpy(v).to(device) for k, v in table.items()}

    def _text(self, prompts: Sequence[str]) -> torch.Tensor:
        """``(len(prompts), D)`` prompt embeddings on the counter's device (MiniLM runs there for new prompts)."""
        missing = [p for p in dict.fromkeys(prompts) if p not in self._table]
        if missing:
            log.info("embedding %d prompts not in the checkpoint's table with MiniLM on %s", len(missing),
                     self.device)
            for p, e in zip(missing, embed_texts(missing, device=self.device), strict=True):
                self._table[p] = torch.from_numpy(e).to(self.device)
        return torch.stack([self._table[p] for p in prompts])

    @device_step
    def encode_images(self, items: Sequence[ImageItem]) -> list[tuple[torch.Tensor, tuple[int, int]]]:
        """Encoder features ``(C, h, w)`` and size of each image (same-size images share a batch)."""
        out: list = [None] * len(items)
        by_size: dict[tuple[int, int], list[int]] = {}
        for i, it in enumerate(items):
            by_size.setdefault(it.size, []).append(i)
        for size, idx in by_size.items():
            feats = self.net.encode(images_to_tensor([items[i] for i in idx]).to(self.device))
            for k, i in enumerate(idx):
                out[i] = (feats[k], size)
        return out

    @device_step
    def _grids(self, features: Sequence, prompts: Sequence[str]) -> list[torch.Tensor]:
        """Counts per cell of every pair, on the device: the head once per image over all of its prompts (in
        chunks of ``prompt_batch_size``)."""
        check_one_prompt_each(features, prompts, "image features", "pair")
        out: list[torch.Tensor | None] = [None] * len(prompts)
        for (feat, _), idx in group_by_image(features):
            for start in range(0, len(idx), self.prompt_batch_size):
                chunk = idx[start:start + self.prompt_batch_size]
                text = self._text([prompts[i] for i in chunk])
                grids = self.net.decode(feat[None].expand(len(chunk), -1, -1, -1), text).float()
                for g, i in zip(grids, chunk, strict=True):
                    out[i] = g
        return out

    def decode(self, features: Sequence, prompts: Sequence[str]) -> list[np.ndarray]:
        """Each cell's count spread over its pixels (``grid_to_density``); the grids leave the device at once."""
        grids = self._grids(features, prompts)
        host = to_host(grids)
        return [grid_to_density(g, size, self.stride) for g, (_, size) in zip(host, features, strict=True)]

    @device_step
    def device_maps(self, features: Sequence, prompts: Sequence[str]) -> list[torch.Tensor]:
        """``decode``'s maps made on the device (:func:`grid_density`), left there."""
        return [grid_density(g, size, self.stride)
                for g, (_, size) in zip(self._grids(features, prompts), features, strict=True)]

    def decode_counts(self, features: Sequence, prompts: Sequence[str]) -> np.ndarray:
        """The sum of each pair's grid, the model's count, summed on the device (one transfer for the batch).

        ``grid_to_density`` rescales its map to this sum, so ``map_count`` of ``decode``'s maps is the same count
        up to float32 rounding of the map (a relative 1e-6).
        """
        grids = self._grids(features, prompts)
        if not grids:
            return np.zeros(0)
        (counts,) = to_host([torch.stack([g.to(torch.float64).sum() for g in grids])])
        return counts
