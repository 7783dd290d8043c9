"""GradCAM on tiny randomly initialised CLIP and BLIP checkpoints built here, saved and loaded back offline."""

from __future__ import annotations

import json
import string

import numpy as np
import pytest
import torch

from countboard.errors import ConfigError
from countboard.grounding.datasets.public import GroundingSample
from countboard.grounding.models.blip_gradcam import BlipGradCAM
from countboard.grounding.models.clip_gradcam import ClipGradCAM, TinyRandomClipGradCAM, tiny_clip_config
from countboard.grounding.models.clip_gscorecam import ClipGScoreCAM
from countboard.grounding.models.gradcam import pixel_batch, resolve_module, token_gradcam, upsample_map

PHRASES = ["the red circle", "a blue square"]


def _samples(n: int = 2) -> list[GroundingSample]:
    rng = np.random.default_rng(0)
    return [GroundingSample(sample_id=f"s{k}", phrase=PHRASES[k % 2], box=(4, 4, 20, 20),
                            image=rng.integers(0, 255, size=(40 + 8 * k, 56, 3), dtype=np.uint8)) for k in range(n)]


@pytest.fixture(scope="module")
def tiny_clip_dir(tmp_path_factory):
    from transformers import CLIPImageProcessor, CLIPModel, CLIPTokenizer

    root = tmp_path_factory.mktemp("tiny_clip")
    chars = list(string.ascii_lowercase)
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for c in chars:
        vocab[c] = len(vocab)
        vocab[c + "</w>"] = len(vocab)
    (root / "vocab.json").write_text(json.dumps(vocab))
    (root / "merges.txt").write_text("#version: 0.2\n")
    tok = CLIPTokenizer(str(root / "vocab.json"), str(root / "merges.txt"), pad_token="<|endoftext|>")
    config = tiny_clip_config(len(vocab), image_size=32, patch_size=8, max_length=32)
    config.text_config.bos_token_id, config.text_config.eos_token_id, config.text_config.pad_token_id = 0, 1, 1
    torch.manual_seed(0)
    CLIPModel(config).save_pretrained(root)
    tok.save_pretrained(root)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(root)
    return root


def test_clip_gradcam_loads_saved_checkpoint_and_maps_every_image(tiny_clip_dir):
    model = ClipGradCAM(model_id=str(tiny_clip_dir), batch_size=2)
    samples = _samples(3)
    maps = model.heatmaps(samples)
    assert [m.shape for m in maps] == [s.image.shape[:2] for s in samples]
    assert all(np.isfinite(m).all() and (m >= 0).all() for m in maps)
    again = model.heatmaps(samples)
    assert all(np.array_equal(a, b) for a, b in zip(maps, again, strict=True))


@pytest.mark.parametrize("explainer", ["gradcam", "gscorecam"])
def test_explainers_run_under_bf16_autocast(tiny_clip_dir, explainer):
    from countboard.models.precision import numerics

    cls = ClipGradCAM if explainer == "gradcam" else ClipGScoreCAM
    model = cls(model_id=str(tiny_clip_dir), batch_size=2)
    samples = _samples(2)
    with numerics("cpu", "bf16"):
        maps = model.heatmaps(samples)
    assert [(m.shape, m.dtype) for m in maps] == [(s.image.shape[:2], np.float32) for s in samples]
    assert all(np.isfinite(m).all() for m in maps)


def test_clip_token_gradcam_matches_autograd_on_hidden_states(tiny_clip_dir):
    model = ClipGradCAM(model_id=str(tiny_clip_dir), target_layer="vision_model.encoder.layers.0")
    samples = _samples(2)
    images = [s.image for s in samples]
    got = model._cams(images, PHRASES)
    from countboard.grounding.models.gradcam import pixel_batch

    pixels = pixel_batch(images, model.input_size, model.mean, model.std)
    out = model.model(pixel_values=pixels, output_hidden_states=True, **model.tokenize(PHRASES))
    hidden = out.vision_model_output.hidden_states[1]  # output of encoder layer 0
    (grad,) = torch.autograd.grad(out.logits_per_image.diagonal().sum(), hidden)
    weights = grad[:, 1:].mean(dim=1, keepdim=True)
    expected = torch.relu((hidden[:, 1:] * weights).sum(-1)).reshape(2, *model.grid)
    torch.testing.assert_close(got, expected.detach(), rtol=1e-4, atol=1e-6)


def test_tiny_random_clip_is_seeded_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = TinyRandomClipGradCAM(seed=3, image_size=32).heatmaps(_samples(2))
    after = torch.rand(1)
    b = TinyRandomClipGradCAM(seed=3, image_size=32).heatmaps(_samples(2))
    c = TinyRandomClipGradCAM(seed=4, image_size=32).heatmaps(_samples(2))
    assert torch.equal(before, after)
    assert np.array_equal(a[0], b[0]) and not np.array_equal(a[0], c[0])


