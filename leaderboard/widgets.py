"""Page parts shared by the family pages: empty state, filters and the schema-driven ranking table."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import data
from countboard.schema import MetricInfo

SWEEP_HINT = """\
No finished **{title}** runs in the index `{db}` yet.

Launch a sweep into the store, index it, then reload this page:

```bash
countboard-sweep -m model={models} dataset=<dataset> task=<task> tracking.store_dir=mlruns
countboard index --store mlruns
```
{kinds}"""


def launch_hint(lead: str, sweep_args: str) -> None:
    """An info box: ``lead``, then the sweep to launch (``countboard-sweep <sweep_args>``) and how to index it."""
    st.info(f"{lead} Launch a sweep, e.g.\n\n```bash\ncountboard-sweep {sweep_args} tracking.store_dir=mlruns\n"
            "countboard index --store mlruns\n```\n\nthen reload this page.")


def run_picker(runs: pd.DataFrame, unit: str, default_n: int, key: str) -> tuple[str, str, int]:
    """Select a run, an annotator id and how many ``unit`` to label; returns ``(run_id, annotator, n)``."""
    names = {r.run_id: f"{r.model} · {r.dataset} · {r.run_name}" for r in runs.itertuples()}
    cols = st.columns([3, 1, 1])
    run_id = cols[0].selectbox("Run", list(names), format_func=names.get, key=f"{key}_run")
    annot = cols[1].text_input("Annotator id", key=f"{key}_annot").strip()
    n = int(cols[2].number_input(unit, min_value=1, value=default_n, key=f"{key}_n"))
    return run_id, annot, n


def index_unusable() -> bool:
    """Warn (and return True) when the index was built for another schema version."""
    problem = data.index_problem()
    if problem:
        st.warning(problem)
    return bool(problem)


def family_header(family: str) -> list[MetricInfo] | None:
    """Title, description and the family's metrics; the empty state and None when it has no runs yet."""
    st.title(data.family_title(family))
    fam = data.family(family)
    if fam and fam.description:
        st.caption(fam.description)
    metrics = data.view_metrics(family)
    if not metrics or data.choices(family).empty:
        empty_state(family)
        return None
    return metrics


def empty_state(family: str) -> None:
    """Explain how to fill the page: which sweep to launch and how to index it."""
    if index_unusable():
        return
    fam = data.family(family)
    kinds = f"Models of kind {', '.join(f'`{k}`' for k in fam.model_kinds)} belong here." if fam and fam.model_kinds \
        else ""
    st.info(SWEEP_HINT.format(title=data.family_title(family), db=data.db_path(), models="<model_a>,<model_b>",
                              kinds=kinds))
    if not data.index_exists():
        st.caption("There is no index file yet: `countboard index` creates it from the MLflow store.")


def number_format(fmt: str) -> str:
    """Streamlit's printf format for a schema ``fmt`` (``.3f`` → ``%.3f``, ``d`` → ``%d``)."""
    return f"%{fmt}" if fmt else "%.3f"


def filters(family: str, key_prefix: str) -> data.Filters:
    """Dataset and split selectors built from the runs present."""
    opts = data.choices(family)
    cols = st.columns(2)
    datasets = sorted(opts.dataset.dropna().unique()) if not opts.empty else []
    dataset = cols[0].selectbox("Dataset", ["All", *datasets], key=f"{key_prefix}_dataset")
    dataset = None if dataset == "All" else dataset
    subset = opts[opts.dataset == dataset] if dataset and not opts.empty else opts
    splits = sorted(subset.split.dropna().unique()) if not subset.empty else []
    split = cols[1].selectbox("Split", ["All", *splits], key=f"{key_prefix}_split")
    return data.Filters(dataset=dataset, split=None if split == "All" else split)


def metric_picker(family: str, metrics: list[MetricInfo], key_prefix: str) -> tuple[MetricInfo, list[MetricInfo]]:
    """The metric to rank by (default: the family's main metric) and the columns to show."""
    fam = data.family(family)
    keys = [m.key for m in metrics]
    main = fam.main_metric if fam and fam.main_metric in keys else keys[0]
    by_key = {m.key: m for m in metrics}
    cols = st.columns([1, 2])
    sort_key = cols[0].selectbox("Rank by", keys, index=keys.index(main), key=f"{key_prefix}_sort",
                                 format_func=lambda k: by_key[k].display)
    default = [m.key for m in data.default_columns(family, metrics)] or keys[:data.DEFAULT_COLUMNS]
    shown = cols[1].multiselect("Columns", keys, default=default, key=f"{key_prefix}_cols",
                                format_func=lambda k: by_key[k].display)
    if sort_key not in shown:
        shown = [sort_key, *shown]
    return by_key[sort_key], [by_key[k] for k in keys if k in shown]


def ranking_frame(df: pd.DataFrame, metrics: list[MetricInfo], extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """Rank, model, dataset, split, the metric columns and a link to each run's MLflow page.

    ``df`` comes best first; rows are grouped by dataset and split (and evaluator, when shown, and task, when a
    model has one entry per task), keeping that order inside each group, and ranked within their group: models are
    only compared on the same data.
    """
    groups = ["dataset", "split", *(["evaluator"] if "evaluator" in extra else [])]
    if "task" in df and "task" not in extra and df.duplicated(["model", *groups]).any():
        extra, groups = (*extra, "task"), [*groups, "task"]  # entries split per task: rank each task apart
    df = df.sort_values(groups, kind="stable", na_position="last")
    out = pd.DataFrame({"rank": df.groupby(groups, sort=False, dropna=False).cumcount().to_numpy() + 1,
                        "model": df.model.to_numpy(), "dataset": df.dataset.to_numpy(),
                        "split": df.split.to_numpy()})
    for col in extra:
        out[col] = df[col].to_numpy()
    for m in metrics:
        out[m.key] = df[m.key].to_numpy()
    out["run"] = [data.run_url(e, r) for e, r in zip(df.experiment_id, df.run_id, strict=True)]
    return out


def show_ranking(df: pd.DataFrame, metrics: list[MetricInfo], sort: MetricInfo, extra: tuple[str, ...] = (),
                 key: str | None = None) -> None:
    """The ranking table, columns named and formatted from the schema."""
    frame = ranking_frame(df, metrics, extra)
    arrow = {True: "↑", False: "↓", None: ""}
    config = {m.key: st.column_config.NumberColumn(
        f"{m.display} {arrow[m.higher_is_better]}".strip(), format=number_format(m.fmt),
        help=(m.description or None)) for m in metrics}
    config["run"] = st.column_config.LinkColumn("MLflow", display_text="open run")
    config["rank"] = st.column_config.NumberColumn("#", format="%d")
    direction = "higher is better" if sort.higher_is_better is not False else "lower is better"
    st.caption(f"Ranked by **{sort.display}** ({direction}); ↑ higher is better, ↓ lower is better.")
    st.dataframe(frame, column_config=config, hide_index=True, key=key)


def missing(what: str, path: str) -> None:
    """Say which artifact a chart needs when no selected run has it."""
    st.info(f"No {what}: none of the selected runs has the artifact `{path}`.")
