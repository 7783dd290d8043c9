"""SAM 3 end to end, where torchvision can be imported (transformers' Sam3 model and image processor need it; it is
not a base dependency: these tests skip without it, and ``make gpu-check`` runs them on the GPU image, which has it).

A tiny random ``Sam3Model`` (the sizes of transformers' own model tests) with its real ``Sam3Processor`` is saved to a
folder and loaded by the counter as a checkpoint would be: its counts equal those of the processor and the model's own
full forward (instance score = query sigmoid x presence sigmoid, strictly above the threshold, box centre in the
image), and a real sweep over the negative-label and mosaic tests finishes with counts and maps.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import run_sweep, store_runs


def _torchvision_usable() -> bool:
    try:
        import torchvision.ops  # noqa: F401
    except Exception:  # absent, or a build that does not load against this torch
        return False
    return True


pytestmark = [pytest.mark.torchvision,
              pytest.mark.skipif(not _torchvision_usable(), reason="SAM 3 needs torchvision (not importable here)")]

PROMPTS = ["red circle", "blue square", "green triangle", "apples"]


def build_tiny_sam3(folder):
    """A tiny random SAM 3 and its processor (the torchvision image processor at 224 px, the tests' byte-level CLIP
    tokenizer) saved under ``folder``."""
    import transformers
    from transformers import Sam3Config, Sam3Model, Sam3Processor
    from transformers.models.sam3.configuration_sam3 import (
        Sam3DETRDecoderConfig,
        Sam3DETREncoderConfig,
        Sam3GeometryEncoderConfig,
        Sam3MaskDecoderConfig,
        Sam3VisionConfig,
        Sam3ViTConfig,
    )

    from tests.fixtures.tiny_models import tiny_clip_tokenizer

    tok = tiny_clip_tokenizer()
    small = dict(num_attention_heads=4, intermediate_size=64)
    backbone = Sam3ViTConfig(hidden_size=32, num_hidden_layers=2, image_size=224, patch_size=14, window_size=8,
                             global_attn_indexes=[0, 1], **small)
    config = Sam3Config(
        vision_config=Sam3VisionConfig(backbone_config=backbone, fpn_hidden_size=32, scale_factors=[2.0, 1.0]),
        text_config={"vocab_size": len(tok), "hidden_size": 32, "intermediate_size": 64, "projection_dim": 32,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 32,
                     "hidden_act": "gelu", "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id,
                     "pad_token_id": tok.pad_token_id},
        geometry_encoder_config=Sam3GeometryEncoderConfig(hidden_size=32, num_layers=1, **small),
        detr_encoder_config=Sam3DETREncoderConfig(hidden_size=32, num_layers=1, **small),
        detr_decoder_config=Sam3DETRDecoderConfig(hidden_size=32, num_layers=1, num_queries=5, **small),
        mask_decoder_config=Sam3MaskDecoderConfig(hidden_size=32, num_upsampling_stages=2))
    torch.manual_seed(0)
    model = Sam3Model(config).eval()
    with torch.no_grad():  # spread the random scores (all near 0.25 as initialised) as a trained model's are spread
        for name, param in model.dot_product_scoring.named_parameters():
            if name.endswith(("text_proj.weight", "query_proj.weight")):
                param.mul_(6.0)
    model.save_pretrained(folder)
    image_cls = getattr(transformers, "Sam3ImageProcessor", None) or transformers.Sam3ImageProcessorFast
    Sam3Processor(image_processor=image_cls(size={"height": 224, "width": 224}), tokenizer=tok).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_sam3_dir(tmp_path_factory):
    return build_tiny_sam3(tmp_path_factory.mktemp("tiny_sam3"))


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


@pytest.mark.slow
def test_a_sweep_of_the_negative_and_mosaic_tests_finishes_with_counts_and_maps(tiny_sam3_dir, tmp_path):
    import pandas as pd

    from tests.counting.models.test_new_counters_sweep import SMALL

    run_sweep(["-m", "model=sam3", f"model.model_id={tiny_sam3_dir}", "model.score_threshold=0.2",
               "task=praco_negative,praco_mosaic", *SMALL], tmp_path)
    store = tmp_path / "mlruns"
    runs = store_runs(store)
    cells = runs[runs["tags.countboard.role"] == "cell"].set_index("tags.task")
    assert sorted(cells.index) == ["praco_mosaic", "praco_negative"] and set(cells["status"]) == {"FINISHED"}
    neg, mos = cells.loc["praco_negative"], cells.loc["praco_mosaic"]
    assert not np.isnan(neg["metrics.mae"]) and neg["metrics.n_images"] == 8 and mos["metrics.n_samples"] > 0
    counts = pd.read_parquet(next(store.glob(f"artifacts/*/{neg['run_id']}/artifacts")) / "tables" /
                             "negative_counts.parquet")
    assert counts.shape[0] == 8
    assert list(next(store.glob(f"artifacts/*/{mos['run_id']}/artifacts")).glob("figures/mosaic_*.png"))
