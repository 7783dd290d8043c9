"""benchmarks/dino_preprocess.py runs end to end: both paths give the same pixels and features, every figure printed."""

import re

import pytest
from tests.fixtures.benchmark_scripts import load_benchmark


@pytest.mark.slow
def test_the_dino_preprocessing_benchmark_runs(capsys):
    bench = load_benchmark("dino_preprocess")
    assert bench.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"480x640 +800x1066 +\d+\.\d +\d+\.\d +\d+\.\d\d  True", out), out
    assert re.search(r"encode_images, tiny model, 2 images .* features equal True", out), out
