"""The negative-label summary's confusion figure: bounded size whatever the class count, showing what its title
says (the most confused classes), and its matrix against a direct per-class loop."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from countboard.counting.tasks.praco import MAX_FIGURE_CLASSES, _matrix_figure, class_confusion, most_confused
from tests.fixtures.benchmark_scripts import load_benchmark


def _direct(counts, gt, pos_idx, c):
    out = np.full((c, counts.shape[1]), np.nan)
    for k in range(c):
        rows = [counts[i] / gt[i] for i in range(len(gt)) if pos_idx[i] == k and gt[i] > 0]
        if rows:
            out[k] = np.mean(rows, axis=0)
    return out


def test_class_confusion_matches_a_direct_loop():
    rng = np.random.default_rng(3)
    for c, n in ((2, 5), (7, 40), (30, 31)):
        counts = rng.uniform(0, 10, (n, c))
        gt = rng.integers(0, 6, n).astype(float)
        pos = rng.integers(0, c, n)
        np.testing.assert_allclose(class_confusion(counts, gt, pos, c), _direct(counts, gt, pos, c), equal_nan=True)


def test_most_confused_picks_the_largest_off_diagonal_values():
    c = 100
    mean = np.eye(c)
    mean[10, 70] = 0.9  # images of class 10 counted as 70: both classes are shown
    mean[55, 3] = 0.5
    mean[20, :] = np.nan  # a class with no image
    picked = most_confused(mean, k=4)
    assert {3, 10, 55, 70} == set(picked.tolist())
    assert most_confused(np.eye(5), k=40).tolist() == [0, 1, 2, 3, 4]


def _pixels(png: bytes) -> tuple[int, int]:
    with Image.open(io.BytesIO(png)) as im:
        return im.size


def test_figure_size_is_bounded_whatever_the_class_count():
    rng = np.random.default_rng(0)
    sizes = {}
    for c in (5, MAX_FIGURE_CLASSES, 400):
        n = 2 * c
        counts = rng.uniform(0, 3, (n, c))
        pos = np.arange(n) % c
        counts[np.arange(n), pos] = 5.0
        classes = [f"class {k:04d}" for k in range(c)]
        sizes[c] = _pixels(_matrix_figure(counts, np.full(n, 5.0), classes, pos))
    assert sizes[5][0] < sizes[MAX_FIGURE_CLASSES][0]
    assert sizes[400][0] == sizes[MAX_FIGURE_CLASSES][0]
    assert 0 <= sizes[400][1] - sizes[MAX_FIGURE_CLASSES][1] < 30  # the title's second line
    assert max(sizes[400]) < 2000


@pytest.mark.slow
def test_benchmark_runs_a_real_cell_and_reports_its_memory(capsys):
    bench = load_benchmark("praco_classes_memory")
    rows = bench.main(["--classes", "60", "--images", "60", "--cap-gb", "8"])
    assert rows[0]["rc"] == 0 and 0 < rows[0]["rss_mib"] < 2048
    assert rows[0]["figure"] != "none"
    assert "peak RSS MiB" in capsys.readouterr().out
