"""``countboard compare``: one comparison run per (task, dataset, classifier), values from the Beta parameters."""

from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd
import pytest

from countboard.cli import main
from countboard.quantify import prob_greater
from countboard.quantify.compare import pairwise_long
from countboard.quantify.comparison_runs import inputs_hash, latest_per_generator
from countboard.tracking import tracker_from_config

EXPERIMENT = "countboard"  # a store written before experiments were split by family: its runs are read


def experiment_ids(tracker) -> list[str]:
    return [e.experiment_id for e in tracker.experiments()]


def log_cell(tracker, task: str, tags: dict[str, str], a: float, b: float, tmp: Path, *,
             as_table: bool = False) -> str:
    """A FINISHED cell run of ``task`` carrying Beta(a, b) as metrics or as the ``all`` row of bcc_cells."""
    all_tags = {"countboard.role": "cell", "task": task, "family": "acs", "dataset": "ds",
                "config_hash": f"{task}-{sorted(tags.items())}", **tags}
    metrics, art = {}, None
    if as_table:
        art = tmp / all_tags["config_hash"].replace("'", "").replace(" ", "")
        (art / "tables").mkdir(parents=True)
        pd.DataFrame({"cell": ["t1", "all"], "bcc_alpha": [1.0, a], "bcc_beta": [1.0, b],
                      "no_human_positives": [False, False]}).to_parquet(art / "tables" / "bcc_cells.parquet")
    else:
        metrics = {"bcc_alpha": a, "bcc_beta": b, "acs_bcc_mean": a / (a + b)}
    return tracker.log_complete_run(EXPERIMENT, "cell", all_tags, metrics=metrics, artifacts_dir=art)


BCC = {"gen_a": (30.0, 70.0), "gen_b": (45.0, 55.0), "gen_c": (12.0, 9.0)}
GECKO = {"sd": (5.0, 95.0), "flux": (40.0, 60.0)}
TEXT = {"gpt": (80.0, 20.0), "llama": (70.0, 25.0)}


@pytest.fixture()
def store(tmp_path):
    store = tmp_path / "mlruns"
    tracker = tracker_from_config({"kind": "local", "store_dir": str(store)})
    for gen, (a, b) in BCC.items():
        log_cell(tracker, "bcc", {"generator": gen, "model": "clf1"}, a, b, tmp_path)
    log_cell(tracker, "bcc", {"generator": "gen_a", "model": "clf2"}, 3.0, 4.0, tmp_path)  # alone: no comparison
    # a smoke run and a run with a failed unit: incomplete, never compared
    log_cell(tracker, "bcc", {"generator": "gen_p", "model": "clf1", "partial": "true"}, 90.0, 10.0, tmp_path)
    log_cell(tracker, "bcc", {"generator": "gen_q", "model": "clf1", "n_failed_units": "1"}, 90.0, 10.0, tmp_path)
    for gen, (a, b) in GECKO.items():
        log_cell(tracker, "geckonum_autoeval", {"model": gen, "evaluator": "owl"}, a, b, tmp_path, as_table=True)
    for gen, (a, b) in TEXT.items():
        log_cell(tracker, "text_acs", {"model": gen, "classifier": "vader"}, a, b, tmp_path)
    failed = tracker.create_run(tracker.experiment_id(EXPERIMENT), "cell",
                                {"countboard.role": "cell", "task": "bcc", "dataset": "ds", "generator": "gen_z",
                                 "model": "clf1"})
    tracker.set_status(failed, "FAILED")
    return store, tracker


def comparisons(tracker) -> dict[tuple[str, str], str]:
    runs = tracker.client.search_runs(experiment_ids(tracker),
                                      filter_string="tags.`countboard.role` = 'comparison'")
    return {(r.data.tags["task"], r.data.tags["classifier"]): r.info.run_id for r in runs}


def check_table(tracker, run_id: str, params: dict[str, tuple[float, float]], tmp: Path) -> None:
    table = pd.read_parquet(tracker.download(run_id, "tables/pairwise.parquet", tmp / run_id))
    assert len(table) == len(params) * (len(params) - 1)
    got = {(r.generator_a, r.generator_b): r.p_greater for r in table.itertuples()}
    for x, y in itertools.permutations(params, 2):
        assert got[(x, y)] == pytest.approx(prob_greater(*params[x], *params[y]), abs=1e-9)
        assert got[(x, y)] + got[(y, x)] == pytest.approx(1.0, abs=1e-12)
    assert "figures/pairwise.png" in tracker.list_artifacts(run_id, "figures")


