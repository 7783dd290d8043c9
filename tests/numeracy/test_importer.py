"""``countboard import-geckonum`` into a temporary MLflow store."""

from __future__ import annotations

import argparse
import json
import zipfile
from pathlib import Path

import pytest

from countboard import cli
from countboard.commands.import_geckonum import register
from countboard.fingerprint import path_fingerprint
from countboard.numeracy.importer import ImportOptions, build_runs, task_name
from countboard.schema import load_schema

REPO = Path(__file__).resolve().parents[2]

# Table 2 of the paper (Kajić et al., 2024): accuracy (%) per task, in the order of GENERATORS
# (DALL-E 3, Imagen-A, Imagen-B, Imagen-C, Imagen-D, Muse-A, Muse-B).
PAPER_TABLE_2 = {
    1: (45.2, 26.3, 27.0, 34.8, 28.5, 34.8, 39.8),
    2: (48.7, 20.0, 24.6, 27.0, 28.7, 21.0, 24.6),
    3: (48.8, 41.1, 42.9, 50.6, 43.8, 45.1, 46.2),
}
# Its standard errors (percentage points).
PAPER_TABLE_2_SE = {
    1: (0.5, 0.4, 0.4, 0.4, 0.4, 0.4, 0.5),
    2: (2.7, 2.2, 2.3, 2.4, 2.4, 2.2, 2.3),
    3: (1.1, 1.3, 1.4, 1.2, 1.3, 1.2, 1.2),
}


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["import-geckonum", *argv])
    return args.func(args)


def _runs(store: Path):
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlflow.db'}")
    return mlflow.search_runs(search_all_experiments=True)


def test_subcommand_is_registered():
    assert "countboard.commands.import_geckonum" in cli._SUBCOMMANDS


def test_metrics_are_declared_and_reproduce_table_2(geckonum_dir):
    runs, problems = build_runs(
        geckonum_dir / "geckonum_annotations.zip", geckonum_dir, ImportOptions(n_boot=50, n_perm=50)
    )
    assert not problems
    assert len(runs) == 21
    # All 21 cells of Table 2 within 0.35 percentage points, and the standard errors as printed.
    from countboard.numeracy.release import GENERATORS

    for run in runs:
        k = GENERATORS.index(run.generator)
        acc = run.metrics["numeracy_accuracy"] * 100
        assert acc == pytest.approx(PAPER_TABLE_2[run.task][k], abs=0.35), (run.task, run.generator, acc)
        se = run.metrics["numeracy_accuracy_se"] * 100
        assert se == pytest.approx(PAPER_TABLE_2_SE[run.task][k], abs=0.051), (run.task, run.generator, se)
        assert run.params["ties"] == "first" and run.params["ranges"] == "up"
    schema = load_schema()
    for run in runs:
        for key in run.metrics:
            assert schema.metric(key).family == "generators"
    t1 = [r for r in runs if r.task == 1]
    assert {r.generator for r in t1} == {
        "dalle_3",
        "imagen_a",
        "imagen_b",
        "imagen_c",
        "imagen_d",
        "muse_a",
        "muse_b",
    }
    assert all("numeracy_digits_words_p_value" in r.metrics for r in t1)
    assert schema.families["generators"].main_metric == "numeracy_accuracy"


