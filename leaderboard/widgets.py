"""Page parts shared by the family pages: empty state, filters and the schema-driven ranking table."""

from __future__ import annotations

import shlex

import numpy as np
import pandas as pd
import streamlit as st

import data
import ranking
from countboard.escaping import md
from countboard.index.ddl import SPREAD_SUFFIX
from countboard.schema import IntervalInfo, MetricInfo

MISSING = "—"
#: Rows of a table sent to the browser at once (the ranking tables, the Runs page): at 30,000 runs "All" datasets
#: sent 1,200 entries (865 kB) in one message; a page control after the table shows the others.
PAGE_ROWS = 100

#: Session-state key, set once the session's browser has drawn a table (``report_first_table``).
TABLE_DRAWN = "table_on_screen"
# Reports, once, that a table's grid is drawn in the page (or that 3 s have passed: a page whose table is hidden
# still gets its figures). No HTML, no request: it only reads the page's DOM.
_TABLE_DRAWN_JS = """
export default function ({ setStateValue }) {
  const start = performance.now();
  const check = () => {
    if (document.querySelector('[data-testid="stMain"] [data-testid="stDataFrame"] canvas')
        || performance.now() - start > 3000) {
      requestAnimationFrame(() => setStateValue("drawn", true));
    } else {
      requestAnimationFrame(check);
    }
  };
  requestAnimationFrame(check);
}
"""
_table_drawn = st.components.v2.component("countboard_table_drawn", js=_TABLE_DRAWN_JS)

SWEEP_HINT = """\
No finished **{title}** runs in the index `{db}` yet.

Launch a sweep into the store, index it, then reload this page:

```bash
countboard-sweep -m model={models} dataset=<dataset> task=<task> {sweep}
countboard index {index}
```
{kinds}"""


def store_args() -> tuple[str, str]:
    """The sweep's and the index's arguments that name the store this page reads: the indexed store where it is
    now (``$COUNTBOARD_STORE`` when ``countboard leaderboard`` set it), else the store the environment names (the
    default ``mlruns`` when none does).

    Example (a local store in ``/data/my runs``): ``("'tracking.store_dir=/data/my runs'", "--store '/data/my runs'")``.
    """
    from countboard.tracking import address

    folder = data.store_dirs()[1]
    uri = data.store_uri()
    addr = address.parse(folder) if folder is not None else address.parse(uri) if uri else address.resolve()
    if addr.is_embedded:
        return shlex.quote(f"tracking.store_dir={addr.folder}"), f"--store {shlex.quote(str(addr.folder))}"
    return f"tracking=server {shlex.quote(f'tracking.uri={addr.uri}')}", f"--store {shlex.quote(addr.uri)}"


def launch_hint(lead: str, sweep_args: str) -> None:
    """An info box: ``lead``, then the sweep to launch (``countboard-sweep <sweep_args>``) into the store this page
    reads and how to index it."""
    sweep, index = store_args()
    st.info(f"{lead} Launch a sweep, e.g.\n\n```bash\ncountboard-sweep {sweep_args} {sweep}\n"
            f"countboard index {index}\n```\n\nthen reload this page.")


def run_picker(runs: pd.DataFrame, unit: str, default_n: int, key: str) -> tuple[str, str, int]:
    """Select a run, an annotator id and how many ``unit`` to label; returns ``(run_id, annotator, n)``."""
    names = {r.run_id: f"{r.model} · {r.dataset} · {r.run_name}" for r in runs.itertuples()}
    cols = st.columns([3, 1, 1])
    run_id = cols[0].selectbox("Run", list(names), format_func=names.get, key=f"{key}_run")
    annot = cols[1].text_input("Annotator id", key=f"{key}_annot").strip()
    n = int(cols[2].number_input(unit, min_value=1, value=default_n, key=f"{key}_n"))
    return run_id, annot, n


#: End of the key of the container that holds the place of what stands below the session's first table until it
#: is on screen (its class, ``st-key-…_after_first_table``, tells a browser test or benchmark that the page
#: is still being drawn).
PENDING = "after_first_table"
_WAITING = "first_table_waiting"
_TABLE_SENT = "first_table_sent"  # this run's content sent a table (``table``), read by ``controls_then``


