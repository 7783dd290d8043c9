"""The released GeckoNum images: the generator that reads them, the VQA benchmark dataset, classic's accuracy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from countboard.counting.models.class_blind import ClassBlindCounter
from countboard.counting.models.oracle import OracleCounter
from countboard.counting.tasks.classic import ClassicCounting
from countboard.errors import ConfigError, DataNotFoundError
from countboard.models.base import CountedMap, Counter
from countboard.numeracy.datasets.prompts import GeckoNumPromptSet
from countboard.numeracy.datasets.release_items import GeckoNumReleaseDataset, agreement_shares
from countboard.numeracy.models.released import ReleasedImages
from countboard.numeracy.tasks.geckonum import GeckoNumAutoEval
from countboard.results import RunContext
from tests.fixtures.geckonum_images import make_release

ORACLE = {"_target_": "countboard.counting.models.oracle.OracleCounter", "name": "oracle", "kind": "counter"}


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return make_release(tmp_path_factory.mktemp("release"), n_prompts=200, missing=3)


@pytest.fixture(scope="module")
def dataset(release):
    root, image_dir = release
    return GeckoNumReleaseDataset(str(root), str(image_dir), generators=["dalle_3", "muse_b"])


@pytest.fixture
def ctx(tmp_path) -> RunContext:
    return RunContext(device="cpu", seed=0, batch_size=64, work_dir=tmp_path)


def test_generator_reads_every_seed_of_the_release(release, ctx):
    root, image_dir = release
    gen = ReleasedImages("muse_b", str(image_dir))
    assert gen.available_seeds() == [0, 1, 2, 3, 4]
    prompts = GeckoNumPromptSet(str(root))
    task = GeckoNumAutoEval(ORACLE, seeds=[0])
    units = task.units(gen, prompts, ctx)
    assert len(units) == 5 * len([s for s in prompts.specs if s.exact])  # task.seeds give way to the release's
    have = set(gen.release.files)
    present = [u for u in units if u in have][:3]
    records = task.run_units(gen, prompts, present, ctx)
    assert [r["unit_id"] for r in records] == present and all("error" not in r for r in records)


def test_a_missing_image_is_a_failed_unit(release, ctx):
    root, image_dir = release
    gen = ReleasedImages("dalle_3", str(image_dir))
    prompts = GeckoNumPromptSet(str(root))
    have = set(gen.release.files)
    task = GeckoNumAutoEval(ORACLE, seeds=[0])
    units = task.units(gen, prompts, ctx)
    absent = next(u for u in units if u not in have)
    present = next(u for u in units if u in have)
    records = task.run_units(gen, prompts, [present, absent], ctx)
    assert "error" not in records[0]
    assert records[1]["unit_id"] == absent and f"no image {absent}" in records[1]["error"]


def test_a_missing_folder_is_named_before_the_run(release, tmp_path):
    _, image_dir = release
    with pytest.raises(DataNotFoundError) as err:
        ReleasedImages.preflight({"name": "imagen_a", "image_dir": str(image_dir)})
    msg = str(err.value)
    assert "imagen_a" in msg and "storage.googleapis.com/geckonum_t2i_benchmark" in msg and "\n" not in msg
    with pytest.raises(ConfigError, match="not a generator of the GeckoNum release"):
        ReleasedImages.preflight({"name": "sd15", "image_dir": str(image_dir)})
    ReleasedImages.preflight({"name": "dalle_3", "image_dir": str(image_dir)})
    nested = tmp_path / "unzipped"
    (nested / "geckonum").mkdir(parents=True)
    (image_dir / "dalle_3").rename(nested / "geckonum" / "dalle_3")
    try:  # the zip's own top folder is looked into
        assert ReleasedImages("dalle_3", str(nested)).release.folder == nested / "geckonum" / "dalle_3"
    finally:
        (nested / "geckonum" / "dalle_3").rename(image_dir / "dalle_3")


def test_dataset_items_are_high_agreement_questions_with_the_human_mode(dataset):
    table = dataset.table
    assert set(table["generator"]) == {"dalle_3", "muse_b"}
    assert (table["agreement"] >= 0.8).all() and (table["n_modes"] == 1).all()
    uid = dataset.image_ids[0]
    gen, image, qid = uid.split(":")
    assert gen == "dalle_3" and image.startswith("geckonum_") and qid.isdigit()
    item = dataset.load(uid)
    assert item.image.shape == (8, 8, 3) and item.class_name == dataset.class_of(uid)
    assert item.count_of() == dataset.count_of(uid)
    assert dataset.count_of(uid) == int(table.loc[uid, "label"])
    spatial = table[table["prompt_type"] == "attribute-spatial"].iloc[0]
    assert spatial["phrase"] in spatial["question"] and "left of" not in spatial["phrase"]
    looser = GeckoNumReleaseDataset(str(dataset.root), str(dataset.folders["dalle_3"].folder.parent),
                                    generators=["dalle_3"], agreement=0.0)
    assert len(looser) > (table["generator"] == "dalle_3").sum()
    assert (looser.table["n_modes"] > 1).any()  # ties kept, labelled by the first-given rule


def test_agreement_is_the_share_of_answers_equal_to_the_rounded_mode():
    ann = pd.DataFrame({"model": ["m"] * 5, "image_id": ["i"] * 5, "question": ["q"] * 5,
                        "answer": ["2", "2", "1.5", "2-3", "10+"], "raw_answer": ["2", "2", "1.5", "2-3", "10+"]})
    units = pd.DataFrame({"model": ["m"], "image_id": ["i"], "question": ["q"], "label": [2.0], "n_answers": [5]})
    # 1.5 rounds up to 2 (the paper's rule), the range 2-3 to 3: three answers of five are 2
    assert agreement_shares(ann, units, "up").tolist() == [0.6]


def test_classic_oracle_scores_exact_accuracy_one_and_a_blind_counter_less(dataset, ctx):
    task = ClassicCounting()
    units = task.units(None, dataset, ctx)
    ok_oracle = pd.DataFrame(task.run_units(OracleCounter(), dataset, units, ctx))
    failed = ok_oracle[ok_oracle.get("error", pd.Series(None, ok_oracle.index)).notna()]
    assert len(failed) > 0 and failed["unit_id"].str.startswith("dalle_3:").all()  # the 3 missing images
    scored = ok_oracle[ok_oracle["unit_id"].isin(set(units) - set(failed["unit_id"]))].drop(columns="error")
    result = task.summarize(scored.reset_index(drop=True), OracleCounter(), dataset, ctx)
    assert result.metrics["exact_accuracy"] == 1.0 and result.metrics["mae"] == 0.0
    by_number = result.tables["accuracy_by_number"]
    assert set(by_number["generator"]) == {"dalle_3", "muse_b"} and (by_number["accuracy"] == 1.0).all()
    assert by_number["n"].sum() == len(scored)
    assert set(result.tables["accuracy_by_prompt_type"]["prompt_type"]) <= set(scored["prompt_type"])

    blind = pd.DataFrame(task.run_units(ClassBlindCounter(), dataset, list(scored["unit_id"]), ctx))
    res = task.summarize(blind, ClassBlindCounter(), dataset, ctx)
    expected = float((blind["gt"] == 0).mean())  # it counts 0 here (no points): right only where nothing is
    assert res.metrics["exact_accuracy"] == pytest.approx(expected) and expected < 1.0
    lo, hi = res.metrics["exact_accuracy__low"], res.metrics["exact_accuracy__high"]
    assert lo <= res.metrics["exact_accuracy"] <= hi


def test_dataset_refuses_an_unknown_generator(release):
    root, image_dir = release
    with pytest.raises(ConfigError, match="not generators of the GeckoNum release"):
        GeckoNumReleaseDataset(str(root), str(image_dir), generators=["sd15"])
    with pytest.raises(DataNotFoundError, match="imagen_b"):
        GeckoNumReleaseDataset(str(root), str(image_dir), generators=["imagen_b"])


def test_ten_plus_counts_are_one_bin():
    from countboard.metrics.counting import exact_count_hits

    assert exact_count_hits(np.array([10.4, 10.6, 25.0]), np.array([10, 11, 11]), cap=11).tolist() == [1, 1, 1]
    assert exact_count_hits(np.array([25.0]), np.array([11]), cap=None).tolist() == [0]


class PixelCounter(Counter):
    """A judge that looks at the pixels only: 1 to 4 objects from the image's mean brightness."""

    def decode(self, features, prompts):
        return [CountedMap(np.zeros(it.size, np.float32), float(int(it.image.mean()) % 4 + 1)) for it in features]


