"""SAM 3's adapter on the model's real output structures (``Sam3VisionEncoderOutput``,
``Sam3ImageSegmentationOutput``) filled with forced tensors: batching, the query x presence score, the strict
threshold, the box centres. transformers' Sam3 image processor and model need torchvision (not a base
dependency): the tests marked ``torchvision`` build a tiny random SAM 3 and compare the adapter with the real
processor's pixels and post-processing where it is importable (``make gpu-check``), and skip without it."""

import importlib.util

import numpy as np
import pytest
import torch
from transformers.modeling_outputs import BaseModelOutputWithPooling
from transformers.models.sam3.modeling_sam3 import Sam3ImageSegmentationOutput, Sam3VisionEncoderOutput

from countboard.counting.models import sam3 as sam3_module
from countboard.counting.models.sam3 import Sam3Counter, instance_scores, pixel_boxes, sam3_pixel_values
from countboard.errors import ConfigError
from tests.fixtures.tiny_models import tiny_clip_tokenizer

HAS_TORCHVISION = importlib.util.find_spec("torchvision") is not None
# per prompt: query logits, presence logit, boxes (normalised x0, y0, x1, y1) of the 3 queries
FORCED = {
    "apples": ([4.0, 4.0, -4.0], 3.0, [[0.1, 0.1, 0.3, 0.3], [0.5, 0.5, 0.9, 0.7], [0.0, 0.0, 1.0, 1.0]]),
    "zebras": ([4.0, 4.0, 4.0], -5.0, [[0.1, 0.1, 0.3, 0.3]] * 3),  # objects scored high, concept absent
    "cats": ([0.0, 9.0, -9.0], 100.0, [[0.2, 0.4, 0.6, 0.8], [0.0, 0.5, 0.5, 1.0], [0.1, 0.1, 0.2, 0.2]]),
}
NAMES = list(FORCED)


class FakeSam3:
    """What the adapter calls of ``Sam3Model``, returning its output classes with forced values; it records the
    batch sizes it sees."""

    def __init__(self):
        self.calls = {"vision": [], "text": [], "forward": []}

    def get_vision_features(self, pixel_values):
        b = pixel_values.shape[0]
        self.calls["vision"].append(b)
        maps = tuple(torch.full((b, 4, s, s), float(s)) for s in (8, 4, 2))
        return Sam3VisionEncoderOutput(last_hidden_state=torch.zeros(b, 4, 4), fpn_hidden_states=maps,
                                       fpn_position_encoding=maps)

    def get_text_features(self, input_ids, attention_mask, return_dict=True):
        self.calls["text"].append(len(input_ids))
        # the first character's id says which prompt this is (each prompt starts with another letter)
        return BaseModelOutputWithPooling(pooler_output=input_ids[:, 1:2, None].float().expand(-1, input_ids.shape[1], 3))

    def __call__(self, vision_embeds, text_embeds, attention_mask):
        b = text_embeds.pooler_output.shape[0]
        assert all(t.shape[0] == b for t in vision_embeds.fpn_hidden_states)
        assert attention_mask.shape == (b, 32) and attention_mask.dtype == torch.long
        self.calls["forward"].append(b)
        first = text_embeds.pooler_output[:, 0, 0].long().tolist()
        rows = [FORCED[next(n for n in NAMES if TOKENIZER(n)["input_ids"][1] == f)] for f in first]
        return Sam3ImageSegmentationOutput(
            pred_masks=torch.zeros(b, 3, 4, 4), pred_boxes=torch.tensor([r[2] for r in rows]),
            pred_logits=torch.tensor([r[0] for r in rows]), presence_logits=torch.tensor([[r[1]] for r in rows]))


TOKENIZER = tiny_clip_tokenizer()


@pytest.fixture
def counter():
    from types import SimpleNamespace

    from transformers import ViTImageProcessor

    c = Sam3Counter.__new__(Sam3Counter)
    Counter_init = super(Sam3Counter, c).__init__  # noqa: N806
    Counter_init(device="cpu")
    c.model = FakeSam3()
    c.processor = SimpleNamespace(tokenizer=TOKENIZER,
                                  image_processor=ViTImageProcessor(size={"height": 16, "width": 16}))
    c.configure("fake", score_threshold=0.5, nms_iou=1.0, prompt_template="{}", prompt_batch_size=2,
                image_batch_size=2)
    return c


def _reference_count(name, threshold=0.5):
    logits, presence, _ = FORCED[name]
    scores = torch.sigmoid(torch.tensor(logits)) * torch.sigmoid(torch.tensor(presence))
    return int((scores > threshold).sum())


def test_counts_are_instances_whose_query_times_presence_score_passes_strictly(counter, make_items):
    items = make_items(2, seed=51)
    pairs = [(i, n) for i in range(2) for n in NAMES]
    counts = counter.count([items[i] for i, _ in pairs], [n for _, n in pairs]).tolist()
    assert counts == [_reference_count(n) for _, n in pairs] == [2.0, 0.0, 1.0] * 2
    # "cats": the first query scores exactly 0.5 (sigmoid(0) x sigmoid(100) = 0.5 in float32), not above it


def test_maps_have_unit_mass_at_the_scaled_box_centres(counter, make_items):
    item = make_items(1, seed=52)[0]  # 40 x 64
    (apples,) = counter.density([item], ["apples"])
    h, w = item.size
    expected = np.zeros((h, w), np.float32)
    for x0, y0, x1, y1 in np.float32(FORCED["apples"][2][:2]).astype(np.float64):  # the model's float32 boxes
        expected[int((y0 * h + y1 * h) / 2), int((x0 * w + x1 * w) / 2)] += 1
    np.testing.assert_array_equal(apples, expected)


