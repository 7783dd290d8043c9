"""model=vlm as a counter: parsed counts with raw answers in the records, unparsable answers as failed units,
the mosaic refused before the run, pointing answers as maps; on a tiny random LLaVA with forced outputs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from countboard.counting.datasets.praco_multiclass import SyntheticMulticlass
from countboard.counting.datasets.synthetic_shapes import SyntheticShapes
from countboard.counting.models.vlm import VlmCounter
from countboard.counting.tasks.classic import ClassicCounting
from countboard.counting.tasks.praco import PracoNegative
from countboard.counting.tasks.praco_multiclass import PracoMulticlass
from countboard.errors import ConfigError
from countboard.models.tiny_asked import build_tiny_vlm, force_answer
from countboard.numeracy.tasks.geckonum import _answered_questions
from countboard.preflight import _preflight_model
from countboard.results import RunContext

SMALL = dict(image_size=(48, 48), size_range=(5.0, 8.0), count_range=(1, 10),
             images_per_class={"train": 0, "val": 0, "test": 2}, multi_class_images=0, n_classes=3)


@pytest.fixture(scope="module")
def counter(tmp_path_factory):
    return VlmCounter(str(build_tiny_vlm(tmp_path_factory.mktemp("tiny_llava"), "llava")), max_new_tokens=1)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    return SyntheticShapes(tmp_path_factory.mktemp("vlm") / "shapes", **SMALL)


@pytest.fixture
def ctx(tmp_path):
    return RunContext(device="cpu", seed=0, batch_size=2, work_dir=tmp_path, progress=False)


@pytest.fixture
def forced(counter):
    handles = []

    def force(*words):
        vocab = counter.asked.tokenizer.get_vocab()
        handles.append(force_answer(counter.asked.model, [vocab[w] for w in words]))

    yield force
    for h in handles:
        h.remove()


def test_negative_records_hold_parsed_counts_and_raw_answers(counter, shapes, ctx, forced):
    forced("7")
    task = PracoNegative()
    units = task.units(counter, shapes, ctx)
    records = task.run_units(counter, shapes, units, ctx)
    assert all(r["counts"] == [7.0] * 3 and r["answers"] == ["7"] * 3 for r in records)
    metrics = task.summarize(pd.DataFrame(records), counter, shapes, ctx).metrics
    assert metrics["nmn"] == pytest.approx(np.mean([7 / r["gt"] for r in records]))


def test_an_unparsable_answer_fails_its_unit_with_the_raw_answer(counter, shapes, ctx, forced):
    forced("cats")
    task = PracoNegative()
    units = task.units(counter, shapes, ctx)
    records = task.run_units(counter, shapes, units, ctx)
    assert len(records) == len(units)
    assert all("error" in r and "unparsable answer 'cats'" in r["error"] for r in records)


def test_classic_keeps_an_unparsable_answer_for_the_conventions_out_of_the_count_metrics(counter, shapes, ctx,
                                                                                          forced):
    forced("cats")
    task = ClassicCounting()
    records = task.run_units(counter, shapes, task.units(counter, shapes, ctx), ctx)
    assert all("error" not in r and "count" not in r and r["answer"] == "cats"
               and "unparsable answer 'cats'" in r["parse_error"] for r in records)
    metrics = task.summarize(pd.DataFrame(records), counter, shapes, ctx).metrics
    assert metrics["n_images"] == 0 and metrics["n_unparsed_answers"] == metrics["n_answers"] == len(records)
    assert np.isnan(metrics["mae"]) and metrics["smape"] == 100.0 and metrics["off_by_one_acc"] == 0.0
    assert all(metrics[k] == 0.0 for k in metrics if k.startswith("conv_") and "__" not in k)


def test_classic_reports_the_parsed_and_the_strict_convention(counter, shapes, ctx, forced):
    forced("three")
    task = ClassicCounting()
    records = task.run_units(counter, shapes, task.units(counter, shapes, ctx), ctx)
    assert all(r["count"] == 3.0 and r["answer"] == "three" for r in records)
    gt = np.array([r["gt"] for r in records])
    metrics = task.summarize(pd.DataFrame(records), counter, shapes, ctx).metrics
    assert metrics["mae"] == pytest.approx(np.abs(3 - gt).mean())
    assert metrics["answer_exact_acc"] == pytest.approx(100 * (gt == 3).mean())
    assert metrics["lmms_countbench_acc"] == pytest.approx(100 * (gt == 3).mean())  # "three" maps to "3"
    # the same answers under every convention: "three" is 3 for lmms-eval's countbench, VLMEvalKit's TallyQA and
    # ours, and never for the digit-only rules
    for key in ("conv_lmms_eval_countbench", "conv_vlmevalkit_tallyqa", "conv_countboard"):
        assert metrics[key] == pytest.approx(100 * (gt == 3).mean())
    for key in ("conv_lmms_eval_countbenchqa", "conv_lmms_eval_pixmo_count", "conv_vlmevalkit_countbenchqa"):
        assert metrics[key] == 0.0


def test_multiclass_runs_on_counts_without_localized_metrics(counter, tmp_path, ctx, forced):
    forced("2")
    data = SyntheticMulticlass(tmp_path / "mc", n_images=3, n_classes=3)
    task = PracoMulticlass()
    records = task.run_units(counter, data, task.units(counter, data, ctx), ctx)
    assert all(r["counts"] == [2.0] * 3 and r["answers"] == ["2"] * 3 and r["localized_sums"] == []
               for r in records)
    metrics = task.summarize(pd.DataFrame(records), counter, data, ctx).metrics
    assert metrics["mc_mnp_macro"] == 2.0 and not any("localized" in k for k in metrics)


def test_pointing_answers_count_points_and_make_unit_mass_maps(counter, shapes, monkeypatch):
    monkeypatch.setattr(counter, "localising", True)
    monkeypatch.setattr(counter.asked, "ask", lambda images, questions: [
        '<points x1="10" y1="10" x2="90" y2="90" alt="x">x</points>'] * len(questions))
    item = shapes.load(shapes.image_ids[0])
    (dmap,) = counter.decode([item], ["circles"])
    assert dmap.shape == item.size and dmap.sum() == 2.0 and dmap[4, 4] == 1.0
    assert counter.decode_counts([item], ["circles"]).tolist() == [2.0]


def test_geckonum_judge_keeps_raw_answers_and_fails_unparsable_ones(counter, shapes, forced):
    forced("cats")
    item = shapes.load(shapes.image_ids[0])
    counts, errors, answers = _answered_questions(counter, [item, item], ["dogs", "cats"], ["u0", "u0"])
    assert np.isnan(counts).all() and answers == ["cats", "cats"] and "unparsable answer 'cats'" in errors["u0"]


def test_the_mosaic_refuses_a_model_that_answers_one_number_before_the_run(compose_cfg, monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))  # no weights: the task's refusal comes first
    cfg = compose_cfg("model=vlm_llava_1_5_7b", "task=praco_mosaic")
    with pytest.raises(ConfigError, match="answers one number per question") as err:
        _preflight_model(cfg)
    assert "\n" not in str(err.value)
    for fits in (("task=praco_negative",), ("task=praco_mosaic", "model.answers=points")):  # then the weights
        with pytest.raises(ConfigError, match="llava-1.5-7b-hf': it is not in the Hugging Face cache"):
            _preflight_model(compose_cfg("model=vlm_llava_1_5_7b", *fits))
    with pytest.raises(ConfigError, match="model.model_id is not set"):
        _preflight_model(compose_cfg("model=vlm", "task=classic"))
    # the same model as a task's node: its settings are named by the task's key
    from countboard.models.base import preflight_node

    node = {"_target_": "countboard.counting.models.vlm.VlmCounter", "name": "vlm", "model_id": None}
    with pytest.raises(ConfigError, match=r"^task.vlm.model_id is not set: .* \(model@task.vlm=vlm_llava_1_5_7b"):
        preflight_node(node, "task.vlm")
    with pytest.raises(ConfigError, match=r"^task.vlm.question='How many\?' has no \{noun\}"):
        preflight_node(node | {"model_id": "org/vlm", "question": "How many?"}, "task.vlm")


def test_an_open_question_is_judged_by_the_class_the_answer_names(counter, shapes, monkeypatch):
    """answers=named: the BCC study's judge ("What animal is shown and how many are there?")."""
    monkeypatch.setattr(counter, "answers", "named")
    monkeypatch.setattr(counter, "question", "What animal is shown and how many are there?")
    asked = []
    monkeypatch.setattr(counter.asked, "ask", lambda images, questions: asked.extend(questions) or [
        "There are two dogs.", "There are two dogs.", "The image shows a cat."])
    item = shapes.load(shapes.image_ids[0])
    counts = counter.decode_counts([item] * 3, ["dogs", "cats", "cats"])
    assert counts.tolist() == [2.0, 0.0, 1.0]
    assert asked == ["What animal is shown and how many are there?"] * 3


def test_a_question_without_its_noun_needs_the_named_rule():
    from countboard.counting.models.vlm import check_settings

    with pytest.raises(ConfigError, match="has no \\{noun\\}.*answers=named"):
        check_settings("What animal is shown and how many are there?", "count", "m")
    check_settings("What animal is shown and how many are there?", "named", "m")
