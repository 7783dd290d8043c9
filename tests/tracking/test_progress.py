"""A multirun read as a whole (``countboard.tracking.progress``): its line, its summary, on a file and a terminal."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from countboard.tracking import progress as pg
from countboard.tracking.progress import (FAILED, FINISHED, KILLED, NOT_RUN, RUNNING, SKIPPED, CellReport,
                                          CellState, SweepProgress, read_cells, status_line, summary, time_left)
from tests.conftest import store_runs, sweep_env

SRC = Path(__file__).resolve().parents[2] / "src"
#: The sweep's line, as printed when a cell ends (a file or pipe) or drawn (a terminal).
LINE = re.compile(r"^sweep (\d+)/(\d+) cells: (\d+) finished, (\d+) failed, (\d+) skipped")


class _Progress:
    """What ``engine.Progress`` hands to its report callback."""

    def __init__(self, **kw):
        self.name, self.run_id, self.saved, self.total = kw.get("name", ""), kw.get("run_id"), 0, 0
        self.__dict__.update(kw)


def test_time_left_is_the_mean_finished_time_over_the_lanes():
    cells = [CellState(0, "a", state=FINISHED, start=0, end=20), CellState(1, "b", state=FAILED, start=0, end=1),
             CellState(2, "c", start=10)]
    # 2 cells not started (20 s each) and 10 s left of the running one, two at a time
    assert time_left(cells, total=5, now=20, lanes=2) == pytest.approx(25.0)
    assert time_left(cells[1:], total=5, now=20, lanes=2) is None  # no cell finished: nothing to estimate from


def test_the_line_counts_cells_by_outcome_and_names_the_running_ones():
    cells = [CellState(0, "model=a", state=FINISHED), CellState(1, "model=b", state=SKIPPED),
             CellState(2, "model=c tracking.store_dir=/s", state=FAILED),
             CellState(3, "model=d", name="d · shapes", saved=8, total=24)]
    line = status_line(cells, 6, 65, None)
    assert line == ("sweep 3/6 cells: 1 finished, 1 failed, 1 skipped, 1 running | 1m05s elapsed, time left: ? | "
                    "#3 d · shapes 8/24")
    assert status_line(cells[:3], 3, 5, 0).endswith("| 5s elapsed")  # all done: no time left shown


def test_the_summary_gives_every_cell_its_status_time_and_run_id_and_each_failure_its_reason():
    now = 100.0
    cells = [CellState(0, "model=a", name="a", state=FINISHED, start=10, end=40, run_id="r0"),
             CellState(1, "model=b tracking.store_dir=/x", state=FAILED, start=10, end=12,
                       reason="task=t takes a counter; model=b is a text generator"),
             CellState(2, "model=c", name="c", start=50, run_id="r2")]
    lines = summary(cells, ["model=a", "model=b", "model=c", "model=d"], 90, now)
    assert lines[0] == "sweep summary: 4 cells in 1m30s: 1 finished, 1 failed, 1 killed, 1 not run"
    rows = [line.split() for line in lines[2:6]]
    assert rows[0] == ["0", "a", FINISHED, "30s", "r0"]
    assert rows[1] == ["1", "model=b", FAILED, "2s", "-"]  # where results go is left out of a label
    assert rows[2] == ["2", "c", KILLED, "50s", "r2"]  # still running when the sweep ended
    assert rows[3] == ["3", "model=d", "NOT", "RUN", "-", "-"]
    assert lines[6:] == ["failed:", "  #1 model=b: task=t takes a counter; model=b is a text generator"]


def test_a_job_report_is_read_back_and_follows_the_jobs_progress(tmp_path):
    report = CellReport(tmp_path, 3, ["model=a", "seed=1"])
    assert read_cells(tmp_path)[3].state == RUNNING
    report(_Progress(name="a · shapes", run_id="abc", saved=4, total=12))
    cell = read_cells(tmp_path)[3]
    assert (cell.name, cell.run_id, cell.saved, cell.total) == ("a · shapes", "abc", 4, 12)
    report.end(FAILED, reason="bad\nthing")
    cell = read_cells(tmp_path)[3]
    assert (cell.state, cell.reason, cell.run_id) == (FAILED, "bad thing", "abc") and cell.end >= cell.start
    assert [p.name for p in tmp_path.iterdir()] == ["cell-3.json"]  # replaced atomically, no temporary left
    (tmp_path / "cell-4.json").write_text("{")  # half-written by hand: skipped, not fatal
    assert set(read_cells(tmp_path)) == {3}


def test_no_report_without_a_launching_process_reading_one(tmp_path, monkeypatch):
    monkeypatch.delenv(pg.STATUS_ENV, raising=False)
    assert pg.job_report(0, ["model=a"]) is None
    monkeypatch.setenv(pg.STATUS_ENV, str(tmp_path / "gone"))
    assert pg.job_report(0, ["model=a"]) is None


def _state(folder: Path, cell: CellState) -> None:
    (folder / f"cell-{cell.num}.json").write_text(json.dumps(cell.__dict__))


def test_to_a_file_a_plain_line_per_ended_cell_then_the_summary(tmp_path):
    out = io.StringIO()
    sweep = SweepProgress(tmp_path, ["model=a", "model=b"], lanes=2, stream=out, tty=False, interval_s=60)
    sweep.start()
    t = time.time()
    _state(tmp_path, CellState(0, "model=a", name="a", start=t))
    (tmp_path / "cell-0.out").write_text("a line of the job\nhalf a li")
    sweep.tick()
    assert out.getvalue() == "a line of the job\n"  # nothing drawn while no cell has ended
    _state(tmp_path, CellState(0, "model=a", name="a", state=FINISHED, start=t - 4, end=t, run_id="r0"))
    with (tmp_path / "cell-0.out").open("a") as f:
        f.write("ne\n")
    sweep.tick()
    sweep.tick()  # a cell's end is printed once
    lines = out.getvalue().splitlines()
    assert lines[1] == "half a line"
    assert LINE.match(lines[2]).groups() == ("1", "2", "1", "0", "0") and lines[2].endswith("#0 a FINISHED in 4s")
    assert len(lines) == 3
    sweep.finish()
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    assert "sweep summary: 2 cells" in text and re.search(r"1\s+model=b\s+NOT RUN", text)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_other_lines_are_written_above_the_line(tmp_path, monkeypatch):
    err = _Tty()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(shutil, "get_terminal_size", lambda fallback=None: os.terminal_size((60, 20)))
    handler = logging.StreamHandler(err)
    logger = logging.getLogger("countboard.test_progress")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        sweep = SweepProgress(tmp_path, ["model=a"], stream=err, interval_s=60)
        sweep.start()
        _state(tmp_path, CellState(0, "model=a", name="a" * 80, start=time.time(), saved=2, total=9))
        sweep.tick()
        logger.warning("a log line")
        sweep.finish()
    finally:
        logger.removeHandler(handler)
    assert handler.stream is err and sys.stderr is err  # given back at the end
    text = err.getvalue()
    # every write clears the line first and draws it again after a complete line; the line fits the width
    drawn = [part.split("\n")[0] for part in text.split(pg._CLEAR)[1:]]
    assert [d for d in drawn if d and not d.startswith("sweep")] == ["a log line"]
    assert [len(d) for d in drawn if LINE.match(d)] and all(len(d) <= 57 for d in drawn if LINE.match(d))
    rows = text.replace(pg._CLEAR, "\n").splitlines()
    assert "a log line" in rows and not any("a log line" in r and "sweep" in r for r in rows)
    assert re.search(r"0\s+a{80}\s+KILLED", text)


# --- real sweeps -----------------------------------------------------------------------------------------------

#: Two cells on the synthetic shapes: the oracle, and a text model the counting task does not take (it fails, as
#: a cell the user can fix does: in one line).
SWEEP = ["-m", "model=oracle,story_procedural_good", "dataset=synthetic_shapes", "task=praco_negative",
         "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "max_samples=6", "checkpoint_every=2"]


def _sweep_cmd(tmp_path: Path) -> list[str]:
    return [sys.executable, "-m", "countboard.commands.sweep", *SWEEP, f"tracking.store_dir={tmp_path / 'store'}",
            f"hydra.sweep.dir={tmp_path / 'multirun'}"]


def _env(tmp_path: Path) -> dict[str, str]:
    env = sweep_env(tmp_path, PYTHONPATH=str(SRC))
    for key in ("COUNTBOARD_DEBUG", "HYDRA_FULL_ERROR", "COUNTBOARD_VERBOSE"):
        env.pop(key, None)
    return env


@pytest.mark.slow
def test_a_sweep_to_a_file_prints_a_line_per_cell_and_a_summary(tmp_path):
    proc = subprocess.run(_sweep_cmd(tmp_path), capture_output=True, text=True, timeout=600, env=_env(tmp_path),
                          cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]  # a cell failed
    assert "Joblib.Parallel" not in out and "Launching jobs" not in out and "Traceback" not in out, out[-3000:]
    assert "\r" not in out and "\x1b" not in out and "%|" not in out  # no redrawn line, no per-cell bar
    assert proc.stderr.splitlines() == [line for line in proc.stderr.splitlines() if line.startswith("error: job #1 ")]
    lines = proc.stdout.splitlines()  # the line and the summary: the sweep's output; stderr has its error alone
    status = [LINE.match(line).groups() for line in lines if LINE.match(line)]
    assert sorted(status, key=lambda g: g[0]) in (
        [("1", "2", "0", "1", "0"), ("2", "2", "1", "1", "0")], [("1", "2", "1", "0", "0"), ("2", "2", "1", "1", "0")])
    oracle = store_runs(tmp_path / "store")
    run_id = oracle[oracle["tags.mlflow.runName"].str.startswith("oracle", na=False)]["run_id"].iloc[0]
    summary_at = next(i for i, line in enumerate(lines) if line.startswith("sweep summary: 2 cells in "))
    assert lines[summary_at].endswith(": 1 finished, 1 failed")
    rows = lines[summary_at + 2:summary_at + 4]
    assert re.match(r"^  0  oracle · synthetic_shapes · praco_negative · first 6\s+FINISHED\s+\d+s\s+" + run_id,
                    rows[0]), rows
    assert re.match(r"^  1  model=story_procedural_good .*\s+FAILED\s+\d+s\s+-$", rows[1]), rows
    assert "tracking.store_dir" not in rows[1]
    assert lines[summary_at + 4] == "failed:"
    assert re.match(r"^  #1 model=story_procedural_good .*: task=praco_negative takes a counter; "
                    r"model=story_procedural_good is a text generator", lines[summary_at + 5])
    # the cell's own error line is printed once (relayed from its worker), on stderr
    assert len(proc.stderr.splitlines()) == 1

    again = subprocess.run(_sweep_cmd(tmp_path), capture_output=True, text=True, timeout=600, env=_env(tmp_path),
                           cwd=tmp_path)
    assert again.returncode == 1 and "Traceback" not in again.stderr + again.stdout
    assert re.search(r"^  0  oracle .*\s+SKIPPED\s+\d+s\s+-$", again.stdout, re.M), again.stdout[-2000:]
    assert re.search(r"^sweep summary: 2 cells in \S+: 0 finished, 1 failed, 1 skipped$", again.stdout, re.M)


def _pane(session: str) -> list[str]:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True,
                          check=True).stdout.splitlines()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux for a real terminal")
def test_a_sweep_on_a_terminal_shows_one_line_redrawn_in_place(tmp_path):
    session = f"countboard-progress-{os.getpid()}"
    env = _env(tmp_path)
    script = tmp_path / "sweep.sh"
    # the pane's own size, not one the environment carries (shutil.get_terminal_size reads COLUMNS first)
    exports = "".join(f"export {k}={_quote(v)}\n" for k, v in env.items()
                      if re.fullmatch(r"[A-Z_][A-Z0-9_]*", k) and k not in ("COLUMNS", "LINES"))
    # the pane's size set on its terminal before the sweep starts (a detached session may begin at tmux's default)
    script.write_text(f"{exports}stty cols 150 rows 60\ncd {_quote(str(tmp_path))}\n"
                      f"{' '.join(_quote(a) for a in _sweep_cmd(tmp_path))}\necho \"EXIT $?\"\nsleep 300\n")
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "150", "-y", "60", "bash", str(script)],
                   check=True)
    seen, panes = set(), []
    try:
        deadline = time.time() + 600
        while time.time() < deadline:
            pane = _pane(session)
            panes.append(pane)
            seen.update(line for line in pane if LINE.match(line))
            if any(line.startswith("EXIT ") for line in pane):
                break
            time.sleep(0.5)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    final = panes[-1]
    assert "EXIT 1" in final, "\n".join(final)
    for pane in panes:  # at any moment, one progress line at most, alone on its row
        assert sum(bool(LINE.match(line)) for line in pane) <= 1, "\n".join(pane)
        assert not any(re.search(r"sweep \d+/\d+ cells: ", line) and not LINE.match(line) for line in pane), \
            "\n".join(pane)
        assert all(len(line) <= 150 for line in pane)
    assert any(re.search(r"running \| .* \| #\d+ ", line) for line in seen), seen  # the running cells were named
    text = "\n".join(final)
    assert not any(LINE.match(line) for line in final), text  # the line is gone once the summary is shown
    assert "Joblib.Parallel" not in text and "Traceback" not in text and "%|" not in text
    assert re.search(r"^  0  oracle .*FINISHED", text, re.M) and re.search(r"^  1  model=story_.*FAILED", text, re.M)
    assert sum(line.startswith("error: job #1 ") for line in final) == 1
    assert any(line.startswith("[") and "done oracle" in line for line in final)


def _quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def test_a_worker_job_writes_its_stdout_and_stderr_to_the_status_folder(tmp_path, monkeypatch, capfd):
    report = CellReport(tmp_path, 2, ["model=a"])
    monkeypatch.setenv(pg.RELAY_ENV, "1")
    with pg.relayed_output(report, here=False):
        os.write(1, b"out of the job\n")
        os.write(2, b"error: of the job\n")
    os.write(1, b"after\n")
    assert pg.log_path(tmp_path, 2, 1).read_text() == "out of the job\n"
    assert pg.log_path(tmp_path, 2, 2).read_text() == "error: of the job\n"
    assert capfd.readouterr().out == "after\n"  # the descriptors are given back
    with pg.relayed_output(report, here=True):  # a job of the launching process writes where it writes
        os.write(1, b"here\n")
    assert capfd.readouterr().out == "here\n"


def test_lanes_follow_the_launcher():
    from omegaconf import OmegaConf

    from countboard.tracking.callbacks import _lanes

    assert _lanes(OmegaConf.create({"n_jobs": 2}), 5) == 2
    assert _lanes(OmegaConf.create({"n_jobs": -1}), 500) == os.cpu_count()
    assert _lanes(OmegaConf.create({"n_jobs": 8}), 3) == 3  # no more lanes than cells
    assert _lanes(OmegaConf.create({"gpus": "0,1"}), 5) == 2
    assert _lanes(OmegaConf.create({}), 5) == 1  # Hydra's basic launcher: one cell at a time
