"""CLIPSeg (text-prompted segmentation) as a map counter.

The frozen CLIP vision encoder runs once per image, over the images in calls sized by the device
(``encode_images`` keeps the layers the decoder reads; ``models.device_batch``), on pixels resized and normalised
on the model's device (``countboard.models.preprocess.vit_pixel_values``); ``decode`` embeds the distinct prompts
in one text batch (cached across calls) and runs the light FiLM-conditioned decoder over all pairs of the call
at once (every image with each of its prompts), in calls sized by memory. The decoder's first step on each encoder layer (a linear
reduction, 768 to 64 wide for ``clipseg-rd64-refined``) does not depend on the prompt, so ``encode_images`` applies
it once per image and keeps the reduced layers (``reduced_layers``); ``decode_reduced`` runs the rest of
``CLIPSegDecoder.forward`` on them for every prompt (transformers would reduce the layers again for each prompt:
most of the decoder's time on a CPU at the real size).

Calibration (segmentation logits to a density whose sum is a count). CLIPSeg predicts where the prompted class
is, not how many instances there are, at a low fixed resolution (352 x 352 for ``clipseg-rd64-refined``). The
logits are resized bilinearly to the image, passed through a sigmoid, and thresholded at ``mask_threshold``;
every 8-connected region of at least ``min_region_frac`` of the image area is taken to be one object and gets unit
mass, spread over the region in proportion to its probabilities (``p / sum of p over the region``). The map thus
still shows where CLIPSeg looked, its halves integrate to the counts of the mosaic test, and the total is the
number of regions. Touching objects merge into one region, so crowded scenes are under-counted; the threshold is
a config value so it can be tuned on a validation split. ``decode_counts`` labels the regions on the model's
device (``regions.py``) and reads the counts of a whole batch in one transfer; ``decode`` builds the maps on the
host.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from scipy import ndimage

from countboard.counting.models.prompt_batching import EmbeddingCache, pooled_text_features
from countboard.counting.models.regions import (
    finish_counts,
    initial_parents,
    label_rounds,
    region_counts,
    region_sums,
    settle,
)
from countboard.items import ImageItem
from countboard.models.base import Counter, check_one_prompt_each
from countboard.models.device_batch import (
    ImageRef,
    check_setting,
    device_step,
    distinct,
    encode_in_calls,
    images_per_call,
    pair_rows,
    vit_image_bytes,
)
from countboard.models.hf_loading import load_processor_and_model
from countboard.models.preprocess import vit_pixel_values
from countboard.models.transfer import to_device, to_host, to_host_later

#: 8-connected within each map of a (C, H, W) stack, nothing across maps.
_IN_PLANE = np.zeros((3, 3, 3), dtype=bool)
_IN_PLANE[1] = True


def reduced_layers(decoder, hidden_states: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The prompt-independent first step of ``CLIPSegDecoder.forward``: ``reduces[i]`` of its ``i``-th input (the
    extracted encoder layers in reverse order, as the decoder reads them)."""
    return [reduce(a) for a, reduce in zip(hidden_states[::-1], decoder.reduces, strict=True)]


#: Pixels of the maps labelled in one call (the labelling holds several int64 / float64 values per pixel).
LABEL_CHUNK_PIXELS = 2**25
#: Elements of the decoder's largest activations (pairs x tokens x width) in one call.
DECODER_ELEMENTS = 2**27