@pytest.mark.slow
def test_import_logs_one_run_per_generator_and_task_then_skips(geckonum_dir, tmp_path, capsys):
    store = tmp_path / "store"
    argv = [str(geckonum_dir / "geckonum_annotations.zip"), "--store", str(store), "--task", "2", "--task", "3",
            "--n-boot", "100"]  # fmt: skip
    assert cli.main(["import-geckonum", *argv]) == 0  # the real entry point
    assert "logged 14 run(s)" in capsys.readouterr().out
    runs = _runs(store)
    assert len(runs) == 14
    assert set(runs["tags.task"]) == {task_name(2), task_name(3)}
    assert set(runs["tags.model_kind"]) == {"generator"} and set(runs["tags.family"]) == {"generators"}
    assert set(runs["tags.dataset"]) == {"geckonum"}
    dalle_t3 = runs[(runs["tags.model"] == "dalle_3") & (runs["tags.task"] == task_name(3))].iloc[0]
    assert dalle_t3["metrics.numeracy_accuracy"] == pytest.approx(0.488, abs=0.0005)
    assert dalle_t3["metrics.numeracy_n_images"] == 285
    artifacts = Path(dalle_t3["artifact_uri"].removeprefix("file://"))
    assert (artifacts / "samples.parquet").is_file()
    assert (artifacts / "tables" / "per_prompt_type.parquet").is_file()
    # the release it came from, tracked as MLflow datasets, in the numeracy experiment
    from countboard.tracking.store import open_store

    tracker = open_store(str(store))
    run = tracker.client.get_run(dalle_t3["run_id"])
    inputs = {(i.dataset.name, i.dataset.source): i.dataset.digest for i in run.inputs.dataset_inputs}
    zip_path = str((geckonum_dir / "geckonum_annotations.zip").resolve())
    assert inputs == {("geckonum/annotations", zip_path): path_fingerprint(zip_path),
                      ("geckonum/prompts", str((geckonum_dir / "prompts.csv").resolve())):
                          path_fingerprint(geckonum_dir / "prompts.csv")}
    assert {t.value for i in run.inputs.dataset_inputs for t in i.tags} == {"human_study"}
    assert tracker.client.get_experiment(run.info.experiment_id).name == "countboard/numeracy"
    assert _run(argv) == 0
    assert "logged 0 run(s), skipped 14 already imported" in capsys.readouterr().out
    assert len(_runs(store)) == 14


@pytest.mark.slow
def test_bad_rows_are_reported_and_the_rest_imported(geckonum_dir, tmp_path, capsys):
    folder = tmp_path / "annotations"
    folder.mkdir()
    with zipfile.ZipFile(geckonum_dir / "geckonum_annotations.zip") as zf:
        zf.extract("task_2_muse_b.csv", folder)
        lines = zf.read("task_1_dalle_3.csv").decode().splitlines()[:201]
    lines[3] = lines[3].replace(",dalle_3,", ",dalle_4,")
    lines[7] = lines[7].replace("geckonum_00000_", "geckonum_07777_")
    head, _, _ = lines[20].rpartition(",")
    lines[20] = head.rpartition(",")[0] + ",??,??"
    (folder / "task_1_dalle_3.csv").write_text("\n".join(lines) + "\n")
    store = tmp_path / "store"
    assert _run([str(folder), "--prompts", str(geckonum_dir / "prompts.csv"), "--store", str(store),
                 "--n-boot", "50"]) == 0  # fmt: skip
    captured = capsys.readouterr()
    assert "task_1_dalle_3.csv:4: unknown generator 'dalle_4'" in captured.err
    assert "task_1_dalle_3.csv:8: prompt id 7777 of image geckonum_07777_" in captured.err
    assert "task_1_dalle_3.csv:21: cannot read answer '??'" in captured.err
    assert "logged 2 run(s)" in captured.out and "left out 3 row(s)" in captured.out
    runs = _runs(store)
    t1 = runs[runs["tags.task"] == task_name(1)].iloc[0]
    assert t1["metrics.numeracy_n_annotations"] == 197
    assert t1["metrics.numeracy_n_skipped_rows"] == 3
    problems = json.loads((Path(t1["artifact_uri"].removeprefix("file://")) / "problems.json").read_text())
    assert [p["line"] for p in problems] == [4, 8, 21]
    assert (Path(t1["artifact_uri"].removeprefix("file://")) / "figures" / "number_confusion.png").is_file()


def _small_folder(geckonum_dir, tmp_path, n_lines: int = 201) -> Path:
    folder = tmp_path / "annotations"
    folder.mkdir()
    with zipfile.ZipFile(geckonum_dir / "geckonum_annotations.zip") as zf:
        lines = zf.read("task_1_dalle_3.csv").decode().splitlines()[:n_lines]
    (folder / "task_1_dalle_3.csv").write_text("\n".join(lines) + "\n")
    return folder