def after_first_table(key: str, what: str | None = None) -> bool:
    """True once this session's browser has drawn a table; until then, holds the place of what follows (with a
    line that says ``what`` follows, when given) and returns False (the caller draws nothing more), and
    ``report_first_table`` waits for the table. ``key``: unique on the page.

    What stands below a page's first table waits for it the first time a session opens a page: Plotly's code (a
    4.7 MB chunk) evaluated, or a second grid and its widgets drawn, before the ranking grid's first draw held the
    ranking back by ~0.7 s on one page load in two, and the page control and the figures' tabs drawn in the same
    batch by ~0.09 s (``benchmarks/leaderboard_browser.py``); a script rerun without the browser's word came too
    soon to help. Above the table, the filters wait too, in a place held at their height (``controls_then``).
    Later pages of the session are drawn at once."""
    if st.session_state.get(TABLE_DRAWN):
        return True
    st.session_state[_WAITING] = True
    with st.container(key=f"{key}_{PENDING}"):
        if what:
            st.caption(f"Drawing {what} once the table above is on screen…")
    return False


def second_table_ready(family: str, none_yet: str, key: str, what: str) -> bool:
    """Whether a page's table below its ranking (a paper's table of ``family``) can be drawn now: not when the
    family has no runs (``none_yet`` says so), nor before the session's first table is on screen
    (``after_first_table``: its place is held)."""
    if not data.has_family_view(family) or data.choices(family).empty:
        st.info(none_yet)
        return False
    return after_first_table(key, what)


def report_first_table() -> None:
    """While something waits for the session's first table (``after_first_table``): a component in the sidebar
    that reports when a table's grid is drawn in the page. Called by the app's main script, outside every
    fragment, so that the report reruns the whole page (two fragments' reports in one batch reran only one)."""
    if st.session_state.get(TABLE_DRAWN) or not st.session_state.get(_WAITING):
        return
    with st.sidebar:
        _table_drawn(key="first_table_drawn", on_drawn_change=_mark_table_drawn)


def _mark_table_drawn() -> None:
    st.session_state[TABLE_DRAWN] = True


def index_unusable() -> bool:
    """Warn (and return True) when the index was built for another schema version."""
    problem = data.index_problem()
    if problem:
        st.warning(problem)
    return bool(problem)


def empty_state(family: str) -> None:
    """Explain how to fill the page: which sweep to launch and how to index it."""
    if index_unusable():
        return
    fam = data.family(family)
    kinds = f"Models of kind {', '.join(f'`{k}`' for k in fam.model_kinds)} belong here." if fam and fam.model_kinds \
        else ""
    sweep, index = store_args()
    st.info(SWEEP_HINT.format(title=data.family_title(family), db=data.db_path(), models="<model_a>,<model_b>",
                              kinds=kinds, sweep=sweep, index=index))
    if not data.index_exists():
        st.caption("There is no index file yet: `countboard index` creates it from the MLflow store.")


#: Heights (px) of the controls as Streamlit draws them in a wide page (its default theme): a labelled input (select
#: box, multiselect, text input), a segmented control, a toggle, a one-line caption, and the gap between elements.
#: ``Peek.height`` adds them up to hold the controls' place while the first table is drawn (``controls_then``);
#: the browser test checks that the table stays where it is when the controls arrive.
HEIGHTS = {"selectbox": 68.0, "multiselect": 68.0, "text_input": 68.0, "segmented_control": 60.0, "toggle": 24.0,
           "caption": 22.4}
GAP = 16.0


