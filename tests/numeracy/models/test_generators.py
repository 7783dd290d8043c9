"""Generators: the diffusers adapter on a tiny random Stable Diffusion pipeline, and the procedural renderer."""

from __future__ import annotations

import json
import string
from collections import Counter

import numpy as np
import pytest
import torch

from countboard.errors import ConfigError
from countboard.numeracy.datasets.prompts import Entity, PromptSpec, generate_prompts
from countboard.numeracy.models.diffusers_generator import DiffusersGenerator
from countboard.numeracy.models.procedural import NumeracyErrors, ProceduralGenerator, drawable_nouns
from countboard.numeracy.release import image_id


@pytest.fixture(scope="module")
def tiny_sd_dir(tmp_path_factory):
    """A randomly initialised Stable Diffusion pipeline (UNet, VAE, CLIP text encoder) saved like a hub folder."""
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    root = tmp_path_factory.mktemp("tiny_sd")
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for c in string.ascii_lowercase + string.digits + ".,":
        vocab[c] = len(vocab)
        vocab[c + "</w>"] = len(vocab)
    (root / "vocab.json").write_text(json.dumps(vocab))
    (root / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizer(str(root / "vocab.json"), str(root / "merges.txt"), pad_token="<|endoftext|>",
                              model_max_length=16)  # fmt: skip
    torch.manual_seed(0)
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(vocab),
            hidden_size=16,
            intermediate_size=32,
            num_attention_heads=2,
            num_hidden_layers=1,
            max_position_embeddings=16,
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=1,
        )  # fmt: skip
    )
    unet = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, block_out_channels=(8, 16), layers_per_block=1,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=16, attention_head_dim=2, norm_num_groups=4,
    )  # fmt: skip
    vae = AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(8, 8), layers_per_block=1,
        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2, norm_num_groups=4,
    )  # fmt: skip
    pipe = StableDiffusionPipeline(
        vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet, scheduler=DDIMScheduler(),
        safety_checker=None, feature_extractor=None, requires_safety_checker=False,
    )  # fmt: skip
    pipe.save_pretrained(root)
    return root


def _specs(n: int) -> list[PromptSpec]:
    return [PromptSpec(i, f"{i + 1} red circles.", "numeric_simple", (Entity("red circle", str(i + 1)),))
            for i in range(n)]  # fmt: skip


def test_diffusers_generator_loads_with_auto_pipeline_and_is_seeded(tiny_sd_dir):
    gen = DiffusersGenerator(str(tiny_sd_dir), dtype="float16", steps=2, guidance=1.0, height=16, width=16,
                             local_files_only=True, batch_size=2)  # fmt: skip
    specs = _specs(3)
    images = list(gen.generate(specs, seeds=[0, 1]))
    assert type(gen.pipe).__name__ == "StableDiffusionPipeline"
    assert gen.pipe.unet.dtype == torch.float32  # half precision falls back on CPU
    assert [image_id(im.prompt.prompt_id, im.seed) for im in images] == [image_id(p, s) for p in range(3) for s in (0, 1)]
    assert all(im.image.shape == (16, 16, 3) and im.image.dtype == np.uint8 for im in images)
    # Each image has its own generator: the same (prompt, seed) gives the same image in another batch.
    alone = gen.generate_batch([specs[1]], [1])[0].image
    np.testing.assert_array_equal(alone, images[3].image)
    assert not np.array_equal(images[2].image, images[3].image)
    assert all(im.drawn_counts is None for im in images)


def test_diffusers_generator_runs_under_bf16_autocast(tiny_sd_dir):
    from countboard.models.precision import numerics

    gen = DiffusersGenerator(str(tiny_sd_dir), dtype="float32", steps=2, guidance=1.0, height=16, width=16,
                             local_files_only=True, batch_size=2)  # fmt: skip
    with numerics("cpu", "bf16"):
        images = gen.generate_batch(_specs(2), [0, 1])
    assert all(im.image.shape == (16, 16, 3) and im.image.dtype == np.uint8 for im in images)


