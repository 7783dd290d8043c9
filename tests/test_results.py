"""Model outputs are checked once for every task (``results.check_outputs``) and metrics are never logged as NaN
or infinite (``results.split_metrics``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from countboard.results import check_outputs, missing_text, split_metrics


def test_a_non_finite_model_output_fails_its_unit_with_the_reason():
    nan, inf = float("nan"), float("inf")
    records = [
        {"unit_id": "a", "counts": [1.0, 2.0], "pred": 3.0},
        {"unit_id": "b", "counts": [1.0, nan], "pred": 3.0},
        {"unit_id": "c", "counts": [1.0, 2.0], "pred": -inf},
        {"unit_id": "d", "counts": np.array([[1.0, 2.0], [inf, 0.0]]), "pred": 1.0},
        {"unit_id": "e", "counts": [[1.0], [2.0, nan]], "pred": 1.0},
        {"unit_id": "f", "error": "image unreadable"},
        {"unit_id": "g", "counts": [1.0], "pred": 2.0, "drift": nan, "name": "x", "png": b"\x00"},
    ]
    out = check_outputs(records, ["counts", "pred"])
    assert [r["unit_id"] for r in out] == list("abcdefg")
    assert out[0] is records[0] and out[6] is records[6]  # a NaN outside the model's outputs is the task's own
    assert out[1] == {"unit_id": "b", "error": "the model returned a non-finite counts (nan at 1); the unit is "
                                               "failed and retried by the next run"}
    assert "non-finite pred (-inf)" in out[2]["error"]
    assert "non-finite counts (inf at [1, 0])" in out[3]["error"]
    assert "non-finite counts (nan at 1)" in out[4]["error"]
    assert out[5] == {"unit_id": "f", "error": "image unreadable"}
    assert check_outputs(records, []) == records


def test_metrics_that_are_not_finite_are_missing_with_their_reason():
    finite, missing = split_metrics({"mae": 2, "mape": float("inf"), "nmn": float("nan"), "pccn": None,
                                     "rmse": -float("inf")}, {"nmn": "every image has ground truth 0"}, 7)
    assert finite == {"mae": 2.0}
    assert missing == {"mape": "infinite (inf) on the 7 units that succeeded",
                       "nmn": "every image has ground truth 0",
                       "pccn": "undefined (NaN) on the 7 units that succeeded",
                       "rmse": "infinite (-inf) on the 7 units that succeeded"}
    assert all(math.isfinite(v) for v in finite.values())
    # a reason for a metric the task did not compute at all is kept too; a computed one never is missing
    assert split_metrics({"mae": 1.0}, {"mae": "x", "nmn": "no images"}, 1) == ({"mae": 1.0}, {"nmn": "no images"})
    assert missing_text(missing).startswith("mape: infinite (inf) on the 7 units that succeeded; nmn: every image")
    assert missing_text({}) == ""


@pytest.mark.parametrize("value", [float("nan"), float("inf"), np.float32("nan"), np.array([np.inf])])
def test_every_kind_of_number_is_checked(value):
    assert "error" in check_outputs([{"unit_id": "u", "x": value}], ["x"])[0]
