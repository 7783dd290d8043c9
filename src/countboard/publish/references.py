"""The papers' own numbers beside ours: reference rows typed from the seed papers (``references.csv``, each with
the paper, table, row and column it comes from), matched to the measured entry of the same model, dataset, split,
task and protocol.

A reference value is stored as printed (``value``) with the factor that brings it to the metric's unit here
(``scale``: GeckoNum prints accuracy in %, the index holds a share). Models match by name with case and everything
but letters and digits ignored (``CLIP-Count`` is ``clip_count``). A reference is flagged when it lies outside the
measured entry's interval (the metric's declared interval; a metric without one is never flagged).

A reference with a ``relation`` (``<`` or ``>=``) is a mark, not a value: GeckoNum's Table 3 prints ✓ where a
metric's Mann-Whitney p-value is below 0.05 and = where it is not, stored as ``value`` 0.05 with ``<`` (✓) or ``>=``
(=); it is flagged when our p-value is on the other side. Only the marks the seed text keeps are typed: its ✓ signs
are lost, so a row's = marks are placed only where the row has no ✓ (DALL·E 3: = under CLIP, TIFA, Gecko, DSG; ✓
under VNLI, which is no metric here), not for Imagen-C (one =) and Muse-B (three =).

To add references: append rows to ``references.csv`` (the ``metric`` a key of ``countboard/schema/*.yaml``).
"""

from __future__ import annotations

import csv
import re
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from countboard.protocol import DEFAULT_LABEL
from countboard.tracking import tags as tg

PATH = Path(__file__).with_name("references.csv")
COLUMNS = ("paper", "table", "row", "column", "family", "model", "dataset", "split", "task", "protocol", "metric",
           "value", "scale", "relation")
#: a mark's relation -> (holds for our value, how the paper's mark reads)
RELATIONS = {"<": (lambda ours, v: ours < v, "✓ (p < {v:g})"), ">=": (lambda ours, v: ours >= v, "= (p ≥ {v:g})")}


def model_key(name) -> str:
    """Example:
    >>> model_key("CLIP-Count") == model_key("clip_count"), model_key("DALL·E 3")
    (True, 'dalle3')
    """
    return re.sub(r"[^0-9a-z]", "", str(name).lower())


@lru_cache(maxsize=1)
def load(path: str | None = None) -> pd.DataFrame:
    """The reference rows, ``value`` and ``scale`` as numbers, ``expected`` the value in the metric's unit."""
    with open(path or PATH, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, restval=""))
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    df["value"] = df["value"].astype(float)
    df["scale"] = df["scale"].astype(float)
    df["expected"] = df["value"] * df["scale"]
    df["relation"] = df["relation"].fillna("")
    return df


def metrics_of(family: str) -> list[str]:
    """Metric keys the references give for ``family`` (the publication fetches them and their bounds)."""
    refs = load()
    return sorted(set(refs[refs.family == family].metric))


def compare(table, schema) -> pd.DataFrame:
    """The references that match an entry of ``table`` (a ``collect.RankedTable``), one row each: the paper's
    source, the metric, the paper's value (in our unit), ours with its interval, the difference (ours − paper) and
    whether the paper's value lies outside our interval (for a mark: whether our value disagrees with it;
    ``paper_shown`` is the paper's value or mark as the pages print it)."""
    return _match(table.family, table.dataset, table.split, table.context.get(tg.PROTOCOL_LABEL, DEFAULT_LABEL),
                  table.context.get("task", ""), table.rows, schema)


def compare_rows(family: str, rows: pd.DataFrame, schema) -> pd.DataFrame:
    """``compare`` for the board's ranking rows (``model``, ``dataset``, ``split``, protocol and task columns,
    several benchmarks mixed): each dataset × split × protocol × task matched as the site matches its tables."""
    if rows.empty or "model" not in rows:
        return pd.DataFrame()
    keys = [c for c in ("dataset", "split", tg.PROTOCOL_LABEL, "task") if c in rows]
    parts = []
    for group, part in rows.groupby(keys, sort=False, dropna=False) if keys else [((), rows)]:
        got = dict(zip(keys, group if isinstance(group, tuple) else (group,), strict=True))
        text = {k: "" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v) for k, v in got.items()}
        parts.append(_match(family, text.get("dataset"), text.get("split"),
                            text.get(tg.PROTOCOL_LABEL) or DEFAULT_LABEL, text.get("task", ""),
                            part.reset_index(drop=True), schema))
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _match(family, dataset, split, protocol, task, rows: pd.DataFrame, schema) -> pd.DataFrame:
    refs = load()
    refs = refs[(refs.family == family) & (refs.dataset == (dataset or ""))]
    refs = refs[(refs.split == "") | (refs.split == (split or ""))]
    refs = refs[refs.protocol == protocol]
    refs = refs[(refs.task == "") | (refs.task == (task or ""))]
    if refs.empty:
        return pd.DataFrame()
    by_model = {model_key(m): i for i, m in enumerate(rows.model)}
    out = []
    for ref in refs.to_dict("records"):
        i = by_model.get(model_key(ref["model"]))
        if i is None or ref["metric"] not in rows:
            continue
        row = rows.iloc[i]
        ours = float(row[ref["metric"]]) if pd.notna(row[ref["metric"]]) else np.nan
        info = schema.metrics.get(ref["metric"])
        iv = info.interval if info else None
        low = float(row[iv.low]) if iv and iv.low in row and pd.notna(row[iv.low]) else np.nan
        high = float(row[iv.high]) if iv and iv.high in row and pd.notna(row[iv.high]) else np.nan
        outside = bool(not np.isnan(low) and not np.isnan(high) and not low <= ref["expected"] <= high)
        shown, difference = f"{ref['expected']:.4g}", ours - ref["expected"]
        if ref["relation"]:
            holds, text = RELATIONS[ref["relation"]]
            shown, difference = text.format(v=ref["expected"]), np.nan
            low = high = np.nan
            outside = bool(not np.isnan(ours) and not holds(ours, ref["expected"]))
        out.append({"entry_id": row.get("entry_id", row.get("run_id")), "model": row["model"], "metric": ref["metric"],
                    "metric_display": info.display if info else ref["metric"], "paper": ref["paper"],
                    "source": f"{ref['table']}, row {ref['row']}, column {ref['column']}",
                    "paper_value": ref["expected"], "ours": ours, "low": low, "high": high,
                    "difference": difference, "outside_interval": outside, "paper_shown": shown,
                    "rule": "mark" if ref["relation"] else "interval"})
    return pd.DataFrame(out)


def verdict(ref: dict) -> tuple[str, bool]:
    """How a row of ``compare`` stands against our value: its words and whether it is flagged (the site and the
    board print the same).

    Example:
        >>> verdict({"outside_interval": True, "rule": "interval", "ours": 0.4, "low": 0.35})
        ('outside our interval', True)
    """
    mark = ref.get("rule") == "mark"
    if ref["outside_interval"]:
        return ("disagrees with our p-value" if mark else "outside our interval"), True
    if mark:
        return ("agrees" if pd.notna(ref["ours"]) else "no value"), False
    return ("inside" if pd.notna(ref["low"]) else "no interval"), False
