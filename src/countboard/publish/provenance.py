"""Where each published number comes from: per run, what its tags, params and the index say about it.

The fields are the run tags of ``countboard.tracking.tags`` (one owner of their names): the MLflow run id, the
config hash, the git commit, the countboard version, the dataset's data fingerprint (the digest of its MLflow
dataset input), device and precision; plus the run's params (its flattened config) and latest metrics. The library
versions are the run's ``countboard.versions.<library>`` tags (a cell run records them when it starts,
``tags.library_versions``; a tag ending in ``_version`` counts too); runs that record none say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from countboard.tracking import tags as tg

#: (label, tag) of the provenance fields, in the order an entry page lists them.
FIELDS = (
    ("config hash", tg.CONFIG_HASH),
    ("git commit", tg.GIT_COMMIT),
    ("countboard version", tg.COUNTBOARD_VERSION),
    ("dataset digest (data fingerprint)", tg.DATA_FINGERPRINT),
    ("device", tg.DEVICE),
    ("precision", tg.PRECISION),
    ("protocol", tg.PROTOCOL_LABEL),
    ("seed", tg.SEED),
    ("source", tg.SOURCE),
    ("bootstrap", tg.BOOTSTRAP),
    ("missing metrics", tg.MISSING_METRICS),
)
VERSION_SUFFIX = "_version"

RUNS_SQL = """
SELECT r.run_id, r.run_name, r.experiment_id, e.name AS experiment, r.status, r.model, r.dataset, r.split, r.task,
       r.start_time, r.end_time
FROM runs r LEFT JOIN experiments e USING (experiment_id)
WHERE r.run_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY r.run_id
"""
TAGS_SQL = "SELECT run_id, key, value FROM tags WHERE run_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY run_id, key"


@dataclass
class RunProvenance:
    run_id: str
    run_name: str
    experiment: str
    experiment_id: str
    status: str
    task: str
    start_time: str
    end_time: str
    fields: list[tuple[str, str]]  # (label, value) of ``FIELDS`` the run has, "not recorded" otherwise
    versions: list[tuple[str, str]]  # library versions its tags record
    params: list[tuple[str, str]] = field(default_factory=list)
    metrics: list[tuple[str, float]] = field(default_factory=list)


def _text(v) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)) or v is pd.NaT:
        return ""
    if isinstance(v, pd.Timestamp):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    return str(v)


def _by_run(df: pd.DataFrame) -> dict[str, list[tuple[str, object]]]:
    out: dict[str, list[tuple[str, object]]] = {}
    for run, key, value in zip(df.run_id.tolist(), df.key.tolist(), df.value.tolist(), strict=True):
        out.setdefault(run, []).append((key, value))
    return out


def provenance(reader, run_ids: list[str]) -> dict[str, RunProvenance]:
    """Provenance of every run in ``run_ids``, read in four queries whatever their number."""
    from countboard.index import queries

    ids = sorted(set(run_ids))
    if not ids:
        return {}
    runs = reader.df(RUNS_SQL, (ids,))
    tags = _by_run(reader.df(TAGS_SQL, (ids,)))
    params = _by_run(reader.df(queries.PARAMS_OF_RUNS, (ids,)))
    metrics = _by_run(reader.df(queries.METRICS_OF_RUNS, (ids,)))
    out = {}
    for row in runs.to_dict("records"):
        run = row["run_id"]
        t = dict(tags.get(run, []))
        fields = [(label, str(t[key]) if t.get(key) not in (None, "") else "not recorded") for label, key in FIELDS
                  if key in t or key in (tg.CONFIG_HASH, tg.GIT_COMMIT, tg.COUNTBOARD_VERSION, tg.DATA_FINGERPRINT,
                                         tg.DEVICE, tg.PRECISION)]
        versions = sorted((k.removeprefix(tg.LIBRARY_VERSION_PREFIX), str(v)) for k, v in t.items()
                          if k.startswith(tg.LIBRARY_VERSION_PREFIX)
                          or (k.endswith(VERSION_SUFFIX) and k != tg.COUNTBOARD_VERSION))
        out[run] = RunProvenance(
            run_id=run, run_name=_text(row["run_name"]), experiment=_text(row["experiment"]),
            experiment_id=_text(row["experiment_id"]), status=_text(row["status"]), task=_text(row["task"]),
            start_time=_text(row["start_time"]), end_time=_text(row["end_time"]), fields=fields, versions=versions,
            params=sorted((k, str(v)) for k, v in params.get(run, [])),
            metrics=sorted((k, float(v)) for k, v in metrics.get(run, []) if v is not None))
    return out
