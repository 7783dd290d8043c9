"""Agreement between label sets: a classifier against people, or two annotators.

Pure functions over aligned label sequences (strings or integers). ``labels`` fixes the label order of the
confusion matrix; an entry outside ``labels`` is an error, since a silently dropped item would change every rate.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _aligned(a: Sequence, b: Sequence, labels: Sequence, names: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
    """Indices of ``a`` and ``b`` in ``labels``; a clear error for unequal lengths or unknown labels."""
    if len(a) != len(b):
        raise ValueError(f"{names[0]} and {names[1]} must have one label per item, got {len(a)} and {len(b)}")
    index = {label: i for i, label in enumerate(labels)}
    if len(index) != len(labels):
        raise ValueError(f"labels must be distinct, got {list(labels)}")
    out = []
    for name, seq in zip(names, (a, b), strict=True):
        unknown = sorted({str(x) for x in seq if x not in index})
        if unknown:
            raise ValueError(f"{name} holds label(s) {unknown[:5]} outside the label set {list(labels)}")
        out.append(np.array([index[x] for x in seq], dtype=np.int64))
    return out[0], out[1]


def confusion_matrix(true: Sequence, pred: Sequence, labels: Sequence) -> np.ndarray:
    """``(L, L)`` counts with rows = ``true`` label and columns = ``pred`` label, in the order of ``labels``.

    Example:
        >>> confusion_matrix(["a", "a", "b"], ["a", "b", "b"], ["a", "b"]).tolist()
        [[1, 1], [0, 1]]
    """
    t, p = _aligned(true, pred, labels, ("true", "pred"))
    out = np.zeros((len(labels), len(labels)), dtype=np.int64)
    np.add.at(out, (t, p), 1)
    return out


def binary_rates(decision: Sequence[int], truth: Sequence[int]) -> dict[str, float]:
    """True- and false-positive rate of 0/1 decisions against 0/1 truth (NaN where a class is absent).

    ``tpr = tp / (tp + fn)``, ``fpr = fp / (fp + tn)``.

    Example:
        >>> binary_rates([1, 1, 0, 1], [1, 0, 0, 1])
        {'tpr': 1.0, 'fpr': 0.5}
    """
    d, t = _aligned(list(decision), list(truth), [0, 1], ("decision", "truth"))
    tp, fn = int(np.sum((d == 1) & (t == 1))), int(np.sum((d == 0) & (t == 1)))
    fp, tn = int(np.sum((d == 1) & (t == 0))), int(np.sum((d == 0) & (t == 0)))
    return {"tpr": tp / (tp + fn) if tp + fn else float("nan"), "fpr": fp / (fp + tn) if fp + tn else float("nan")}


def one_vs_rest_rates(true: Sequence, pred: Sequence, labels: Sequence) -> dict[str, dict[str, float]]:
    """Per label ``l``: TPR and FPR of "pred is l" against "true is l" (NaN where undefined).

    Example:
        >>> r = one_vs_rest_rates(["p", "n", "n"], ["p", "p", "n"], ["p", "n"])
        >>> r["p"], r["n"]
        ({'tpr': 1.0, 'fpr': 0.5}, {'tpr': 0.5, 'fpr': 0.0})
    """
    conf = confusion_matrix(true, pred, labels)
    total = conf.sum()
    out = {}
    for i, label in enumerate(labels):
        tp = conf[i, i]
        pos = conf[i].sum()
        fp = conf[:, i].sum() - tp
        neg = total - pos
        out[str(label)] = {"tpr": float(tp / pos) if pos else float("nan"),
                           "fpr": float(fp / neg) if neg else float("nan")}
    return out


def macro_f1(true: Sequence, pred: Sequence, labels: Sequence) -> float:
    """Unweighted mean of per-label F1 over the labels that occur in ``true`` or ``pred``.

    ``F1_l = 2 tp_l / (2 tp_l + fp_l + fn_l)``; a label that neither side uses is left out of the mean (it has no
    F1), so adding unused labels to the label set does not change the score. NaN for no items.

    Example:
        >>> round(macro_f1(["a", "a", "b", "b"], ["a", "b", "b", "b"], ["a", "b", "c"]), 4)  # (2/3 + 4/5) / 2
        0.7333
    """
    conf = confusion_matrix(true, pred, labels)
    tp = np.diag(conf).astype(np.float64)
    fp = conf.sum(axis=0) - tp
    fn = conf.sum(axis=1) - tp
    used = (tp + fp + fn) > 0
    if not used.any():
        return float("nan")
    return float(np.mean(2 * tp[used] / (2 * tp[used] + fp[used] + fn[used])))


def cohen_kappa(a: Sequence, b: Sequence, labels: Sequence) -> float:
    """Cohen's kappa between two annotators: ``(p_o - p_e) / (1 - p_e)``.

    ``p_o`` is the share of items with the same label, ``p_e = sum_l P_a(l) P_b(l)`` the agreement expected from
    the two annotators' label frequencies. NaN when ``p_e = 1`` (both used one and the same label throughout: the
    agreement beyond chance is undefined) or for no items.

    Example:
        >>> cohen_kappa(["y", "y", "n", "n"], ["y", "n", "n", "n"], ["y", "n"])  # p_o 3/4, p_e 1/2
        0.5
    """
    conf = confusion_matrix(a, b, labels).astype(np.float64)
    n = conf.sum()
    if n == 0:
        return float("nan")
    p_o = np.trace(conf) / n
    p_e = float(np.dot(conf.sum(axis=1), conf.sum(axis=0)) / n**2)
    if np.isclose(p_e, 1.0):
        return float("nan")
    return float((p_o - p_e) / (1 - p_e))
