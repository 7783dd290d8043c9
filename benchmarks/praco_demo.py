"""Wall time of the offline PrACo demo: oracle and class_blind on synthetic_shapes, negative and mosaic tests.

Target: about one minute on a 2-core CPU, first-use dataset generation included. Prints the generation time of the
default synthetic_shapes settings, then the sweep's time with the data already generated and the sum.

Run: ``python benchmarks/praco_demo.py``
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from countboard.counting.datasets.synthetic_shapes import SyntheticShapes

TARGET_S = 60.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="max_samples=5 per cell (a smoke check of the script)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        t0 = time.perf_counter()
        ds = SyntheticShapes(tmp_path / "data" / "synthetic_shapes", split="test")
        gen_s = time.perf_counter() - t0
        env = {**os.environ, "COUNTBOARD_DATA_DIR": str(tmp_path / "data"), "COUNTBOARD_OUTPUTS": str(tmp_path / "o"),
               "MLFLOW_ENABLE_ASYNC_LOGGING": "false"}
        cmd = [sys.executable, "-m", "countboard.commands.sweep", "-m", "model=oracle,class_blind", "dataset=synthetic_shapes",
               "task=praco_negative,praco_mosaic", f"tracking.store_dir={tmp_path / 'mlruns'}", "progress=false"]
        if args.quick:
            cmd.append("max_samples=5")
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, env=env, cwd=tmp, capture_output=True)
        sweep_s = time.perf_counter() - t0
    n = len(ds)
    c = len(ds.classes)
    print(f"synthetic_shapes default: {n} test images, {c} classes ({n * c} negative prompts, {n * (c - 1)} mosaics)")
    print(f"generation (all splits, first use): {gen_s:6.1f} s")
    print(f"sweep, 4 cells (data present):      {sweep_s:6.1f} s")
    total = gen_s + sweep_s
    print(f"total:                              {total:6.1f} s  (target ~{TARGET_S:.0f} s; ratio {total / TARGET_S:.2f})")


if __name__ == "__main__":
    main()