class Peek:
    """Stands in for ``st`` when a section reads its controls before drawing them: each widget returns what the
    drawn widget will (its value in session state, from the previous run or an interaction, else its default)
    and draws nothing. A section that draws its table before its controls (``controls_then``) reads them so.
    It also notes the controls' layout, to tell how tall they will be (``height``).

    Example (a row of two select boxes, then a toggle):
        >>> ui = Peek()
        >>> left, right = ui.columns(2)
        >>> left.selectbox("Dataset", ["All"]), right.selectbox("Split", ["All", "test"], index=1)
        ('All', 'test')
        >>> ui.toggle("Include partial runs")
        False
        >>> ui.height()  # 68 + 16 + 24
        108.0
    """

    def __init__(self):
        self._items: list[float | list[Peek]] = []  # top to bottom: an element's height, or a row of columns

    def height(self) -> float:
        """How tall the controls read so far are when drawn (a row of columns: its tallest column)."""
        parts = [max((c.height() for c in x), default=0.0) if isinstance(x, list) else x for x in self._items]
        return sum(parts) + GAP * max(len(parts) - 1, 0)

    def columns(self, spec, **_) -> list[Peek]:
        row = [Peek() for _ in range(spec if isinstance(spec, int) else len(spec))]
        self._items.append(row)
        return row

    def _add(self, kind: str) -> None:
        self._items.append(HEIGHTS[kind])

    def caption(self, *_, **__) -> None:
        self._add("caption")

    def selectbox(self, label, options, index=0, key=None, **_):
        self._add("selectbox")
        options = list(options)
        value = st.session_state.get(key, _UNSET) if key else _UNSET
        if value is not _UNSET and value in options:
            return value
        return options[index] if options and index is not None else None

    def multiselect(self, label, options, default=None, key=None, **_) -> list:
        self._add("multiselect")
        value = st.session_state.get(key) if key else None
        return list(value) if value is not None else list(default or [])

    def toggle(self, label, value=False, key=None, **_) -> bool:
        self._add("toggle")
        return bool(st.session_state.get(key, value)) if key else value

    def text_input(self, label, value="", key=None, **_) -> str:
        self._add("text_input")
        return str(st.session_state.get(key, value) or "") if key else value

    def segmented_control(self, label, options, default=None, key=None, **_):
        self._add("segmented_control")
        options = list(options)
        value = st.session_state.get(key, default) if key else default
        return value if value in options else None


_UNSET = object()


def controls_then(controls, content, key: str, fragment: bool = False):
    """Draw ``content(values)`` before the widgets that pick its values, and the widgets above it.

    ``controls(ui)`` draws the widgets through ``ui`` (``st``, or a ``Peek`` that only reads their values) and
    returns their values. The browser gets the content's table first, so that it is drawn before the widgets'
    components load (on a page with a dozen widgets the table came 1.3-2x later than on a page with one); the
    widgets still appear above it, in a container made first. The first time a session opens a page, when the
    content sent a table (``table``), the widgets wait until the browser reports it drawn (as what stands below it
    does, ``after_first_table``): their place is held at the height they will have (in a wide window), so the
    table does not move when they come; once drawn in the session, or in a fragment's own run, they never wait.
    Drawn in the same batch as the table, their components' code still held the grid's first draw back by
    0.1-0.2 s (``benchmarks/leaderboard_browser.py``). When the values the drawn widgets return differ
    from those read before (a choice that no longer exists, e.g. a split of another dataset), the section runs
    again with them, once (``fragment``: only the fragment that called this, when it is a fragment's own run;
    ``key``: unique on the page, it keeps whether this call has just rerun)."""
    top = st.container()
    peek = Peek()
    values = controls(peek)
    st.session_state[_TABLE_SENT] = False
    out = content(values)
    shown = f"{key}_shown"  # the widgets were drawn once in this session: they never wait again
    height = round(peek.height())
    if st.session_state.get(_TABLE_SENT) and not st.session_state.get(TABLE_DRAWN) \
            and not st.session_state.get(shown) and not _fragment_run() and height > 0:
        # (not in a fragment's own run: the report's component is placed by the app's whole run only; and not
        # once drawn: a run that leaves a widget out drops its state, the user's choice)
        st.session_state[_WAITING] = True
        with top:
            st.container(height=height, border=False, key=f"{key}_{PENDING}")
        return out
    with top:
        drawn = controls(st)
    st.session_state[shown] = True
    flag = f"{key}_rerun"
    again = st.session_state.get(flag, False)
    st.session_state[flag] = drawn != values and not again  # once: a widget Peek misreads never loops
    if st.session_state[flag]:
        st.rerun(scope="fragment" if fragment and _fragment_run() else "app")
    return out


def table(data, **kwargs):
    """``st.dataframe(data, **kwargs)`` for a page's first table: ``controls_then`` holds the controls above it
    until the browser has drawn it."""
    st.session_state[_TABLE_SENT] = True
    return st.dataframe(data, **kwargs)


