"""MM Grounding DINO (the MM-GDINO and LLMDet checkpoints) through the Auto zero-shot-detection classes."""

import pytest
from transformers import MMGroundingDinoForObjectDetection

from countboard.counting.models.grounding_dino import GroundingDinoCounter
from countboard.errors import ConfigError
from tests.counting.models.test_grounding_dino import PROMPTS, _direct_count
from tests.fixtures.tiny_models import tiny_mm_grounding_dino_dir  # noqa: F401


@pytest.fixture(scope="module")
def counter(tiny_mm_grounding_dino_dir):  # noqa: F811
    # the class head's prior bias keeps a random MM-GDINO's scores near 0.01-0.09: thresholds below them
    return GroundingDinoCounter(model_id=str(tiny_mm_grounding_dino_dir), box_threshold=0.03, text_threshold=0.03,
                                nms_iou=0.5, prompt_batch_size=3)


def test_auto_classes_load_the_mm_grounding_dino_checkpoint(counter):
    assert isinstance(counter.model, MMGroundingDinoForObjectDetection)
    assert counter.model.config.model_type == "mm-grounding-dino"


def test_counts_match_unmodified_model_per_prompt(counter, make_items):
    items = make_items(1, seed=21)
    feats = counter.encode_images(items)
    pairs = [(i, p) for i in range(len(items)) for p in PROMPTS]
    counts = counter.count([items[i] for i, _ in pairs], [p for _, p in pairs]).tolist()
    maps = counter.decode([feats[i] for i, _ in pairs], [p for _, p in pairs])
    expected = [_direct_count(counter, items[i], p, 0.03, 0.5) for i, p in pairs]
    assert counts == expected == [float(m.sum()) for m in maps]
    assert sum(counts) > 0


def test_backbone_runs_once_per_image(counter, make_items):
    calls = []
    handle = counter._backbone.inner.register_forward_hook(lambda *a: calls.append(1))
    try:
        feats = counter.encode_images(make_items(2, seed=22))
        counter.decode([feats[0]] * len(PROMPTS) + [feats[1]] * len(PROMPTS), PROMPTS * 2)
    finally:
        handle.remove()
    assert len(calls) == 2


def test_a_checkpoint_of_another_detector_is_refused_in_one_line(tiny_owlv2_dir):
    with pytest.raises(ConfigError, match=r"'owlv2' checkpoint, not one of \['grounding-dino', 'mm-grounding-dino'\]"):
        GroundingDinoCounter(model_id=str(tiny_owlv2_dir))
