"""gScoreCAM of CLIP's image-text similarity (Chen et al., ACCV 2022): the paper's CLIP explainer.

ScoreCAM weights each channel of a layer by the model's score on the image masked with that channel's upsampled,
min-max normalised activation; gScoreCAM scores only the ``topk`` channels with the largest spatially averaged
gradient of the score (k = 300 in the Q-GroundCAM setting, "the average pooling of top 300-channel activation
maps"). As in the released gScoreCAM code: masks are bilinear (``align_corners=True``) upsamplings normalised with
``(A − min) / (max − min + 1e-6)`` and applied to the *normalised* input tensor; a NaN score counts as 0; the
softmax that turns scores into weights runs over all channels, with score 0 for the channels not selected; the
map is ``ReLU(Σ_c w_c A_c)``, brought to the image as that code does (``upsample="bilinear_minmax"``: min-max,
bilinear ``cv2.resize``, min-max; no plateaus, so no tied maxima in the pointing game).

Departure: Q-GroundCAM ran it on CLIP ResNet-50×16, which transformers does not provide; here it explains a CLIP
ViT's token grid (the gScoreCAM code's ViT variant), so ``explainer_detail`` names the backbone and layer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from countboard.grounding.models.clip_gradcam import DEFAULT_LAYER, ClipGradCAM

#: Channels scored per image in the Q-GroundCAM setting (gScoreCAM's best on CLIP).
DEFAULT_TOPK = 300


def gscorecam_map(acts: torch.Tensor, grads: torch.Tensor, image: torch.Tensor,
                  score: Callable[[torch.Tensor], torch.Tensor], topk: int = DEFAULT_TOPK,
                  score_batch_size: int = 32) -> torch.Tensor:
    """gScoreCAM of one image from a layer's activations and their gradients.

    Args:
        acts: ``(C, h, w)`` activations of the explained layer.
        grads: ``(C, h, w)`` gradient of the score with respect to ``acts``.
        image: ``(3, H, W)`` model input (normalised pixels).
        score: Maps a ``(K, 3, H, W)`` batch of masked inputs to ``(K,)`` scores of the phrase.
        topk: Channels scored (all when ``topk >= C``).
        score_batch_size: Masked inputs per ``score`` call.

    Returns:
        ``(h, w)`` map.

    Example:
        >>> acts = torch.zeros(2, 2, 2); acts[0, 0, 0] = 1.0; acts[1, 1, 1] = 1.0
        >>> grads = torch.tensor([1.0, -1.0])[:, None, None].expand(2, 2, 2)
        >>> cam = gscorecam_map(acts, grads, torch.ones(3, 4, 4), lambda x: x.sum(dim=(1, 2, 3)), topk=1)
        >>> [round(v, 4) for v in cam.flatten().tolist()]
        [1.0, 0.0, 0.0, 0.0]
    """
    c = acts.shape[0]
    importance = grads.float().mean(dim=(1, 2))
    idx = importance.topk(min(int(topk), c)).indices
    scores = torch.zeros(c, dtype=torch.float32, device=acts.device)
    up = torch.nn.functional.interpolate(acts[idx][None].float(), size=tuple(image.shape[-2:]), mode="bilinear",
                                         align_corners=True)[0]
    flat = up.reshape(len(idx), -1)
    lo, hi = flat.min(dim=1).values, flat.max(dim=1).values
    masks = (up - lo[:, None, None]) / (hi - lo + 1e-6)[:, None, None]
    with torch.no_grad():
        for start in range(0, len(idx), max(int(score_batch_size), 1)):
            part = masks[start:start + score_batch_size]
            s = score(image[None].float() * part[:, None]).float()
            scores[idx[start:start + score_batch_size]] = torch.nan_to_num(s, nan=0.0)
    weights = torch.softmax(scores, dim=0)
    return torch.relu(torch.einsum("c,chw->hw", weights, acts.float()))


class ClipGScoreCAM(ClipGradCAM):
    """gScoreCAM maps of ``logit(image, phrase)`` for a CLIP ViT checkpoint (tokens reshaped to the patch grid).

    Args:
        model_id: Hub id or local directory with the model, tokenizer and image-processor files.
        target_layer: Dotted module path whose ``(B, 1 + N, C)`` token output is explained.
        topk: Channels scored per image (300 in the paper's setting).
        score_batch_size: Masked images per scoring forward pass.
        batch_size: Samples per gradient pass.
        upsample: Token-grid to image resizing: ``bilinear_minmax`` (gScoreCAM's own code: ReLU, min-max,
            bilinear ``cv2.resize``, min-max; the default), or another of ``gradcam.UPSAMPLE_METHODS``.
        device: ``"cpu"`` or ``"cuda"``.
    """

    explainer_method = "gscorecam"

    def __init__(self, model_id: str = "openai/clip-vit-base-patch16", target_layer: str = DEFAULT_LAYER,
                 topk: int = DEFAULT_TOPK, score_batch_size: int = 32, batch_size: int = 8,
                 upsample: str = "bilinear_minmax", device: str = "cpu"):
        super().__init__(model_id=model_id, target_layer=target_layer, batch_size=batch_size, upsample=upsample,
                         device=device)
        self.topk, self.score_batch_size = int(topk), int(score_batch_size)

    def explainer_detail(self) -> str:
        return (f"gScoreCAM top-{self.topk} channels, CLIP ViT {self.target_layer} (paper: RN50x16), "
                f"{self.grid[0]}x{self.grid[1]} tokens, upsample {self.upsample}")

    def _cams(self, images, phrases) -> torch.Tensor:
        pixels, text, acts, grads = self._similarity_grads(images, phrases)
        gh, gw = self.grid
        cams = []
        for b in range(len(images)):
            one_text = {k: v[b:b + 1] for k, v in text.items()}

            def score(x: torch.Tensor, one_text=one_text) -> torch.Tensor:
                return self.model(pixel_values=x, **one_text).logits_per_image[:, 0]

            a = acts[b, 1:].T.reshape(-1, gh, gw)
            g = grads[b, 1:].T.reshape(-1, gh, gw)
            cams.append(gscorecam_map(a, g, pixels[b], score, self.topk, self.score_batch_size))
        return torch.stack(cams)
