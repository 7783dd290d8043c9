import numpy as np
import pytest
import torch
from scipy import ndimage

from countboard.counting.models.clipseg import ClipSegCounter, regions_to_density, regions_to_density_batch

PROMPTS = ["red circle", "blue square", "apples"]


def _regions_loop(prob, threshold, min_region):
    """Flood fill over 8-neighbours, written out pixel by pixel."""
    h, w = prob.shape
    seen = np.zeros((h, w), bool)
    out = np.zeros((h, w))
    for y in range(h):
        for x in range(w):
            if seen[y, x] or prob[y, x] < threshold:
                continue
            stack, region = [(y, x)], []
            seen[y, x] = True
            while stack:
                cy, cx = stack.pop()
                region.append((cy, cx))
                for dy in (-1, 0, 1):
                    for dx in (-1, 0, 1):
                        ny, nx = cy + dy, cx + dx
                        if 0 <= ny < h and 0 <= nx < w and not seen[ny, nx] and prob[ny, nx] >= threshold:
                            seen[ny, nx] = True
                            stack.append((ny, nx))
            mass = sum(prob[p] for p in region)
            if len(region) >= max(min_region, 1) and mass > 0:
                for p in region:
                    out[p] = prob[p] / mass
    return out


def test_regions_hand_case():
    prob = np.zeros((6, 6))
    prob[0, 0:2] = [0.9, 0.6]  # one region of 2 px
    prob[1, 2] = 0.8  # touches (0, 1) diagonally: same region
    prob[4:6, 4:6] = 0.5  # second region
    prob[5, 0] = 0.7  # single pixel, dropped by min_region=2
    dens = regions_to_density(prob, 0.5, 2)
    assert dens.sum() == pytest.approx(2.0)
    assert dens[0, 0] == pytest.approx(0.9 / 2.3)
    assert dens[5, 0] == 0
    assert dens[4, 4] == pytest.approx(0.25)


@pytest.mark.parametrize("seed", range(4))
def test_regions_match_flood_fill(seed):
    rng = np.random.default_rng(seed)
    prob = ndimage.gaussian_filter(rng.uniform(size=(30, 40)), 1.5)
    prob = (prob - prob.min()) / (prob.max() - prob.min())
    np.testing.assert_allclose(regions_to_density(prob, 0.55, 3), _regions_loop(prob, 0.55, 3), atol=1e-6)


def test_a_stack_of_maps_is_calibrated_map_by_map():
    """Regions never join across maps: a blob at the same place in two maps is one region in each."""
    rng = np.random.default_rng(7)
    probs = ndimage.gaussian_filter(rng.uniform(size=(5, 30, 40)), (0, 1.5, 1.5)).astype(np.float32)
    probs = (probs - probs.min()) / (probs.max() - probs.min())
    probs[3] = probs[2]  # identical neighbouring maps
    batch = regions_to_density_batch(probs, 0.55, 3)
    for q in range(len(probs)):
        np.testing.assert_allclose(batch[q], _regions_loop(probs[q], 0.55, 3), atol=1e-6)
    np.testing.assert_array_equal(batch[2], batch[3])
    assert batch.sum() > 0


@pytest.fixture(scope="module")
def counter(tiny_clipseg_dir):
    return ClipSegCounter(model_id=str(tiny_clipseg_dir), mask_threshold=0.5, min_region_frac=0.002)


def test_split_forward_equals_full_model_forward(counter, make_items):
    item = make_items(1, seed=4)[0]
    inputs = counter.processor(text=PROMPTS, images=[item.image] * len(PROMPTS), padding=True, return_tensors="pt")
    with torch.no_grad():
        full = counter.model(**inputs).logits
    split = counter.logits(counter.encode_images([item])[0], PROMPTS)
    torch.testing.assert_close(split, full, rtol=1e-4, atol=1e-5)


