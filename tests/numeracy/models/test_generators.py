"""Generators: the diffusers adapter on a tiny random Stable Diffusion pipeline, and the procedural renderer."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from countboard.errors import ConfigError
from countboard.numeracy.datasets.prompts import Entity, PromptSpec, generate_prompts
from countboard.numeracy.models.diffusers_generator import DiffusersGenerator
from countboard.numeracy.models.procedural import NumeracyErrors, ProceduralGenerator, drawable_nouns
from countboard.numeracy.release import image_id
from tests.fixtures.tiny_models import build_tiny_sd


@pytest.fixture(scope="module")
def tiny_sd_dir(tmp_path_factory):
    """A randomly initialised Stable Diffusion pipeline (UNet, VAE, CLIP text encoder) saved like a hub folder."""
    return build_tiny_sd(tmp_path_factory.mktemp("tiny_sd"))


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
    # the same, before any run exists: a folder without the pipeline, a hub id not cached while downloads are off
    with pytest.raises(ConfigError, match="it has no model_index.json"):
        DiffusersGenerator.preflight({"hub_id": str(tmp_path / "missing")})
    with pytest.raises(ConfigError, match="not in the Hugging Face cache"):
        DiffusersGenerator.preflight({"hub_id": "nobody/no-such-pipeline", "local_files_only": True})


def test_diffusers_generator_preflight_accepts_a_saved_pipeline(tiny_sd_dir):
    DiffusersGenerator.preflight({"hub_id": str(tiny_sd_dir), "local_files_only": True})


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


def test_images_are_rounded_on_the_device_as_the_pipelines_numpy_output_was(tiny_sd_dir):
    gen = DiffusersGenerator(str(tiny_sd_dir), dtype="float32", steps=2, guidance=3.0, height=16, width=16,
                             local_files_only=True, batch_size=3)  # fmt: skip
    specs, seeds = _specs(3), [4, 5, 6]
    got = np.stack([im.image for im in gen.generate_batch(specs, seeds)])
    with torch.inference_mode():
        out = gen.pipe(prompt=[s.prompt for s in specs], num_inference_steps=2, guidance_scale=3.0, height=16,
                       width=16, generator=[torch.Generator().manual_seed(s) for s in seeds], output_type="np")
    want = np.clip(np.asarray(out.images) * 255.0 + 0.5, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(got, want)


def generate_into(sd_dir: str, image_dir: str, n: int) -> list[str]:
    """``GeckoNumAutoEval.images`` of ``n`` prompts (seed 0) into ``image_dir``; the ids it generated."""
    from countboard.numeracy.datasets.prompts import PromptSet
    from countboard.numeracy.tasks.geckonum import GeckoNumAutoEval

    made = []

    class Spy(DiffusersGenerator):
        def generate_batch(self, prompts, seeds):
            made.extend(image_id(p.prompt_id, s) for p, s in zip(prompts, seeds, strict=True))
            return super().generate_batch(prompts, seeds)

    gen = Spy(sd_dir, dtype="float32", steps=2, guidance=1.0, height=16, width=16, local_files_only=True,
              batch_size=2)
    task = GeckoNumAutoEval(evaluator={"_target_": "countboard.counting.models.oracle.OracleCounter"}, seeds=[0],
                            image_dir=image_dir)
    task.images(gen, PromptSet(_specs(n)), [image_id(i, 0) for i in range(n)])
    return made


@pytest.mark.slow
def test_a_killed_generation_resumes_at_the_next_image(tiny_sd_dir, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from PIL import Image

    repo = Path(__file__).resolve().parents[3]
    code = (f"from tests.numeracy.models.test_generators import generate_into; "
            f"generate_into({str(tiny_sd_dir)!r}, {str(tmp_path / 'images')!r}, 6)")
    env = {**os.environ, "COUNTBOARD_FAILPOINT": "image_write", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == -9, proc.stderr[-3000:]
    # killed at the first image written: the writer pool may have finished the other image of that batch too,
    # never one of a later batch (batch_size=2), and every file there is whole
    saved = sorted(p.stem for p in (tmp_path / "images").glob("*.png"))
    assert image_id(0, 0) in saved or image_id(1, 0) in saved
    assert set(saved) <= {image_id(0, 0), image_id(1, 0)}
    made = generate_into(str(tiny_sd_dir), str(tmp_path / "images"), 6)
    assert made == [image_id(i, 0) for i in range(6) if image_id(i, 0) not in saved]  # saved ones read back
    fresh = generate_into(str(tiny_sd_dir), str(tmp_path / "fresh"), 6)
    assert len(fresh) == 6
    for i in range(6):  # the resumed batches are [1, 2], [3, 4], [5], the fresh ones [0, 1], [2, 3], [4, 5]: the
        name = f"{image_id(i, 0)}.png"  # batched math may round a pixel one level apart, never more
        resumed = np.asarray(Image.open(tmp_path / "images" / name)).astype(int)
        assert np.abs(resumed - np.asarray(Image.open(tmp_path / "fresh" / name))).max() <= 1
    assert not list((tmp_path / "images").glob(".*.tmp"))
