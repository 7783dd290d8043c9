"""``make screenshots`` (benchmarks/screenshots.py) on a tiny store: every page and the MLflow run are saved, small,
and show content; the palette reduction keeps a picture readable."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from tests.fixtures.benchmark_scripts import load_benchmark
from tests.fixtures.browser import MISSING
from tests.fixtures.synthetic_store import make_store, specs_from_schema


def test_optimise_keeps_the_picture_and_shrinks_it(tmp_path):
    shots = load_benchmark("screenshots")
    rng = np.random.default_rng(0)
    pixels = np.full((200, 320, 3), 255, np.uint8)
    pixels[20:60, 10:300] = (31, 119, 180)  # a bar of a chart
    pixels[100:180, 10:300] = rng.integers(0, 256, (80, 290, 3), dtype=np.uint8)  # noise: the worst case
    path = tmp_path / "p.png"
    Image.fromarray(pixels).save(path)
    before = path.stat().st_size
    after = shots.optimise(path)
    assert after == path.stat().st_size and after < before
    with Image.open(path) as img:
        assert img.mode == "P" and img.size == (320, 200)
        back = np.asarray(img.convert("RGB")).astype(int)
    assert np.abs(back[:100] - pixels[:100]).max() <= 8  # flat colours survive (nearly) exactly


@pytest.mark.slow
@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
def test_screenshots_of_a_tiny_store(tmp_path, capsys):
    shots = load_benchmark("screenshots")
    make_store(tmp_path / "store", specs_from_schema(models_per_family=2, datasets=("fsc147",)), seed=3)
    out = tmp_path / "img"
    assert shots.main(["--store", str(tmp_path / "store"), "--out", str(out)]) == 0
    names = {p.stem for p in out.glob("*.png")}
    assert names == (set(shots.PAGES) | {f"{p}_chart" for p in shots.CHARTS} | {"mlflow_run"}
                     | set(shots.SITE_PAGES)), names
    printed = capsys.readouterr().out
    for name in names:
        path = out / f"{name}.png"
        assert 5_000 < path.stat().st_size < shots.MAX_BYTES, (name, path.stat().st_size)
        assert f"{name}.png" in printed
        with Image.open(path) as img:
            assert img.size == shots.VIEWPORT
            colours = img.convert("RGB").getcolors(maxcolors=1 << 16)
        assert colours is None or len(colours) > 8, f"{name}.png is (nearly) blank"
