"""The HTML of each kind of page: the overview, a family, a benchmark (its rankings, charts, the papers' values,
galleries) and an entry (its values and every run's provenance). Every store string goes through ``render.esc``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from countboard.publish import references
from countboard.publish.collect import Benchmark, Entry, RankedTable, labels_of
from countboard.publish.provenance import RunProvenance
from countboard.publish.render import MISSING, chart, esc, fmt, link, table
from countboard.publish.render import num as render_num
from countboard.quantify.ranks import TIE_RULE
from countboard.tracking import tags as tg

ARROW = {True: " ↑", False: " ↓", None: ""}
TOP_INTERVALS = 30


def entry_href(entry_id: str, depth: int) -> str:
    return f"{'../' * depth}entries/{entry_id}.html"


def data_links(key: str, depth: int) -> str:
    up = "../" * depth
    return f'<p class="note">Data: {link(f"{up}data/{key}.csv", "CSV")} · {link(f"{up}data/{key}.json", "JSON")}</p>'


def context_text(t: RankedTable) -> str:
    parts = [f"{k.replace('_label', '')} {v}" for k, v in t.context.items()]
    return " · ".join(parts)


def ranking_table(t: RankedTable, depth: int) -> str:
    """The ranking as the board shows it: rank range, tie group, model, value with its interval (and the value
    drawn beside it, CC beside BCC), seeds, the other columns, failed units."""
    sort, iv = t.sort, t.interval
    headers = [("#", "Rank range: the best and worst rank the intervals allow; the first number is Chatbot Arena's "
                     "rank"), ("tie", TIE_RULE), ("model", ""), (sort.display + ARROW[sort.higher_is_better],
                                                                   sort.description)]
    if iv:
        headers += [(f"{iv.level:.0%} low", iv.method), (f"{iv.level:.0%} high", iv.method)]
    spread = f"{sort.key}__std"
    seeds = spread in t.rows and "n_runs" in t.rows and (t.rows["n_runs"].fillna(1) > 1).any()
    if seeds:
        headers += [("± sd (seeds)", "Standard deviation over the seeds of the cell"), ("seeds", "")]
    beside = t.beside if t.beside and t.beside in t.rows else None
    from countboard.schema import load_schema

    schema = load_schema()
    if beside:
        info = schema.metrics.get(beside)
        headers.append(((info.display if info else beside) + " (beside)", info.description if info else ""))
    others = [m for m in t.metrics if m.key in t.rows and m.key != beside]
    headers += [(m.display + ARROW[m.higher_is_better], m.description) for m in others]
    failed = tg.N_FAILED_UNITS in t.rows and (t.rows[tg.N_FAILED_UNITS].fillna(0) > 0).any()
    if failed:
        headers.append(("failed units", "Units whose input could not be read; the metrics cover the others"))
    headers.append(("runs", "The entry's page: provenance of every run"))
    rows = []
    for r in t.rows.to_dict("records"):
        def num(k, f=sort.fmt, r=r):
            return render_num(r.get(k), f)

        cells = [esc(r["rank"]), esc(MISSING if pd.isna(r["tie_group"]) else int(r["tie_group"])),
                 link(entry_href(r["entry_id"], depth), r["model"]), num(sort.key)]
        if iv:
            cells += [num(iv.low), num(iv.high)]
        if seeds:
            cells += [num(spread), esc(fmt(r.get("n_runs"), "d"))]
        if beside:
            info = schema.metrics.get(beside)
            cells.append(num(beside, info.fmt if info else ".3f"))
        cells += [num(m.key, m.fmt) for m in others]
        if failed:
            n = r.get(tg.N_FAILED_UNITS)
            share = r.get("failed_share")
            cells.append(esc(MISSING if not n or pd.isna(n) else f"{int(n)} ({share:.1%})" if share == share
                             else f"{int(n)}"))
        cells.append(esc(len(r["run_ids"]) if isinstance(r["run_ids"], list | np.ndarray) else 1))
        rows.append(cells)
    return table(headers, rows)


def interval_chart(t: RankedTable, cid: str) -> str:
    iv = t.interval
    part = t.rows.dropna(subset=[t.sort.key, iv.low, iv.high]).head(TOP_INTERVALS)
    if part.empty:
        return ""
    labels = labels_of(part)
    v = part[t.sort.key].to_numpy(dtype=float)
    data = [{"type": "scatter", "mode": "markers", "name": t.sort.display, "y": labels, "x": v.tolist(),
             "error_x": {"type": "data", "symmetric": False,
                         "array": (part[iv.high].to_numpy(dtype=float) - v).tolist(),
                         "arrayminus": (v - part[iv.low].to_numpy(dtype=float)).tolist()},
             "text": [f"tie group {int(g)}" if g == g else "" for g in part.tie_group],
             "hovertemplate": "%{y}: %{x:.4g} (%{text})<extra></extra>"}]
    if t.beside and t.beside in part and part[t.beside].notna().any():
        from countboard.schema import load_schema

        info = load_schema().metrics.get(t.beside)
        data.append({"type": "scatter", "mode": "markers", "name": info.display if info else t.beside, "y": labels,
                     "x": part[t.beside].to_numpy(dtype=float).tolist(), "marker": {"symbol": "x", "size": 9}})
    layout = {"height": 120 + 28 * len(part), "margin": {"l": 200, "r": 20, "t": 20, "b": 40},
              "yaxis": {"autorange": "reversed", "type": "category"}, "xaxis": {"title": {"text": t.sort.display}},
              "legend": {"orientation": "h", "y": -0.2}}
    title = f"{t.sort.display} and its {iv.level:.0%} interval" + (f" ({len(part)} best)" if len(part) < len(t.rows)
                                                                   else "")
    return chart(cid, {"data": data, "layout": layout}, title)


def pairwise_block(t: RankedTable, cid: str) -> str:
    pw = t.pairwise
    if pw is None:
        return ""
    z = np.round(pw.p, 3)
    spec = {"data": [{"type": "heatmap", "z": z.tolist(), "x": pw.labels, "y": pw.labels, "zmin": 0, "zmax": 1,
                      "colorscale": "RdBu", "text": [[f"{v:.2f}" for v in row] for row in z],
                      "texttemplate": "%{text}", "hovertemplate": "P(%{y} better than %{x}) = %{z}<extra></extra>"}],
            "layout": {"height": 160 + 40 * len(pw.labels), "margin": {"l": 200, "r": 20, "t": 20, "b": 120},
                       "yaxis": {"autorange": "reversed"}}}
    rows = [[esc(a)] + [esc(f"{v:.2f}") if i != j else MISSING for j, v in enumerate(row)]
            for i, (a, row) in enumerate(zip(pw.labels, z, strict=True))]
    return (chart(cid, spec, f"P(row better than column) by {t.sort.display}") + f'<p class="note">{esc(pw.how)}</p>'
            + "<details><summary>As a table</summary>" + table([("", "")] + [(x, "") for x in pw.labels], rows)
            + "</details>")


def drift_block(t: RankedTable, cid: str) -> str:
    if not t.drift:
        return ""
    data = []
    for d in t.drift:
        for name, stats, axis in (("drift", d["drift"], "y"), ("c_neg", d.get("c_neg"), "y2")):
            if stats:
                data.append({"type": "box", "name": d["label"], "x": [name], "q1": [stats["q1"]],
                             "median": [stats["median"]], "q3": [stats["q3"]], "lowerfence": [stats["lowerfence"]],
                             "upperfence": [stats["upperfence"]], "mean": [stats["mean"]], "yaxis": axis,
                             "xaxis": "x" if axis == "y" else "x2", "legendgroup": d["label"],
                             "showlegend": axis == "y"})
    layout = {"height": 420, "boxmode": "group", "grid": {"rows": 1, "columns": 2, "pattern": "independent"},
              "yaxis": {"title": {"text": "|c_pos − c_single| / c_single (upper half)"}},
              "yaxis2": {"title": {"text": "count on the distractor (lower half, ideal 0)"}, "rangemode": "tozero"},
              "margin": {"l": 70, "r": 20, "t": 20, "b": 40}}
    rows = [[esc(d["label"]), esc(fmt(d["drift"]["median"], ".3f")), esc(fmt(d["drift"]["mean"], ".3f")),
             esc(fmt((d.get("c_neg") or {}).get("mean"), ".2f")), esc(d["drift"]["n"])] for d in t.drift]
    return (chart(cid, {"data": data, "layout": layout}, "Count drift, with the count on the distractor half")
            + table([("entry", ""), ("drift median", ""), ("drift mean", ""), ("distractor count mean", ""),
                     ("mosaics", "")], rows))


def _flag(verdict: tuple[str, bool]) -> str:
    return f'<span class="flag">{esc(verdict[0])}</span>' if verdict[1] else esc(verdict[0])


def references_block(t: RankedTable, depth: int) -> str:
    refs = t.references
    if refs is None or refs.empty:
        return ""
    rows = []
    for r in refs.to_dict("records"):
        rows.append([link(entry_href(r["entry_id"], depth), r["model"]), esc(r["metric_display"]),
                     esc(r["paper_shown"]), esc(fmt(r["ours"], ".4g")),
                     esc(f"[{fmt(r['low'], '.4g')}, {fmt(r['high'], '.4g')}]" if r["low"] == r["low"] else MISSING),
                     esc(fmt(r["difference"], "+.4g")), _flag(references.verdict(r)),
                     esc(f"{r['paper']}: {r['source']}")])
    n_out = int(refs.outside_interval.sum())
    return ("<h3>The papers' numbers beside ours</h3>"
            f'<p class="note">Values the papers report for the same model, dataset, split and protocol (typed from '
            f"the papers, in this metric's unit); difference = ours − paper; {n_out} of {len(refs)} outside our "
            "interval (a mark such as GeckoNum Table 3's ✓ / =: flagged when our p-value is on its other side).</p>"
            + table([("model", ""), ("metric", ""), ("paper", ""), ("ours", ""), ("our interval", ""),
                     ("difference", ""), ("", ""), ("source", "")], rows, cls="references"))


def gallery_block(t: RankedTable) -> str:
    if not t.gallery:
        return ""
    figs = "".join(f'<figure><img src="../{esc(g["src"])}" alt="{esc(g["label"])}: {esc(g["path"])}" '
                   f'width="{g["width"]}" height="{g["height"]}" loading="lazy"><figcaption>{esc(g["label"])}: '
                   f'{esc(g["path"])}</figcaption></figure>' for g in t.gallery)
    return f'<h3>Gallery</h3><div class="gallery">{figs}</div>'


def benchmark_body(b: Benchmark, depth: int) -> tuple[str, int]:
    """The benchmark page's body and how many charts it holds."""
    parts = [f'<p class="note">{esc(b.family.description)}</p>' if b.family.description else "",
             f'<p class="note">{esc(TIE_RULE)} Entries are ranked within one dataset, split and protocol (and '
             "task or evaluator where they differ); smoke runs and failed runs are not ranked.</p>"]
    n_charts = 0
    for i, t in enumerate(b.tables):
        direction = "higher is better" if t.sort.higher_is_better is not False else "lower is better"
        ctx = context_text(t)
        parts.append(f'<h2 id="{esc(t.key)}">Ranked by {esc(t.sort.display)} ({direction})'
                     f"{' · ' + esc(ctx) if ctx else ''}</h2>")
        parts.append(f'<p class="note">{len(t.rows)} entries'
                     + (f"; intervals: {esc(t.interval.method)}" if t.interval else "; no interval in the schema")
                     + ".</p>")
        parts.append(ranking_table(t, depth))
        parts.append(data_links(t.key, depth))
        for block in (interval_chart(t, f"iv-{i}") if t.interval else "", pairwise_block(t, f"pw-{i}"),
                      drift_block(t, f"dr-{i}")):
            if block:
                n_charts += block.count('data-chart="')
                parts.append(block)
        parts.append(references_block(t, depth))
        parts.append(gallery_block(t))
    return "\n".join(p for p in parts if p), n_charts


