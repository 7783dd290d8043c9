"""Every published table as CSV and JSON with a versioned schema, the publication's manifest (``site.json``), and
the comparison of two publications (``compare_sites``: new and removed entries, moved ranks, changed values).

JSON of a table::

    {"schema": "countboard.publish/table", "schema_version": 1, "key": ..., "kind": "ranking" | ...,
     "meta": {...}, "columns": [...], "rows": [{column: value}, ...]}

``site.json`` lists the tables (key, kind, title, page, csv, json) and the entries (id, family, model, dataset,
split, context, run ids, table, rank, tie group, values). A change that removes or renames a field bumps
``SCHEMA_VERSION``; ``compare_sites`` refuses publications of another version.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from countboard.errors import ConfigError

SCHEMA_VERSION = 1
TABLE_SCHEMA = "countboard.publish/table"
SITE_SCHEMA = "countboard.publish/site"
MANIFEST = "site.json"
#: Values closer than this (relative) are the same value in ``compare_sites``.
REL_TOL = 1e-9


def dumps(data) -> str:
    """JSON as the publication writes it: keys sorted, two-space indent, UTF-8 text, no NaN (null instead)."""
    from countboard.publish.render import clean

    return json.dumps(clean(data), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def table_csv(frame: pd.DataFrame) -> str:
    """CSV of ``frame``: the columns as they are, floats in their shortest exact form, missing values empty; a text
    cell a spreadsheet would read as a formula (a model named ``=cmd|…``) with a leading ``'``
    (``countboard.escaping.csv_frame``; the JSON beside it keeps every name as typed).

    Example:
        >>> table_csv(pd.DataFrame({"a": [1.5, float("nan")], "b": ["x", None]}))
        'a,b\\n1.5,x\\n,\\n'
    """
    from countboard.escaping import csv_frame

    buf = io.StringIO()
    csv_frame(frame).to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue()


def records(frame: pd.DataFrame) -> list[dict]:
    out = []
    for row in frame.to_dict("records"):
        out.append({k: (list(v) if hasattr(v, "__len__") and not isinstance(v, str) else
                        None if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NaT
                        else v.isoformat() if isinstance(v, pd.Timestamp) else v)
                    for k, v in row.items()})
    return out


def table_json(key: str, kind: str, frame: pd.DataFrame, meta: dict) -> str:
    return dumps({"schema": TABLE_SCHEMA, "schema_version": SCHEMA_VERSION, "key": key, "kind": kind, "meta": meta,
                  "columns": [str(c) for c in frame.columns], "rows": records(frame)})


@dataclass
class Changes:
    new: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        if not (self.new or self.removed or self.moved or self.changed):
            return ["no change: the same entries, ranks and values"]
        out = [f"{len(self.new)} new, {len(self.removed)} removed, {len(self.moved)} moved, "
               f"{len(self.changed)} changed values"]
        out += [f"new      {x}" for x in self.new] + [f"removed  {x}" for x in self.removed]
        out += [f"moved    {x}" for x in self.moved] + [f"changed  {x}" for x in self.changed]
        return out


def read_manifest(folder: Path) -> dict:
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise ConfigError(f"{folder} is not a publication: it has no {MANIFEST}; give a folder written by "
                          "`countboard publish`")
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("schema") != SITE_SCHEMA or data.get("schema_version") != SCHEMA_VERSION:
        raise ConfigError(f"{path} has schema {data.get('schema')} version {data.get('schema_version')}; this "
                          f"countboard compares version {SCHEMA_VERSION} of {SITE_SCHEMA}: publish both with one "
                          "version")
    return data


def _name(e: dict) -> str:
    ctx = " · ".join(f"{k}={v}" for k, v in sorted(e.get("context", {}).items()))
    return " · ".join(str(x) for x in (e["family"], e["model"], e.get("dataset"), e.get("split")) if x) + \
        (f" · {ctx}" if ctx else "")


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=1e-12)
    return a == b


def compare_sites(old: Path, new: Path) -> Changes:
    """What changed from the publication ``old`` to ``new``: entries (by their id, stable across stores), ranks
    and tie groups within their ranking, and every published value of an entry."""
    a, b = read_manifest(old)["entries"], read_manifest(new)["entries"]
    out = Changes()
    for eid in sorted(set(b) - set(a), key=lambda k: _name(b[k])):
        out.new.append(f"{_name(b[eid])}: rank {b[eid]['rank']}")
    for eid in sorted(set(a) - set(b), key=lambda k: _name(a[k])):
        out.removed.append(_name(a[eid]))
    for eid in sorted(set(a) & set(b), key=lambda k: _name(b[k])):
        x, y = a[eid], b[eid]
        if x["rank"] != y["rank"] or x["tie_group"] != y["tie_group"]:
            out.moved.append(f"{_name(y)}: rank {x['rank']} → {y['rank']}, tie group {x['tie_group']} → "
                             f"{y['tie_group']}")
        for key in sorted(set(x["values"]) | set(y["values"])):
            u, v = x["values"].get(key), y["values"].get(key)
            if not _same(u, v):
                out.changed.append(f"{_name(y)}: {key} {u} → {v}")
    return out