def test_compare_logs_one_run_per_group_and_skips_unchanged(store, tmp_path, capsys):
    store_dir, tracker = store
    assert main(["compare", "--store", str(store_dir)]) == 0
    out = capsys.readouterr().out
    assert "bcc / ds / clf1: 3 generators, logged run" in out
    assert "(2 partial or damaged run(s) left out: complete runs only)" in out
    runs = comparisons(tracker)
    assert set(runs) == {("bcc", "clf1"), ("geckonum_autoeval", "owl"), ("text_acs", "vader")}
    check_table(tracker, runs[("bcc", "clf1")], BCC, tmp_path)
    check_table(tracker, runs[("geckonum_autoeval", "owl")], GECKO, tmp_path)
    check_table(tracker, runs[("text_acs", "vader")], TEXT, tmp_path)
    run = tracker.client.get_run(runs[("bcc", "clf1")])
    assert run.info.status == "FINISHED"
    assert {k: run.data.tags[k] for k in ("task", "dataset", "classifier", "family")} == {
        "task": "bcc", "dataset": "ds", "classifier": "clf1", "family": "acs"}
    gecko = tracker.client.get_run(runs[("geckonum_autoeval", "owl")]).data.tags
    assert gecko["family"] == "generator_autoeval"  # the family of the cells it compares
    assert run.data.params["generators"] == "gen_a,gen_b,gen_c"  # not the FAILED gen_z, partial gen_p, damaged gen_q
    # each comparison in its family's experiment, none in the older single one
    names = {e.experiment_id: e.name for e in tracker.experiments()}
    where = {key: names[tracker.client.get_run(rid).info.experiment_id] for key, rid in runs.items()}
    assert where == {("bcc", "clf1"): "countboard/acs", ("text_acs", "vader"): "countboard/acs",
                     ("geckonum_autoeval", "owl"): "countboard/numeracy"}

    capsys.readouterr()
    assert main(["compare", "--store", str(store_dir)]) == 0
    assert "0 comparison run(s) logged, 3 unchanged" in capsys.readouterr().out
    assert comparisons(tracker) == runs

    log_cell(tracker, "bcc", {"generator": "gen_d", "model": "clf1"}, 2.0, 8.0, tmp_path)
    assert main(["compare", "--store", str(store_dir), "--task", "bcc", "--classifier", "clf1"]) == 0
    assert "1 comparison run(s) logged, 0 unchanged" in capsys.readouterr().out
    new = tracker.client.search_runs(experiment_ids(tracker),
                                     filter_string="tags.`countboard.role` = 'comparison' AND tags.task = 'bcc'",
                                     order_by=["attributes.start_time DESC"])
    assert len(new) == 2
    check_table(tracker, new[0].info.run_id, {**BCC, "gen_d": (2.0, 8.0)}, tmp_path)


def test_compare_names_a_missing_experiment(store, capsys):
    store_dir, _ = store
    assert main(["compare", "--store", str(store_dir), "--experiment", "nope"]) == 2
    assert "no experiment named by 'nope'" in capsys.readouterr().err


def test_helpers():
    cells = pd.DataFrame({"generator": ["g", "h", "g"], "run_id": ["r1", "r2", "r3"], "end_time": [1, 1, 2]})
    assert latest_per_generator(cells)["run_id"].tolist() == ["r3", "r2"]
    assert inputs_hash("bcc", "d", "c", cells) != inputs_hash("bcc", "d", "c", cells.assign(end_time=[1, 1, 3]))
    assert inputs_hash("bcc", "d", "c", cells) != inputs_hash("text_acs", "d", "c", cells)
    m = pd.DataFrame([[float("nan"), 0.25], [0.75, float("nan")]], index=["x", "y"], columns=["x", "y"])
    assert pairwise_long(m).to_dict("records") == [
        {"generator_a": "x", "generator_b": "y", "p_greater": 0.25},
        {"generator_a": "y", "generator_b": "x", "p_greater": 0.75}]


def test_every_page_of_cells_is_read(store, tmp_path, monkeypatch):
    """Cells of a task over several pages of MLflow's search (a page of 2 here, of 1,000 in use) all enter."""
    from countboard.acs.tasks import COMPARED
    from countboard.quantify.comparison_runs import read_cells

    _, tracker = store
    search = tracker.client.search_runs
    monkeypatch.setattr(tracker.client, "search_runs",
                        lambda *a, **kw: search(*a, **{**kw, "max_results": 2}))
    spec = next(t for t in COMPARED if t.task == "bcc")
    cells, left_out = read_cells(tracker, experiment_ids(tracker), spec, tmp_path)
    assert sorted(cells["generator"]) == ["gen_a", "gen_a", "gen_b", "gen_c"] and len(left_out) == 2
