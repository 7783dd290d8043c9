"""``countboard demo``'s step table: every step's wall and CPU time, the failing one included."""

from __future__ import annotations

import subprocess
import sys

import pytest

from countboard.commands.demo import DEMO_EPOCHS, StepTimes


def test_each_step_is_timed_and_the_table_adds_them_up(capsys):
    times = StepTimes()
    with times.step("work"):
        sum(i * i for i in range(200_000))
    with times.step("a child process"):
        subprocess.run([sys.executable, "-c", "sum(i * i for i in range(2_000_000))"], check=True)
    assert capsys.readouterr().out == "\n== work\n\n== a child process\n"
    (name1, wall1, cpu1), (name2, wall2, cpu2) = times.rows
    assert (name1, name2) == ("work", "a child process")
    assert wall1 > 0 and cpu1 > 0 and cpu2 > 0.02  # the child's CPU counts once it has been waited for
    lines = times.table().splitlines()
    assert lines[0].split() == ["step", "wall", "s", "CPU", "s"] and len(lines) == 4
    total = lines[-1].split()
    assert total[0] == "total" and float(total[1]) == pytest.approx(round(wall1, 1) + round(wall2, 1), abs=0.11)


def test_a_failing_step_keeps_its_time():
    times = StepTimes()
    with pytest.raises(RuntimeError), times.step("fails"):
        raise RuntimeError("boom")
    assert [r[0] for r in times.rows] == ["fails"]


def test_the_demo_trains_as_long_as_train_counter():
    # 5 epochs were measured: the aware counter's mosaic F1 fell from 0.93 to 0.39, below the naive one
    from countboard.counting.models.shapecount_recipes import TRAIN_EPOCHS

    assert DEMO_EPOCHS == TRAIN_EPOCHS
