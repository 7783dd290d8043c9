"""The published site's paper tables know the 2026 benchmarks: each benchmark with classic runs gets its scores table
(the publisher's metrics first), as a page section and as CSV, with the values the runs logged."""

from __future__ import annotations

import pandas as pd
import pytest

from countboard.index import build_index
from countboard.index.scores_table import BENCHMARKS, SCORE_COLUMNS
from tests.fixtures.synthetic_store import FamilySpec, make_store

DATASETS = ["pixmo_count", "tallyqa", "capture", "fscd147", "countqa", "mucca"]
MODELS = ["vlm_a", "owl_b"]


@pytest.mark.slow  # a store indexed and published
def test_the_site_publishes_a_scores_table_per_new_benchmark(tmp_path):
    from mlflow.tracking import MlflowClient

    from countboard.publish import Options, build_site

    made = make_store(tmp_path / "store", [FamilySpec("counters", {"mae": False}, MODELS, DATASETS,
                                                      task="classic")], seed=5, with_artifacts=False)
    client = MlflowClient(tracking_uri=made.uri)
    values = made.values.set_index(["model", "dataset"])
    for (model, dataset), run_id in values.run_id.items():
        for key in BENCHMARKS[dataset][1]:  # what each benchmark reports, a known value per run
            client.log_metric(run_id, key, 10.0 * (DATASETS.index(dataset) + 1) + MODELS.index(model))
    build_index(made.uri, tmp_path / "index.duckdb")
    out = build_site(tmp_path / "index.duckdb", tmp_path / "site", Options(title="Board")).out
    page = (out / "families" / "counters.html").read_text()
    headers = {c[2]: c[1] for c in SCORE_COLUMNS}
    for dataset in DATASETS:
        name, reported = BENCHMARKS[dataset]
        assert f"Classic scores: {name} test" in page and f"{name} reports" in page
        table = pd.read_csv(out / "data" / f"scores_table__{dataset}__test.csv").set_index("Method")
        assert list(table.columns[:len(reported)]) == [headers[k] for k in reported], dataset
        for model in MODELS:
            for key in reported:
                assert table.loc[model, headers[key]] == 10.0 * (DATASETS.index(dataset) + 1) + MODELS.index(model)
        if "mae" not in reported:  # the store's own MAE, after the reported columns
            assert table.loc["owl_b", "MAE"] == pytest.approx(values.loc[("owl_b", dataset), "mae"])
