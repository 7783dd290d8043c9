"""``diffusers`` text-to-image pipelines behind the ``Generator`` interface.

Any pipeline ``AutoPipelineForText2Image`` can load works (Stable Diffusion 1.5, SDXL-Turbo, SD 3.5, FLUX.1…);
the model configs (``conf/model/{sd15,sdxl_turbo,sd35_medium,flux_schnell}.yaml``) are the presets: hub id, dtype,
steps, guidance and resolution. Each image of a batch has its own ``torch.Generator`` seeded with its seed, so an
image does not depend on the batch it was generated in (up to the float rounding of batched math: a pixel may come
out one level apart in another batch).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from countboard.errors import ConfigError
from countboard.items import GeneratedImage
from countboard.models.base import Generator
from countboard.numeracy.datasets.prompts import PromptSpec

log = logging.getLogger(__name__)

_DTYPES = ("float32", "float16", "bfloat16")


class DiffusersGenerator(Generator):
    """A diffusers text-to-image pipeline.

    Args:
        hub_id: Hub id or local folder of the pipeline (``from_pretrained``).
        dtype: ``float32``, ``float16`` or ``bfloat16``; half precision falls back to float32 on CPU.
        steps: Denoising steps.
        guidance: Classifier-free guidance scale (0 for distilled models such as SDXL-Turbo and FLUX.1-schnell).
        height: Image height in pixels (None: the pipeline's default).
        width: Image width in pixels (None: the pipeline's default).
        negative_prompt: Optional negative prompt for pipelines that take one.
        call_kwargs: Further keyword arguments of the pipeline call (e.g. ``max_sequence_length``).
        local_files_only: Do not try to download.
    """

    operational_params = {"local_files_only": "whether the hub may be asked for weights already cached"}

    def __init__(self, hub_id: str, dtype: str = "float16", steps: int = 30, guidance: float = 7.5,
                 height: int | None = None, width: int | None = None, negative_prompt: str | None = None,
                 call_kwargs: dict[str, Any] | None = None, local_files_only: bool = False, device: str = "cpu",
                 batch_size: int = 4):  # fmt: skip
        super().__init__(device=device, batch_size=batch_size)
        if dtype not in _DTYPES:
            raise ConfigError(f"model.dtype={dtype!r}: choose one of {', '.join(_DTYPES)}")
        if steps < 1:
            raise ConfigError(f"model.steps={steps}: need at least one denoising step")
        self.hub_id, self.dtype, self.steps, self.guidance = hub_id, dtype, int(steps), float(guidance)
        self.height, self.width, self.negative_prompt = height, width, negative_prompt
        self.call_kwargs = dict(call_kwargs or {})
        self.local_files_only = local_files_only
        self._pipe = None

    @classmethod
    def preflight(cls, node: Mapping[str, Any]) -> None:
        """Before any run exists, one line when the pipeline cannot be there: a local folder without
        ``model_index.json``, or a hub id that is not in the Hugging Face cache while downloads are off
        (``HF_HUB_OFFLINE=1`` or ``model.local_files_only``). With downloads on, loading decides."""
        from countboard.models.hf_loading import check_weights_present

        check_weights_present(str(node.get("hub_id")), "diffusers pipeline", key="model.hub_id",
                              marker="model_index.json", local_files_only=bool(node.get("local_files_only")))

    def _torch_dtype(self):
        import torch

        if self.device == "cpu" and self.dtype != "float32":
            log.info("%s: %s on CPU is slow or unsupported; using float32", self.hub_id, self.dtype)
            return torch.float32
        return getattr(torch, self.dtype)

    @property
    def pipe(self):
        """The pipeline, loaded on first use."""
        if self._pipe is None:
            from diffusers import AutoPipelineForText2Image

            try:
                pipe = AutoPipelineForText2Image.from_pretrained(
                    self.hub_id, torch_dtype=self._torch_dtype(), local_files_only=self.local_files_only
                )
            except OSError as exc:
                raise ConfigError(
                    f"cannot load diffusers pipeline {self.hub_id!r} ({exc}). Download it first "
                    "(huggingface-cli download) or point model.hub_id to a local folder."
                ) from exc
            pipe.set_progress_bar_config(disable=True)
            self._pipe = pipe.to(self.device)
        return self._pipe

    def generate_batch(self, prompts: Sequence[PromptSpec], seeds: Sequence[int]) -> list[GeneratedImage]:
        import torch

        if len(prompts) != len(seeds):
            raise ValueError(f"{len(prompts)} prompts but {len(seeds)} seeds: pass one seed per prompt")
        gen_device = "cpu" if self.device == "cpu" else self.device
        generators = [torch.Generator(device=gen_device).manual_seed(int(s)) for s in seeds]
        kwargs: dict[str, Any] = dict(self.call_kwargs)
        if self.negative_prompt is not None:
            kwargs["negative_prompt"] = [self.negative_prompt] * len(prompts)
        if self.height is not None:
            kwargs["height"] = int(self.height)
        if self.width is not None:
            kwargs["width"] = int(self.width)
        with torch.inference_mode():
            out = self.pipe(
                prompt=[p.prompt for p in prompts],
                num_inference_steps=self.steps,
                guidance_scale=self.guidance,
                generator=generators,
                output_type="pt",
                **kwargs,
            )
            images = to_uint8(out.images)
        return [GeneratedImage(p, int(s), img) for p, s, img in zip(prompts, seeds, images, strict=True)]


def to_uint8(images) -> np.ndarray:
    """``(B, 3, H, W)`` pixels in ``[0, 1]`` (on any device) as ``(B, H, W, 3)`` uint8, rounded on the device and
    copied to the host once, as uint8: the values of ``np.clip(x * 255 + 0.5, 0, 255).astype(np.uint8)`` on the
    pipeline's float32 NumPy output, at a quarter of the copy."""
    import torch

    pixels = (images.float() * 255.0 + 0.5).clamp(0, 255).to(torch.uint8)
    return pixels.permute(0, 2, 3, 1).contiguous().cpu().numpy()