@pytest.fixture(scope="module")
def tiny_blip_dir(tmp_path_factory):
    from transformers import BertTokenizer, BlipConfig, BlipForImageTextRetrieval, BlipImageProcessor

    root = tmp_path_factory.mktemp("tiny_blip")
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "red", "blue", "circle", "square"]
    (root / "vocab.txt").write_text("\n".join(words) + "\n")
    tok = BertTokenizer(str(root / "vocab.txt"))
    text = {"vocab_size": len(words), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 2, "encoder_hidden_size": 32, "max_position_embeddings": 32,
            "pad_token_id": 0, "bos_token_id": 2, "sep_token_id": 3}
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
              "image_size": 32, "patch_size": 8}
    torch.manual_seed(0)
    BlipForImageTextRetrieval(BlipConfig(text_config=text, vision_config=vision, projection_dim=16)).save_pretrained(root)
    tok.save_pretrained(root)
    BlipImageProcessor(size={"height": 32, "width": 32}).save_pretrained(root)
    return root


def test_blip_gradcam_on_cross_attention(tiny_blip_dir):
    model = BlipGradCAM(model_id=str(tiny_blip_dir), target_layer="text_encoder.encoder.layer.0.crossattention.self",
                        batch_size=2)
    samples = _samples(3)
    maps = model.heatmaps(samples)
    assert [m.shape for m in maps] == [s.image.shape[:2] for s in samples]
    assert all(np.isfinite(m).all() and (m >= 0).all() for m in maps)
    assert model.grid == (4, 4)
    swapped = model.heatmaps([GroundingSample("x", PHRASES[1], samples[0].box, image=samples[0].image)])
    assert maps[0].max() > 0  # layer 0 reaches the ITM head (the CLS row of the last layer alone does)
    assert not np.array_equal(swapped[0], maps[0])  # the phrase changes the map


def test_bad_target_layer_is_a_config_error(tiny_clip_dir):
    with pytest.raises(ConfigError, match="no submodule 'layerz'"):
        ClipGradCAM(model_id=str(tiny_clip_dir), target_layer="vision_model.encoder.layerz.0")
    net = torch.nn.Sequential(torch.nn.Linear(2, 2))
    with pytest.raises(ConfigError, match="target layer '3'"):
        resolve_module(net, "3")


def test_token_gradcam_rejects_wrong_grid():
    with pytest.raises(ValueError, match="do not fill a 3x3 grid"):
        token_gradcam(torch.zeros(1, 5, 2), torch.zeros(1, 5, 2), (3, 3))


def _zoom_reference(cam, size):
    """skimage ``resize(order=3, mode="constant")`` written as spline sampling at the output pixel centres."""
    from scipy import ndimage

    a = (cam - cam.min()) / (cam.max() - cam.min())
    (h, w), (big_h, big_w) = cam.shape, size
    yy = (np.arange(big_h) + 0.5) * h / big_h - 0.5
    xx = (np.arange(big_w) + 0.5) * w / big_w - 0.5
    grid = np.meshgrid(yy, xx, indexing="ij")
    return np.clip(ndimage.map_coordinates(a, grid, order=3, mode="grid-constant", cval=0.0), 0, 1)


@pytest.mark.parametrize(("shape", "size"), [((7, 9), (30, 41)), ((14, 14), (56, 80))])
def test_bicubic_clip_upsampling_is_getattmap_without_blur(shape, size):
    cam = np.random.default_rng(1).random(shape) * 5 - 1
    up = upsample_map(cam, size, "bicubic_clip")
    assert up.shape == size and up.dtype == np.float32 and up.min() >= 0 and up.max() == 1.0
    np.testing.assert_allclose(up, _zoom_reference(cam, size), atol=1e-6)
    bilinear = upsample_map(cam, size, "bilinear")
    expected = torch.nn.functional.interpolate(torch.from_numpy(cam)[None, None], size=size, mode="bilinear")
    np.testing.assert_allclose(bilinear, expected[0, 0].numpy(), rtol=1e-6)
    with pytest.raises(ConfigError, match="model.upsample='nearest'"):
        upsample_map(cam, size, "nearest")