def test_vision_once_per_image_batch_prompts_batched_text_once_per_prompt(counter, make_items):
    feats = counter.encode_images(make_items(3, seed=53))
    counter.decode_counts([f for f in feats for _ in NAMES], NAMES * 3)
    counter.decode_counts([f for f in feats for _ in NAMES], NAMES * 3)
    assert counter.model.calls["vision"] == [2, 1]
    assert counter.model.calls["text"] == [2, 1]  # the first chunk's 2 prompts, then the third; then cached
    assert counter.model.calls["forward"] == [2, 1] * 6  # chunks of 2 prompts per image, twice


def test_threshold_and_nms_settings(counter, make_items):
    item = make_items(1, seed=54)[0]
    counter.score_threshold = 0.2
    assert counter.count([item] * 3, NAMES).tolist() == [_reference_count(n, 0.2) for n in NAMES]
    counter.score_threshold = 0.001
    assert counter.count([item], ["zebras"]).tolist() == [3.0]  # the absent concept's 0.0066 scores pass now
    counter.nms_iou = 0.5  # three copies of one box: one survives
    assert counter.count([item], ["zebras"]).tolist() == [1.0]


def test_score_and_box_helpers_follow_the_post_processing():
    logits, presence = torch.tensor([[0.5, -1.0]]), torch.tensor([[2.0]])
    torch.testing.assert_close(instance_scores(logits, presence), logits.sigmoid() * presence.sigmoid())
    torch.testing.assert_close(instance_scores(logits, None), logits.sigmoid())
    boxes = pixel_boxes(torch.tensor([[[0.25, 0.5, 0.75, 1.0]]]), torch.tensor([[40.0, 64.0]]))
    assert boxes.tolist() == [[[20.0, 16.0, 40.0, 48.0]]]


@pytest.mark.skipif(HAS_TORCHVISION, reason="torchvision is installed: nothing is missing")
def test_without_torchvision_preflight_and_construction_say_what_to_install():
    with pytest.raises(ConfigError, match=r"needs torchvision .* pip install 'countboard\[sam3\]'"):
        Sam3Counter.preflight({})
    with pytest.raises(ConfigError, match="needs torchvision"):
        Sam3Counter(model_id="facebook/sam3")
    assert "\n" not in sam3_module.torchvision_missing_message()


def test_reduce_maps_reads_the_density_maps_sums(counter, make_items):
    items = make_items(2, seed=56)
    pairs_items, pairs_prompts = [it for it in items for _ in NAMES], NAMES * 2
    reduced = counter.reduce_maps(pairs_items, pairs_prompts, lambda i, m: [m.sum(), m[:, : m.shape[1] // 2].sum()])
    maps = counter.density(pairs_items, pairs_prompts)
    assert [[float(a), float(b)] for a, b in reduced] == [[float(m.sum()), float(m[:, : m.shape[1] // 2].sum())]
                                                          for m in maps]
    assert sum(float(a) for a, _ in reduced) == 6.0


def test_pixels_are_the_image_processors_own(counter, make_items):
    # ViTImageProcessor is a PIL backend without torchvision and a torchvision one with it: both are reproduced
    images = [it.image for it in make_items(2, seed=57)]
    processor = counter.processor.image_processor
    assert torch.equal(sam3_pixel_values(images, processor, "cpu"),
                       processor(images=images, return_tensors="pt")["pixel_values"])


@pytest.fixture(scope="module")
def real_counter(tmp_path_factory):
    from tests.fixtures.tiny_models import build_tiny_sam3

    return Sam3Counter(model_id=str(build_tiny_sam3(tmp_path_factory.mktemp("tiny_sam3"))), prompt_batch_size=2)


@pytest.mark.torchvision
@pytest.mark.skipif(not HAS_TORCHVISION, reason="Sam3Processor and Sam3Model need torchvision (not installed: a CUDA "
                    "build, kept out of the base install); runs where it is importable (make gpu-check)")
def test_real_sam3_pixels_counts_and_boxes_equal_the_processors(real_counter, make_items):
    processor = real_counter.processor
    for item in make_items(2, seed=58):  # upscaled to 224 px: PIL's resize would differ by rounding here
        feats = real_counter.encode_images([item])
        for prompt in ["red circles", "squares"]:
            inputs = processor(images=item.image, text=prompt, return_tensors="pt")
            assert torch.equal(inputs["pixel_values"], sam3_pixel_values([item.image], processor.image_processor, "cpu"))
            with torch.no_grad():
                out = real_counter.model(**inputs)
            scores = instance_scores(out.pred_logits, out.presence_logits)[0]
            sizes = inputs["original_sizes"].tolist()
            # the random model's scores sit near 0.25: thresholds at its median and below its minimum
            for threshold in (float(scores.median()), float(scores.min()) - 1e-6):
                real_counter.score_threshold = threshold
                seg = processor.post_process_instance_segmentation(out, threshold=threshold, target_sizes=sizes)[0]
                det = processor.post_process_object_detection(out, threshold=threshold, target_sizes=sizes)[0]
                ((boxes, kept),) = real_counter.detect(feats, [prompt])
                assert len(kept) == len(seg["scores"]) == len(det["scores"]) > 0
                np.testing.assert_allclose(np.sort(kept), np.sort(det["scores"].numpy()), rtol=1e-5)
                x0, y0, x1, y1 = det["boxes"].numpy().astype(np.float64).T  # the processor's (x0, y0, x1, y1)
                np.testing.assert_allclose(np.sort(boxes[:, 1]), np.sort(x0), atol=1e-3)
                np.testing.assert_allclose(np.sort(boxes[:, 2]), np.sort(y1), atol=1e-3)
                assert real_counter.count([item], [prompt])[0] == len(det["scores"])

