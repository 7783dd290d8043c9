"""SAM 3 end to end, where torchvision can be imported (transformers' Sam3 model and image processor need it; it is
not a base dependency: these tests skip without it, and ``make gpu-check`` runs them on the GPU image, which has it).

A tiny random ``Sam3Model`` (the sizes of transformers' own model tests) with its real ``Sam3Processor`` is saved to a
folder and loaded by the counter as a checkpoint would be: its counts equal those of the processor and the model's own
full forward (instance score = query sigmoid x presence sigmoid, strictly above the threshold, box centre in the
image). The sweep over the negative-label and mosaic tests is in ``test_new_counters_sweep.py``, the pixels and the
processor's post-processing in ``test_sam3.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.fixtures.tiny_models import build_tiny_sam3


def _torchvision_usable() -> bool:
    try:
        import torchvision.ops  # noqa: F401
    except Exception:  # absent, or a build that does not load against this torch
        return False
    return True


pytestmark = [pytest.mark.torchvision,
              pytest.mark.skipif(not _torchvision_usable(), reason="SAM 3 needs torchvision (not importable here)")]

PROMPTS = ["red circle", "blue square", "green triangle", "apples"]


def _reference_scores(model_dir, items, device):
    """Per (image, prompt): the instance scores and box centres of the processor and the model's full forward."""
    from transformers import Sam3Model, Sam3Processor

    processor = Sam3Processor.from_pretrained(model_dir)
    model = Sam3Model.from_pretrained(model_dir).to(device).eval()
    rows = []
    with torch.inference_mode():
        for it in items:
            inputs = processor(images=[it.image] * len(PROMPTS), text=PROMPTS, return_tensors="pt").to(device)
            out = model(**inputs)
            scores = torch.sigmoid(out.pred_logits.float()) * torch.sigmoid(out.presence_logits.float()).reshape(-1, 1)
            boxes = out.pred_boxes.float()  # normalised x0, y0, x1, y1
            centres = torch.stack([(boxes[..., 0] + boxes[..., 2]) / 2, (boxes[..., 1] + boxes[..., 3]) / 2], -1)
            inside = ((centres >= 0) & (centres < 1)).all(-1)
            rows.extend(zip(scores.cpu().numpy(), inside.cpu().numpy(), strict=True))
    return rows


def _threshold_in_a_gap(rows) -> float:
    """A threshold in the widest gap between neighbouring scores of the middle half (so that the counts vary and
    a rounding difference of the pixels cannot move a score across it)."""
    scores = np.sort(np.concatenate([s for s, _ in rows]))
    mid = scores[len(scores) // 4: 3 * len(scores) // 4 + 1]
    k = int(np.argmax(np.diff(mid)))
    return float((mid[k] + mid[k + 1]) / 2)


@pytest.fixture(scope="module")
def tiny_sam3_dir(tmp_path_factory):
    return build_tiny_sam3(tmp_path_factory.mktemp("tiny_sam3"))


def test_counts_equal_the_processor_and_the_full_forward(tiny_sam3_dir, make_items):
    from countboard.counting.models.sam3 import Sam3Counter

    device = "cuda" if torch.cuda.is_available() else "cpu"
    items = make_items(3, seed=5)
    rows = _reference_scores(tiny_sam3_dir, items, device)
    threshold = _threshold_in_a_gap(rows)
    want = np.array([int(((s > threshold) & inside).sum()) for s, inside in rows], dtype=float)
    counter = Sam3Counter(model_id=str(tiny_sam3_dir), score_threshold=threshold, device=device, image_batch_size=2,
                          prompt_batch_size=3)
    pairs = [it for it in items for _ in PROMPTS], PROMPTS * len(items)
    got = np.asarray(counter.count(*pairs), dtype=float)
    assert 0 < want.sum() < 5 * len(want)  # some instances kept, not all
    np.testing.assert_array_equal(got, want)
    maps = counter.density(*pairs)
    np.testing.assert_allclose([float(m.sum()) for m in maps], want, atol=1e-4)