def test_clipped_bicubic_upsampling_creates_the_tied_maxima_pg_uncertainty_counts():
    from countboard.metrics.grounding import grounding_metrics_batch

    rng = np.random.default_rng(0)
    grids = rng.random((40, 12, 12)) ** 3
    y0, x0 = rng.integers(0, 48, 40), rng.integers(0, 48, 40)
    boxes = np.stack([y0, x0, y0 + rng.integers(8, 48, 40), x0 + rng.integers(8, 48, 40)], axis=1)
    counts = {}
    for method in ("bilinear", "bicubic_clip"):
        maps = np.stack([upsample_map(g, (96, 96), method) for g in grids])
        counts[method] = int(grounding_metrics_batch(maps, boxes, delta=12)["pg_uncertain"].sum())
    assert counts["bilinear"] == 0 and counts["bicubic_clip"] > 0


def _gscorecam_loop(model, sample, topk):
    """gScoreCAM from its description: one autograd pass, then each top channel's masked image scored alone."""
    pixels = pixel_batch([sample.image], model.input_size, model.mean, model.std)
    text = model.tokenize([sample.phrase])
    kept = []
    ln = model.model.vision_model.encoder.layers[-1].layer_norm1
    handle = ln.register_forward_hook(lambda _m, _i, o: kept.append(o))
    try:
        out = model.model(pixel_values=pixels, **text)
    finally:
        handle.remove()
    acts = kept[0]  # the last block's first LayerNorm output
    (grad,) = torch.autograd.grad(out.logits_per_image[0, 0], acts)
    gh, gw = model.grid
    a, g = acts[0, 1:].detach(), grad[0, 1:]
    channels = a.shape[1]
    order = sorted(range(channels), key=lambda c: -float(g[:, c].mean()))[:topk]
    scores = [0.0] * channels
    for c in order:
        grid = a[:, c].reshape(1, 1, gh, gw)
        mask = torch.nn.functional.interpolate(grid, size=model.input_size, mode="bilinear", align_corners=True)
        mask = (mask - mask.min()) / (mask.max() - mask.min() + 1e-6)
        with torch.no_grad():
            scores[c] = float(model.model(pixel_values=pixels * mask, **text).logits_per_image[0, 0])
    total = sum(np.exp(s) for s in scores)
    cam = sum(np.exp(scores[c]) / total * a[:, c].reshape(gh, gw) for c in range(channels))
    return torch.relu(cam)


def test_gscorecam_matches_direct_loop_on_tiny_clip(tiny_clip_dir):
    model = ClipGScoreCAM(model_id=str(tiny_clip_dir), topk=5, score_batch_size=2)
    samples = _samples(2)
    cams = model._cams([s.image for s in samples], [s.phrase for s in samples])
    for k, s in enumerate(samples):
        torch.testing.assert_close(cams[k], _gscorecam_loop(model, s, 5), rtol=1e-4, atol=1e-6)
    maps = model.heatmaps(samples)
    assert [m.shape for m in maps] == [s.image.shape[:2] for s in samples]
    assert model.explainer_method == "gscorecam" and "top-5" in model.explainer_detail()
    every = ClipGScoreCAM(model_id=str(tiny_clip_dir), topk=1000)._cams([samples[0].image], [samples[0].phrase])
    assert every.shape == (1, *model.grid)  # topk above the channel count scores every channel


def test_blip_default_block_is_lavis_and_labelled(tiny_blip_dir):
    from countboard.grounding.models.blip_gradcam import DEFAULT_LAYER, cross_attention_block_label

    assert DEFAULT_LAYER == "text_encoder.encoder.layer.6.crossattention.self"
    model = BlipGradCAM(model_id=str(tiny_blip_dir), target_layer="text_encoder.encoder.layer.0.crossattention.self")
    assert model.explainer_method == "cross_attention_gradcam"
    assert "cross-attention block 0 (LAVIS default: 6)" in model.explainer_detail()
    assert cross_attention_block_label(DEFAULT_LAYER) == "cross-attention block 6 (LAVIS default)"


@pytest.mark.parametrize("module", ["countboard.grounding.models.gradcam", "countboard.grounding.models.clip_gradcam",
                                    "countboard.grounding.models.blip_gradcam", "countboard.grounding.models.baselines",
                                    "countboard.grounding.models.clip_gscorecam"])
