"""Peak memory and time of one ``praco_negative`` cell as the class list grows (an LVIS-size vocabulary).

For each class count, a dataset in the FSC-147 layout is generated under a temporary folder: ``--images`` images
(24 x 24 grey JPEGs with 1 to 5 annotated points), spread evenly over that many classes, every class prompted on
every image (``classes x images`` prompts). One real sweep subprocess per class count runs it
(``model=oracle dataset=fsc147 task=praco_negative``, a local store) under an address-space cap
(``RLIMIT_AS``, ``--cap-gb``: a blow-up fails the run instead of taking the machine), and the benchmark prints the
subprocess's peak resident memory (``wait4``'s ``ru_maxrss``), its wall time, the summary figure's size in pixels
and the run's status.

    python benchmarks/praco_classes_memory.py                       # 30, 300 and 1,000 classes x 1,000 images
    python benchmarks/praco_classes_memory.py --classes 30 --images 60 --cap-gb 6
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_layout(root: Path, n_classes: int, n_images: int, seed: int = 0) -> Path:
    """An FSC-147-layout test split of ``n_images`` tiny images over ``n_classes`` classes (names ``class 0007``)."""
    import numpy as np
    from PIL import Image

    from countboard.counting.datasets import fsc147

    rng = np.random.default_rng(seed)
    (root / fsc147.IMAGE_DIR).mkdir(parents=True)
    classes = [f"class {k:04d}" for k in range(n_classes)]
    annotations, class_of, ids = {}, {}, []
    for i in range(n_images):
        image_id = f"img_{i:05d}.jpg"
        Image.fromarray(rng.integers(0, 256, (24, 24), dtype=np.uint8)).save(root / fsc147.IMAGE_DIR / image_id)
        pts = rng.uniform(1, 23, (int(rng.integers(1, 6)), 2)).round(1).tolist()
        annotations[image_id] = {"H": 24, "W": 24, "points": pts, "box_examples_coordinates": []}
        class_of[image_id] = classes[i % n_classes]
        ids.append(image_id)
    (root / fsc147.ANNOTATION_FILE).write_text(json.dumps(annotations))
    (root / fsc147.CLASSES_FILE).write_text("".join(f"{i}\t{c}\n" for i, c in class_of.items()))
    (root / fsc147.SPLITS_FILE).write_text(json.dumps({"train": [], "val": [], "test": ids}))
    (root / fsc147.SPLIT_CLASSES_FILE).write_text(json.dumps({"train": [], "val": [], "test": classes}))
    return root


def run_cell(data: Path, store: Path, cap_gb: float) -> dict:
    """One sweep subprocess over ``data``: its peak RSS (MiB), wall time (s), return code and last stderr line."""
    cap = int(cap_gb * 2**30)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    cmd = [sys.executable, "-m", "countboard.commands.sweep", "model=oracle", "dataset=fsc147",
           f"dataset.root={data}", "dataset.exclude=null", "task=praco_negative", f"tracking.store_dir={store}",
           "progress=false", "num_workers=0", f"hydra.run.dir={store.parent / 'outputs'}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": f"{ROOT / 'src'}:{os.environ.get('PYTHONPATH', '')}"}
    start = time.perf_counter()
    with open(store.parent / "stderr.txt", "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, preexec_fn=limit)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = (store.parent / "stderr.txt").read_text().strip().splitlines()
    return {"rss_mib": usage.ru_maxrss / 1024, "wall_s": wall, "rc": proc.returncode,
            "last_line": lines[-1] if lines else ""}


def figure_pixels(store: Path) -> str:
    """``W x H`` of the run's ``negative_matrix`` figure ("none" when the run wrote none)."""
    from PIL import Image

    found = sorted(store.rglob("negative_matrix.png"))
    if not found:
        return "none"
    with Image.open(found[-1]) as im:
        return f"{im.width} x {im.height}"


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", default="30,300,1000", help="comma list of class counts")
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--cap-gb", type=float, default=8.0, help="address-space cap of each cell (RLIMIT_AS)")
    args = parser.parse_args(argv)
    rows = []
    print(f"{'classes':>8} {'images':>7} {'prompts':>10} {'peak RSS MiB':>13} {'wall s':>7} {'figure px':>12} rc")
    for n in (int(c) for c in args.classes.split(",")):
        with tempfile.TemporaryDirectory(prefix="praco-classes-") as tmp:
            data = write_layout(Path(tmp) / "data", n, args.images)
            store = Path(tmp) / "run" / "mlruns"
            store.parent.mkdir()
            row = {"classes": n, "images": args.images, **run_cell(data, store, args.cap_gb),
                   "figure": figure_pixels(store)}
        rows.append(row)
        print(f"{n:>8} {args.images:>7} {n * args.images:>10,} {row['rss_mib']:>13.0f} {row['wall_s']:>7.1f} "
              f"{row['figure']:>12} {row['rc']}" + ("" if row["rc"] == 0 else f"  {row['last_line']}"), flush=True)
    return rows


if __name__ == "__main__":
    main()
