"""The negative tests' semantic-similarity figure (``negative_similarity`` in the schema): per ranked entry, the
error on each negative class against its text similarity to the image's classes (the PrACo authors'
``multiclass_semantic_plots.ipynb``; computed by ``countboard.counting.similarity``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

import data
import figures
import widgets
from countboard.counting.models.text_encoder import CLIP_TEXT_ENCODER
from countboard.counting.similarity import MULTICLASS_COUNTS, MULTICLASS_GT, NEGATIVE_COUNTS, analyse
from countboard.escaping import md
from countboard.schema import FigureInfo

TOP_ENTRIES = 10


@st.cache_resource(show_spinner="Embedding the class names")
def _embeddings(encoder: str, classes: tuple[str, ...]) -> np.ndarray:
    from countboard.counting.models.text_encoder import class_embeddings

    return class_embeddings(list(classes), encoder)


def _pairs(run_id: str, fig: FigureInfo, encoder: str) -> pd.DataFrame | None:
    from countboard.counting.similarity import negative_pairs_of

    single = data.read_table(run_id, fig.get("single", NEGATIVE_COUNTS))
    if single is not None:
        return negative_pairs_of(single, lambda classes: _embeddings(encoder, tuple(classes)))
    counts = data.read_table(run_id, fig.get("multi", MULTICLASS_COUNTS))
    truth = data.read_table(run_id, fig.get("multi_gt", MULTICLASS_GT))
    if counts is None or truth is None:
        return None
    return negative_pairs_of(counts, lambda classes: _embeddings(encoder, tuple(classes)), truth)


def draw_negative_similarity(ctx, fig: FigureInfo) -> None:
    st.subheader("Negative classes: error against similarity to the image's classes")
    encoder = st.text_input("Text encoder", CLIP_TEXT_ENCODER, key=f"{ctx.prefix}_similarity_encoder",
                            help="A CLIP checkpoint (hub id or local folder; the authors' notebook uses CLIP "
                                 "ViT-B/32) or `minilm` (bundled, offline).")
    pairs: dict[str, pd.DataFrame] = {}
    try:
        for entry, ids in zip(ctx.df.run_id[:TOP_ENTRIES], ctx.df.run_ids[:TOP_ENTRIES], strict=True):
            ids = list(ids)
            source = (data.first_with(ids, fig.get("single", NEGATIVE_COUNTS))
                      or data.first_with(ids, fig.get("multi", MULTICLASS_COUNTS)))
            found = _pairs(source, fig, encoder) if source else None
            if found is not None and len(found):
                pairs[ctx.labels[entry]] = found
    except Exception as exc:  # an encoder that cannot be loaded here: said in one line
        st.warning(f"{type(exc).__name__}: {md(exc)}. Try the text encoder `minilm` (bundled).")
        return
    if not pairs:
        widgets.missing("semantic-similarity analysis", f"{NEGATIVE_COUNTS} or {MULTICLASS_COUNTS}")
        return
    corr, bins = analyse(pairs)
    st.caption(f"Pearson and Spearman correlation of the error on a negative class with its highest similarity to "
               f"a class of the image ({encoder}, \"a photo of <class>\"); the best {TOP_ENTRIES} entries.")
    st.dataframe(corr, hide_index=True, width="stretch",
                 column_config={"entry": st.column_config.TextColumn("entry", pinned=True)})
    st.plotly_chart(figures.quartile_boxes(bins, "Quartiles of the normalised error per similarity bin"),
                    key=f"{ctx.prefix}_similarity")
