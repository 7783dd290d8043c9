"""A counter that returns NaN or inf for some images, in every counting task: those units fail with the reason
(``results.check_outputs`` over the task's ``model_outputs``), the others are scored, and no metric is NaN or
infinite (``results.split_metrics``)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from countboard.counting.datasets.praco_multiclass import SyntheticMulticlass
from countboard.counting.datasets.synthetic_shapes import SyntheticShapes
from countboard.counting.tasks.classic import ClassicCounting
from countboard.counting.tasks.praco import PracoMosaic, PracoNegative
from countboard.counting.tasks.praco_multiclass import PracoMulticlass
from countboard.results import RunContext, check_outputs, split_metrics
from tests.fixtures.countboard_toy import NonFiniteCounter, _nonfinite_of

SMALL = dict(image_size=(48, 48), size_range=(5.0, 8.0), count_range=(1, 10),
             images_per_class={"train": 0, "val": 0, "test": 3}, multi_class_images=0, n_classes=4)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    return SyntheticShapes(tmp_path_factory.mktemp("nonfinite") / "shapes", **SMALL)


@pytest.fixture(scope="module")
def multiclass(tmp_path_factory):
    return SyntheticMulticlass(tmp_path_factory.mktemp("nonfinite") / "mc", n_images=8, n_classes=4)


@pytest.mark.parametrize("task", [PracoNegative(), ClassicCounting(), PracoMosaic(n_figures=1), PracoMulticlass()],
                         ids=lambda t: t.name)
def test_non_finite_counts_fail_their_units_and_no_metric_is_non_finite(task, shapes, multiclass, tmp_path):
    dataset = multiclass if task.name == "praco_multiclass" else shapes
    model = NonFiniteCounter(every=4)
    ctx = RunContext(device="cpu", seed=0, batch_size=3, work_dir=tmp_path, progress=False)
    units = list(task.units(model, dataset, ctx))
    records = check_outputs(task.run_units(model, dataset, units, ctx), task.model_outputs)
    failed = {r["unit_id"]: r["error"] for r in records if "error" in r}
    # a unit fails when its image is one the counter returns NaN or inf for (a mosaic also when its collage is)
    bad = {u for u in units if _nonfinite_of(u.split("::")[0], 4) is not None}
    assert 0 < len(bad) < len(units) and len(failed) < len(units)
    assert bad <= set(failed) if task.name == "praco_mosaic" else bad == set(failed)
    assert all("finite" in e for e in failed.values()), failed
    ok = pd.DataFrame([r for r in records if "error" not in r])
    result = task.summarize(ok, model, dataset, ctx)
    finite, missing = split_metrics(result.metrics, result.missing, len(ok))
    assert all(math.isfinite(v) for v in finite.values())
    assert set(finite) | set(missing) == set(result.metrics)
