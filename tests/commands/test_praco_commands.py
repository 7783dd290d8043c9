"""``countboard import-praco`` / ``export-praco`` on the synthetic release: logged runs and a lossless round trip."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from countboard.cli import main
from countboard.tracking.store import open_store
from tests.fixtures.praco_release import MODEL, write_release


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return write_release(tmp_path_factory.mktemp("release"))


def _runs(tracker):
    exp = tracker.client.get_experiment_by_name("countboard/counters")  # imports land in their family's
    return tracker.client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])


def test_import_export_import_is_the_identity(release, tmp_path, capsys):
    store = tmp_path / "mlruns"
    common = ["--fsc147", str(release["meta"]), "--gt-density-maps", str(release["gt_dir"]),
              "--exclude", str(release["exclude"]), "--store", str(store), "--keep-maps"]
    assert main(["import-praco", str(release["model_dir"]), *common]) == 0
    out, err = capsys.readouterr()
    assert "logged run" in out and "left out Inference_Test1_SYN_test.csv:4,red apples: no count ('nan')" in err
    assert main(["import-praco", str(release["model_dir"]), *common]) == 0   # same files: skipped
    assert "skipped: an identical import exists" in capsys.readouterr().out
    tracker = open_store(str(store), create=True)
    (first,) = _runs(tracker)
    assert first.data.tags["task"] == "praco" and first.data.tags["model"] == MODEL
    # the released data it was scored from, tracked as MLflow datasets: the FSC-147 metadata (context: the split)
    # and the model's released results
    inputs = {i.dataset.name: (i.dataset.source, [t.value for t in i.tags]) for i in first.inputs.dataset_inputs}
    assert inputs == {"fsc147": (str(Path(release["meta"]).resolve()), ["test"]),
                      f"praco_release/{Path(release['model_dir']).name}":
                          (str(Path(release["model_dir"]).resolve()), ["predictions"])}
    artifacts = {a.path for a in tracker.client.list_artifacts(first.info.run_id)}
    assert {"files", "problems.json", "tables", "arrays"} <= artifacts

    exported = tmp_path / "exported"
    assert main(["export-praco", first.info.run_id, "--out", str(exported), "--store", str(store)]) == 0
    model_dir = exported / MODEL
    assert (model_dir / f"Inference_Test1_{MODEL}_test.csv").is_file()
    assert (model_dir / "density_maps").is_dir() and (exported / "gt_density_maps").is_dir()
    assert main(["import-praco", str(model_dir), "--fsc147", str(release["meta"]), "--gt-density-maps",
                 str(exported / "gt_density_maps"), "--exclude", str(release["exclude"]), "--store", str(store),
                 "--keep-maps"]) == 0
    second = _runs(tracker)[1]
    assert second.data.metrics == pytest.approx(first.data.metrics, rel=1e-6)
    assert set(second.data.metrics) == set(first.data.metrics)
    for name in ("negative_counts", "mosaic_upper", "mosaic_lower", "mosaic_pairs"):
        a = pd.read_parquet(tracker.download(first.info.run_id, f"tables/{name}.parquet", tmp_path / "a"))
        b = pd.read_parquet(tracker.download(second.info.run_id, f"tables/{name}.parquet", tmp_path / "b"))
        pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-6)
    csv_a = (tracker.download(first.info.run_id, "files/final_metrics_test.csv", tmp_path / "a")).read_text()
    csv_b = (tracker.download(second.info.run_id, "files/final_metrics_test.csv", tmp_path / "b")).read_text()
    assert csv_a == csv_b
    problems = json.loads(tracker.download(second.info.run_id, "problems.json", tmp_path / "b").read_text())
    # the exported layout holds only what was scored: no unknown rows or columns left to report
    assert not any("unicorns" in p or "999.jpg" in p for p in problems)


def test_export_of_local_task_runs(tmp_path):
    """A praco_negative + praco_mosaic pair of runs exports to the layout and imports back to the same counts."""
    from countboard.counting.released.exporter import build_results

    neg = pd.DataFrame({"image_id": ["a.jpg", "b.jpg"], "class_name": ["x", "y"], "gt": [3, 4],
                        "x": [3.0, 1.0], "y": [0.5, 4.0]})
    up = pd.DataFrame({"image_id": ["a.jpg", "b.jpg"], "gt": [3, 4], "x": [np.nan, 2.0], "y": [2.5, np.nan]})
    low = up.assign(x=[np.nan, 1.0], y=[0.0, np.nan])
    pairs = pd.DataFrame({"image_id": ["a.jpg", "b.jpg"], "class_name": ["x", "y"], "other_class": ["y", "x"],
                          "partner_id": ["b.jpg", "a.jpg"]})
    res = build_results({"negative_counts": neg, "mosaic_upper": up, "mosaic_lower": low, "mosaic_pairs": pairs},
                        "M", "test")
    assert res.classes == ["x", "y"] and res.images == ["a.jpg", "b.jpg"]
    np.testing.assert_array_equal(res.counts, [[3.0, 0.5], [1.0, 4.0]])
    np.testing.assert_array_equal(res.upper, [[np.nan, 2.5], [2.0, np.nan]])
    assert res.partners.tolist() == [[None, "b.jpg"], ["a.jpg", None]]
    assert res.pos_idx.tolist() == [0, 1]


def test_a_folder_without_results_is_refused(release, tmp_path, capsys):
    assert main(["import-praco", str(release["model_dir"]), "--fsc147", str(release["meta"]), "--model", "OTHER",
                 "--store", str(tmp_path / "mlruns")]) == 2
    err = capsys.readouterr().err
    assert "Inference_Test1_OTHER_test.csv" in err and "--model" in err


def test_several_folders_and_one_final_metrics_file(release, tmp_path, capsys):
    import shutil

    second = tmp_path / "benchmark_results" / "TWO"
    second.mkdir(parents=True)
    for path in release["model_dir"].glob("*.csv"):
        shutil.copy(path, second / path.name.replace(f"_{MODEL}_", "_TWO_"))
    out = tmp_path / "final_metrics_test.csv"
    assert main(["import-praco", str(release["model_dir"]), str(second), "--fsc147", str(release["meta"]),
                 "--exclude", str(release["exclude"]), "--store", str(tmp_path / "mlruns"),
                 "--final-metrics", str(out)]) == 0
    frame = pd.read_csv(out)
    assert frame["Model"].tolist() == [MODEL, "TWO"]
    assert frame.drop(columns="Model").iloc[0].equals(frame.drop(columns="Model").iloc[1])
    assert main(["import-praco", str(release["model_dir"]), str(second), "--model", "X", "--fsc147",
                 str(release["meta"]), "--store", str(tmp_path / "mlruns")]) == 2
    assert "give one MODEL_DIR" in capsys.readouterr().err


def test_export_of_an_unknown_run_is_one_clear_line(tmp_path, capsys):
    argv = ["export-praco", "0123456789abcdef", "--out", str(tmp_path / "o"), "--store", str(tmp_path / "mlruns")]
    assert main(argv) == 2  # export only reads: a store that does not exist is not created
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: no MLflow store at ")
    assert not (tmp_path / "mlruns" / "mlflow.db").exists()
    open_store(str(tmp_path / "mlruns"), create=True)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: run '0123456789abcdef' is not in the store")
