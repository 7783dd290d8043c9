"""The semantic-similarity analysis of the negative tests, from the tables the runs log.

``praco_negative`` logs ``tables/negative_counts.parquet`` (``image_id``, ``class_name``, ``gt``, one column of
counts per prompted class); ``praco_multiclass`` logs ``tables/multiclass_counts.parquet`` and
``tables/multiclass_gt.parquet`` (``image_id``, one column per class; a class is in the image when its ground truth
is above 0). :func:`negative_pairs_of` turns either into the (image, negative class) pairs of
``countboard.metrics.semantic_similarity``, with the classes embedded by ``embed`` (by default
``countboard.counting.models.text_encoder.class_embeddings``: the authors' CLIP ViT-B/32, ``"a photo of <class>"``);
:func:`analyse` gives the correlations per entry and the quartiles per similarity bin, the bins cut once over every
entry's similarities as the notebook cuts them over all models.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from countboard.metrics.semantic_similarity import (
    N_BINS,
    negative_pairs,
    similarity_bins,
    similarity_correlations,
)

#: The tables the analysis reads: single-class test, multi-class counts and truth.
NEGATIVE_COUNTS = "tables/negative_counts.parquet"
MULTICLASS_COUNTS, MULTICLASS_GT = "tables/multiclass_counts.parquet", "tables/multiclass_gt.parquet"
_SINGLE_META = ("image_id", "class_name", "gt")


def negative_pairs_of(counts: pd.DataFrame, embed: Callable[[Sequence[str]], np.ndarray],
                      truth: pd.DataFrame | None = None) -> pd.DataFrame:
    """The pairs of one run: ``counts`` is ``negative_counts`` (single-class test; ``truth`` None) or
    ``multiclass_counts`` with ``truth`` its ``multiclass_gt``.

    Example:
        >>> counts = pd.DataFrame({"image_id": ["i"], "class_name": ["a"], "gt": [4], "a": [3.0], "b": [2.0]})
        >>> embed = lambda classes: np.eye(2)
        >>> negative_pairs_of(counts, embed)[["class", "absolute", "error_norm_by_pos_gt"]].values.tolist()
        [['b', 2.0, 0.5]]
    """
    if truth is None:
        classes = [c for c in counts.columns if c not in _SINGLE_META]
        positives = [[c] for c in counts["class_name"]]
        gt = [{c: float(g)} for c, g in zip(counts["class_name"], counts["gt"], strict=True)]
    else:
        classes = [c for c in counts.columns if c != "image_id"]
        truth = truth.set_index("image_id").reindex(counts["image_id"])
        positives = [[c for c in classes if row[c] > 0] for _, row in truth.iterrows()]
        gt = [{c: float(row[c]) for c in classes if row[c] > 0} for _, row in truth.iterrows()]
    return negative_pairs(counts[classes].to_numpy(np.float64), classes, counts["image_id"].astype(str).tolist(),
                          positives, gt, np.asarray(embed(classes), np.float64))


def analyse(pairs: Mapping[str, pd.DataFrame], n_bins: int = N_BINS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per entry (``pairs``: label -> its pairs): ``correlations`` (``entry``, ``pearson_r``, ``pearson_p``,
    ``spearman_r``, ``spearman_p``, ``n_pairs``) and ``bins`` (``entry`` and :func:`similarity_bins`'s columns),
    the bin edges cut over every entry's similarities together."""
    frames = [p for p in pairs.values() if len(p)]
    if not frames:
        return pd.DataFrame(), pd.DataFrame()
    _, edges = pd.cut(pd.concat(frames)["max_sim_to_positive"].astype(float), bins=n_bins, retbins=True)
    corr = pd.DataFrame([{"entry": k, **similarity_correlations(p)} for k, p in pairs.items() if len(p)])
    bins = pd.concat([similarity_bins(p, edges=edges).assign(entry=k) for k, p in pairs.items() if len(p)],
                     ignore_index=True)
    return corr, bins
