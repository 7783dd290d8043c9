"""GradCAM for vision-language models, and the interface every grounding model implements.

The usual library for this, pytorch-grad-cam, imports torchvision at module level, and torchvision is broken in
this environment; the few lines it would give us (a forward hook that keeps the target layer's output, a tensor
hook that keeps its gradient, the ViT token-grid reshape) are implemented here with plain torch hooks instead.

To add a grounding model: subclass ``GroundingModel`` (``heatmaps(samples)`` returns one ``(H, W)`` map per sample
at image resolution; any scale, the metrics min-max normalise), accept ``device``, add ``conf/model/<name>.yaml``
with ``kind: vlm``, and set ``explainer_method``.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from countboard.errors import ConfigError
from countboard.models.base import GroundingModel

if TYPE_CHECKING:
    from countboard.grounding.datasets.public import GroundingSample


def vit_geometry(vision_config: Any) -> tuple[tuple[int, int], tuple[int, int]]:
    """Input size ``(H, W)`` and patch-token grid ``(rows, cols)`` of a square ViT from its config.

    Example:
        >>> from types import SimpleNamespace
        >>> vit_geometry(SimpleNamespace(image_size=224, patch_size=16))
        ((224, 224), (14, 14))
    """
    size, patch = int(vision_config.image_size), int(vision_config.patch_size)
    return (size, size), (size // patch, size // patch)


def resolve_module(root: nn.Module, path: str) -> nn.Module:
    """The submodule at a dotted ``path``; integer parts index lists (negative ones from the end).

    Example:
        >>> net = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU(), nn.Tanh()))
        >>> type(resolve_module(net, "-1.0")).__name__
        'ReLU'
    """
    module: Any = root
    for part in path.split("."):
        try:
            module = module[int(part)] if part.lstrip("-").isdigit() else getattr(module, part)
        except (AttributeError, IndexError, TypeError, KeyError):
            raise ConfigError(f"target layer {path!r}: no submodule {part!r} in {type(module).__name__}; "
                              "set model.target_layer to a dotted path of the model's modules") from None
    if not isinstance(module, nn.Module):
        raise ConfigError(f"target layer {path!r} is a {type(module).__name__}, not a module")
    return module


class ActivationCapture:
    """Keeps a module's output (through ``select``) and, after ``backward``, its gradient.

    Use as a context manager around one forward + backward pass; the hooks are removed on exit.
    """

    def __init__(self, module: nn.Module, select: Callable[[Any], torch.Tensor] | None = None):
        self.module = module
        self.select = select or (lambda out: out[0] if isinstance(out, tuple) else out)
        self.activation: torch.Tensor | None = None
        self.gradient: torch.Tensor | None = None
        self._handle = None

    def _hook(self, _module, _inputs, output) -> None:
        t = self.select(output)
        self.activation = t

        def keep(grad: torch.Tensor) -> None:
            self.gradient = grad

        if t.requires_grad:
            t.register_hook(keep)

    def __enter__(self) -> ActivationCapture:
        self._handle = self.module.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc) -> None:
        if self._handle is not None:
            self._handle.remove()

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.activation is None or self.gradient is None:
            raise RuntimeError(f"{type(self.module).__name__} produced no activation/gradient: is the target layer "
                               "on the path from the inputs to the score?")
        return self.activation.detach(), self.gradient.detach()


def token_gradcam(acts: torch.Tensor, grads: torch.Tensor, grid: tuple[int, int], prefix: int = 1) -> torch.Tensor:
    """GradCAM of a ViT layer: drop ``prefix`` tokens (CLS), reshape tokens to ``grid``, ReLU(Σ_c w_c A_c).

    ``w_c`` is the gradient averaged over the token grid (the spatial average of the original GradCAM).

    Args:
        acts: ``(B, prefix + gh*gw, C)`` layer output.
        grads: Gradient of the score w.r.t. ``acts``, same shape.
        grid: ``(gh, gw)``.

    Returns:
        ``(B, gh, gw)`` maps.

    Example:
        >>> a = torch.zeros(1, 5, 2); a[0, 2, 0] = 1.0
        >>> token_gradcam(a, torch.ones(1, 5, 2), (2, 2))[0].tolist()
        [[0.0, 1.0], [0.0, 0.0]]
    """
    b, n, c = acts.shape
    gh, gw = grid
    if n - prefix != gh * gw:
        raise ValueError(f"{n} tokens minus {prefix} prefix tokens do not fill a {gh}x{gw} grid")
    a = acts[:, prefix:].reshape(b, gh, gw, c).float()
    w = grads[:, prefix:].float().mean(dim=1)
    return torch.relu(torch.einsum("bhwc,bc->bhw", a, w))


UPSAMPLE_METHODS = ("bilinear", "bicubic_clip", "bicubic_clip_blur", "bilinear_minmax")


def check_upsample(method: str) -> str:
    """``method`` if it is one of ``UPSAMPLE_METHODS``, else a ``ConfigError`` naming ``model.upsample``."""
    if method not in UPSAMPLE_METHODS:
        raise ConfigError(f"model.upsample={method!r}: use one of {', '.join(UPSAMPLE_METHODS)}")
    return method


def upsample_map(cam: np.ndarray, size: tuple[int, int], method: str = "bicubic_clip") -> np.ndarray:
    """One ``(gh, gw)`` map resized to ``size = (H, W)`` (float32).

    Methods:
        ``bilinear``: bilinear interpolation of the raw map (pixel centres aligned, ``align_corners=False``).
        ``bicubic_clip``: the LAVIS/ALBEF ``getAttMap`` recipe without its blur: min-max normalise the grid to
            ``[0, 1]``, resize with cubic splines (scikit-image's ``resize(order=3, mode="constant")``:
            ``scipy.ndimage.zoom`` with ``grid-constant`` edges) and clip to ``[0, 1]``. The clip turns the
            spline's overshoot around strong peaks into plateaus of exactly 1.0: the tied maxima the
            pointing-game uncertainty counts.
        ``bicubic_clip_blur``: ``getAttMap`` with its default blur: ``bicubic_clip``, then scipy's
            ``gaussian_filter`` with sigma ``0.02 * max(H, W)`` and min-max normalisation again.
        ``bilinear_minmax``: gScoreCAM's own code (``pytorch_grad_cam/base_cam.py``, ``compute_cam_per_layer``
            and ``aggregate_multi_layers``): ReLU, ``normalize2D`` (``(A - min) / (1e-8 + max)``), ``cv2.resize``
            with its default bilinear interpolation (pixel centres aligned, edges clamped), then ReLU and
            ``normalize2D`` again.

    Example:
        >>> cam = np.zeros((2, 2)); cam[0, 0] = 3.0
        >>> up = upsample_map(cam, (4, 4), "bicubic_clip")
        >>> up.shape, float(up.max()) <= 1.0, upsample_map(cam, (4, 4), "bilinear")[0, 0]
        ((4, 4), True, np.float32(3.0))
    """
    check_upsample(method)
    h, w = int(size[0]), int(size[1])
    a = np.asarray(cam, dtype=np.float64)
    if method == "bilinear":
        up = nn.functional.interpolate(torch.from_numpy(a)[None, None], size=(h, w), mode="bilinear",
                                       align_corners=False)
        return up[0, 0].numpy().astype(np.float32)
    if method == "bilinear_minmax":
        a = _normalize2d(np.maximum(a, 0.0))
        up = nn.functional.interpolate(torch.from_numpy(a)[None, None], size=(h, w), mode="bilinear",
                                       align_corners=False)[0, 0].numpy()
        return _normalize2d(np.maximum(up, 0.0)).astype(np.float32)
    from scipy import ndimage

    a = a - a.min()
    if a.max() > 0:
        a = a / a.max()
    out = ndimage.zoom(a, (h / a.shape[0], w / a.shape[1]), order=3, mode="grid-constant", cval=0.0,
                       grid_mode=True)
    if out.shape != (h, w):  # zoom rounds the output shape; never off by more than one pixel
        raise ValueError(f"resize of a {a.shape} map gave {out.shape}, not {(h, w)}")
    out = np.clip(out, 0.0, 1.0)
    if method == "bicubic_clip_blur":
        out = ndimage.gaussian_filter(out, 0.02 * max(h, w))
        out = out - out.min()
        if out.max() > 0:
            out = out / out.max()
    return out.astype(np.float32)


def _normalize2d(a: np.ndarray) -> np.ndarray:
    """gScoreCAM's ``normalize2D``: ``(a - min) / (1e-8 + max)`` of the shifted map."""
    a = a - a.min()
    return a / (1e-8 + a.max())


