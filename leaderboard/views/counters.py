"""Counters page: the families with ``page: counters`` (PrACo prompt-aware counters), then the paper's table."""

from __future__ import annotations

import streamlit as st

import data
import family
import queries
import widgets
from countboard.escaping import md, slug
from countboard.index.praco_table import (
    CONVENTIONS,
    praco_caption,
    praco_table,
    table_csv,
    table_latex,
    task_protocols,
)
from countboard.index.scores_table import TASKS as SCORE_TASKS
from countboard.index.scores_table import scores_caption, scores_table

PAGE = "counters"
FAMILY = "counters"


@st.fragment
def paper_table() -> None:
    """Tables 1-2 of the PrACo paper (NMN, PCCN, CntP, CntR, CntF1, MAE, RMSE), as CSV and LaTeX downloads."""
    st.header("The paper's table (PrACo Tables 1-2)")
    if not widgets.second_table_ready(FAMILY, "No counter runs yet: the table fills from praco_negative, "
                                      "praco_mosaic and classic runs, and from results imported with "
                                      "`countboard import-praco`.", "praco_table", "the paper's table"):
        return
    choices = data.choices(FAMILY).dropna()
    cols = st.columns(3)
    convention = cols[0].radio("Convention", CONVENTIONS, horizontal=True, key="praco_table_convention",
                               help="paper: the paper's definitions; released: the authors' released scorer "
                                    "(official_* metrics; CntR differs, see docs/praco.md)")
    dataset = cols[1].selectbox("Dataset", sorted(set(choices.dataset)), key="praco_table_dataset")
    split = cols[2].selectbox("Split", sorted(set(choices[choices.dataset == dataset].split)), key="praco_table_split")
    rows = data.query(queries.family_rows(FAMILY))
    protocols = {}
    for task, labels in task_protocols(rows, dataset, split).items():
        protocols[task] = labels[0] if len(labels) == 1 else st.selectbox(
            f"Protocol of {md(task)}", labels, key=f"praco_table_protocol_{task}",
            help="The table takes one protocol per test (e.g. the mosaic preset); the caption states it.")
    table = praco_table(rows, convention, dataset, split, protocols)
    caption = praco_caption(convention, split, dataset, protocols)
    if table.empty:
        st.info(f"No counter run on {md(dataset)} / {md(split)} reports the paper's metrics.")
        return
    st.caption(md(caption))
    # one table: the method stays in view while the paper's columns scroll sideways
    st.dataframe(table, hide_index=True, width="stretch",
                 column_config={"Method": st.column_config.TextColumn("Method", pinned=True)})
    left, right = st.columns(2)
    name = slug(f"praco_{dataset}_{split}_{convention}")  # store text in a file name and a LaTeX label
    left.download_button("CSV", table_csv(table), f"{name}.csv", mime="text/csv", key="praco_table_csv")
    right.download_button("LaTeX", table_latex(table, caption), f"{name}.tex", mime="application/x-tex",
                          key="praco_table_tex")


@st.fragment
def classic_scores_table() -> None:
    """The classic test's scores of one benchmark (count errors, AP, conventions), as CSV and LaTeX downloads."""
    st.header("Classic counting scores (CSV and LaTeX)")
    if not widgets.second_table_ready(FAMILY, "No counter runs yet: the table fills from classic runs.",
                                      "scores_table", "the classic scores table"):
        return
    rows = data.query(queries.family_rows(FAMILY))
    rows = rows[rows["task"].isin(SCORE_TASKS)]
    if rows.empty:
        st.info("No classic run yet: `countboard-sweep -m model=... dataset=... task=classic` fills this table.")
        return
    cols = st.columns(2)
    dataset = cols[0].selectbox("Dataset", sorted(set(rows.dataset.dropna())), key="scores_table_dataset")
    split = cols[1].selectbox("Split", sorted(set(rows[rows.dataset == dataset].split.dropna())),
                              key="scores_table_split")
    table, columns = scores_table(rows, dataset, split)
    caption = scores_caption(dataset, split)
    st.caption(md(caption))  # names the dataset: store text
    st.dataframe(table, hide_index=True, width="stretch",
                 column_config={"Method": st.column_config.TextColumn("Method", pinned=True)})
    left, right = st.columns(2)
    name = slug(f"classic_{dataset}_{split}")
    left.download_button("CSV", table_csv(table, columns), f"{name}.csv", mime="text/csv", key="scores_table_csv")
    right.download_button("LaTeX", table_latex(table, caption, f"tab:{name}", columns), f"{name}.tex",
                          mime="application/x-tex", key="scores_table_tex")


def main() -> None:
    family.render_page(PAGE)
    paper_table()
    classic_scores_table()


if __name__ == "__main__":
    main()
