"""benchmarks/praco_throughput.py runs end to end on the tests' tiny models: both modes agree, every figure printed."""

import re

import pytest

from tests.fixtures.benchmark_scripts import load_benchmark


@pytest.mark.slow
def test_the_throughput_benchmark_runs_on_tiny_models(capsys):
    bench = load_benchmark("praco_throughput")
    assert bench.main(["--size", "tiny", "--counters", "owlv2,clipseg", "--images", "2", "--classes", "3"]) == 0
    out = capsys.readouterr().out
    assert len(re.findall(r"max \|count diff\| 0\.00e\+00", out)) == 2, out
    assert len(re.findall(r"host \(null model\) \d+\.\d{3} ms/pair", out)) == 2, out
    assert re.search(r"NMS candidates per pair \(score above threshold, centre in image\): \d+", out), out