def _fragment_run() -> bool:
    """Whether this script run reruns fragments only (``st.rerun(scope="fragment")`` is allowed only then)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return bool(ctx and ctx.fragment_ids_this_run)


def filters(family: str, key_prefix: str, ui=st) -> data.Filters:
    """Dataset and split selectors built from the runs present, one selector per schema level (e.g. the task:
    entries of different levels are never ranked together) and, when the index marks partial (smoke) runs, a
    toggle that lets them in (off by default). ``ui``: ``st``, or a ``Peek`` that reads their values only."""
    opts = data.choices(family)
    fam = data.family(family)
    levels = [(lv, data.level_values(family, lv.column)) for lv in (fam.levels if fam else ())]
    levels = [(lv, vals) for lv, vals in levels if vals]
    cols = ui.columns(2 + len(levels))
    datasets = sorted(opts.dataset.dropna().unique()) if not opts.empty else []
    dataset = cols[0].selectbox("Dataset", ["All", *datasets], key=f"{key_prefix}_dataset")
    dataset = None if dataset == "All" else dataset
    subset = opts[opts.dataset == dataset] if dataset and not opts.empty else opts
    splits = sorted(subset.split.dropna().unique()) if not subset.empty else []
    split = cols[1].selectbox("Split", ["All", *splits], key=f"{key_prefix}_split")
    chosen = tuple((lv.column, cols[2 + i].selectbox(lv.display, vals, key=f"{key_prefix}_level_{lv.column}"))
                   for i, (lv, vals) in enumerate(levels))
    chosen += protocol_filter(family, key_prefix, ui)
    partial = failed = False
    if data.has_partial_column(family):
        partial = ui.toggle("Include partial (smoke) runs", value=False, key=f"{key_prefix}_partial")
    if data.has_failed_runs(family):
        failed = ui.toggle("Show runs with failed units apart", value=False, key=f"{key_prefix}_failed",
                           help="A run with failed units (unreadable inputs) never replaces a clean run of its "
                                "entry; switched on, the latest such run of each entry gets a row of its own.")
    return data.Filters(dataset=dataset, split=None if split == "All" else split, levels=chosen,
                        include_partial=partial, include_failed=failed)


ALL_PROTOCOLS = "All protocols, apart"


def protocol_filter(family: str, key_prefix: str, ui=st) -> tuple[tuple[str, str | None], ...]:
    """The protocol the table ranks (a level: ``(column, label)``; ``None`` for all protocols, each its own rows).

    One protocol per table by default: the default protocol when runs have it, else the first.
    """
    labels = data.protocols(family)
    if not labels:
        return ()
    if len(labels) == 1:
        ui.caption(f"Protocol: **{md(labels[0])}** (the task and model parameters that change what is measured).")
        return ((data.PROTOCOL_COLUMN, labels[0]),)
    picked = ui.selectbox("Protocol", [*labels, ALL_PROTOCOLS], key=f"{key_prefix}_protocol",
                          help="Runs of one model and task that measure different things (a mosaic preset, a "
                               "threshold, a classifier) are different entries; a table ranks one protocol.")
    return ((data.PROTOCOL_COLUMN, None if picked == ALL_PROTOCOLS else picked),)


def metric_picker(family: str, metrics: list[MetricInfo], key_prefix: str,
                  ui=st) -> tuple[MetricInfo, list[MetricInfo]]:
    """The metric to rank by (default: the family's main metric) and the columns to show (default: the
    schema's ``columns``). ``ui``: ``st``, or a ``Peek`` that reads their values only."""
    fam = data.family(family)
    metrics = [m for m in metrics if m.bound_of is None]  # a bound is shown beside its metric, never on its own
    keys = [m.key for m in metrics]
    main = fam.main_metric if fam and fam.main_metric in keys else keys[0]
    by_key = {m.key: m for m in metrics}
    cols = ui.columns([1, 2])
    sort_key = cols[0].selectbox("Rank by", keys, index=keys.index(main), key=f"{key_prefix}_sort",
                                 format_func=lambda k: by_key[k].display)
    default = [m.key for m in data.default_columns(family, metrics)] or keys[:data.DEFAULT_COLUMNS]
    shown = cols[1].multiselect("Columns", keys, default=default, key=f"{key_prefix}_cols",
                                format_func=lambda k: by_key[k].display)
    return by_key[sort_key], [by_key[k] for k in keys if k in shown and k != sort_key]


def rank_column(df: pd.DataFrame, sort: MetricInfo, interval: IntervalInfo | None, groups: list[str]) -> list[str]:
    """Rank of each row within its group: ties share a rank, and with an interval, entries whose intervals
    overlap share a rank range (``1–3``)."""
    return rank_and_tie_group(df, sort, interval, groups)[0]


def rank_and_tie_group(df: pd.DataFrame, sort: MetricInfo, interval: IntervalInfo | None,
                       groups: list[str]) -> tuple[list[str], list[str]]:
    """Rank labels and tie groups (``ranking.ranks_within``) of each row within its group."""
    if not len(df):
        return [], []
    # the groups' rows as positions, the columns as arrays once (a pandas slice per group cost 0.5 ms: 20 ms of a
    # 30-group ranking, before the table is sent)
    codes = df.groupby(groups, sort=False, dropna=False).ngroup().to_numpy()
    mean = df[sort.key].to_numpy(dtype=float)
    low = df[interval.low].to_numpy(dtype=float) if interval is not None else None
    high = df[interval.high].to_numpy(dtype=float) if interval is not None else None
    best, worst, tie = ranking.ranks_within(codes, mean, low, high, sort.higher_is_better is not False)
    labels = [ranking.rank_label(b, w) for b, w in zip(best, worst, strict=True)]
    return labels, [MISSING if np.isnan(t) else str(int(t)) for t in tie]


def ranking_frame(df: pd.DataFrame, metrics: list[MetricInfo], sort: MetricInfo,
                  interval: IntervalInfo | None = None, extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """Rank, model, the ranked metric (and its interval), dataset, split, the other metric columns and a link to
    each run's MLflow page.

    ``df`` comes best first; rows are grouped by dataset and split (and evaluator, when shown, and task, when a
    model has one entry per task), keeping that order inside each group, and ranked within their group: models are
    only compared on the same data.
    """
    if data.PROTOCOL_COLUMN in df and df[data.PROTOCOL_COLUMN].nunique() > 1 and data.PROTOCOL_COLUMN not in extra:
        extra = (*extra, data.PROTOCOL_COLUMN)  # several protocols: each ranked apart, named in a column
    groups = ["dataset", "split", *(c for c in ("evaluator", data.PROTOCOL_COLUMN) if c in extra)]
    if "task" in df and "task" not in extra and df.duplicated(["model", *groups]).any():
        extra, groups = (*extra, "task"), [*groups, "task"]  # entries split per task: rank each task apart
    df = df.sort_values(groups, kind="stable", na_position="last").reset_index(drop=True)
    labels, tie = rank_and_tie_group(df, sort, interval, groups)
    out = pd.DataFrame({"rank": labels, "model": df.model.to_numpy()})
    out[sort.key] = df[sort.key].to_numpy(dtype=float)
    if interval is not None:
        out[interval.low] = df[interval.low].to_numpy(dtype=float)
        out[interval.high] = df[interval.high].to_numpy(dtype=float)
        if interval.count and interval.count in df:
            out[interval.count] = df[interval.count].to_numpy(dtype=float)
    spread = f"{sort.key}{SPREAD_SUFFIX}"
    if spread in df and "n_runs" in df and (df["n_runs"] > 1).any():  # seeds of a cell: mean, spread and n
        out[spread] = df[spread].to_numpy(dtype=float)
        out["n_runs"] = df["n_runs"].to_numpy(dtype=int)
    out["tie group"] = tie  # beside the ranked value and its interval, which decide it
    for col in ("dataset", "split", *extra):
        if col in ("dataset", "split") and df[col].nunique(dropna=False) == 1:
            continue  # one dataset and split: named in the caption, not repeated on every row
        out[col] = df[col].astype(object).where(df[col].notna(), MISSING).to_numpy()
    if data.FAILED_COLUMN in df and (df[data.FAILED_COLUMN].fillna(0) > 0).any():
        out["failed units"] = [failed_text(n, s) for n, s in zip(df[data.FAILED_COLUMN], df["failed_share"],
                                                                 strict=True)]
    for m in metrics:
        if m.key not in out:
            out[m.key] = df[m.key].to_numpy(dtype=float)
    out["run"] = data.run_urls(df.experiment_id, df.run_id)
    return out


def interval_help(interval: IntervalInfo) -> str:
    """What an interval column holds: its level and method, and where its units and seeds are shown."""
    if interval.units:
        return (f"Equal-tailed {interval.level:.0%} percentile bootstrap interval over the run's {interval.units} "
                "(drawn once when the run was summarised; the run's `bootstrap` tag names the resamples and seed). "
                "With several seeds, each bound is their mean. Entries whose intervals overlap share a rank range; "
                "the interval chart below names each entry's units and seeds on hover.")
    return f"Equal-tailed {interval.level:.0%} credible interval of the posterior."


def dashes(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with missing text and times shown as "—" (the grid prints "None" for them); times become
    ``YYYY-MM-DD HH:MM:SS`` text, which sorts as the times do. Numbers stay numbers (the grid formats them; ``with_dashes`` turns a number
    column with a missing value into text).

    Example:
        >>> dashes(pd.DataFrame({"a": ["x", None], "t": pd.to_datetime(["2026-01-02 03:04:05", None])})).values.tolist()
        [['x', '2026-01-02 03:04:05'], ['—', '—']]
    """
    out = df.copy()
    for col in out.columns:
        values = out[col]
        if pd.api.types.is_datetime64_any_dtype(values):
            out[col] = values.dt.strftime("%Y-%m-%d %H:%M:%S").astype(object).where(values.notna(), MISSING)
        elif values.dtype == object or pd.api.types.is_string_dtype(values):
            out[col] = values.astype(object).where(values.notna(), MISSING)
    return out


def failed_text(n, share) -> str:
    """``"1 (4.2%)"``: failed units of an entry and their share of its units; a dash when none failed.

    Example:
        >>> failed_text(1, 1 / 24), failed_text(0, 0.0)
        ('1 (4.2%)', '—')
    """
    if n is None or pd.isna(n) or int(n) == 0:
        return MISSING
    return f"{int(n)} ({float(share):.1%})" if share is not None and not pd.isna(share) else f"{int(n)}"


def format_value(v, fmt: str) -> str:
    """A metric value in the schema's format (``d``: a whole number); missing values as a dash, never "None".

    Example:
        >>> format_value(3.0, "d"), format_value(0.12345, ".3f"), format_value(float("nan"), ".3f")
        ('3', '0.123', '—')
    """
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return MISSING
    spec = fmt or ".3f"
    if spec.endswith("d"):
        return format(int(round(float(v))), spec)
    return format(float(v), spec)


def _formatter(fmt: str):
    return lambda v: format_value(v, fmt)


def printf(fmt: str) -> str:
    """The schema's format as the grid's printf-style ``format`` (drawn by the browser, as ``format_value`` does).

    Example:
        >>> printf(".3f"), printf("d"), printf(".2e"), printf("")
        ('%.3f', '%d', '%.2e', '%.3f')
    """
    spec = fmt or ".3f"
    return "%d" if spec.endswith("d") else f"%{spec}"


def show_ranking(df: pd.DataFrame, metrics: list[MetricInfo], sort: MetricInfo, extra: tuple[str, ...] = (),
                 key: str | None = None, interval: IntervalInfo | None = None) -> pd.DataFrame:
    """The ranking table, one per section, columns named and formatted from the schema; rank, model and the ranked
    metric are pinned at the left so they stay in view while the other columns scroll sideways. Returns the frame
    shown."""
    frame = ranking_frame(df, metrics, sort, interval, extra)
    arrow = {True: "↑", False: "↓", None: ""}
    infos = {m.key: m for m in [sort, *metrics]}
    # numbers are formatted by the grid (``format``), not by a pandas Styler: a Styler renders every cell's text in
    # Python and sends it beside the number, which doubled the table's message and its script time at 1,000s of rows
    config = {k: st.column_config.NumberColumn(f"{m.display} {arrow[m.higher_is_better]}".strip(),
                                               help=(m.description or None), pinned=k == sort.key,
                                               format=printf(m.fmt))
              for k, m in infos.items()}
    formats = {k: _formatter(m.fmt) for k, m in infos.items()}
    if interval is not None:
        pct = f"{interval.level:.0%}"
        how = interval_help(interval)
        for bound, side in ((interval.low, "low"), (interval.high, "high")):
            config[bound] = st.column_config.NumberColumn(f"{pct} {side}", pinned=True, help=how,
                                                          format=printf(sort.fmt))
            formats[bound] = _formatter(sort.fmt)
        if interval.count in frame:
            config[interval.count] = st.column_config.NumberColumn(
                "n", help=f"{interval.units.capitalize()} the interval resamples (per run).", format="%d")
            formats[interval.count] = _formatter("d")
    spread = f"{sort.key}{SPREAD_SUFFIX}"
    if spread in frame:
        config[spread] = st.column_config.NumberColumn("± sd (seeds)", pinned=True, format=printf(sort.fmt),
                                                       help="Standard deviation of the ranked metric over the seeds "
                                                            "of the cell; the value is their mean.")
        formats[spread] = _formatter(sort.fmt)
        config["n_runs"] = st.column_config.NumberColumn("seeds", pinned=True, format="%d")
    config["run"] = st.column_config.LinkColumn("MLflow", display_text="open run",
                                                help="The run's page in the MLflow UI.")
    config["rank"] = st.column_config.TextColumn("#", pinned=True, help="Rank within dataset and split; entries "
                                                 "whose intervals overlap share a rank range, equal values a rank.")
    config["tie group"] = st.column_config.TextColumn("tie", pinned=True, help=ranking.TIE_RULE)
    config["model"] = st.column_config.TextColumn("model", pinned=True)
    config[data.PROTOCOL_COLUMN] = st.column_config.TextColumn(
        "protocol", help="Task and model parameters that change what is measured; ranks are within a protocol.")
    config["failed units"] = st.column_config.TextColumn(
        "failed units", help="Units whose input could not be read or evaluated, and their share of the entry's "
                             "units: its metrics cover the other units only.")
    direction = "higher is better" if sort.higher_is_better is not False else "lower is better"
    how = f", with its {interval.level:.0%} interval" if interval is not None else " (no interval in the schema)"
    where = " · ".join(f"{c} {md(df[c].iloc[0])}" for c in ("dataset", "split")
                       if c not in frame and c in df and len(df) and pd.notna(df[c].iloc[0]))
    st.caption(f"Ranked by **{sort.display}** ({direction}){how}{f' on {where}' if where else ''}; "
               "↑ higher is better, ↓ lower is better.")
    page_key = f"{key or 'ranking'}_page"
    bounds = page_bounds(len(frame), page_key)
    shown, config = with_dashes(frame.iloc[bounds[0]:bounds[1]], config, formats)
    # one table as wide as the page: the pinned columns (rank, model, the ranked metric and its interval) stay in
    # view while the others scroll sideways, instead of a second table of the columns that did not fit
    table(shown, column_config=config, hide_index=True, key=key, width="stretch")
    if after_first_table(page_key):
        page_control(len(frame), page_key, bounds)
    return frame


def with_dashes(frame: pd.DataFrame, config: dict, formats: dict) -> tuple[pd.DataFrame, dict]:
    """``frame`` for the grid: a number column with a missing value becomes its formatted text, "—" where missing,
    right-aligned (the grid draws "None" for a missing number whatever its format says)."""
    shown, config = frame.copy(), dict(config)
    for k, fmt in formats.items():
        if k in shown and shown[k].isna().any():
            shown[k] = [fmt(v) for v in shown[k]]
            c = config.get(k) or {}
            config[k] = st.column_config.TextColumn(c.get("label") or k, help=c.get("help"), pinned=c.get("pinned"),
                                                    alignment="right")
    return shown, config


def missing(what: str, path: str) -> None:
    """Say which artifact a chart needs when no selected run has it."""
    st.info(f"No {what}: none of the selected runs has the artifact `{path}`.")


def page_bounds(n_rows: int, key: str, rows: int | None = None) -> tuple[int, int]:
    """Rows ``[start, stop)`` of the page that the page control ``key`` shows: the first until another is picked,
    the last when a filter left fewer pages than the one picked."""
    rows = rows or PAGE_ROWS
    n_pages = max(1, -(-n_rows // rows))
    page = min(max(1, int(st.session_state.get(key) or 1)), n_pages)
    st.session_state[key] = page  # before the control exists in this run: a page past the end becomes the last
    return (page - 1) * rows, min(page * rows, n_rows)


def page_control(n_rows: int, key: str, bounds: tuple[int, int], rows: int | None = None) -> None:
    """After a paged table: which rows it shows, and the page to show (only when there is more than one)."""
    rows = rows or PAGE_ROWS
    if n_rows <= rows:
        return
    n_pages = -(-n_rows // rows)
    left, right = st.columns([1, 3])
    left.number_input(f"Page (of {n_pages:,})", min_value=1, max_value=n_pages, step=1, key=key)
    right.caption(f"Rows {bounds[0] + 1:,}–{bounds[1]:,} of {n_rows:,}, {rows} a page, in the order above; "
                  "sorting by a column header sorts this page.")