def test_density_is_region_calibrated_full_forward(counter, make_items):
    items = make_items(3, seed=5)
    maps = counter.density(items, PROMPTS)
    assert sum(float(m.sum()) for m in maps) > 0  # the random model finds some regions: the check is not vacuous
    for item, prompt, dens in zip(items, PROMPTS, maps, strict=True):
        assert dens.shape == item.size and dens.dtype == np.float32
        inputs = counter.processor(text=[prompt], images=[item.image], padding=True, return_tensors="pt")
        with torch.no_grad():
            logits = counter.model(**inputs).logits.reshape(1, 1, 64, 64)
        prob = torch.sigmoid(torch.nn.functional.interpolate(logits, size=item.size, mode="bilinear"))[0, 0]
        min_region = int(np.ceil(0.002 * item.size[0] * item.size[1]))
        expected = _regions_loop(prob.numpy(), 0.5, min_region)
        np.testing.assert_allclose(dens, expected, atol=1e-4)
        assert dens.sum() == pytest.approx(round(float(dens.sum())), abs=1e-3)


def test_cached_features_with_batched_prompts_equal_per_pair_calls(counter, make_items, monkeypatch):
    from countboard.counting.models import clipseg

    items = make_items(2, seed=6)
    feats = counter.encode_images(items)
    pairs = [(i, p) for i in range(len(items)) for p in PROMPTS]
    # two pairs per decoder call: the calls cut across images
    monkeypatch.setattr(clipseg, "DECODER_ELEMENTS", 2 * counter._pair_elements)
    batched = counter.decode([feats[i] for i, _ in pairs], [p for _, p in pairs])
    monkeypatch.undo()
    for (i, p), m in zip(pairs, batched, strict=True):
        np.testing.assert_allclose(m, counter.density([items[i]], [p])[0], atol=1e-5)


def test_probabilities_equal_transformers_logits_through_sigmoid(counter, make_items):
    """transformers' CLIPSeg: processor, full forward, ``sigmoid(logits)``. At the model's output size the adapter's
    probabilities are exactly that; at image size they are the logits resized bilinearly, then the sigmoid."""
    sized = make_items(1, seed=14, sizes=((64, 64),))[0]
    other = make_items(1, seed=15)[0]
    for item in (sized, other):
        inputs = counter.processor(text=PROMPTS, images=[item.image] * len(PROMPTS), padding=True,
                                   return_tensors="pt")
        with torch.no_grad():
            logits = counter.model(**inputs).logits.reshape(len(PROMPTS), 1, 64, 64)
        probs = counter.probabilities(counter.encode_images([item])[0], PROMPTS)
        expected = torch.sigmoid(torch.nn.functional.interpolate(logits, size=item.size, mode="bilinear"))[:, 0]
        np.testing.assert_allclose(probs, expected.numpy(), atol=1e-5)
        if item is sized:
            np.testing.assert_allclose(probs, torch.sigmoid(logits[:, 0]).numpy(), atol=1e-5)


def test_docstring_examples():
    import doctest

    from countboard.counting.models import clipseg

    result = doctest.testmod(clipseg)
    assert result.attempted >= 2 and result.failed == 0


def test_bf16_autocast_gives_float32_maps_with_whole_counts(counter, make_items):
    from countboard.models.precision import numerics

    items = make_items(3, seed=11)
    with numerics("cpu", "bf16"):
        maps = counter.density(items, PROMPTS)
    assert [(m.shape, m.dtype) for m in maps] == [(it.size, np.float32) for it in items]
    assert all(m.sum() == pytest.approx(round(float(m.sum())), abs=1e-3) for m in maps)


def test_decode_reduced_is_the_decoders_forward(tiny_clipseg_dir, make_items):
    """The reduced layers kept per image and broadcast over the prompts give transformers' decoder logits."""
    from countboard.counting.models.clipseg import decode_reduced, reduced_layers
    from countboard.models.preprocess import vit_pixel_values

    counter = ClipSegCounter(model_id=str(tiny_clipseg_dir))
    prompts = ["red circle", "blue square", "apples", "a"]
    with torch.inference_mode():
        pixels = vit_pixel_values([it.image for it in make_items(2, seed=3)], counter.processor.image_processor, "cpu")
        out = counter.model.clip.get_image_features(pixel_values=pixels, interpolate_pos_encoding=True,
                                                    output_hidden_states=True)
        layers = [out.hidden_states[i + 1] for i in counter.model.extract_layers]
        reduced = reduced_layers(counter.model.decoder, layers)
        cond = counter._text(prompts)
        for b in range(2):
            ref = counter.model.decoder([a[b:b + 1].expand(len(prompts), -1, -1) for a in layers], cond).logits
            got = decode_reduced(counter.model.decoder, [r[b:b + 1] for r in reduced], cond)
            assert got.shape == ref.shape
            torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