def to_image_maps(cams: torch.Tensor, sizes: Sequence[tuple[int, int]], method: str = "bicubic_clip"
                  ) -> list[np.ndarray]:
    """Upsample ``(B, gh, gw)`` maps to each image's ``(H, W)`` with ``upsample_map`` (float32 numpy)."""
    return [upsample_map(cam.detach().float().cpu().numpy(), (int(h), int(w)), method)
            for cam, (h, w) in zip(cams, sizes, strict=True)]


def pixel_batch(images: Sequence[np.ndarray], size: tuple[int, int], mean: Sequence[float],
                std: Sequence[float]) -> torch.Tensor:
    """``(B, 3, h, w)`` model input: each image resized (bicubic) to ``size = (h, w)`` without cropping, so the
    activation grid covers the whole image, then scaled to ``[0, 1]`` and normalised with ``mean``/``std``."""
    from PIL import Image

    h, w = size
    arrays = [np.asarray(Image.fromarray(np.asarray(im, dtype=np.uint8)).convert("RGB")
                         .resize((w, h), Image.Resampling.BICUBIC), dtype=np.float32) / 255.0 for im in images]
    x = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2)
    m = torch.tensor(list(mean), dtype=torch.float32)[None, :, None, None]
    s = torch.tensor(list(std), dtype=torch.float32)[None, :, None, None]
    return (x - m) / s


