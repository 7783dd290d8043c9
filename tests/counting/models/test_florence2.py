"""Florence-2's open-vocabulary detection on a tiny random model: the image tower once per image, the same
generation as the model's own ``generate`` from pixels, and answers (forced where an exact count is needed) parsed
by the processor into counts and unit masses at the box centres."""

import numpy as np
import pytest
import torch

from countboard.counting.models.florence2 import TASK, Florence2Counter, answer_boxes
from countboard.errors import ConfigError
from tests.fixtures.tiny_models import tiny_florence2_dir  # noqa: F401

PROMPTS = ["red circle", "blue square", "apples"]


@pytest.fixture(scope="module")
def counter(tiny_florence2_dir):  # noqa: F811
    c = Florence2Counter(model_id=str(tiny_florence2_dir), max_new_tokens=9, num_beams=1, prompt_batch_size=2)
    c.model.generation_config.min_new_tokens = 8  # a random model would end its answer at once
    return c


def _library_sequences(counter, item, prompt):
    """The model's own path: the processor on pixels and text, ``generate`` with ``pixel_values``."""
    inputs = counter.processor(images=item.image, text=TASK + prompt, return_tensors="pt")
    with torch.no_grad():
        return counter.model.generate(**inputs, max_new_tokens=9, num_beams=1, do_sample=False)


def test_texts_equal_the_processor_layout(counter, make_items):
    item = make_items(1)[0]
    inputs = counter.processor(images=[item.image] * len(PROMPTS), text=[TASK + p for p in PROMPTS], padding=True,
                               return_tensors="pt")
    tok = counter.processor.tokenizer(counter.texts(PROMPTS), padding=True, add_special_tokens=False,
                                      return_tensors="pt")
    torch.testing.assert_close(tok["input_ids"], inputs["input_ids"], rtol=0, atol=0)


def test_generation_from_cached_image_tokens_equals_generate_from_pixels(counter, make_items):
    """A batch of an image's prompts (padded) from its cached image tokens, against one ``generate`` per prompt."""
    item = make_items(1, seed=41)[0]
    ours = counter.generate(counter.encode_images([item])[0], PROMPTS)
    for q, prompt in enumerate(PROMPTS):
        ref = _library_sequences(counter, item, prompt)[0]
        torch.testing.assert_close(ours[q, :len(ref)], ref, rtol=0, atol=0)
        assert len(ref) > 2  # a real answer, not the end token at once


def test_image_tower_runs_once_per_image_batch(counter, make_items):
    calls = []
    handle = counter.model.model.vision_tower.register_forward_hook(lambda m, args, out: calls.append(len(args[0])))
    try:
        feats = counter.encode_images(make_items(3, seed=42))  # image_batch_size=auto: the whole batch at once
        counter.decode_counts(feats, PROMPTS)
        counter.image_batch_size = 2
        counter.encode_images(make_items(3, seed=42))
    finally:
        counter.image_batch_size = "auto"
        handle.remove()
    assert calls == [3, 2, 1]  # decoding does not run it again


def _forced(counter, answers):
    """Token ids of answers as the decoder writes them (start token, answer, end token), right-padded."""
    tok = counter.processor.tokenizer
    rows = [[2, 0, *tok(a, add_special_tokens=False)["input_ids"], 2] for a in answers]
    width = max(len(r) for r in rows)
    return torch.tensor([r + [1] * (width - len(r)) for r in rows])


ANSWERS = {
    "red circle": "red circle<loc_100><loc_200><loc_300><loc_400>red circle<loc_500><loc_500><loc_700><loc_900>",
    "blue square": "",
    "apples": "apples<poly><loc_100><loc_100><loc_300><loc_100><loc_300><loc_500></poly>",
}


def test_forced_answers_give_the_processor_boxes_as_counts_and_centres(counter, make_items, monkeypatch):
    monkeypatch.setattr(counter, "generate", lambda feat, prompts: _forced(counter, [ANSWERS[p] for p in prompts]))
    item = make_items(1, seed=43)[0]  # 40 x 64
    feats = counter.encode_images([item]) * len(PROMPTS)
    assert counter.decode_counts(feats, PROMPTS).tolist() == [2.0, 0.0, 1.0]
    maps = counter.decode(feats, PROMPTS)
    h, w = item.size
    parsed = counter.processor.post_process_generation(text=ANSWERS["red circle"], task=TASK, image_size=(w, h))
    expected = np.zeros((h, w), np.float32)
    for x0, y0, x1, y1 in parsed[TASK]["bboxes"]:
        expected[int((y0 + y1) / 2), int((x0 + x1) / 2)] += 1
    np.testing.assert_array_equal(maps[0], expected)
    assert maps[1].sum() == 0 and maps[2].sum() == 1
    # the polygon's points (dequantised) bound its box: x 6..19, y 4..20
    assert np.argwhere(maps[2]).tolist() == [[12, 12]]


def test_answer_boxes_reads_boxes_then_polygons():
    boxes = answer_boxes({"bboxes": [[0, 0, 10, 4]], "polygons": [[[2, 2, 6, 2], [4, 8]]], "labels": []})
    assert boxes.tolist() == [[0.0, 0.0, 4.0, 10.0], [2.0, 2.0, 8.0, 6.0]]
    assert answer_boxes({"bboxes": [], "polygons": []}).shape == (0, 4)


def test_a_checkpoint_of_another_model_is_refused_in_one_line(tiny_owlv2_dir):
    with pytest.raises(ConfigError, match="could not load the Florence-2 model"):
        Florence2Counter(model_id=str(tiny_owlv2_dir))
