"""Task text_acs: generation, classification, human labels, CC/BCC and agreement metrics; configs; a sweep."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hydra import compose
from hydra.utils import instantiate

from countboard.acs.annotation import text_id
from countboard.acs.datasets.text_prompts import TextPromptSet
from countboard.acs.models.text_classifiers import LEXICON_MAP, VaderClassifier
from countboard.acs.models.text_generator import TinyRandomCausalLM
from countboard.acs.models.text_procedural import ProceduralStoryGenerator
from countboard.acs.tasks.text_acs import TextACSTask
from countboard.config import check_node
from countboard.errors import ConfigError
from countboard.metrics.agreement import cohen_kappa
from countboard.models.base import TextClassifier
from countboard.paths import conf_dir
from countboard.quantify import counts_from_labels, fit_bcc_batch
from countboard.quantify.bcc import SamplerConfig
from countboard.results import RunContext
from countboard.schema import load_schema
from tests.acs.test_annotation import write_label_file
from tests.conftest import run_sweep, store_runs

RATIOS = {"positive": 35, "neutral": 30, "negative": 35}
FAST = {"draws": 200, "tune": 200, "chains": 2}
GOOD = {"positive": 0.95, "neutral": 0.75, "negative": 0.9}


def ctx_for(tmp_path, seed: int = 0) -> RunContext:
    return RunContext(device="cpu", seed=seed, batch_size=8, work_dir=tmp_path, progress=False)


def run_task(task: TextACSTask, model, dataset, ctx: RunContext, chunk: int = 64):
    """What the engine does: units in chunks, failures apart, summary of the successful records."""
    units = list(task.units(model, dataset, ctx))
    records = []
    for start in range(0, len(units), chunk):
        records.extend(task.run_units(model, dataset, units[start:start + chunk], ctx))
    ok = pd.DataFrame([r for r in records if "error" not in r])
    failed = [r for r in records if "error" in r]
    return task.summarize(ok, model, dataset, ctx), ok, failed


def vader() -> VaderClassifier:
    return VaderClassifier(name="vader", label_map=LEXICON_MAP)


@pytest.mark.parametrize("option", sorted(p.stem for p in (conf_dir() / "task" / "classifier").glob("*.yaml")))
def test_every_classifier_option_composes_and_builds(hydra_init, option):
    overrides = ["model=story_procedural_good", "dataset=sentiment_stories", "task=text_acs",
                 f"task/classifier={option}"]
    cfg = compose("config", overrides=overrides)
    if "model_id" in cfg.task.classifier and cfg.task.classifier.model_id is None:
        # an option that names no model of its own (llm_zeroshot) is refused without one, and builds with one
        with pytest.raises(Exception, match="task.classifier.model_id is not set"):
            instantiate(cfg.task.classifier, _convert_="all")
        cfg = compose("config", overrides=[*overrides, "task.classifier.model_id=org/any-chat-lm"])
    node = check_node(cfg, "task")
    assert node["classifier"]["name"] == option
    clf = instantiate(cfg.task.classifier, _convert_="all")
    assert isinstance(clf, TextClassifier) and clf.name == option
    assert clf.labels == tuple(cfg.dataset.labels)


def test_default_classifier_dataset_and_metric_keys_are_declared(hydra_init):
    cfg = compose("config", overrides=["model=story_procedural_poor", "task=text_acs"])
    assert cfg.task.classifier.name == "vader" and cfg.model.kind == "text_generator"
    assert cfg.dataset.name == "sentiment_stories"  # text_acs's default prompt set
    assert compose("config", overrides=["task=text_acs", "dataset=synthetic_shapes"]).dataset.name == \
        "synthetic_shapes"
    schema = load_schema()
    for key in ("classifier_tpr", "classifier_fpr", "classifier_macro_f1", "cohen_kappa", "acs_true_rate",
                "acs_mc_mean", "acs_mc_low", "acs_mc_high"):
        assert schema.metric(key).family == "acs"
    assert "text_generator" in schema.families["acs"].model_kinds


@pytest.mark.slow
def test_simulated_labels_binary_and_multiclass_bcc(tmp_path):
    # two requested labels of three keep the multi-class part to two Dirichlet fits
    dataset = TextPromptSet(n_prompts=300, label_ratios={"positive": 1, "negative": 1})
    model = ProceduralStoryGenerator(success=GOOD, miss_weights={"positive": 3, "neutral": 1, "negative": 1})
    task = TextACSTask(vader(), human={"n_labelled": 100, "error_rate": 0.05}, sampler=FAST, multiclass=True)
    result, ok, failed = run_task(task, model, dataset, ctx_for(tmp_path))
    m = result.metrics
    assert failed == [] and len(ok) == 300
    truth = float((ok["true_label"] == ok["requested"]).mean())
    assert m["acs_true_rate"] == pytest.approx(truth)
    assert m["acs_cc_mean"] == pytest.approx((ok["cc_success"].sum() + 1) / 302)
    assert m["acs_bcc_low"] <= m["acs_bcc_mean"] <= m["acs_bcc_high"]
    assert m["acs_mc_low"] <= m["acs_mc_mean"] <= m["acs_mc_high"] and abs(m["acs_mc_mean"] - truth) < 0.1
    assert m["acs_n_human"] == 100 and m["acs_n_items"] == 300
    assert 0 <= m["classifier_fpr"] < m["classifier_tpr"] <= 1 and 0 < m["classifier_macro_f1"] <= 1
    labels = result.tables["human_labels"]
    assert len(labels) == 100
    assert m["cohen_kappa"] == pytest.approx(cohen_kappa(labels["annotator_a"].tolist(),
                                                         labels["annotator_b"].tolist(), dataset.labels))
    cells = result.tables["bcc_cells"]
    assert list(cells["cell"]) == ["positive", "negative", "all"]
    assert cells.loc[cells["cell"] == "all", "acs_bcc_mean"].iloc[0] == pytest.approx(m["acs_bcc_mean"])
    assert int(cells.loc[cells["cell"] != "all", "n_m"].sum()) == 200
    per = result.tables["per_prompt_type"].set_index("prompt_type")
    assert per["n"].tolist() == [150, 0, 150] and per.loc["negative", "cc_rate"] == pytest.approx(
        ok.loc[ok["requested"] == "negative", "cc_success"].mean())
    mc = result.tables["multiclass"]
    assert len(mc) == 6 and np.allclose(mc.groupby("requested")["mean"].sum(), 1.0)
    assert per.loc["positive", "bcc_low"] <= per.loc["positive", "bcc_rate"] <= per.loc["positive", "bcc_high"]
    conf = result.tables["requested_confusion"]
    assert list(conf.columns) == ["requested", "classifier", "count"] and conf["count"].sum() == 300
    conf = result.tables["confusion"]
    assert list(conf.columns) == ["human", "classifier", "count"] and conf["count"].sum() == 100
    assert result.tables["requested_human"]["count"].sum() == 100
    assert result.tags["classifier"] == "vader" and result.tags["evaluator"] == "vader"
    assert result.tags["attribute"] == "sentiment" and result.tags["human_source"] == "simulated"
    assert result.arrays["bcc_draws"]["p"].shape == (3, 400)


@pytest.mark.filterwarnings("ignore::countboard.quantify.errors.BCCWarning")
def test_bcc_interval_is_calibrated_over_human_subsets():
    """Over 20 random human subsets of one generated set, the 90% BCC interval covers the true rate >= 14 times.

    With 90% coverage, 13 or fewer hits out of 20 has probability 0.24%; CC, by contrast, is biased here.
    """
    dataset = TextPromptSet(n_prompts=400, label_ratios=RATIOS)
    model = ProceduralStoryGenerator(success={"positive": 0.8, "neutral": 0.4, "negative": 0.65})
    texts = list(model.generate(dataset.items))
    truth = np.array([t.true_label == t.prompt.label for t in texts], dtype=float)
    decision = np.array([c.label == t.prompt.label for c, t in zip(vader().classify([t.text for t in texts]), texts,
                                                                     strict=True)], dtype=float)
    counts = []
    for rep in range(20):
        chosen = np.random.default_rng([rep, 99]).choice(len(texts), size=100, replace=False)
        human = np.full(len(texts), np.nan)
        human[chosen] = truth[chosen]
        counts.append(counts_from_labels(decision, human))
    table = pd.DataFrame([c.__dict__ for c in counts])
    fit = fit_bcc_batch(*(table[k].to_numpy() for k in ("tp", "fn", "fp", "tn", "s_m", "n_m")),
                        sampler=SamplerConfig(draws=300, tune=300))
    lo, hi = np.quantile(fit.draws, [0.05, 0.95], axis=1)
    covered = int(np.sum((lo <= truth.mean()) & (truth.mean() <= hi)))
    assert covered >= 14, (covered, truth.mean(), lo, hi)
    assert abs(decision.mean() - truth.mean()) > 0.05  # the classifier alone is off


def test_label_file_source_with_two_annotators_and_bad_rows(tmp_path):
    dataset = TextPromptSet(n_prompts=120, label_ratios=RATIOS, seed=1)
    model = ProceduralStoryGenerator(success=0.8)
    texts = list(model.generate(dataset.items))
    path = tmp_path / "labels.csv"
    rows = []
    for i, t in enumerate(texts[:40]):
        rows.append((t.text, "ann1", t.true_label))
        rows.append((t.text, "ann2", t.true_label if i % 5 else next(x for x in dataset.labels if x != t.true_label)))
    write_label_file(path, rows)
    with path.open("a") as fh:
        fh.write(f"{text_id(texts[50].text)},ann1,ecstatic,\n")
    task = TextACSTask(vader(), human={"source": "file", "path": str(path)}, sampler=FAST, multiclass=False)
    result, ok, _ = run_task(task, model, dataset, ctx_for(tmp_path))
    m = result.metrics
    # ann2 disagrees on every fifth text: ties have no adjudicated label, so 32 texts are labelled
    assert m["acs_n_human"] == 32 and result.tags["annotators"] == "ann1,ann2"
    a = [t.true_label for t in texts[:40]]
    b = [t.true_label if i % 5 else next(x for x in dataset.labels if x != t.true_label) for i, t in enumerate(texts[:40])]
    assert m["cohen_kappa"] == pytest.approx(cohen_kappa(a, b, dataset.labels))
    assert result.tags["label_file_problems"] == "1"
    assert "acs_true_rate" in m and "acs_mc_mean" not in m


def test_bad_inputs_are_reported_and_the_rest_goes_on(tmp_path):
    prompts = tmp_path / "prompts.csv"
    prompts.write_text("id,title,label\n" + "".join(f"p{i},Title {i},{['positive', 'negative'][i % 2]}\n"
                                                     for i in range(30)) + "px,Odd,ecstatic\n")
    dataset = TextPromptSet(prompt_file=str(prompts))
    model = ProceduralStoryGenerator(success=0.9, empty_rate=0.1)
    task = TextACSTask(vader(), human={"source": "none"}, multiclass=False)
    ctx = ctx_for(tmp_path)
    records = task.run_units(model, dataset, dataset.ids(), ctx)
    errors = {r["unit_id"]: r["error"] for r in records if "error" in r}
    assert list(errors) == ["px"] and "ecstatic" in errors["px"]
    ok = pd.DataFrame([r for r in records if "error" not in r])
    assert len(ok) == 30  # empty texts are failed outputs, kept in the denominator
    empty = ok[ok["failed"] == 1]
    assert len(empty) and (empty["text"] == "").all() and empty["failure"].str.contains("empty text").all()
    assert (empty["cc_success"] == 0).all()
    result = task.summarize(ok, model, dataset, ctx)
    assert set(result.metrics) == {"acs_cc_mean", "acs_true_rate", "acs_failure_rate"}
    assert result.metrics["acs_cc_mean"] == pytest.approx((ok["cc_success"].sum() + 1) / (30 + 2))
    assert result.metrics["acs_failure_rate"] == pytest.approx(len(empty) / 30)


def test_configuration_errors(tmp_path):
    dataset = TextPromptSet(n_prompts=20)
    ctx = ctx_for(tmp_path)
    with pytest.raises(ConfigError, match="source=file"):
        TextACSTask(vader(), human={"source": "file"})
    with pytest.raises(ConfigError, match="task.human"):
        TextACSTask(vader(), human={"n_labeled": 3})
    with pytest.raises(ConfigError, match="TextClassifier"):
        TextACSTask(classifier={"name": "vader"})
    task = TextACSTask(VaderClassifier(labels=["pos", "neg"], label_map={"pos": "pos", "neg": "neg"}))
    with pytest.raises(ConfigError, match="differ from the dataset"):
        task.units(ProceduralStoryGenerator(), dataset, ctx)
    with pytest.raises(ConfigError, match="controlled prompt set"):
        TextACSTask(vader()).units(ProceduralStoryGenerator(), object(), ctx)
    task = TextACSTask(vader(), human={"n_labelled": 20})
    units = task.units(ProceduralStoryGenerator(), dataset, ctx)
    ok = pd.DataFrame(task.run_units(ProceduralStoryGenerator(), dataset, units, ctx))
    with pytest.raises(ConfigError, match="n_labelled=20"):
        task.summarize(ok, ProceduralStoryGenerator(), dataset, ctx)


def test_causal_lm_generator_through_the_task(tmp_path):
    dataset = TextPromptSet(n_prompts=6, label_ratios=RATIOS)
    model = TinyRandomCausalLM(batch_size=3, generation={"max_new_tokens": 6})
    with pytest.raises(ConfigError, match="cannot be simulated"):
        TextACSTask(vader()).units(model, dataset, ctx_for(tmp_path))
    task = TextACSTask(vader(), human={"source": "none"})
    records = task.run_units(model, dataset, dataset.ids(), ctx_for(tmp_path))
    assert [r["unit_id"] for r in records] == dataset.ids()
    ok = pd.DataFrame([r for r in records if "error" not in r])
    result = task.summarize(ok, model, dataset, ctx_for(tmp_path))
    assert set(result.metrics) == {"acs_cc_mean", "acs_failure_rate"}


@pytest.mark.slow
def test_offline_sweep_two_generators_by_two_classifiers(tmp_path):
    run_sweep(["-m", "model=story_procedural_good,story_procedural_poor", "dataset=sentiment_stories",
               "task=text_acs", "task/classifier=vader,textblob", "dataset.n_prompts=400", "task.sampler.draws=300",
               "task.sampler.tune=300", "task.multiclass=false", "device=cpu", "seed=2"], tmp_path, timeout=600)
    runs = store_runs(tmp_path / "mlruns")
    cells = runs[runs["tags.countboard.role"] == "cell"]
    assert len(cells) == 4 and set(cells["status"]) == {"FINISHED"}
    assert set(zip(cells["tags.model"], cells["tags.classifier"], strict=True)) == {
        (m, c) for m in ("story_procedural_good", "story_procedural_poor") for c in ("vader", "textblob")}
    assert set(cells["tags.family"]) == {"acs"} and set(cells["tags.model_kind"]) == {"text_generator"}
    for _, row in cells.iterrows():
        true = row["metrics.acs_true_rate"]
        assert row["metrics.acs_bcc_low"] <= true <= row["metrics.acs_bcc_high"], row["tags.model"]
        assert abs(row["metrics.acs_bcc_mean"] - true) < abs(row["metrics.acs_cc_mean"] - true)
    good = cells[cells["tags.model"] == "story_procedural_good"]
    poor = cells[cells["tags.model"] == "story_procedural_poor"]
    assert (good["metrics.acs_true_rate"].iloc[0] > poor["metrics.acs_true_rate"].iloc[0] + 0.1)
    assert set(cells["metrics.n_failed_samples"]) == {0.0}  # empty texts are failed outputs, not failed units
    assert set(good["metrics.acs_failure_rate"]) == {0.0} and (poor["metrics.acs_failure_rate"] > 0).all()
    run_id = poor["run_id"].iloc[0]
    art = next((tmp_path / "mlruns").glob(f"artifacts/*/{run_id}/artifacts"))
    per_type = pd.read_parquet(art / "tables" / "per_prompt_type.parquet")
    assert (per_type["failure_rate"] > 0).any()
    assert (art / "tables" / "bcc_cells.parquet").exists() and (art / "tables" / "confusion.parquet").exists()
    assert math.isfinite(poor["metrics.cohen_kappa"].iloc[0])


class BlankEverySecond(ProceduralStoryGenerator):
    """The procedural generator, but every second prompt (by position) gets an empty text."""

    def generate_batch(self, prompts):
        out = super().generate_batch(prompts)
        for g in out:
            if int(g.prompt.prompt_id.split("_")[-1]) % 2:
                g.text = ""
        return out


@pytest.mark.filterwarnings("ignore::countboard.quantify.errors.BCCWarning")
def test_empty_texts_half_the_time_at_most_halve_the_success_rate(tmp_path):
    dataset = TextPromptSet(n_prompts=300, label_ratios=RATIOS, seed=4)
    assert all(p.prompt_id.split("_")[-1].isdigit() for p in dataset.items)
    task = TextACSTask(vader(), human={"n_labelled": 100, "error_rate": 0.0}, sampler=FAST, multiclass=True,
                       bcc_method="auto")
    clean, _, _ = run_task(task, ProceduralStoryGenerator(success=GOOD), dataset, ctx_for(tmp_path))
    blank, ok, failed = run_task(task, BlankEverySecond(success=GOOD), dataset, ctx_for(tmp_path))
    assert failed == [] and len(ok) == 300 and blank.metrics["acs_failure_rate"] == 0.5
    rest = ok[ok["failed"] == 0]
    rest_truth = float((rest["true_label"] == rest["requested"]).mean())
    assert blank.metrics["acs_true_rate"] == pytest.approx(rest_truth / 2)
    # the CC posterior mean (s + 1) / (N + 2) of all 300 texts against that of the 150 judged ones
    assert blank.metrics["acs_cc_mean"] <= 0.5 * (rest["cc_success"].sum() + 1) / (len(rest) + 2) + 2 / 300
    for key in ("acs_bcc_mean", "acs_mc_mean", "acs_cc_mean"):
        assert blank.metrics[key] <= 0.5 * clean.metrics[key] + 0.05, key
    for key in ("acs_bcc_mean", "acs_mc_mean"):  # CC keeps the classifier's bias; the BCC rates lose it
        assert blank.metrics[key] == pytest.approx(0.5 * rest_truth, abs=0.06), key
    assert blank.metrics["acs_bcc_low"] <= 0.5 * rest_truth <= blank.metrics["acs_bcc_high"]
    per = blank.tables["per_prompt_type"]
    assert per["failure_rate"].between(0.4, 0.6).all() and blank.metrics["acs_n_items"] == 300