def entry_body(e: Entry, runs: list[RunProvenance], table_href: str, schema) -> str:
    ctx = " · ".join(f"{k.replace('_label', '')} {v}" for k, v in e.context.items())
    where = " · ".join(x for x in (e.dataset, e.split) if x)
    values = [[esc(schema.metrics[k].display if k in schema.metrics else k), esc(k),
               esc(fmt(v, schema.metrics[k].fmt if k in schema.metrics else ".4g"))]
              for k, v in e.values.items()]
    out = [f"<p>{esc(e.family)} · {esc(where)}{' · ' + esc(ctx) if ctx else ''} · rank {esc(e.rank)}, tie group "
           f"{esc(e.tie_group)} in {link(table_href, 'its ranking')}.</p>",
           "<h2>Published values</h2>", table([("metric", ""), ("key", ""), ("value", "")], values),
           f"<h2>Runs ({len(runs)})</h2>",
           '<p class="note">The most recent complete run of each task of the entry; each value above comes from the '
           "most recent of them that has it.</p>"]
    for p in runs:
        fields = "".join(f"<dt>{esc(k)}</dt><dd><code>{esc(v)}</code></dd>" for k, v in
                         [("MLflow run id", p.run_id), ("run name", p.run_name),
                          ("experiment", f"{p.experiment} ({p.experiment_id})"), ("task", p.task),
                          ("status", p.status), ("started", p.start_time), ("ended", p.end_time), *p.fields])
        versions = "<dt>library versions</dt><dd>" + (", ".join(f"{esc(k)} <code>{esc(v)}</code>"
                                                               for k, v in p.versions)
                                                     or "not recorded in the run's tags") + "</dd>"
        params = table([("param", ""), ("value", "")], [[esc(k), f"<code>{esc(v)}</code>"] for k, v in p.params],
                       cls="params")
        metrics = table([("metric", ""), ("value", "")], [[esc(k), esc(fmt(v, ".6g"))] for k, v in p.metrics],
                        cls="params")
        out.append(f'<h3 id="run-{esc(p.run_id)}">{esc(p.task or p.run_name)} · <code>{esc(p.run_id)}</code></h3>'
                   f'<dl class="prov">{fields}{versions}</dl>'
                   f"<details><summary>Config ({len(p.params)} params)</summary>{params}</details>"
                   f"<details><summary>Metrics ({len(p.metrics)})</summary>{metrics}</details>")
    return "\n".join(out)
