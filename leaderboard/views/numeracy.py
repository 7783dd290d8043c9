"""Text-to-image numeracy page: GeckoNum human studies and auto-evaluated success, one section each, then the
paper's Table 3 (auto-eval metrics against human correctness)."""

from __future__ import annotations

import streamlit as st

import data
import family
import queries
import widgets
from countboard.index.table3 import auroc_ranking, table3, table3_csv, table3_latex

PAGE = "numeracy"
AUTOMETRICS = "generator_autometrics"


@st.fragment
def autometrics_table() -> None:
    """GeckoNum Table 3 (✓ where p < 0.05) and the metrics ranked by AUROC per generator, as CSV and LaTeX."""
    st.header("Auto-eval metrics (GeckoNum Table 3)")
    if not widgets.second_table_ready(AUTOMETRICS, "No geckonum_autometrics runs yet: run "
                                      "`task=geckonum_autometrics` on `model=geckonum_release`.", "table3", "Table 3"):
        return
    rows = data.query(queries.family_rows(AUTOMETRICS))
    marks, ranked = table3(rows), auroc_ranking(rows)
    left, right = st.columns(2)
    left.caption("✓: Mann-Whitney U p < 0.05 between correct and incorrect images; =: not significant.")
    left.dataframe(marks, hide_index=True)
    a, b = left.columns(2)
    a.download_button("CSV", table3_csv(marks), "geckonum_table3.csv", mime="text/csv", key="table3_csv")
    b.download_button("LaTeX", table3_latex(marks), "geckonum_table3.tex", mime="application/x-tex",
                      key="table3_tex")
    right.caption("Metrics ranked by AUROC per generator (90% bootstrap interval).")
    right.dataframe(ranked.round(3), hide_index=True)


def main() -> None:
    family.render_page(PAGE, "Text-to-image numeracy")
    autometrics_table()


if __name__ == "__main__":
    main()