def test_diffusers_generator_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="dtype"):
        DiffusersGenerator("x", dtype="int8")
    with pytest.raises(ConfigError, match="steps"):
        DiffusersGenerator("x", steps=0)
    gen = DiffusersGenerator(str(tmp_path / "missing"), local_files_only=True)
    with pytest.raises(ConfigError, match="cannot load diffusers pipeline"):
        gen.generate_batch(_specs(1), [0])


def test_error_model_probabilities_match_simulation():
    errors = NumeracyErrors(accuracy=0.9, decay=0.1, floor=0.2, off_by_one=0.7, overshoot=0.6, omission=0.0)
    rng = np.random.default_rng(0)
    draws = [errors.draw_count(4, rng) for _ in range(20000)]
    counts = Counter(draws)
    assert counts[4] / len(draws) == pytest.approx(errors.p_exact(4), abs=0.01)
    misses = len(draws) - counts[4]
    assert (counts[3] + counts[5]) / misses == pytest.approx(0.7, abs=0.02)
    assert sum(v for k, v in counts.items() if k > 4) / misses == pytest.approx(0.6, abs=0.02)
    assert errors.p_exact(1) == 0.9 and errors.p_exact(20) == 0.2
    swapped = NumeracyErrors(accuracy=1.0, decay=0.0, omission=0.0, binding=1.0)
    assert swapped.draw_counts({"a": 2, "b": 5}, rng) == {"a": 5, "b": 2}
    with pytest.raises(ConfigError, match="omission"):
        NumeracyErrors(omission=1.5)


def test_procedural_generator_draws_what_it_reports():
    nouns = drawable_nouns()[:4]
    specs = generate_prompts(
        ["numeric_simple", "2-additive", "3-additive"], n_per_type=3, nouns=nouns, seed=0
    )
    gen = ProceduralGenerator(image_size=96, accuracy=0.6, decay=0.1, binding=0.3, batch_size=4)
    images = list(gen.generate(specs, seeds=[0, 1]))
    assert len(images) == 18
    assert any(im.drawn_counts != im.prompt.counts for im in images)
    assert any(im.drawn_counts == im.prompt.counts for im in images)
    for im in images:
        assert set(im.drawn_counts) == set(im.prompt.counts)
        assert im.image.shape == (96, 96, 3)
    again = gen.generate_batch([specs[4]], [1])[0]
    np.testing.assert_array_equal(again.image, images[9].image)
    assert again.drawn_counts == images[9].drawn_counts


def test_perfect_procedural_generator_draws_exact_counts():
    from countboard.counting.datasets.synthetic_shapes import SHAPE_CLASSES

    specs = generate_prompts(["2-additive"], n_per_type=3, nouns=drawable_nouns()[:3], seed=1)
    gen = ProceduralGenerator(image_size=128, accuracy=1.0, decay=0.0, omission=0.0, binding=0.0)
    for im in gen.generate(specs, seeds=[0]):
        assert im.drawn_counts == im.prompt.counts
        # Every drawn object shows its class colour somewhere in the image.
        for noun in im.prompt.counts:
            colour = np.array(SHAPE_CLASSES[noun + "s"][1])
            close = (np.abs(im.image.astype(int) - colour).sum(axis=2) < 60).sum()
            assert close > 0


def test_procedural_generator_rejects_undrawable_prompts():
    gen = ProceduralGenerator()
    with pytest.raises(ValueError, match="cannot draw 'koala'"):
        gen.generate_batch([PromptSpec(0, "2 koalas.", "numeric_simple", (Entity("koala", "2"),))], [0])
    with pytest.raises(ConfigError, match="error-model keys are accuracy"):
        ProceduralGenerator(acuracy=0.5)
    approx = generate_prompts(["approx-1-entity"], n_per_type=1)[0]
    with pytest.raises(ValueError, match="no exact counts"):
        gen.generate_batch([approx], [0])
