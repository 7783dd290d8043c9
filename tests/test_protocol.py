"""A run's protocol (``countboard.protocol``): which parameters split leaderboard entries, and how they read."""

from __future__ import annotations

from countboard.cell import flatten
from countboard.protocol import DEFAULT_LABEL, derive, of_run

MOSAIC = "countboard.counting.tasks.praco.PracoMosaic"
GROUNDING = "countboard.grounding.tasks.grounding.GroundingTask"


def mosaic(**task) -> dict[str, str]:
    node = {"_target_": MOSAIC, "name": "praco_mosaic", "description": "d", "orientation": "vertical",
            "tile_size": None, "classes": None, "seed": None, "n_figures": 8, "mosaic": "default",
            "pairs_file": None, "official_rounding": False, **task}
    model = {"_target_": "countboard.counting.models.class_blind.ClassBlindCounter", "name": "class_blind"}
    return {k: str(v) for k, v in flatten({"task": node, "model": model, "seed": 0, "batch_size": 8}).items()}


def test_default_parameters_give_the_default_protocol():
    p = derive(mosaic())
    assert p.label == DEFAULT_LABEL
    assert len(p.key) == 10 and p.key == derive(mosaic()).key


def test_a_measuring_parameter_splits_and_is_named():
    official = derive(mosaic(mosaic="official"))
    assert official.label == "mosaic=official"
    assert official.key != derive(mosaic()).key
    both = derive(mosaic(mosaic="official", official_rounding=True))
    assert both.label == "mosaic=official, official_rounding=True"
    assert len({both.key, official.key}) == 2


def test_operational_knobs_and_seeds_do_not_split():
    base = derive(mosaic()).key
    assert derive(mosaic(n_figures=2)).key == base          # declared by PracoMosaic
    assert derive(mosaic(seed=5)).key == base               # a replicate
    params = mosaic()
    params.update({"batch_size": "64", "model.batch_size": "3", "model.device": "cuda", "task.max_images": "4"})
    assert derive(params).key == base


def test_values_compare_as_numbers_and_lists():
    # a tile size given as a list, and tau given as an int or a float, are the same value
    assert derive(mosaic(tile_size=[64, 64])).label == "tile_size=[64, 64]"
    g = {"task._target_": GROUNDING, "task.tau": "0.7", "task.delta": "50", "task.n_examples": "2"}
    assert derive(g).label == DEFAULT_LABEL
    g["task.delta"] = "50.0"
    assert derive(g).label == DEFAULT_LABEL
    g["task.tau"] = "0.5"
    assert derive(g).label == "tau=0.5"


def test_paths_count_by_file_name():
    a = derive(mosaic(pairs_file="/data/a/mosaic_image_pairs.csv"))
    b = derive(mosaic(pairs_file="/mnt/b/mosaic_image_pairs.csv/"))
    assert a == b and a.label == "pairs_file=mosaic_image_pairs.csv"


def test_model_parameters_are_prefixed_and_nested_nodes_named_by_name():
    params = mosaic()
    params["model.score_threshold"] = "0.3"  # unknown to ClassBlindCounter's signature: a non-default value
    assert derive(params).label == "model.score_threshold=0.3"
    vader = {"task._target_": "countboard.acs.tasks.text_acs.TextACSTask",
             "task.classifier._target_": "countboard.acs.models.text_classifiers.VaderClassifier",
             "task.classifier.name": "vader", "task.classifier.label_map.pos": "positive",
             "task.classifier.positive_threshold": "0.05", "task.classifier.batch_size": "256",
             "task.human.source": "simulated", "task.human.n_labelled": "100", "task.sampler.draws": "1000"}
    assert derive(vader).label == "classifier=vader"
    stricter = {**vader, "task.classifier.positive_threshold": "0.2", "task.human.n_labelled": "50"}
    assert derive(stricter).label == "classifier=vader, classifier.positive_threshold=0.2, human.n_labelled=50"
    blob = {**vader, "task.classifier._target_": "countboard.acs.models.text_classifiers.TextBlobClassifier",
            "task.classifier.name": "textblob", "task.classifier.positive_threshold": "0.1"}
    assert derive(blob).label == "classifier=textblob"


def test_a_class_that_no_longer_imports_counts_every_parameter():
    p = derive({"task._target_": "countboard.nowhere.Gone", "task.alpha": "1", "task.batch_size": "4",
                "task.name": "gone"})
    assert p.label == "alpha=1"


def test_a_tagged_protocol_wins_over_params():
    p = derive(mosaic(mosaic="official"))
    assert of_run(p.key, p.label, mosaic()) == p
    assert of_run(None, None, mosaic(mosaic="official")) == p
    assert of_run(p.key, None, {}).label == DEFAULT_LABEL


def test_the_label_names_what_differs_from_the_config_file():
    conf = {"_target_": "countboard.numeracy.models.procedural.ProceduralGenerator", "name": "procedural_good",
            "image_size": 192, "clutter": 0.2, "salt": 1, "batch_size": 16, "accuracy": 0.97, "seed": 3}
    params = {f"model.{k}": str(v) for k, v in conf.items()}
    as_configured = derive(params)
    assert as_configured.label == DEFAULT_LABEL          # the config's own values are its defaults
    changed = derive({**params, "model.accuracy": "0.5"})
    assert changed.label == "model.accuracy=0.5" and changed.key != as_configured.key
    gecko = {"task._target_": "countboard.numeracy.tasks.geckonum.GeckoNumAutoEval", "task.name": "geckonum_autoeval",
             "task.seeds": "[0, 1]", "task.human_generator": "procedural_good", "task.n_annotate": "10",
             "task.evaluator._target_": "countboard.counting.models.shapecount.ShapeCountCounter",
             "task.evaluator.name": "shapecount_aware", "task.evaluator.recipe": "aware",
             "task.evaluator.data_dir": "/somewhere"}
    assert derive(gecko).label == "evaluator=shapecount_aware"


def test_a_precision_other_than_fp32_is_another_protocol():
    assert derive({**mosaic(), "precision": "fp32"}) == derive(mosaic())  # runs from before the key: the same
    bf16 = derive({**mosaic(mosaic="official"), "precision": "bf16"})
    assert bf16.label == "mosaic=official, precision=bf16" and bf16.key != derive(mosaic(mosaic="official")).key
