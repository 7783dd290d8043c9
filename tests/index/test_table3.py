"""GeckoNum Table 3 from autometrics run rows: marks, AUROC ranking, CSV and LaTeX."""

from __future__ import annotations

import pandas as pd

from countboard.index.table3 import auroc_ranking, table3, table3_csv, table3_latex


def _rows() -> pd.DataFrame:
    return pd.DataFrame({
        "model": ["dalle_3", "muse_b", "muse_b"], "is_latest": [True, True, False],
        "autometrics_clipscore_p_value": [0.3, 0.01, 0.9], "autometrics_counter_p_value": [0.001, 0.049, 0.9],
        "autometrics_clipscore_auroc": [0.52, 0.61, 0.5], "autometrics_counter_auroc": [0.8, 0.55, 0.5],
        "autometrics_clipscore_auroc_low": [0.45, 0.55, 0.4], "autometrics_clipscore_auroc_high": [0.6, 0.7, 0.6],
        "autometrics_counter_auroc_low": [0.7, 0.5, 0.4], "autometrics_counter_auroc_high": [0.9, 0.6, 0.6]})


def test_marks_follow_the_p_value_of_each_generators_latest_run():
    t = table3(_rows()).set_index("Generator")
    assert t.loc["dalle_3"].tolist() == ["=", "✓"] and t.loc["muse_b"].tolist() == ["✓", "✓"]
    assert "dalle_3,=,✓" in table3_csv(table3(_rows()))
    tex = table3_latex(table3(_rows()))
    assert r"dalle\_3 & = & \checkmark \\" in tex and tex.count(r"\checkmark") == 4  # 3 marks and the caption


def test_ranking_orders_metrics_by_auroc_per_generator():
    r = auroc_ranking(_rows())
    assert r[r.Generator == "dalle_3"].Metric.tolist() == ["Counter", "CLIP"]
    assert r[r.Generator == "muse_b"].Metric.tolist() == ["CLIP", "Counter"]
    assert (r.low <= r.AUROC).all() and (r.high >= r.AUROC).all()


def test_qa_metrics_get_columns_in_the_papers_order_only_when_a_run_has_them():
    rows = _rows().assign(autometrics_dsg_p_value=[0.01, None, None], autometrics_dsg_auroc=[0.9, None, None],
                          autometrics_dsg_auroc_low=[0.8, None, None], autometrics_dsg_auroc_high=[0.95, None, None])
    t = table3(rows).set_index("Generator")
    assert list(t.columns) == ["CLIP", "DSG", "Counter"]
    assert t.loc["dalle_3", "DSG"] == "✓" and t.loc["muse_b", "DSG"] == ""
    assert r"& CLIP & DSG & Counter \\" in table3_latex(table3(rows))
    r = auroc_ranking(rows)
    assert r[r.Generator == "dalle_3"].Metric.tolist() == ["DSG", "Counter", "CLIP"]
    assert "DSG" not in r[r.Generator == "muse_b"].Metric.tolist()