PIXEL = {"_target_": f"{__name__}.PixelCounter", "name": "pixel", "kind": "counter"}


def test_autoeval_on_released_images_validates_bcc_on_all_human_labels(release, ctx):
    root, image_dir = release
    gen = ReleasedImages("dalle_3", str(image_dir))
    prompts = GeckoNumPromptSet(str(root))
    task = GeckoNumAutoEval(PIXEL, n_human=40, human_labels=str(root), human_generator="dalle_3", n_annotate=4,
                            bcc_draws=200, replicates=60, replicate_n=50, replicate_sizes=[25, 50])
    have = set(gen.release.files)
    units = [u for u in task.units(gen, prompts, ctx) if u in have][:300]
    records = pd.DataFrame(task.run_units(gen, prompts, units, ctx))
    result = task.summarize(records, gen, prompts, ctx)
    m = result.metrics
    table = result.tables["replicate_calibration"]
    assert set(table["method"]) == {"bcc", "cc", "human"} and set(table["n_human"]) == {25, 50}
    assert m["autoeval_n_replicates"] == 60 and m["autoeval_n_all_human"] > 300  # image-question pairs
    for method in ("bcc", "cc", "human"):
        row = table[(table["method"] == method) & (table["n_human"] == 50) & (table["level"] == 0.95)].iloc[0]
        assert m[f"autoeval_{method}_coverage"] == row["coverage"] and m[f"autoeval_{method}_mae"] == row["mae"]
    # the truth is the released labels themselves: the import's scoring of the same questions
    scored = task.human_answers(records, prompts, everyone=True)
    flat = np.array([a for answers in scored.values() for a in answers], dtype=float)
    assert m["autoeval_all_human_rate"] == pytest.approx(np.nanmean(flat))
    assert 0 <= m["autoeval_bcc_coverage"] <= 1 and m["autoeval_bcc_mae"] < 0.5