def upsampled_probabilities(logits: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """``(N, h, w)`` logits resized bilinearly to ``size`` (float32), then the sigmoid (in place): the maps of any
    number of prompts, of one image or of several images of one size, in one call."""
    up = torch.nn.functional.interpolate(logits[:, None].float(), size=tuple(size), mode="bilinear",
                                         align_corners=False)[:, 0]
    return up.sigmoid_()


def relu_in_place(decoder) -> None:
    """Each decoder layer's MLP applies its ReLU to ``fc1``'s fresh output in place (the same values, one ``(B, T,
    2048)`` temporary fewer per layer: about a fifth of the decoder's time on a CPU)."""
    for layer in decoder.layers:
        if type(layer.mlp.activation_fn) is torch.nn.ReLU:
            layer.mlp.activation_fn = torch.nn.ReLU(inplace=True)


def decode_reduced(decoder, reduced: Sequence[torch.Tensor], cond: torch.Tensor) -> torch.Tensor:
    """``CLIPSegDecoder.forward(layers, cond).logits`` from one image's :func:`reduced_layers` (each ``(1, T, R)``)
    for a batch of ``B`` conditional embeddings: the same operations in the same order, the reduced layers
    broadcast over the batch instead of being reduced again for each prompt. Returns ``(B, h, w)`` logits.

    Equal to transformers' decoder up to float rounding: a matrix product over one image's rows rounds differently
    from the same product over ``B`` stacked copies (as transformers' own output for a prompt differs with the
    number of prompts decoded with it). Here the reduction no longer depends on the prompt batch."""
    output = None
    for i, (r, layer) in enumerate(zip(reduced, decoder.layers, strict=True)):
        output = r if output is None else r + output
        if i == decoder.conditional_layer:
            output = decoder.film_mul(cond) * output.permute(1, 0, 2) + decoder.film_add(cond)
            output = output.permute(1, 0, 2)
        output = layer(output, attention_mask=None)
        output = output[0] if isinstance(output, tuple) else output
    output = output[:, 1:, :].transpose(1, 2)  # drop the class token: (B, R, T)
    size = int(math.sqrt(output.shape[2]))
    output = output.reshape(output.shape[0], output.shape[1], size, size)
    return decoder.transposed_convolution(output).squeeze(1)


def regions_to_density(prob: np.ndarray, threshold: float, min_region: int) -> np.ndarray:
    """Unit mass per connected region of ``prob >= threshold``, spread in proportion to ``prob``.

    Args:
        prob: ``(H, W)`` probabilities.
        threshold: Minimum probability of a foreground pixel.
        min_region: Regions with fewer pixels are dropped.

    Example:
        >>> p = np.zeros((5, 5)); p[0, 0:2] = [0.9, 0.6]; p[3:5, 3:5] = 0.8; p[4, 0] = 0.7
        >>> d = regions_to_density(p, 0.5, 2)
        >>> float(d.sum()), round(float(d[0, 0]), 2)
        (2.0, 0.6)
    """
    return regions_to_density_batch(np.asarray(prob)[None], threshold, min_region)[0]


def regions_to_density_batch(probs: np.ndarray, threshold: float, min_region: int) -> np.ndarray:
    """:func:`regions_to_density` of every map of a ``(C, H, W)`` stack at once (one labelling, one sum per region).

    Regions connect pixels of one map only (8-connected in the plane, never across maps), so each map's result is
    the one it gets alone.

    Example:
        >>> p = np.zeros((2, 3, 3)); p[0, 0, 0] = p[1, 1, 1] = p[1, 2, 2] = 0.9
        >>> regions_to_density_batch(p, 0.5, 1).sum(axis=(1, 2)).tolist()
        [1.0, 1.0]
    """
    mask = probs >= threshold
    labels, n = ndimage.label(mask, structure=_IN_PLANE)
    out = np.zeros(probs.shape, dtype=np.float32)
    if n == 0:
        return out
    flat = labels.ravel()
    areas = np.bincount(flat, minlength=n + 1)
    masses = np.bincount(flat, weights=probs.ravel(), minlength=n + 1)
    keep = (areas >= max(min_region, 1)) & (masses > 0)
    keep[0] = False
    denom = np.where(masses > 0, masses, 1.0)
    sel = keep[labels]
    out[sel] = (probs[sel] / denom[labels[sel]]).astype(np.float32)
    return out


class ClipSegCounter(Counter):
    """Counts CLIPSeg's connected foreground regions for a text prompt (see the module docstring).

    Args:
        model_id: Hub id or local directory with a ``CLIPSegForImageSegmentation`` and its processor.
        mask_threshold: Sigmoid probability above which a pixel is foreground.
        min_region_frac: Smallest counted region as a fraction of the image area.
        prompt_template: Format string applied to each prompt.
        image_batch_size: Images per vision-encoder call in ``encode_images``: ``auto`` (sized by the device,
            ``models.device_batch``) or a number.
        prompt_batch_size: Accepted for configs that set it; the decoder's calls are sized by memory
            (``DECODER_ELEMENTS``) over all pairs of a batch.
        device: ``"cpu"`` or ``"cuda"``.

    Example:
        >>> counter = ClipSegCounter("CIDAS/clipseg-rd64-refined")  # doctest: +SKIP
        >>> counter.count([item], ["apples"])  # doctest: +SKIP
        array([9.])
    """

    caches_image_features = True

    def __init__(self, model_id: str = "CIDAS/clipseg-rd64-refined", mask_threshold: float = 0.4,
                 min_region_frac: float = 2e-4, prompt_template: str = "{}", image_batch_size: int | str = "auto",
                 prompt_batch_size: int = 32, device: str = "cpu"):
        super().__init__(device=device)
        from transformers import CLIPSegForImageSegmentation, CLIPSegProcessor

        self.model_id = model_id
        self.mask_threshold = float(mask_threshold)
        self.min_region_frac = float(min_region_frac)
        self.prompt_template = prompt_template
        self.image_batch_size = check_setting(image_batch_size)
        self.prompt_batch_size = int(prompt_batch_size)
        self.processor, self.model = load_processor_and_model(CLIPSegProcessor, CLIPSegForImageSegmentation,
                                                              model_id, "CLIPSeg", device)
        relu_in_place(self.model.decoder)
        self._image_bytes = vit_image_bytes(self.model.config.vision_config)
        cfg = self.model.config
        tokens = (cfg.vision_config.image_size // cfg.vision_config.patch_size) ** 2 + 1
        self._pair_elements = tokens * (cfg.reduce_dim + cfg.decoder_intermediate_size) * 2
        self._text = EmbeddingCache(self._embed_texts)

    @device_step
    def _embed_texts(self, prompts: list[str]) -> torch.Tensor:
        return pooled_text_features(self.model.clip, self.processor.tokenizer,
                                    [self.prompt_template.format(p) for p in prompts],
                                    self.model.config.text_config.max_position_embeddings, self.device)

    @device_step
    def encode_images(self, items: Sequence[ImageItem]) -> list[ImageRef]:
        """Run the CLIP vision encoder over the images in calls sized by the device (``models.device_batch``) and
        keep the layers the decoder reads, reduced (``reduced0`` ... per decoder layer, ``(1, T, R)`` an image)."""
        per_call = images_per_call(self.image_batch_size, self.device, len(items), self._image_bytes)
        return encode_in_calls(items, per_call, self._encode)

    def _encode(self, batch: Sequence[ImageItem]) -> dict[str, torch.Tensor]:
        pixels = vit_pixel_values([it.image for it in batch], self.processor.image_processor, self.device)
        out = self.model.clip.get_image_features(pixel_values=pixels, interpolate_pos_encoding=True,
                                                 output_hidden_states=True)
        layers = reduced_layers(self.model.decoder, [out.hidden_states[i + 1] for i in self.model.extract_layers])
        return {f"reduced{k}": layer for k, layer in enumerate(layers)}

    @device_step
    def pair_logits(self, features: Sequence[ImageRef], prompts: Sequence[str]) -> torch.Tensor:
        """``(N, h, w)`` decoder logits at the model's output resolution of every pair ``(features[i],
        prompts[i])``: the decoder over all pairs at once, in calls of at most ``DECODER_ELEMENTS``."""
        check_one_prompt_each(features, prompts, "image features", "pair")
        rows = pair_rows(features)
        names, which = distinct(prompts)
        cond_all = self._text(names)
        which_t = to_device(which, cond_all.device, torch.long)
        layers = [rows.stacked[f"reduced{k}"] for k in range(len(self.model.decoder.layers))]
        per_call = max(1, DECODER_ELEMENTS // self._pair_elements)
        chunks = []
        for a in range(0, len(prompts), per_call):
            idx = rows.rows[a:a + per_call]
            cond = cond_all.index_select(0, which_t[a:a + per_call])
            chunks.append(decode_reduced(self.model.decoder, [x.index_select(0, idx) for x in layers], cond))
        return torch.cat(chunks)

    def logits(self, features: ImageRef, prompts: Sequence[str]) -> torch.Tensor:
        """``(len(prompts), h, w)`` decoder logits at the model's output resolution for one image."""
        return self.pair_logits([features] * len(prompts), prompts)

    def _by_size(self, features: Sequence[ImageRef], prompts: Sequence[str]
                 ) -> list[tuple[tuple[int, int], list[int], torch.Tensor]]:
        """``(size, pair indices, probabilities (n, H, W))`` per image size: every pair's logits from one decoder
        pass, resized with the other pairs of its size (at most ``LABEL_CHUNK_PIXELS`` pixels per call)."""
        logits = self.pair_logits(features, prompts)
        groups: dict[tuple[int, int], list[int]] = {}
        for i, f in enumerate(features):
            groups.setdefault(tuple(f.size), []).append(i)
        out = []
        for (h, w), idx in groups.items():
            per_call = max(1, LABEL_CHUNK_PIXELS // (h * w))
            for a in range(0, len(idx), per_call):
                part = idx[a:a + per_call]
                sel = logits if len(part) == len(logits) else logits[to_device(part, logits.device, torch.long)]
                out.append(((h, w), part, upsampled_probabilities(sel, (h, w))))
        return out

    def _min_region(self, size: tuple[int, int]) -> int:
        return int(np.ceil(self.min_region_frac * size[0] * size[1]))

    @device_step
    def decode(self, features: Sequence[ImageRef], prompts: Sequence[str]) -> list[np.ndarray]:
        """The decoder over all pairs at once, then the region calibration of the maps of each image size."""
        out: list[np.ndarray | None] = [None] * len(prompts)
        for size, idx, probs in self._by_size(features, prompts):
            dens = regions_to_density_batch(probs.cpu().numpy(), self.mask_threshold, self._min_region(size))
            for q, i in enumerate(idx):
                out[i] = dens[q]
        return out

    def decode_counts(self, features: Sequence[ImageRef], prompts: Sequence[str]) -> np.ndarray:
        """The number of counted regions of each pair, labelled on the device (``regions.region_counts``) for the
        maps of one size together, and read in one transfer.
        ``decode``'s maps sum to these counts (up to float32 rounding of the maps)."""
        return self.decode_counts_later(features, prompts)()

    @device_step
    def decode_counts_later(self, features: Sequence[ImageRef], prompts: Sequence[str]):
        """``Counter.decode_counts_later``: the decoder and the labelling of every pair queued, the counts' copy to
        the host started; the returned function reads them (a labelling that had not settled runs more rounds)."""
        if not prompts:
            return lambda: np.zeros(0)
        found = []
        for size, idx, probs in self._by_size(features, prompts):
            min_region = self._min_region(size)
            found.append((idx, probs, min_region, *region_counts(probs, self.mask_threshold, min_region)))
        read = to_host_later([t for _, _, _, counts, settled, _, _ in found for t in (counts, settled)])

        def counts() -> np.ndarray:
            host = read.result()
            out = np.zeros(len(prompts), dtype=np.float64)
            for g, (idx, probs, min_region, _, _, labels, mask) in enumerate(found):
                got = host[2 * g]
                if not bool(host[2 * g + 1]):
                    with torch.no_grad():
                        (got,) = to_host([finish_counts(probs, labels, mask, self.mask_threshold, min_region)])
                out[idx] = got
            return out

        return counts

    @device_step
    def device_probabilities(self, features: ImageRef, prompts: Sequence[str]) -> torch.Tensor:
        """:meth:`probabilities` left on the model's device (float32)."""
        return upsampled_probabilities(self.logits(features, prompts), features.size)

    def probabilities(self, features: ImageRef, prompts: Sequence[str]) -> np.ndarray:
        """``(len(prompts), H, W)`` foreground probabilities at image size: logits resized bilinearly, then sigmoid.

        At the model's output size this is exactly ``sigmoid(logits)`` of transformers' CLIPSeg; the resize comes
        before the sigmoid so the probabilities stay smooth logistic functions of interpolated evidence.
        """
        return self.device_probabilities(features, prompts).cpu().numpy()

    @device_step
    def device_maps(self, features: Sequence[ImageRef], prompts: Sequence[str]) -> list[torch.Tensor]:
        """``decode``'s maps made on the device (:func:`region_density`), left there."""
        groups = self._by_size(features, prompts)
        out: list[torch.Tensor | None] = [None] * len(prompts)
        dens = region_density([(probs, self._min_region(size)) for size, _, probs in groups], self.mask_threshold)
        for (_, idx, _), stack in zip(groups, dens, strict=True):
            for q, i in enumerate(idx):
                out[i] = stack[q]
        return out


def region_density(stacks: list[tuple[torch.Tensor, int]], threshold: float, steps: int = 8) -> list[torch.Tensor]:
    """:func:`regions_to_density_batch` of each ``(probabilities (C, H, W), min_region)`` stack on its device:
    regions labelled with tensor ops (``regions.label_rounds``); whether every labelling has settled is read once
    for all stacks, and only one that had not runs more rounds. Float32 maps, equal to the host's up to the
    rounding of the regions' float64 masses."""
    found = []
    for probs, _ in stacks:
        mask = probs >= threshold
        found.append((mask, *label_rounds(initial_parents(mask), mask, steps)))
    if found and not bool(torch.stack([settled for _, _, settled in found]).all()):
        found = [(mask, labels if bool(settled) else settle(labels, mask, steps), settled)
                 for mask, labels, settled in found]
    out = []
    for (probs, min_region), (mask, labels, _) in zip(stacks, found, strict=True):
        area, mass = region_sums(probs, labels, mask)
        good = (area >= max(int(min_region), 1)) & (mass > 0)
        denom = torch.where(mass > 0, mass, torch.ones_like(mass))
        values = probs.reshape(-1).to(torch.float64)
        dens = torch.where(mask.reshape(-1) & good[labels], values / denom[labels], torch.zeros_like(values))
        out.append(dens.to(torch.float32).reshape(mask.shape))
    return out
