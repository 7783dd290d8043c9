"""geckonum_autometrics: CLIPScore of a tiny random CLIP, the counter score, DSG and TIFA asked to a tiny random VLM,
Table 3 on a fake release."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from countboard.errors import ConfigError
from countboard.models.tiny_asked import build_tiny_vlm, force_answer
from countboard.numeracy.autometrics import ClipScore, CounterScore
from countboard.numeracy.datasets.prompts import GeckoNumPromptSet
from countboard.numeracy.models.released import ReleasedImages
from countboard.numeracy.tasks.autometrics import GeckoNumAutoMetrics, check_metrics
from countboard.results import RunContext
from tests.fixtures.geckonum_images import make_release
from tests.fixtures.tiny_models import tiny_clip_tokenizer
from tests.numeracy.test_release_images import PIXEL, PixelCounter


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    path = tmp_path_factory.mktemp("tiny_clip")
    torch.manual_seed(0)
    tok = tiny_clip_tokenizer()
    config = CLIPConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, max_position_embeddings=77, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id),
        vision_config=dict(image_size=32, patch_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=2),
        projection_dim=16)
    CLIPModel(config).save_pretrained(path)
    CLIPProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": 32},
                                                     crop_size={"height": 32, "width": 32}),
                  tokenizer=tok).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return make_release(tmp_path_factory.mktemp("release"), generators=("muse_b",), n_prompts=40)


def test_clipscore_is_w_times_the_positive_cosine(tiny_clip, release):
    from transformers import CLIPModel, CLIPProcessor

    root, _ = release
    specs = GeckoNumPromptSet(str(root)).specs[:6]
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 255, (20, 24, 3), dtype=np.uint8) for _ in specs]
    got = ClipScore(str(tiny_clip), w=2.5).score(images, specs)
    model, proc = CLIPModel.from_pretrained(tiny_clip), CLIPProcessor.from_pretrained(tiny_clip)
    with torch.no_grad():
        for k, (im, spec) in enumerate(zip(images, specs, strict=True)):
            inp = proc(text=[spec.prompt], images=[im], return_tensors="pt", padding=True)
            v = model.visual_projection(model.vision_model(pixel_values=inp["pixel_values"]).pooler_output)[0]
            c = model.text_projection(model.text_model(input_ids=inp["input_ids"],
                                                       attention_mask=inp["attention_mask"]).pooler_output)[0]
            cos = float(v @ c / (v.norm() * c.norm()))
            assert got[k] == pytest.approx(2.5 * max(cos, 0.0), abs=1e-5)


def test_counter_score_is_the_share_of_questions_counted_right(release):
    root, _ = release
    spec = next(s for s in GeckoNumPromptSet(str(root)).specs if s.prompt_type == "2-additive")
    image = np.full((8, 8, 3), 1, np.uint8)  # PixelCounter counts 2 here
    targets = [q.target for q in spec.count_questions()]
    got = CounterScore(PixelCounter()).score([image], [spec])
    assert got[0] == pytest.approx(np.mean([t == 2 for t in targets]))


def test_table3_on_released_images(tiny_clip, release, tmp_path):
    root, image_dir = release
    ctx = RunContext(device="cpu", seed=0, batch_size=16, work_dir=tmp_path)
    gen = ReleasedImages("muse_b", str(image_dir))
    prompts = GeckoNumPromptSet(str(root))
    task = GeckoNumAutoMetrics(PIXEL, human_labels=str(root), human_generator="muse_b", clip_model_id=str(tiny_clip))
    every = task.units(gen, prompts, ctx)
    units = [u for u in every if u in gen.release.files]
    absent = next(u for u in every if u not in gen.release.files)
    records = pd.DataFrame(task.run_units(gen, prompts, units + [absent], ctx))
    assert records["error"].notna().sum() == 1
    ok = records[records["error"].isna()].drop(columns="error").reset_index(drop=True)
    result = task.summarize(ok, gen, prompts, ctx)
    table = result.tables["table3"].set_index("metric")
    assert list(table.index) == ["clipscore", "counter"]
    n_correct = table.loc["clipscore", "n_correct"]
    assert 0 < n_correct < len(ok) and table.loc["clipscore", "n_incorrect"] == len(ok) - n_correct
    for key in ("clipscore", "counter"):
        row = table.loc[key]
        assert row["significant"] == (row["p_value"] < 0.05)
        assert row["auroc_low"] <= row["auroc"] <= row["auroc_high"]
        assert result.metrics[f"autometrics_{key}_auroc"] == row["auroc"]
    assert "score_distributions" in result.figures


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory):
    return build_tiny_vlm(tmp_path_factory.mktemp("tiny_vlm"), "llava", words=("yes", "no"))


def vlm_node(path) -> dict:
    return {"_target_": "countboard.counting.models.vlm.VlmCounter", "name": "tiny_vlm", "kind": "counter",
            "model_id": str(path), "max_new_tokens": 1}


def test_metrics_are_checked_before_anything_is_built(tiny_vlm, tmp_path, monkeypatch):
    assert check_metrics(["dsg", "counter", "dsg"], vlm_node(tiny_vlm)) == ("dsg", "counter")
    with pytest.raises(ConfigError, match="choose one or more of clipscore, tifa, dsg, counter"):
        check_metrics(["vnli"], None)
    with pytest.raises(ConfigError, match="choose one or more"):
        check_metrics([], None)
    with pytest.raises(ConfigError, match=r"tifa, which ask a VLM, but task.vlm.model_id is not set"):
        check_metrics(["counter", "tifa"], vlm_node(tiny_vlm) | {"model_id": None})
    with pytest.raises(ConfigError, match=r"dsg, which ask a VLM, but task.vlm \(pixel\) is not a model asked in"):
        GeckoNumAutoMetrics.preflight({"metrics": ["dsg"], "vlm": PIXEL})
    # CLIPScore's checkpoint is checked too: not cached while downloads are off, one line naming its key
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ConfigError, match=r"CLIPScore's checkpoint task.clip_model_id 'openai/clip-vit-large-patch14'"
                                          r": it is not in the Hugging Face cache"):
        GeckoNumAutoMetrics.preflight({"metrics": ["clipscore"], "vlm": PIXEL})
    (tmp_path / "clip").mkdir()
    (tmp_path / "clip" / "config.json").write_text("{}")
    GeckoNumAutoMetrics.preflight({"metrics": ["clipscore"], "vlm": PIXEL,  # no VLM needed
                                   "clip_model_id": str(tmp_path / "clip")})
    # the counter's own check, only when the counter score is asked for, named by its key
    owl = {"_target_": "countboard.counting.models.owlv2.Owlv2Counter", "name": "owlv2", "model_id": "org/owl"}
    with pytest.raises(ConfigError, match=r"cannot load task.evaluator=owlv2 'org/owl': it is not in the Hugging "
                                          r"Face cache .* point task.evaluator.model_id to a local folder"):
        GeckoNumAutoMetrics.preflight({"metrics": ["counter"], "vlm": PIXEL, "evaluator": owl})
    GeckoNumAutoMetrics.preflight({"metrics": ["clipscore"], "vlm": PIXEL, "evaluator": owl,
                                   "clip_model_id": str(tmp_path / "clip")})


@pytest.mark.slow
def test_a_sweep_asking_dsg_without_a_vlm_fails_in_one_line_before_any_run(tmp_path):
    from tests.conftest import run_sweep

    root, image_dir = make_release(tmp_path, generators=("muse_b",), n_prompts=4)
    proc = run_sweep(["model=geckonum_release", "model.name=muse_b", f"model.image_dir={image_dir}",
                      f"dataset.root={root}", "task=geckonum_autometrics", "model@task.vlm=vlm",
                      "task.metrics=[dsg]"], tmp_path, check=False)
    assert proc.returncode != 0
    assert "task.vlm.model_id is not set" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "mlruns").exists()


def _dsg_tifa_run(release, tiny_vlm, tmp_path, words):
    root, image_dir = release
    ctx = RunContext(device="cpu", seed=0, batch_size=8, work_dir=tmp_path)
    gen = ReleasedImages("muse_b", str(image_dir))
    prompts = GeckoNumPromptSet(str(root))
    task = GeckoNumAutoMetrics(PIXEL, human_labels=str(root), human_generator="muse_b", vlm=vlm_node(tiny_vlm),
                               metrics=["counter", "dsg", "tifa"])
    units = [u for u in task.units(gen, prompts, ctx) if u in gen.release.files][:40]
    adapter, _ = task.asked("cpu", [])
    vocab = adapter.tokenizer.get_vocab()
    handle = force_answer(adapter.model, [vocab[w] for w in words])
    try:
        records = pd.DataFrame(task.run_units(gen, prompts, units, ctx))
    finally:
        handle.remove()
    return task, records, task.summarize(records, gen, prompts, ctx)


def test_dsg_and_tifa_in_table3_with_the_answers_of_each_question(release, tiny_vlm, tmp_path):
    _, records, result = _dsg_tifa_run(release, tiny_vlm, tmp_path, ["yes"])
    assert "error" not in records or records["error"].isna().all()
    assert (records["score_dsg"] == 1.0).all()  # every question answered yes
    table = result.tables["table3"].set_index("metric")
    assert list(table.index) == ["tifa", "dsg", "counter"]  # Table 3's order, the metrics that ran
    assert table.loc["dsg", "n"] == table.loc["counter", "n"] == result.metrics["autometrics_n_images"]
    assert result.metrics["autometrics_dsg_auroc"] == 0.5  # one score for all: no discrimination
    answers = result.tables["vlm_answers"]
    assert set(answers["metric"]) == {"dsg", "tifa"} and (answers["answer"] == "yes").all()
    tifa = answers[answers["metric"] == "tifa"]
    counts = tifa[tifa["kind"] == "count"]
    assert counts["parsed"].isna().all() and counts["counted"].isna().all()  # "yes" is no count: left out
    assert (tifa.loc[tifa["kind"] == "yes_no", "counted"] == 1.0).all()
    assert set(answers["unit_id"]) == set(result.tables["scores"]["unit_id"])
    assert "vlm_answers" not in result.tables["scores"]


def test_unparsable_answers_leave_the_metric_nan_and_unlogged(release, tiny_vlm, tmp_path):
    _, records, result = _dsg_tifa_run(release, tiny_vlm, tmp_path, ["none"])  # "none": no yes, no count read 0
    assert records["score_dsg"].isna().all()
    table = result.tables["table3"].set_index("metric")
    assert table.loc["dsg", "n"] == 0 and "autometrics_dsg_auroc" not in result.metrics
    assert result.metrics["autometrics_counter_n"] == result.metrics["autometrics_n_images"]
    answers = result.tables["vlm_answers"]
    assert (answers.loc[answers["metric"] == "dsg", "error"] == "neither yes nor no in the answer").all()


@pytest.mark.slow
def test_autometrics_sweep_of_two_release_generators(tiny_clip, tmp_path):
    from tests.conftest import run_sweep, store_runs

    root, image_dir = make_release(tmp_path, n_prompts=40)
    run_sweep(["-m", "model=geckonum_release", "model.name=dalle_3,muse_b", f"model.image_dir={image_dir}",
               "dataset=geckonum_prompts", f"dataset.root={root}", "dataset.max_prompts=30",
               "task=geckonum_autometrics", "model@task.evaluator=class_blind", f"task.human_labels={root}",
               f"task.clip_model_id={tiny_clip}"], tmp_path)
    runs = store_runs(tmp_path / "mlruns")
    cells = runs[runs["tags.task"] == "geckonum_autometrics"]
    assert len(cells) == 2 and set(cells["status"]) == {"FINISHED"}
    assert cells["metrics.autometrics_clipscore_auroc"].between(0, 1).all()
    assert cells["metrics.autometrics_n_images"].gt(0).all()


@pytest.mark.slow
def test_dsg_tifa_sweep_logs_the_auroc_of_each(tmp_path):
    from tests.conftest import run_sweep, store_runs

    root, image_dir = make_release(tmp_path, generators=("muse_b",), n_prompts=40)
    vlm = build_tiny_vlm(tmp_path / "vlm", "llava", words=("yes", "no"), answers=("yes", "no", "1", "2", "3"))
    run_sweep(["model=geckonum_release", "model.name=muse_b", f"model.image_dir={image_dir}",
               "dataset=geckonum_prompts", f"dataset.root={root}", "dataset.max_prompts=30",
               "task=geckonum_autometrics", "model@task.evaluator=class_blind", "model@task.vlm=vlm",
               f"task.vlm.model_id={vlm}", "task.vlm.max_new_tokens=1", f"task.human_labels={root}",
               "task.metrics=[counter,dsg,tifa]"], tmp_path)
    runs = store_runs(tmp_path / "mlruns")
    cell = runs[runs["tags.task"] == "geckonum_autometrics"]
    assert len(cell) == 1 and cell["status"].iloc[0] == "FINISHED"
    for key in ("counter", "dsg", "tifa"):
        n = cell[f"metrics.autometrics_{key}_n"].iloc[0]
        assert 0 < n <= cell["metrics.autometrics_n_images"].iloc[0]
        assert 0 <= cell[f"metrics.autometrics_{key}_auroc"].iloc[0] <= 1
    assert "metrics.autometrics_clipscore_auroc" not in cell
