"""Counters page: ranking (default: the family's main metric), count drift, negative-label heatmap, mosaic gallery."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import data
import figures
import widgets

FAMILY = "counters"
DRIFT_TABLE = "tables/mosaic_pairs.parquet"
NEGATIVE_TABLE = "tables/negative_matrix.parquet"
MOSAIC_PREFIX = "figures/mosaic"
NEGATIVE_COLUMNS = ("class_name", "prompt", "count")  # image class, prompted class, count
GALLERY_SIZE = 12


def run_labels(df: pd.DataFrame) -> dict[str, str]:
    """A short, unique label per run: model, plus dataset/split when the table mixes several."""
    many = df[["dataset", "split"]].drop_duplicates().shape[0] > 1
    labels = {}
    for row in df.itertuples():
        label = f"{row.model} · {row.dataset}/{row.split}" if many else str(row.model)
        labels[row.run_id] = label if label not in labels.values() else f"{label} ({row.run_id[:6]})"
    return labels


def drift_section(df: pd.DataFrame, labels: dict[str, str]) -> None:
    st.subheader("Count drift per counter")
    frames = []
    for entry, run_ids in zip(df.run_id, df.run_ids, strict=True):
        source = data.first_with(list(run_ids), DRIFT_TABLE)
        table = data.read_table(source, DRIFT_TABLE) if source else None
        if table is not None and not table.empty:
            frames.append(table.assign(label=labels[entry]))
    pairs = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    col = next((c for c in pairs.columns if "drift" in c), None) if not pairs.empty else None
    if col is None:
        widgets.missing("count drift", DRIFT_TABLE)
        return
    st.plotly_chart(figures.box(pairs, "label", col, "Drift of the count when a distractor image is added"),
                    key="cnt_drift")


def negative_section(run_ids: list[str], label: str) -> None:
    st.subheader("Negative-label counts")
    source = data.first_with(run_ids, NEGATIVE_TABLE)
    table = data.read_table(source, NEGATIVE_TABLE) if source else None
    if table is None or table.empty:
        widgets.missing("negative-label matrix", NEGATIVE_TABLE)
        return
    cols = NEGATIVE_COLUMNS if set(NEGATIVE_COLUMNS) <= set(table.columns) else None
    if cols is None:
        text = [c for c in table.columns if not pd.api.types.is_numeric_dtype(table[c])]
        nums = [c for c in table.columns if pd.api.types.is_numeric_dtype(table[c])]
        if len(text) < 2 or not nums:
            st.info(f"`{NEGATIVE_TABLE}` of {label} has no (class, prompted class, count) columns to draw.")
            return
        cols = (text[0], text[1], nums[-1])
    rows, prompts, value = cols
    st.plotly_chart(figures.matrix_heatmap(table, rows, prompts, value,
                                           f"{label}: mean count per image class (rows) × prompted class"),
                    key="cnt_negative")


def gallery_section(run_ids: list[str], label: str) -> None:
    st.subheader("Mosaic density maps")
    files = data.artifacts(run_ids, MOSAIC_PREFIX)
    files = files[files.path.str.lower().str.endswith(".png")] if not files.empty else files
    if files.empty:
        widgets.missing("mosaic density maps", f"{MOSAIC_PREFIX}*.png")
        return
    run_id = next(r for r in run_ids if r in set(files.run_id))
    files = files[files.run_id == run_id]
    pairs = data.read_table(run_id, DRIFT_TABLE)
    cols = st.columns(4)
    for i, path in enumerate(files.path.head(GALLERY_SIZE)):
        local = data.artifact_file(run_id, path)
        if local is not None:
            cols[i % 4].image(str(local), caption=mosaic_caption(path, pairs))
    st.caption(f"{label}: {min(len(files), GALLERY_SIZE)} of {len(files)} maps.")


def mosaic_caption(path: str, pairs: pd.DataFrame | None) -> str:
    """The figure's name, with the counts of its mosaic when the pairs table has a row for it."""
    stem = path.rsplit("/", 1)[-1].removesuffix(".png")
    if pairs is None or pairs.empty:
        return stem
    key = next((c for c in ("figure", "mosaic_id", "pair_id") if c in pairs.columns), None)
    counts = [c for c in pairs.columns if c.startswith(("count", "c_", "gt"))]
    if key is None or not counts:
        return stem
    match = pairs[pairs[key].astype(str) == stem.removeprefix("mosaic_")]
    if match.empty:
        return stem
    row = match.iloc[0]
    return stem + " · " + ", ".join(f"{c}={row[c]:.1f}" if isinstance(row[c], float) else f"{c}={row[c]}"
                                    for c in counts)


def main() -> None:
    metrics = widgets.family_header(FAMILY)
    if metrics is None:
        return
    filters = widgets.filters(FAMILY, "cnt")
    sort, shown = widgets.metric_picker(FAMILY, metrics, "cnt")
    latest = st.toggle("Latest run per model, dataset and split", value=True, key="cnt_latest")
    df = data.ranking(FAMILY, sort, filters, latest, columns=[m.key for m in shown])
    if df.empty:
        st.info("No runs match these filters.")
        return
    widgets.show_ranking(df, shown, sort, key="cnt_ranking")
    labels = run_labels(df)
    drift_section(df, labels)
    picked = st.selectbox("Counter for the heatmap and the gallery", list(labels), format_func=labels.get,
                          key="cnt_run")
    run_ids = list(df.set_index("run_id").loc[picked, "run_ids"])
    negative_section(run_ids, labels[picked])
    gallery_section(run_ids, labels[picked])


if __name__ == "__main__":
    main()