class VitCamModel(GroundingModel):
    """A grounding model whose maps come from one layer of a ViT-based vision-language model, in batches.

    Subclasses load the model, call ``_bind`` and implement ``_cams`` (``(B, gh, gw)`` maps of a batch);
    ``heatmaps`` batches the samples and upsamples the maps to each image with ``self.upsample``.
    """

    upsample = "bicubic_clip"

    def _bind(self, model: nn.Module, mean: Sequence[float], std: Sequence[float], target_layer: str,
              batch_size: int) -> None:
        """Moves ``model`` to the device in eval mode and keeps its layer, input geometry and normalisation."""
        self.model = model.to(self.device).eval()
        self.mean, self.std = tuple(mean), tuple(std)
        self.target_layer = target_layer
        self.layer = resolve_module(self.model, target_layer)
        self.input_size, self.grid = vit_geometry(self.model.config.vision_config)
        self.batch_size = max(int(batch_size), 1)

    @abstractmethod
    def _cams(self, images: list[np.ndarray], phrases: list[str]) -> torch.Tensor:
        """``(B, gh, gw)`` maps of ``images`` (uint8 ``(H, W, 3)``) for their ``phrases``."""

    def heatmaps(self, samples: Sequence[GroundingSample]) -> list[np.ndarray]:
        out: list[np.ndarray] = []
        for start in range(0, len(samples), self.batch_size):
            chunk = samples[start:start + self.batch_size]
            images = [s.load_image() for s in chunk]
            cams = self._cams(images, [s.phrase for s in chunk])
            out += to_image_maps(cams, [im.shape[:2] for im in images], self.upsample)
        return out
