"""Generator comparison for a fixed classifier: ``P(p_i > p_j)`` from the cells' Beta posteriors, as a matrix, a
long table and a heatmap (``comparison_runs`` logs them as runs)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from countboard.quantify.beta import prob_greater
from countboard.quantify.errors import QuantifyInputError


def pairwise_prob_greater(names: Sequence[str], a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    """``(n, n)`` matrix with ``P(X_i > X_j)`` for ``X_i ~ Beta(a[i], b[i])``; the diagonal is NaN.

    Example:
        >>> m = pairwise_prob_greater(["x", "y"], [2, 1], [1, 1])
        >>> np.round(m, 4).tolist()
        [[nan, 0.6667], [0.3333, nan]]
    """
    if not (len(names) == len(a) == len(b)):
        raise QuantifyInputError(f"names, a and b differ in length ({len(names)}, {len(a)}, {len(b)})")
    n = len(names)
    out = np.full((n, n), np.nan)
    for i in range(n):
        for j in range(i + 1, n):
            out[i, j] = prob_greater(a[i], b[i], a[j], b[j])
            out[j, i] = 1.0 - out[i, j]
    return out


def generator_comparison(cells: pd.DataFrame, classifier: str | None = None, *, a_col: str = "a",
                         b_col: str = "b") -> pd.DataFrame:
    """Pairwise ``P(row generator > column generator)`` for one classifier.

    Args:
        cells: One row per cell with columns ``generator``, ``classifier`` and the Beta parameters (``a``, ``b``
            by default; e.g. ``bcc_alpha`` / ``bcc_beta`` of the ``bcc`` task).
        classifier: The classifier whose cells are compared; may be omitted when ``cells`` holds only one.

    Returns:
        A square DataFrame indexed and labelled by generator (sorted), NaN on the diagonal.

    Example:
        >>> cells = pd.DataFrame({"generator": ["g1", "g2"], "classifier": ["c", "c"], "a": [2, 1], "b": [1, 1]})
        >>> generator_comparison(cells).round(4).loc["g1", "g2"]
        np.float64(0.6667)
    """
    missing = {"generator", "classifier", a_col, b_col} - set(cells.columns)
    if missing:
        raise QuantifyInputError(f"cells lack column(s) {sorted(missing)}; need generator, classifier, {a_col}, "
                                 f"{b_col}")
    classifiers = sorted(cells["classifier"].unique())
    if classifier is None:
        if len(classifiers) != 1:
            raise QuantifyInputError(f"cells hold classifiers {classifiers}: pass classifier= to pick one")
        classifier = classifiers[0]
    sub = cells[cells["classifier"] == classifier]
    if sub.empty:
        raise QuantifyInputError(f"no cell of classifier {classifier!r}; the cells hold {classifiers}")
    dup = sub["generator"][sub["generator"].duplicated()].unique()
    if len(dup):
        raise QuantifyInputError(f"classifier {classifier!r} has several cells for generator(s) {list(dup)}")
    sub = sub.sort_values("generator")
    names = sub["generator"].astype(str).tolist()
    matrix = pairwise_prob_greater(names, sub[a_col].to_numpy(float), sub[b_col].to_numpy(float))
    return pd.DataFrame(matrix, index=pd.Index(names, name="generator"), columns=names)


def pairwise_long(matrix: pd.DataFrame) -> pd.DataFrame:
    """The off-diagonal entries of a square ``P(row > column)`` matrix as rows (generator_a, generator_b, p_greater).

    Example:
        >>> m = pd.DataFrame([[np.nan, 0.7], [0.3, np.nan]], index=["x", "y"], columns=["x", "y"])
        >>> pairwise_long(m).values.tolist()
        [['x', 'y', 0.7], ['y', 'x', 0.3]]
    """
    rows = [{"generator_a": str(a), "generator_b": str(b), "p_greater": float(matrix.loc[a, b])}
            for a in matrix.index for b in matrix.columns if a != b]
    return pd.DataFrame(rows, columns=["generator_a", "generator_b", "p_greater"])


def pairwise_heatmap(matrix: pd.DataFrame, title: str, path: Path) -> None:
    """Write a ``P(row > column)`` matrix (``generator_comparison``) as an annotated PNG heatmap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matrix_values, n = matrix.to_numpy(float), len(matrix)
    fig, ax = plt.subplots(figsize=(max(4.5, 2.5 + 0.6 * n), max(3.5, 2 + 0.5 * n)))
    im = ax.imshow(matrix_values, vmin=0, vmax=1, cmap="RdBu_r")
    ax.set_xticks(range(n), matrix.columns, rotation=45, ha="right")
    ax.set_yticks(range(n), matrix.index)
    ax.set_xlabel("generator B")
    ax.set_ylabel("generator A")
    for i in range(n):
        for j in range(n):
            if i != j:
                ax.text(j, i, f"{matrix_values[i, j]:.2f}", ha="center", va="center", fontsize=8)
    fig.colorbar(im, ax=ax, label="P(A > B)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