def test_vqa_task_is_classic_in_the_numeracy_family(dataset, ctx):
    from countboard.numeracy.tasks.vqa import GeckoNumVQA

    task = GeckoNumVQA()
    assert (task.name, task.family) == ("geckonum_vqa", "geckonum_vqa")
    units = [u for u in task.units(None, dataset, ctx) if u.startswith("muse_b:")][:50]
    records = pd.DataFrame(task.run_units(OracleCounter(), dataset, units, ctx))
    assert task.summarize(records, OracleCounter(), dataset, ctx).metrics["exact_accuracy"] == 1.0


@pytest.mark.slow
def test_sweeps_on_a_fake_release(tmp_path):
    """The issue's "done when": classic and geckonum_vqa on the release's pairs (oracle 1.0, a counter less), and
    two release generators through geckonum_autoeval with the replicate check."""
    from tests.conftest import run_sweep, store_runs

    root, image_dir = make_release(tmp_path, n_prompts=60, missing=2)
    data = [f"dataset.root={root}", f"dataset.image_dir={image_dir}", "dataset.generators=[dalle_3,muse_b]"]
    run_sweep(["-m", "model=oracle,class_blind", "dataset=geckonum_release", "task=classic,geckonum_vqa", *data],
              tmp_path)
    run_sweep(["-m", "model=geckonum_release", "model.name=dalle_3,muse_b", f"model.image_dir={image_dir}",
               f"data_dir={tmp_path}", "dataset=geckonum_prompts", f"dataset.root={root}", "dataset.max_prompts=60",
               "task=geckonum_autoeval", "model@task.evaluator=class_blind", f"task.human_labels={root}",
               "task.n_annotate=5", "task.bcc_draws=200", "task.replicates=50",
               "task.replicate_n=20", "task.replicate_sizes=[10,20]"], tmp_path)
    runs = store_runs(tmp_path / "mlruns")
    counted = runs[runs["tags.dataset"] == "geckonum_release"].set_index(["tags.task", "tags.model"])
    for task in ("classic", "geckonum_vqa"):
        assert counted.loc[(task, "oracle"), "metrics.exact_accuracy"] == 1.0
        assert counted.loc[(task, "class_blind"), "metrics.exact_accuracy"] < 1.0
    auto = runs[runs["tags.task"] == "geckonum_autoeval"].set_index("tags.model")
    assert len(auto) == 2 and set(auto["status"]) == {"FINISHED"}
    assert auto["metrics.autoeval_bcc_coverage"].between(0, 1).all()
    assert auto["metrics.autoeval_all_human_rate"].between(0, 1).all()