def test_malformed_rows_are_reported_and_the_rest_imported(geckonum_dir, tmp_path):
    folder = _small_folder(geckonum_dir, tmp_path)
    lines = (folder / "task_1_dalle_3.csv").read_text().splitlines()
    lines[5] += ",extra"  # line 6: nine fields
    lines[9] = "geckonum_00000_1,dalle_3"  # line 10: two fields
    (folder / "task_1_dalle_3.csv").write_text("\n".join(lines) + "\n")
    runs, problems = build_runs(folder, geckonum_dir, ImportOptions(tasks=(1,), n_boot=10, n_perm=10))
    assert [str(p).split(" (")[0] for p in problems] == [
        "task_1_dalle_3.csv:6: expected 8 fields, got 9",
        "task_1_dalle_3.csv:10: expected 8 fields, got 2",
    ]
    assert len(runs) == 1 and runs[0].metrics["numeracy_n_annotations"] == 198
    # Later rows keep their own line numbers: a bad value after the skipped rows is reported where it is.
    lines[30] = lines[30].replace(",dalle_3,", ",dalle_9,")
    (folder / "task_1_dalle_3.csv").write_text("\n".join(lines) + "\n")
    _, problems = build_runs(folder, geckonum_dir, ImportOptions(tasks=(1,), n_boot=10, n_perm=10))
    assert str(problems[-1]).startswith("task_1_dalle_3.csv:31: unknown generator 'dalle_9'")


def test_empty_or_broken_zip_is_one_clear_error(geckonum_dir, tmp_path, capsys):
    empty = tmp_path / "geckonum_annotations.zip"
    zipfile.ZipFile(empty, "w").close()
    argv = ["import-geckonum", str(empty), "--prompts", str(geckonum_dir / "prompts.csv"),
            "--store", str(tmp_path / "store")]  # fmt: skip
    assert cli.main(argv) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no task_<n>_<generator>.csv for task(s) 1, 2, 3" in err[0] and str(empty) in err[0]
    empty.write_bytes(b"not a zip at all")
    assert cli.main(argv) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a readable zip" in err[0]


_CHILD = """
import argparse, sys, time
from countboard.commands import import_geckonum as gi
from countboard.tracking import store as st
class Slow:
    def __init__(self, tracker): self.t = tracker
    def __getattr__(self, name): return getattr(self.t, name)
    def log_complete_run(self, *a, **k):
        self.t.log_dir = self.hang
        return self.t.log_complete_run(*a, **k)
    def hang(self, *a, **k):
        print("logging", flush=True)
        time.sleep(600)
real = st.open_store  # the command opens its store through tracking.store when it runs
st.open_store = lambda store, **kw: Slow(real(store, **kw))
parser = argparse.ArgumentParser()
gi.register(parser.add_subparsers())
args = parser.parse_args(["import-geckonum", *sys.argv[1:]])
sys.exit(args.func(args))
"""


def _start_hanging_import(argv: list[str]):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, *argv], stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout.readline().strip() == "logging"  # the run exists, RUNNING, its owner alive
    return child


def test_killed_import_leaves_no_running_run(geckonum_dir, tmp_path, capsys):
    import os
    import signal

    folder, store = _small_folder(geckonum_dir, tmp_path), tmp_path / "store"
    argv = [str(folder), "--prompts", str(geckonum_dir / "prompts.csv"), "--store", str(store), "--task", "1",
            "--n-boot", "10", "--n-perm", "10"]  # fmt: skip
    child = _start_hanging_import(argv)
    try:
        assert _run(argv) == 0
        out = capsys.readouterr()
        assert "another import is logging it now" in out.err and "logged 0 run(s)" in out.out
        assert _runs(store)["status"].tolist() == ["RUNNING"]
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    assert _run(argv) == 0
    out = capsys.readouterr()
    assert "ended 1 run(s) left RUNNING by a killed import" in out.err and "logged 1 run(s)" in out.out
    assert sorted(_runs(store)["status"]) == ["FINISHED", "KILLED"]
    assert _run(argv) == 0 and "skipped 1 already imported" in capsys.readouterr().out


def test_terminated_import_ends_its_run_failed(geckonum_dir, tmp_path, capsys):
    import signal

    folder, store = _small_folder(geckonum_dir, tmp_path), tmp_path / "store"
    argv = [str(folder), "--prompts", str(geckonum_dir / "prompts.csv"), "--store", str(store), "--task", "1",
            "--n-boot", "10", "--n-perm", "10"]  # fmt: skip
    child = _start_hanging_import(argv)
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=60) == 128 + signal.SIGTERM
    assert _runs(store)["status"].tolist() == ["FAILED"]
    assert _run(argv) == 0
    out = capsys.readouterr()
    assert "ended" not in out.err and "logged 1 run(s)" in out.out
    assert sorted(_runs(store)["status"]) == ["FAILED", "FINISHED"]
