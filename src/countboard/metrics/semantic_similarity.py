"""How a counter's error on a negative class depends on that class's text similarity to the image's classes.

The computation of the PrACo authors' ``multiclass_semantic_plots.ipynb``, for the negative-label tests:

- each class is embedded as ``"a photo of <class>"`` by a text encoder (the notebook's: CLIP ViT-B/32) and
  L2-normalised; similarity is the dot product;
- for every (image, class not in the image) pair: the predicted count is the error (the truth is 0,
  ``absolute = |pred|``), ``max_sim_to_positive`` its highest similarity to one of the image's classes, and
  ``error_norm_by_pos_gt`` the error divided by the ground-truth count of that most similar class (the error itself
  when that count is 0);
- per model: Pearson and Spearman correlation of ``max_sim_to_positive`` with ``absolute`` (``scipy.stats``; at
  least ``MIN_ROWS`` finite pairs);
- the similarities cut into ``N_BINS`` equal-width bins over their range (``pandas.cut``), and per bin the quartiles
  of ``error_norm_by_pos_gt`` (the notebook's box plots).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

#: The notebook's prompt prefix, bins and minimum number of pairs for a correlation.
PROMPT_PREFIX = "a photo of "
N_BINS = 5
MIN_ROWS = 10


def negative_pairs(counts: np.ndarray, classes: Sequence[str], images: Sequence[str],
                   positives: Sequence[Sequence[str]], positive_gt: Sequence[Mapping[str, float]],
                   embeddings: np.ndarray) -> pd.DataFrame:
    """One row per (image, negative class): ``image``, ``class``, ``pred_count``, ``absolute``,
    ``max_sim_to_positive``, ``avg_sim_to_positive``, ``most_similar_positive``, ``positive_gt``,
    ``error_norm_by_pos_gt``.

    Args:
        counts: ``(N, C)`` predicted counts, rows ``images``, columns ``classes``.
        positives: The classes present in each image.
        positive_gt: Ground-truth count per present class of each image.
        embeddings: ``(C, D)`` L2-normalised class embeddings, rows in ``classes`` order.

    Example:
        >>> emb = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
        >>> t = negative_pairs(np.array([[5.0, 2.0, 1.0]]), ["a", "b", "c"], ["i"], [["a"]], [{"a": 4}], emb)
        >>> t[["class", "absolute", "max_sim_to_positive", "error_norm_by_pos_gt"]].values.tolist()
        [['b', 2.0, 0.6, 0.5], ['c', 1.0, 0.0, 0.25]]
    """
    index = {c: k for k, c in enumerate(classes)}
    sims = np.asarray(embeddings, np.float64) @ np.asarray(embeddings, np.float64).T
    rows = []
    for n, image in enumerate(images):
        present = [c for c in positives[n] if c in index]
        if not present:
            continue
        for c in classes:
            if c in present:
                continue
            s = np.array([sims[index[c], index[p]] for p in present])
            best = present[int(np.argmax(s))]
            pred = float(counts[n, index[c]])
            gt = float(positive_gt[n].get(best, 0.0))
            err = abs(pred)
            rows.append({"image": image, "class": c, "pred_count": pred, "absolute": err,
                         "max_sim_to_positive": float(s.max()), "avg_sim_to_positive": float(s.mean()),
                         "most_similar_positive": best, "positive_gt": gt,
                         "error_norm_by_pos_gt": err / gt if gt > 0 else err})
    return pd.DataFrame(rows, columns=["image", "class", "pred_count", "absolute", "max_sim_to_positive",
                                       "avg_sim_to_positive", "most_similar_positive", "positive_gt",
                                       "error_norm_by_pos_gt"])


def similarity_correlations(pairs: pd.DataFrame, min_rows: int = MIN_ROWS) -> dict[str, float]:
    """Pearson and Spearman correlation (and their p-values) of ``max_sim_to_positive`` with ``absolute`` over the
    finite pairs; NaN each when fewer than ``min_rows`` pairs, or when either is constant.

    Example:
        >>> p = pd.DataFrame({"max_sim_to_positive": np.linspace(0, 1, 12), "absolute": np.arange(12.0) ** 2})
        >>> r = similarity_correlations(p)
        >>> round(r["spearman_r"], 6), r["pearson_r"] > 0.9
        (1.0, True)
    """
    from scipy.stats import pearsonr, spearmanr

    x = pairs["max_sim_to_positive"].to_numpy(np.float64)
    y = pairs["absolute"].to_numpy(np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    nan = {"pearson_r": float("nan"), "pearson_p": float("nan"), "spearman_r": float("nan"),
           "spearman_p": float("nan"), "n_pairs": float(len(x))}
    if len(x) < min_rows or np.ptp(x) == 0 or np.ptp(y) == 0:
        return nan
    pr, pp = pearsonr(x, y)
    sr, sp = spearmanr(x, y)
    return {"pearson_r": float(pr), "pearson_p": float(pp), "spearman_r": float(sr), "spearman_p": float(sp),
            "n_pairs": float(len(x))}


def similarity_bins(pairs: pd.DataFrame, n_bins: int = N_BINS, edges: np.ndarray | None = None) -> pd.DataFrame:
    """Per equal-width similarity bin (``pandas.cut`` with ``n_bins`` over the similarities, or the given
    ``edges``, e.g. pooled over several models as the notebook does): ``bin``, ``low``, ``high``, ``n`` and the
    quartiles ``q1``, ``median``, ``q3`` of ``error_norm_by_pos_gt``.

    Example:
        >>> p = pd.DataFrame({"max_sim_to_positive": [0.0, 0.1, 0.9, 1.0], "error_norm_by_pos_gt": [1, 3, 5, 7]})
        >>> similarity_bins(p, 2)[["n", "median"]].values.tolist()
        [[2.0, 2.0], [2.0, 6.0]]
    """
    sims = pairs["max_sim_to_positive"].astype(float)
    if edges is None:
        _, edges = pd.cut(sims, bins=n_bins, retbins=True)
    binned = pd.cut(sims, bins=edges, labels=False, include_lowest=True)
    out = []
    for k in range(len(edges) - 1):
        values = pairs.loc[binned == k, "error_norm_by_pos_gt"].astype(float).dropna().to_numpy()
        q1, med, q3 = (np.quantile(values, [0.25, 0.5, 0.75]) if len(values) else (np.nan,) * 3)
        out.append({"bin": k + 1, "low": float(edges[k]), "high": float(edges[k + 1]), "n": float(len(values)),
                    "q1": float(q1), "median": float(med), "q3": float(q3)})
    return pd.DataFrame(out)