def test_docstring_examples(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


def _cv2_inter_linear(a: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``cv2.resize(a, (W, H))`` (INTER_LINEAR) written out: source coordinate ``(d + 0.5) * scale - 0.5``, clamped
    to the first pixel below 0 and to the last above it, two taps per axis."""
    def taps(n_in: int, n_out: int):
        src = (np.arange(n_out) + 0.5) * n_in / n_out - 0.5
        src = np.clip(src, 0, None)
        i0 = np.minimum(np.floor(src).astype(int), n_in - 1)
        i1 = np.minimum(i0 + 1, n_in - 1)
        return i0, i1, src - i0

    (y0, y1, fy), (x0, x1, fx) = taps(a.shape[0], size[0]), taps(a.shape[1], size[1])
    rows = a[y0] * (1 - fy)[:, None] + a[y1] * fy[:, None]
    return rows[:, x0] * (1 - fx)[None, :] + rows[:, x1] * fx[None, :]


@pytest.mark.parametrize(("shape", "size"), [((7, 9), (30, 41)), ((14, 14), (56, 80)), ((12, 12), (5, 7))])
def test_bilinear_minmax_is_gscorecams_own_upsampling(shape, size):
    cam = np.random.default_rng(2).random(shape) * 4 - 1          # negative values: the ReLU matters
    up = upsample_map(cam, size, "bilinear_minmax")
    relu = np.maximum(cam, 0)
    first = (relu - relu.min()) / (1e-8 + (relu - relu.min()).max())   # normalize2D
    resized = np.maximum(_cv2_inter_linear(first, size), 0)
    want = (resized - resized.min()) / (1e-8 + (resized - resized.min()).max())
    assert up.shape == size and up.dtype == np.float32
    np.testing.assert_allclose(up, want, atol=1e-6)


def test_bicubic_clip_blur_is_getattmap_with_its_blur():
    from scipy import ndimage

    cam = np.random.default_rng(3).random((7, 9))
    size = (30, 41)
    blurred = ndimage.gaussian_filter(_zoom_reference(cam, size), 0.02 * 41)
    want = (blurred - blurred.min()) / (blurred - blurred.min()).max()
    np.testing.assert_allclose(upsample_map(cam, size, "bicubic_clip_blur"), want, atol=1e-6)


def test_gscorecam_default_upsampling_has_no_tied_maxima(tiny_clip_dir):
    from countboard.metrics.grounding import grounding_metrics_batch

    assert ClipGScoreCAM(model_id=str(tiny_clip_dir), topk=2).upsample == "bilinear_minmax"
    rng = np.random.default_rng(0)
    grids = rng.random((40, 12, 12)) ** 3
    y0, x0 = rng.integers(0, 48, 40), rng.integers(0, 48, 40)
    boxes = np.stack([y0, x0, y0 + rng.integers(8, 48, 40), x0 + rng.integers(8, 48, 40)], axis=1)
    maps = np.stack([upsample_map(g, (96, 96), "bilinear_minmax") for g in grids])
    assert int(grounding_metrics_batch(maps, boxes, delta=12)["pg_uncertain"].sum()) == 0


@pytest.mark.parametrize(("raw", "clean"), [
    ("The red circle.", "the red circle"), ("a  blue (small) square!", "a blue small square"),
    ('"quoted"; text: here~', "quoted text here"), ("one, two - three", "one, two - three"),
    (" ".join(["w"] * 60), " ".join(["w"] * 50)),
])
def test_pre_caption_as_lavis(raw, clean):
    from countboard.grounding.models.blip_gradcam import pre_caption

    assert pre_caption(raw) == clean


def test_blip_text_is_cleaned_and_starts_with_enc(tiny_blip_dir):
    from countboard.grounding.models.blip_gradcam import enc_token_id

    layer = "text_encoder.encoder.layer.0.crossattention.self"
    seen = []
    model = BlipGradCAM(model_id=str(tiny_blip_dir), target_layer=layer)
    plain = BlipGradCAM(model_id=str(tiny_blip_dir), target_layer=layer, clean_caption=False, enc_token=False)
    for m in (model, plain):
        m.model.text_encoder.register_forward_pre_hook(
            lambda mod, args, kwargs: seen.append(kwargs["input_ids"][:, 0].tolist()), with_kwargs=True)
    sample = _samples(1)[0]
    maps = model.heatmaps([GroundingSample("x", "The RED circle.", sample.box, image=sample.image)])
    cleaned = model.heatmaps([GroundingSample("y", "the red circle", sample.box, image=sample.image)])
    np.testing.assert_array_equal(maps[0], cleaned[0])            # the same text once cleaned
    plain.heatmaps([sample])
    enc = model.model.config.text_config.bos_token_id + 1           # LAVIS: [DEC] = bos, [ENC] after it
    assert seen == [[enc], [enc], [model.tokenizer.cls_token_id]]
    assert "pre_caption, [ENC] first" in model.explainer_detail() and "text: as given" in plain.explainer_detail()

    class WithEnc:
        def get_vocab(self):
            return {"[ENC]": 7}

    assert enc_token_id(WithEnc(), model.model.config.text_config) == 7
    config = type("C", (), {"bos_token_id": 10, "vocab_size": 11})()
    with pytest.raises(ConfigError, match=r"\[ENC\] token \(id 11\) is outside.*model.enc_token=false"):
        enc_token_id(model.tokenizer, config)
