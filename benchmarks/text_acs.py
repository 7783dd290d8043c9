"""Where the time of one text_acs cell goes: generation, each classifier, binary and multi-class BCC.

Usage: ``python benchmarks/text_acs.py [--n 1000] [--draws 1000]``. Prints wall and CPU time per phase and each
phase's share of the cell (procedural generator, VADER, 35/30/35 sentiment stories, B = 100 simulated labels).
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path

import pandas as pd

from countboard.acs.datasets.text_prompts import TextPromptSet
from countboard.acs.models.text_classifiers import (
    LEXICON_MAP,
    EmbeddingZeroShotClassifier,
    TextBlobClassifier,
    VaderClassifier,
)
from countboard.acs.models.text_procedural import ProceduralStoryGenerator
from countboard.acs.tasks.text_acs import TextACSTask
from countboard.results import RunContext

DESCRIPTIONS = {"positive": "A happy story with a positive, joyful sentiment.",
                "neutral": "A factual, neutral description without emotion.",
                "negative": "A sad story with a negative, painful sentiment."}


def timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1000, help="prompts (texts) in the cell")
    parser.add_argument("--draws", type=int, default=1000, help="NUTS draws and tuning steps per chain")
    parser.add_argument("--quick", action="store_true", help="200 texts, 200 draws")
    args = parser.parse_args()
    if args.quick:
        args.n, args.draws = 200, 200
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.getLogger("countboard").setLevel(logging.ERROR)
    dataset = TextPromptSet(n_prompts=args.n, label_ratios={"positive": 35, "neutral": 30, "negative": 35})
    model = ProceduralStoryGenerator(success={"positive": 0.95, "neutral": 0.75, "negative": 0.9})
    rows = []
    texts, w, c = timed(lambda: [g.text for g in model.generate(dataset.items)])
    rows.append(("generate (procedural)", w, c))
    for name, clf in (("classify: vader", VaderClassifier(label_map=LEXICON_MAP)),
                      ("classify: textblob", TextBlobClassifier(label_map=LEXICON_MAP)),
                      ("classify: minilm_zeroshot", EmbeddingZeroShotClassifier(
                          DESCRIPTIONS, fallback_label="neutral", min_similarity=0.2))):
        clf.load("cpu")
        _, w, c = timed(lambda clf=clf: clf.classify(texts))
        rows.append((name, w, c))
    sampler = {"draws": args.draws, "tune": args.draws, "chains": 2}
    with tempfile.TemporaryDirectory() as tmp:
        ctx = RunContext(device="cpu", seed=0, batch_size=8, work_dir=Path(tmp), progress=False)
        for multiclass in (False, True):
            task = TextACSTask(VaderClassifier(label_map=LEXICON_MAP), sampler=sampler, multiclass=multiclass)
            records = pd.DataFrame(task.run_units(model, dataset, dataset.ids(), ctx))
            _, w, c = timed(lambda task=task, records=records: task.summarize(records, model, dataset, ctx))
            rows.append((f"summarize, {'binary + multi-class' if multiclass else 'binary'} BCC", w, c))
    base = rows[0][1] + rows[1][1] + rows[-1][1]
    print(f"text_acs cell: {args.n} texts, {args.draws} draws x 2 chains; cell = generate + vader + summarize "
          f"(multi-class on) = {base:.2f} s wall")
    print(f"{'phase':45s} {'wall s':>8s} {'CPU s':>8s} {'wall / cell':>12s}")
    for name, w, c in rows:
        print(f"{name:45s} {w:8.2f} {c:8.2f} {w / base:12.2f}")


if __name__ == "__main__":
    main()
