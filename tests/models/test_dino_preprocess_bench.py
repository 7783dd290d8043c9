"""benchmarks/dino_preprocess.py runs end to end: both paths give the same pixels and features, every figure printed."""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_dino_preprocessing_benchmark_runs(capsys):
    spec = importlib.util.spec_from_file_location("dino_preprocess", ROOT / "benchmarks" / "dino_preprocess.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"480x640 +800x1066 +\d+\.\d +\d+\.\d +\d+\.\d\d  True", out), out
    assert re.search(r"encode_images, tiny model, 2 images .* features equal True", out), out
