"""benchmarks/praco_throughput.py runs end to end on the tests' tiny models: both modes agree, every figure printed."""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_throughput_benchmark_runs_on_tiny_models(capsys):
    spec = importlib.util.spec_from_file_location("praco_throughput", ROOT / "benchmarks" / "praco_throughput.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--size", "tiny", "--counters", "owlv2,clipseg", "--images", "2", "--classes", "3"]) == 0
    out = capsys.readouterr().out
    assert len(re.findall(r"max \|count diff\| 0\.00e\+00", out)) == 2, out
    assert len(re.findall(r"host \(null model\) \d+\.\d{3} ms/pair", out)) == 2, out
    assert re.search(r"NMS candidates per pair \(score above threshold, centre in image\): \d+", out), out
