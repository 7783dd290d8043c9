"""geckonum_autoeval: records, CC/BCC report, simulated and imported human labels, and an offline sweep."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from countboard.errors import ConfigError
from countboard.numeracy.annotation import LabelStore, annotation_items
from countboard.numeracy.datasets.prompts import Entity, PromptSet, PromptSpec, TemplatePromptSet
from countboard.numeracy.models.procedural import ProceduralGenerator
from countboard.numeracy.tasks.geckonum import (
    GeckoNumAutoEval,
    bcc_cells,
    bcc_report,
    sample_units,
    simulate_human,
)
from countboard.results import RunContext

ORACLE = {"_target_": "countboard.counting.models.oracle.OracleCounter", "name": "oracle", "kind": "counter"}


@pytest.fixture
def ctx(tmp_path) -> RunContext:
    return RunContext(device="cpu", seed=0, batch_size=8, work_dir=tmp_path)


@pytest.fixture(scope="module")
def prompt_set() -> TemplatePromptSet:
    return TemplatePromptSet(
        types=["numeric_simple", "2-additive"], n_per_type=15, shape_classes=True, n_classes=5
    )


def test_sample_units_is_seeded_subset():
    ids = [f"u{i}" for i in range(50)]
    a = sample_units(ids, 10, seed=0, salt=1)
    assert len(a) == 10 and a == sample_units(ids, 10, seed=0, salt=1)
    assert a != sample_units(ids, 10, seed=1, salt=1)
    assert a == [u for u in ids if u in set(a)]
    assert sample_units(ids[::-1], 10, seed=0, salt=1) == a[::-1]


def test_simulated_person_miscounts_at_the_given_rate():
    rng = np.random.default_rng(0)
    right = [simulate_human([3, 2], [3, 2], 0.1, rng) for _ in range(5000)]
    assert np.mean(right) == pytest.approx(0.9**2, abs=0.02)
    assert simulate_human([3], [4], 0.0, rng) == 0


def test_run_units_records_with_a_perfect_evaluator(prompt_set, ctx):
    task = GeckoNumAutoEval(ORACLE, seeds=[0, 1], n_human=10, n_annotate=5)
    gen = ProceduralGenerator(image_size=96, accuracy=0.7, decay=0.1, batch_size=7)
    units = task.units(gen, prompt_set, ctx)
    assert len(units) == 60 and units[:2] == ["geckonum_00000_0", "geckonum_00000_1"]
    records = pd.DataFrame(task.run_units(gen, prompt_set, units, ctx))
    assert (records["cc_success"] == records["true_success"]).all()
    assert 0 < records["cc_success"].mean() < 1
    row = records.iloc[20]
    assert json.loads(row["evaluator_counts"]) == [float(x) for x in json.loads(row["drawn"])]
    assert len(json.loads(row["targets"])) == len(prompt_set.by_id[row["prompt_id"]].entities)


def test_undrawable_prompt_fails_only_its_unit(ctx):
    specs = [PromptSpec(0, "2 red circles.", "numeric_simple", (Entity("red circle", "2"),)),
             PromptSpec(1, "2 koalas.", "numeric_simple", (Entity("koala", "2"),))]  # fmt: skip
    task = GeckoNumAutoEval(ORACLE, seeds=[0])
    records = task.run_units(ProceduralGenerator(image_size=64), PromptSet(specs), ["geckonum_00000_0",
                                                                                   "geckonum_00001_0"], ctx)  # fmt: skip
    assert "error" not in records[0] and records[0]["cc_success"] in (0, 1)
    assert records[1]["unit_id"] == "geckonum_00001_0" and "cannot draw 'koala'" in records[1]["error"]


def _units(n: int, p_true: float, tpr: float, fpr: float, n_labelled: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    truth = (rng.random(n) < p_true).astype(int)
    decision = np.where(truth == 1, rng.random(n) < tpr, rng.random(n) < fpr).astype(int)
    labelled = rng.choice(n, n_labelled, replace=False)
    human = np.full(n, np.nan)
    human[labelled] = truth[labelled]
    types = np.where(np.arange(n) % 2 == 0, "numeric_simple", "2-additive")
    return pd.DataFrame({"cc_success": decision, "human": human, "prompt_type": types, "true_success": truth})


@pytest.mark.filterwarnings("ignore::countboard.quantify.BCCWarning")
def test_bcc_corrects_a_biased_evaluator():
    units = _units(3000, p_true=0.3, tpr=0.9, fpr=0.3, n_labelled=300)
    metrics, table = bcc_report(units, draws=300, chains=2)
    truth = units["true_success"].mean()
    assert metrics["autoeval_cc_rate"] == pytest.approx(units["cc_success"].mean())
    assert abs(metrics["autoeval_cc_rate"] - truth) > 0.12
    assert abs(metrics["autoeval_bcc_rate"] - truth) < 0.05
    assert metrics["autoeval_bcc_rate_low"] < truth < metrics["autoeval_bcc_rate_high"]
    assert metrics["autoeval_n_labelled"] == 300 and metrics["autoeval_n_images"] == 3000
    lab = units.dropna(subset=["human"])
    assert metrics["autoeval_evaluator_tpr"] == pytest.approx(lab.loc[lab.human == 1, "cc_success"].mean())
    assert metrics["autoeval_evaluator_fpr"] == pytest.approx(lab.loc[lab.human == 0, "cc_success"].mean())
    assert table["prompt_type"].tolist() == ["2-additive", "numeric_simple"]
    for _, row in table.iterrows():
        part = units[units.prompt_type == row["prompt_type"]]
        assert row["cc_rate"] == pytest.approx(part["cc_success"].mean())
        assert row["bcc_low"] < row["bcc_rate"] < row["bcc_high"]


def test_bcc_report_when_every_image_is_labelled():
    units = _units(80, p_true=0.5, tpr=0.8, fpr=0.1, n_labelled=80)
    metrics, _ = bcc_report(units, draws=2000, chains=2)
    s, b = int(units["human"].sum()), 80
    assert metrics["autoeval_bcc_rate"] == pytest.approx((s + 1) / (b + 2), abs=0.01)



@pytest.mark.filterwarnings("ignore::countboard.quantify.BCCWarning")
def test_cells_without_human_successes_are_fitted_and_flagged():
    units = _units(200, p_true=0.0, tpr=0.8, fpr=0.1, n_labelled=40)
    units.loc[units.index[-1], ["human", "true_success"]] = [np.nan, 1]  # the only success has no human label
    cells = bcc_cells(units, draws=100, chains=1)
    assert cells["prompt_type"].tolist() == ["all", "2-additive", "numeric_simple"]
    assert cells["no_human_positives"].all()
    assert ((cells["bcc_alpha"] > 0) & (cells["bcc_beta"] > 0)).all()
    mean = cells["bcc_alpha"] / (cells["bcc_alpha"] + cells["bcc_beta"])
    assert np.allclose(mean, cells["bcc_rate"], atol=1e-9)


def test_all_labelled_cell_has_the_human_beta():
    units = _units(80, p_true=0.5, tpr=0.8, fpr=0.1, n_labelled=80)
    cells = bcc_cells(units, draws=100, chains=1).set_index("prompt_type")
    s, b = int(units["human"].sum()), 80
    assert (cells.loc["all", "bcc_alpha"], cells.loc["all", "bcc_beta"]) == (s + 1, b - s + 1)
    assert not cells["no_human_positives"].any()

def test_simulated_labels_need_known_counts(prompt_set, ctx):
    task = GeckoNumAutoEval(ORACLE)
    units = pd.DataFrame({"unit_id": ["geckonum_00000_0"], "targets": ["[1]"], "cc_success": [1]})
    with pytest.raises(ConfigError, match="human_labels=simulated needs a generator"):
        task.human_column(units, prompt_set)
    with pytest.raises(ConfigError, match="_target_"):
        GeckoNumAutoEval({"name": "x"})


@pytest.mark.filterwarnings("ignore::countboard.quantify.BCCWarning")
def test_summary_with_labels_from_the_annotation_store(prompt_set, ctx, tmp_path):
    gen = ProceduralGenerator(image_size=96, accuracy=0.7, decay=0.1)
    task = GeckoNumAutoEval(ORACLE, seeds=[0, 1], n_human=100, n_annotate=20, bcc_draws=200)
    units = task.units(gen, prompt_set, ctx)
    records = pd.DataFrame(task.run_units(gen, prompt_set, units, ctx))
    simulated = task.summarize(records, gen, prompt_set, ctx)
    assert simulated.tags == {"evaluator": "oracle", "autoeval_unit": "question"}
    assert {"autoeval_cc_rate", "autoeval_bcc_rate", "autoeval_true_rate"} <= set(simulated.metrics)
    sample = simulated.tables["annotation_sample"]
    assert len(sample) == 20 and Path(simulated.files["annotation_images.zip"]).is_file()
    # A person labels the sample with the drawn counts; the export is read back as the human labels.
    store = LabelStore(tmp_path / "labels.duckdb")
    drawn = dict(zip(records["unit_id"], records["drawn"].map(json.loads), strict=True))
    for _, item in annotation_items(sample, n=None).iterrows():
        store.add("run1", "procedural_x", item, "ann1", str(drawn[item["image_id"]][item["question_id"]]))
    folder = tmp_path / "export"
    store.export("run1", folder)
    imported = GeckoNumAutoEval(ORACLE, seeds=[0, 1], n_human=100, human_labels=str(folder),
                                human_generator="procedural_x", bcc_draws=200, n_annotate=0)  # fmt: skip
    human = imported.human_column(records.sort_values("unit_id").reset_index(drop=True), prompt_set)
    assert np.isfinite(human).sum() == 20
    labelled = records.sort_values("unit_id").reset_index(drop=True)[np.isfinite(human)]
    np.testing.assert_array_equal(human[np.isfinite(human)], labelled["true_success"].to_numpy())
    result = imported.summarize(records, gen, prompt_set, ctx)
    assert result.metrics["autoeval_n_labelled_images"] == 20
    n_questions = labelled["targets"].map(lambda t: len(json.loads(t))).sum()
    assert result.metrics["autoeval_n_labelled"] == n_questions > 20
    assert result.metrics["autoeval_evaluator_fpr"] == 0.0


def _random_shapecount_checkpoint(path: Path) -> Path:
    """A shapecount checkpoint with random weights and random prompt embeddings (no training, no MiniLM)."""
    import torch

    from countboard.counting.datasets.synthetic_shapes import SHAPE_CLASSES
    from countboard.counting.models.shapecount import ShapeCountArch, ShapeCountNet, save_checkpoint

    torch.manual_seed(0)
    arch = ShapeCountArch()
    rng = np.random.default_rng(0)
    table = {c: rng.standard_normal(arch.text_dim).astype(np.float32) for c in SHAPE_CLASSES}
    return save_checkpoint(path, ShapeCountNet(arch), "aware", table, {"note": "random weights for tests"})


@pytest.mark.slow
def test_offline_sweep_logs_cc_and_bcc_per_generator(tmp_path):
    from tests.conftest import run_sweep, store_runs

    ckpt = _random_shapecount_checkpoint(tmp_path / "shapecount_random.pt")
    run_sweep(["-m", "model=procedural_good,procedural_poor", "dataset=shape_prompts", "task=geckonum_autoeval",
               f"task.evaluator.checkpoint={ckpt}", "dataset.n_per_type=25", "task.n_annotate=10",
               "task.bcc_draws=200", "checkpoint_every=128"], tmp_path)  # fmt: skip
    runs = store_runs(tmp_path / "mlruns")
    cells = runs[runs["tags.task"] == "geckonum_autoeval"].set_index("tags.model")
    assert sorted(cells.index) == ["procedural_good", "procedural_poor"]
    assert set(cells["tags.evaluator"]) == {"shapecount_aware"}
    assert set(cells["tags.family"]) == {"generator_autoeval"}
    assert (cells["metrics.autoeval_n_images"] == 250).all()
    assert (cells["metrics.autoeval_n_labelled_images"] == 100).all()
    assert (cells["metrics.autoeval_n_units"] > 250).all()  # image-question pairs
    assert set(cells["tags.autoeval_unit"]) == {"question"}
    for key in ("autoeval_cc_rate", "autoeval_bcc_rate", "autoeval_bcc_rate_low", "autoeval_bcc_rate_high"):
        assert cells[f"metrics.{key}"].between(0, 1).all(), key
    assert (cells["metrics.autoeval_bcc_rate_low"] <= cells["metrics.autoeval_bcc_rate_high"]).all()
    true = cells["metrics.autoeval_true_rate"]
    assert true["procedural_good"] > true["procedural_poor"]


class _Refuses(ProceduralGenerator):
    def generate_batch(self, prompts, seeds):
        raise AssertionError("images should have been read from image_dir")


def test_image_dir_reuses_generated_images(prompt_set, ctx, tmp_path):
    task = GeckoNumAutoEval(ORACLE, seeds=[0], image_dir=str(tmp_path / "images"))
    units = task.units(ProceduralGenerator(), prompt_set, ctx)[:6]
    first = task.run_units(ProceduralGenerator(image_size=80, accuracy=0.6), prompt_set, units, ctx)
    assert len(list((tmp_path / "images").glob("*.png"))) == 6
    again = GeckoNumAutoEval(ORACLE, seeds=[0], image_dir=str(tmp_path / "images"))
    second = again.run_units(_Refuses(), prompt_set, units, ctx)
    assert second == first


@pytest.fixture(scope="module")
def dalle_records(geckonum_dir):
    return _release_records(geckonum_dir, "dalle_3")


def _release_records(geckonum_dir, generator: str) -> tuple[pd.DataFrame, PromptSet]:
    """Image records of one generator's released images, its evaluator answering every question right.

    The 8 spatial prompts whose released relation question is worded differently are left out, so that every
    question has its human answer (and BCC has nothing to fit).
    """
    from countboard.numeracy.datasets.prompts import GeckoNumPromptSet
    from countboard.numeracy.release import read_annotations

    prompts = GeckoNumPromptSet(str(geckonum_dir))
    ann = read_annotations(geckonum_dir, 1)
    images = sorted(set(ann.loc[ann["model"] == generator, "image_id"].astype(str)))
    rows = []
    for u in images:
        pid, seed = (int(x) for x in u.split("_")[1:])
        spec = prompts.by_id[pid]
        qs = spec.count_questions()
        if "cinnamon stick" in spec.prompt and spec.prompt_type == "attribute-spatial":
            continue
        rows.append({"unit_id": u, "prompt_id": pid, "seed": seed, "prompt_type": spec.prompt_type,
                     "questions": json.dumps([q.question for q in qs]), "targets": json.dumps([q.target for q in qs]),
                     "evaluator_counts": json.dumps([float(q.target) for q in qs]), "cc_success": 1})  # fmt: skip
    return pd.DataFrame(rows), prompts


@pytest.mark.parametrize("unit", ["question", "image"])
def test_human_data_scored_per_question_as_the_paper(geckonum_dir, dalle_records, ctx, unit):
    """DALL-E 3's released labels: per question the rate is Table 2's 45.2%; per image it is 38.4%."""
    records, prompts = dalle_records
    task = GeckoNumAutoEval(ORACLE, seeds=list(range(5)), n_human=10**6, human_labels=str(geckonum_dir),
                            human_generator="dalle_3", n_annotate=0, bcc_draws=50, unit=unit)  # fmt: skip
    result = task.summarize(records, None, prompts, ctx)
    rate = result.metrics["autoeval_human_rate"] * 100
    if unit == "question":
        assert rate == pytest.approx(45.2, abs=0.35)  # Table 2, Task 1
        assert result.metrics["autoeval_n_units"] > 11000 and result.tags["autoeval_unit"] == "question"
    else:
        assert rate == pytest.approx(38.7, abs=0.1)  # 38.4 with the 40 images left out here
        assert result.metrics["autoeval_n_units"] == result.metrics["autoeval_n_images"] == 6260
    assert result.metrics["autoeval_n_labelled_images"] == 6260
    assert result.metrics["autoeval_n_labelled"] == result.metrics["autoeval_n_units"]  # nothing left to fit
    with pytest.raises(ConfigError, match="task.unit must be one of"):
        GeckoNumAutoEval(ORACLE, unit="prompt")


def test_count_questions_reproduce_the_released_questions(geckonum_dir):
    from countboard.numeracy.datasets.prompts import GeckoNumPromptSet
    from countboard.numeracy.release import read_annotations

    ann = read_annotations(geckonum_dir, 1)
    ann = ann[ann["model"] == "dalle_3"].drop_duplicates(["image_id", "question"])
    ann = ann.assign(pid=ann["image_id"].astype(str).str.split("_").str[1].astype(int),
                     qid=ann["question_id"].astype(int)).sort_values(["pid", "qid"])  # fmt: skip
    released = ann.groupby("pid")["question"].agg(lambda x: list(dict.fromkeys(x.astype(str))))
    specs = GeckoNumPromptSet(str(geckonum_dir)).by_id
    same = [specs[pid].questions() == qs for pid, qs in released.items()]
    # All but 8 spatial prompts with "cinnamon stick", whose released relation question reads "... of sticks?".
    assert len(same) - sum(same) == 8 and len(same) > 1200


class FlakyOracle:
    """An oracle counter that raises on every image whose id ends in ``_1`` (seed 1)."""

    def __init__(self, device="cpu"):
        from countboard.counting.models.oracle import OracleCounter

        self.inner = OracleCounter(device=device)

    def count(self, items, prompts):
        bad = [it.image_id for it in items if it.image_id.endswith("_1")]
        if bad:
            raise RuntimeError(f"cannot read {bad[0]}")
        return self.inner.count(items, prompts)


def test_an_image_the_evaluator_fails_on_is_counted_as_a_failure_and_shown(prompt_set, ctx):
    task = GeckoNumAutoEval({**ORACLE, "_target_": f"{__name__}.FlakyOracle"}, seeds=[0, 1], n_human=10,
                            n_annotate=5)
    gen = ProceduralGenerator(image_size=96, accuracy=0.7, decay=0.1, batch_size=7)
    units = task.units(gen, prompt_set, ctx)
    records = pd.DataFrame(task.run_units(gen, prompt_set, units, ctx))
    failed = records["unit_id"].str.endswith("_1")
    assert records.loc[failed, "evaluator_error"].str.startswith("RuntimeError: cannot read").all()
    assert records.loc[~failed, "evaluator_error"].isna().all()
    assert (records.loc[failed, "cc_success"] == 0).all()  # no count is never a success
    assert (records.loc[~failed, "cc_success"] == records.loc[~failed, "true_success"]).all()
    result = task.summarize(records, gen, prompt_set, ctx)
    assert result.metrics["autoeval_evaluator_failure_rate"] == pytest.approx(0.5)
    shown = result.tables["evaluator_failures"]
    assert sorted(shown["unit_id"]) == sorted(records.loc[failed, "unit_id"])


def test_bcc_cells_are_the_shared_cell_report_at_the_task_level():
    from countboard.quantify import SamplerConfig, counts_from_labels, report_cells

    units = _units(300, p_true=0.6, tpr=0.85, fpr=0.1, n_labelled=60)
    wide, narrow = bcc_cells(units, draws=400, chains=1, level=0.95), bcc_cells(units, draws=400, chains=1, level=0.5)
    groups = [("all", units), *((str(t), g) for t, g in units.groupby("prompt_type", sort=True))]
    counts = [counts_from_labels(g["cc_success"].to_numpy(float), g["human"].to_numpy(float)) for _, g in groups]
    report, _ = report_cells(counts, [n for n, _ in groups], SamplerConfig(draws=400, tune=400, chains=1, seed=0),
                             allow_no_human_positives=True, level=0.95)
    row = report.loc["all"]
    assert wide.iloc[0]["bcc_rate"] == pytest.approx(row["acs_bcc_mean"])
    assert (wide.iloc[0]["bcc_low"], wide.iloc[0]["bcc_high"]) == pytest.approx((row["acs_bcc_low"], row["acs_bcc_high"]))
    assert narrow.iloc[0]["bcc_high"] - narrow.iloc[0]["bcc_low"] < wide.iloc[0]["bcc_high"] - wide.iloc[0]["bcc_low"]


def test_annotation_sample_has_one_noun_per_question():
    """Colour prompts ask the bare noun too: the sample's nouns follow the questions, so the page can pair them."""
    from countboard.items import GeneratedImage
    from countboard.numeracy.annotation import annotation_items
    from countboard.numeracy.tasks.geckonum import annotation_row

    spec = PromptSpec(7, "2 white circles and 1 red circle", "2-additive-color",
                      (Entity("white circle", "2"), Entity("red circle", "1")))
    row = annotation_row("geckonum_00007_0", GeneratedImage(spec, 0, np.zeros((8, 8, 3), np.uint8)))
    items = annotation_items(pd.DataFrame([row]))
    assert items["question"].tolist() == ["How many circles are in the image?",
                                          "How many white circles are in the image?",
                                          "How many red circles are in the image?"]
    assert items["noun"].tolist() == ["circles", "white circles", "red circles"]


def test_a_non_finite_evaluator_count_is_that_images_evaluator_failure():
    from countboard.numeracy.tasks.geckonum import _count_questions

    class Evaluator:
        def count(self, items, prompts):
            return [float("nan") if it == "b" else float("inf") if it == "c" else 2.0 for it in items]

    counts, errors = _count_questions(Evaluator(), ["a", "a", "b", "c"], ["p", "q", "p", "p"], ["u1", "u1", "u2", "u3"])
    assert counts[:2].tolist() == [2.0, 2.0] and np.isnan(counts[2:]).all()  # never read as a count
    assert sorted(errors) == ["u2", "u3"] and "non-finite count (nan)" in errors["u2"] and "(inf)" in errors["u3"]
