"""``build_site``: the whole publication written from the index — pages, data files, images, assets — into a new
folder that then replaces the old one, so a reader never sees half a site and no file of an older one stays.

The same index gives the same bytes: rows come in the queries' order, files are written sorted, JSON with sorted
keys, images re-encoded the same way, and the only times shown are the runs' own (from the index).
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from countboard.errors import ConfigError
from countboard.publish import machine, pages, references
from countboard.publish.collect import (
    TOP_DRIFT,
    Benchmark,
    Entry,
    IndexReader,
    Options,
    RankedTable,
    box_stats,
    family_entries,
    figure,
    labels_of,
    pairwise,
    slug,
    split_tables,
)
from countboard.publish.provenance import provenance
from countboard.publish.render import esc, fmt, link, page, table
from countboard.tracking import tags as tg

GALLERY_ENTRIES = 4
GALLERY_PER_ENTRY = 2
THUMB_PX = 320  # the longest side of a gallery image
ASSETS = Path(__file__).with_name("assets")
#: ``queries.ARTIFACTS_OF_RUNS`` for every run: the files under a prefix, by run and path
ARTIFACTS_UNDER = """
SELECT a.run_id, a.path, a.file_size, r.artifact_uri
FROM artifacts a JOIN runs r USING (run_id)
WHERE NOT a.is_dir AND starts_with(a.path, ?)
ORDER BY a.run_id, a.path
"""


@dataclass
class SiteReport:
    out: Path
    pages: int
    files: int
    bytes: int
    entries: int
    tables: int
    seconds: float

    def summary(self) -> str:
        return (f"published {self.pages} pages, {self.tables} tables, {self.entries} entries: {self.files} files, "
                f"{self.bytes / 2**20:.1f} MiB in {self.out} ({self.seconds:.1f} s); open {self.out / 'index.html'}")


class Artifacts:
    """Artifacts of indexed runs as local files (a remote store's downloaded once into ``cache``)."""

    def __init__(self, reader: IndexReader, store_uri: str, store_dir: Path | None, cache: Path):
        from countboard.tracking import address

        self.reader, self.store_uri, self.cache = reader, store_uri, cache
        self.indexed = address.local_folder(store_uri) if store_uri else None
        self.now = store_dir if store_dir is not None else self.indexed
        self._by_prefix: dict[str, pd.DataFrame] = {}

    def files(self, run_ids: list[str], prefix: str) -> pd.DataFrame:
        """The artifacts of ``run_ids`` under ``prefix`` (as ``queries.ARTIFACTS_OF_RUNS``: by run, then path),
        from one query per prefix over the whole index."""
        if not run_ids:
            return pd.DataFrame()
        if prefix not in self._by_prefix:
            self._by_prefix[prefix] = self.reader.df(ARTIFACTS_UNDER, (prefix,))
        every = self._by_prefix[prefix]
        return every[every.run_id.isin(list(run_ids))].reset_index(drop=True)

    def local(self, row) -> Path | None:
        from countboard.index.artifacts import fetch_artifact, relocate_artifact_uri

        uri = relocate_artifact_uri(row.artifact_uri, self.indexed, self.now)
        try:
            path = fetch_artifact(self.store_uri, uri, row.path, self.cache,
                                  int(row.file_size) if pd.notna(row.file_size) else None)
        except Exception:  # gone or unreachable: the page shows what it has
            return None
        return path if path.is_file() else None

    def first(self, run_ids: list[str], path: str) -> Path | None:
        """The file ``path`` of the first of ``run_ids`` (an entry's runs, most recent first) that has it."""
        files = self.files(run_ids, path)
        files = files[files.path == path] if not files.empty else files
        for run in run_ids:
            hit = files[files.run_id == run] if not files.empty else files
            if not hit.empty:
                return self.local(next(hit.itertuples()))
        return None


def _draws(t: RankedTable, fam, art: Artifacts) -> list | None:
    fig = figure(fam, "pairwise")
    path = fig.get("draws") if fig else None
    if not path or t.sort.key != fam.main_metric:
        return None
    out = []
    for ids in t.rows.run_ids:
        local = art.first(list(ids), path)
        if local is None:
            return None
        with np.load(local, allow_pickle=False) as npz:
            cells = [str(c) for c in npz["cells"]] if "cells" in npz.files else []
            out.append(np.asarray(npz["p"])[cells.index("all")] if "p" in npz.files and "all" in cells else None)
    return out


def _drift(t: RankedTable, fam, art: Artifacts) -> list[dict]:
    fig = figure(fam, "drift")
    if fig is None:
        return []
    path, value, beside = fig.get("table"), fig.get("value"), fig.get("beside")
    out = []
    top = t.rows.head(TOP_DRIFT)
    for label, ids in zip(labels_of(top), top.run_ids, strict=True):
        local = art.first(list(ids), path)
        if local is None:
            continue
        pairs = pd.read_parquet(local)
        stats = box_stats(pairs[value]) if value in pairs else None
        if stats:
            out.append({"label": label, "drift": stats,
                        "c_neg": box_stats(pairs[beside]) if beside in pairs else None})
    return out


def _thumbnail(data: bytes) -> tuple[bytes, int, int] | None:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            im = im.convert("RGBA" if "A" in im.getbands() else "RGB")
            im.thumbnail((THUMB_PX, THUMB_PX))
            buf = io.BytesIO()
            im.save(buf, format="PNG", optimize=True)
            return buf.getvalue(), im.width, im.height
    except (OSError, ValueError):
        return None


def _gallery(t: RankedTable, fam, art: Artifacts, images: dict[str, bytes]) -> list[dict]:
    """Up to ``GALLERY_PER_ENTRY`` images of each of the ``GALLERY_ENTRIES`` best entries, at most
    ``THUMB_PX`` pixels a side, from the family's gallery figure (PNGs under a prefix, or images in a zip)."""
    fig = next((f for f in fam.figures if f.kind.endswith("_gallery")), None)
    if fig is None:
        return []
    out = []
    top = t.rows.head(GALLERY_ENTRIES)
    for label, ids in zip(labels_of(top), top.run_ids, strict=True):
        found: list[tuple[str, str, bytes]] = []
        if fig.get("prefix"):
            files = art.files(list(ids), fig.get("prefix"))
            files = files[files.path.str.lower().str.endswith(".png")] if not files.empty else files
            for row in files.sort_values(["path", "run_id"]).head(GALLERY_PER_ENTRY).itertuples() if len(files) else []:
                local = art.local(row)
                if local is not None:
                    found.append((row.run_id, row.path, local.read_bytes()))
        elif fig.get("zip"):
            local = next((p for p in (art.first([r], fig.get("zip")) for r in ids) if p is not None), None)
            if local is not None:
                with zipfile.ZipFile(local) as zf:
                    names = sorted(n for n in zf.namelist() if n.lower().endswith((".png", ".jpg", ".jpeg")))
                    found = [(ids[0], f"{fig.get('zip')}:{n}", zf.read(n)) for n in names[:GALLERY_PER_ENTRY]]
        for run, path, data in found:
            thumb = _thumbnail(data)
            if thumb is None:
                continue
            name = f"img/{hashlib.sha256(f'{run}/{path}'.encode()).hexdigest()[:16]}.png"
            images[name] = thumb[0]
            out.append({"label": label, "run_id": run, "path": path, "src": name, "width": thumb[1],
                        "height": thumb[2]})
    return out


def _ranking_frame(t: RankedTable) -> pd.DataFrame:
    """The published columns of a ranking (what its CSV and JSON hold)."""
    cols = ["entry_id", "rank", "rank_best", "rank_worst", "tie_group", "model", "dataset", "split", "task",
            "evaluator", tg.PROTOCOL_LABEL, t.sort.key]
    if t.interval:
        cols += [t.interval.low, t.interval.high] + ([t.interval.count] if t.interval.count else [])
    cols += [f"{t.sort.key}__std", "n_runs"] + ([t.beside] if t.beside else []) + [m.key for m in t.metrics]
    cols += [tg.N_FAILED_UNITS, "failed_share", "run_id", "run_ids"]
    frame = t.rows[[c for c in dict.fromkeys(cols) if c in t.rows]].copy()
    frame["run_ids"] = [" ".join(map(str, ids)) for ids in frame["run_ids"]]
    return frame


def _paper_tables(reader: IndexReader, fams: dict, datasets: tuple[str, ...]) -> list[tuple[str, str, str, str,
                                                                                             pd.DataFrame]]:
    """(family, key, title, caption, table) of the papers' layouts the board shows: PrACo Tables 1-2 per dataset
    split and convention, the classic scores of each benchmark (``index.scores_table``), GeckoNum Table 3 and its
    AUROC ranking."""
    from countboard.index import queries
    from countboard.index.praco_table import CONVENTIONS, praco_caption, praco_table, task_protocols
    from countboard.index.scores_table import BENCHMARKS, scores_caption, scores_table
    from countboard.index.table3 import auroc_ranking, table3

    out = []
    if "counters" in fams and reader.view_columns("counters"):
        rows = reader.df(queries.family_rows("counters"))
        choices = reader.df(queries.FAMILY_CHOICES, ("counters",)).dropna()
        for dataset, split in sorted(set(zip(choices.dataset, choices.split, strict=True))):
            if datasets and dataset not in datasets:
                continue
            protocols = {task: labels[0] for task, labels in task_protocols(rows, dataset, split).items()}
            for convention in CONVENTIONS:
                frame = praco_table(rows, convention, dataset, split, protocols)
                if not frame.empty:
                    out.append(("counters", slug("praco_table", dataset, split, convention),
                                f"PrACo Tables 1-2 layout: {dataset} {split} ({convention})",
                                praco_caption(convention, split, dataset, protocols), frame))
            scores, shown = scores_table(rows, dataset, split)
            if shown and not scores.empty:  # some classic run of the benchmark
                name = BENCHMARKS.get(dataset, (dataset, ()))[0]
                out.append(("counters", slug("scores_table", dataset, split), f"Classic scores: {name} {split}",
                            scores_caption(dataset, split), scores))
    if "generator_autometrics" in fams and reader.view_columns("generator_autometrics"):
        rows = reader.df(queries.family_rows("generator_autometrics"))
        if not rows.empty:
            out.append(("generator_autometrics", "geckonum_table3", "GeckoNum Table 3",
                        "✓: Mann-Whitney U p < 0.05 between correct and incorrect images; =: not significant.",
                        table3(rows)))
            out.append(("generator_autometrics", "geckonum_table3_auroc", "Auto-eval metrics ranked by AUROC",
                        "Per generator, 90% bootstrap interval.", auroc_ranking(rows)))
    return out


def _frame_html(frame: pd.DataFrame) -> str:
    rows = [[esc(fmt(v, ".3f") if isinstance(v, float) else ("" if v is None else v)) for v in r]
            for r in frame.itertuples(index=False)]
    return table([(str(c), "") for c in frame.columns], rows, cls="paper")


def _collect(reader: IndexReader, fams: list, options: Options, art: Artifacts,
             images: dict[str, bytes]) -> list[Benchmark]:
    benchmarks = []
    schema = reader.schema
    for fam in fams:
        if not reader.view_columns(fam.key):
            continue
        extra = []
        for key in references.metrics_of(fam.key):
            info = schema.metrics.get(key)
            extra += [key] + ([info.interval.low, info.interval.high] if info and info.interval else [])
        df, how = family_entries(reader, fam, extra)
        if df.empty:
            continue
        if options.datasets:
            df = df[df.dataset.isin(options.datasets)]
        by_bench: dict[tuple, list[RankedTable]] = {}
        for t in split_tables(fam, df, how):
            t.pairwise = pairwise(t, _draws(t, fam, art))
            t.drift = _drift(t, fam, art)
            t.gallery = _gallery(t, fam, art, images)
            t.references = references.compare(t, schema)
            by_bench.setdefault((t.dataset, t.split), []).append(t)
        benchmarks += [Benchmark(fam, d, s, ts) for (d, s), ts in by_bench.items()]
    return benchmarks


def _entries(benchmarks: list[Benchmark]) -> dict[str, Entry]:
    out = {}
    for b in benchmarks:
        for t in b.tables:
            keys = [c for c in _ranking_frame(t).columns if c in t.rows and pd.api.types.is_numeric_dtype(t.rows[c])
                    and c not in ("rank_best", "rank_worst", "tie_group")]
            for r in t.rows.to_dict("records"):
                out[r["entry_id"]] = Entry(
                    r["entry_id"], t.family, str(r["model"]), t.dataset, t.split, dict(t.context),
                    [str(x) for x in r["run_ids"]], {k: r[k] for k in keys if pd.notna(r[k])}, t.key, r["rank"],
                    "—" if pd.isna(r["tie_group"]) else str(int(r["tie_group"])))
    return out


def _overview(benchmarks: list[Benchmark], fams: list, state: dict, options: Options) -> str:
    cards = []
    for fam in fams:
        mine = [b for b in benchmarks if b.family.key == fam.key]
        if not mine:
            cards.append(f'<div class="card"><h2>{esc(fam.display)}</h2><p class="note">No complete run in this '
                         "publication.</p></div>")
            continue
        lines = []
        for b in mine:
            t = b.tables[0]
            top = t.rows.iloc[0]
            iv = t.interval
            value = fmt(top[t.sort.key], t.sort.fmt)
            if iv is not None and pd.notna(top[iv.low]):
                value += f" [{fmt(top[iv.low], t.sort.fmt)}, {fmt(top[iv.high], t.sort.fmt)}]"
            n = sum(len(x.rows) for x in b.tables)
            lines.append(f"<li>{link(f'benchmarks/{b.slug}.html', ' · '.join(x for x in (b.dataset, b.split) if x))}"
                         f": {n} entries; best <b>{esc(top['model'])}</b>, {esc(t.sort.display)} {esc(value)}</li>")
        cards.append(f'<div class="card"><h2>{link(f"families/{fam.key}.html", fam.display)}</h2>'
                     f"<ul>{''.join(lines)}</ul></div>")
    facts = " · ".join(f"{k} {esc(v)}" for k, v in state.items())
    return (f'<p class="note">Counting-centred evaluation of vision and vision-language models. The store: {facts}.'
            "</p>" f'<div class="cards">{"".join(cards)}</div>'
            f'<p class="note">Every table is published as CSV and JSON (schema '
            f"{esc(machine.TABLE_SCHEMA)} version {machine.SCHEMA_VERSION}); {link('site.json', 'site.json')} lists "
            "them with every entry.</p>")


def _swap_in(tmp: Path, out: Path) -> None:
    """Replace ``out`` by ``tmp`` (``out``: absent, empty, or an earlier publication; never anything else)."""
    if out.exists():
        if not out.is_dir() or (any(out.iterdir()) and not (out / machine.MANIFEST).is_file()):
            raise ConfigError(f"{out} exists and is not a publication (no {machine.MANIFEST}); choose an empty or new "
                              "folder, or one `countboard publish` wrote")
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old)
    else:
        os.replace(tmp, out)


def build_site(db_path: str | os.PathLike, out: str | os.PathLike, options: Options = Options(),
               store_dir: str | os.PathLike | None = None) -> SiteReport:
    """Publish the index at ``db_path`` into the folder ``out`` (see the module's docstring); ``store_dir``: where
    the indexed store's folder is now when it has moved (artifacts are read from there)."""
    from countboard.index import ddl, queries
    from countboard.index.reader import connect_readonly
    from countboard.schema import load_schema

    t0 = time.perf_counter()
    out = Path(out).expanduser().resolve()
    if not Path(db_path).is_file():
        raise ConfigError(f"no index at {db_path}; build it with `countboard index` first")
    schema = load_schema()
    known = [f.key for f in schema.families.values() if f.page]
    unknown = [f for f in options.families if f not in known]
    if unknown:
        raise ConfigError(f"--family {', '.join(unknown)}: not a family of the schema; families: {', '.join(known)}")
    fams = [schema.families[k] for k in known if not options.families or k in options.families]
    con = connect_readonly(db_path)
    try:
        reader = IndexReader(con, schema)
        meta = dict(reader.df(queries.META).itertuples(index=False, name=None))
        if meta.get("schema_version") != str(ddl.SCHEMA_VERSION):
            raise ConfigError(f"the index {db_path} has schema version {meta.get('schema_version')}, this countboard "
                              f"reads {ddl.SCHEMA_VERSION}: rebuild it with `countboard index`")
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".countboard-artifacts-") as cache:
            art = Artifacts(reader, meta.get("store_uri", ""), Path(store_dir) if store_dir else None, Path(cache))
            images: dict[str, bytes] = {}
            benchmarks = _collect(reader, fams, options, art, images)
            papers = _paper_tables(reader, {f.key for f in fams}, options.datasets)
            entries = _entries(benchmarks)
            runs = provenance(reader, [r for e in entries.values() for r in e.run_ids])
            state = reader.df(queries.STORE_STATE).iloc[0].to_dict()
        files = _files(options, fams, benchmarks, papers, entries, runs, images, state, schema)
    finally:
        con.close()
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    try:
        for rel in sorted(files):
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            data = files[rel]
            target.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
        shutil.copyfile(_plotly_js(), tmp / "assets" / "plotly.min.js")
        _swap_in(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    n_files = sum(1 for p in out.rglob("*") if p.is_file())
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    n_pages = sum(1 for rel in files if rel.endswith(".html"))
    n_tables = sum(1 for rel in files if rel.startswith("data/") and rel.endswith(".json"))
    return SiteReport(out, n_pages, n_files, size, len(entries), n_tables, time.perf_counter() - t0)


def _plotly_js() -> Path:
    import plotly

    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise ConfigError(f"plotly.min.js is not in the installed plotly package ({path}); reinstall plotly")
    return path


def _files(options, fams, benchmarks, papers, entries, runs, images, state, schema) -> dict[str, str | bytes]:
    """Every file of the publication but Plotly's script: relative path -> text or bytes."""
    files: dict[str, str | bytes] = dict(images)
    title, base = options.title, options.base_url
    nav = [(f"families/{f.key}.html", f.section_label) for f in fams if any(b.family.key == f.key for b in benchmarks)]
    manifest_tables = []

    def add_table(key: str, kind: str, frame: pd.DataFrame, meta: dict, page_path: str, caption: str) -> None:
        files[f"data/{key}.csv"] = machine.table_csv(frame)
        files[f"data/{key}.json"] = machine.table_json(key, kind, frame, meta)
        manifest_tables.append({"key": key, "kind": kind, "title": caption, "page": page_path,
                                "csv": f"data/{key}.csv", "json": f"data/{key}.json", **meta})

    for b in benchmarks:
        path = f"benchmarks/{b.slug}.html"
        body, n_charts = pages.benchmark_body(b, 1)
        heading = f"{b.family.display}: {' · '.join(x for x in (b.dataset, b.split) if x)}"
        files[path] = page(heading, body, 1, title, base, path, charts=n_charts > 0, nav=nav)
        for t in b.tables:
            meta = {"family": t.family, "dataset": t.dataset, "split": t.split, "context": t.context,
                    "sort": t.sort.key, "higher_is_better": t.sort.higher_is_better,
                    "interval": [t.interval.low, t.interval.high, t.interval.level] if t.interval else None}
            add_table(t.key, "ranking", _ranking_frame(t), meta, path, f"{heading}: ranked by {t.sort.display}")
            if t.pairwise is not None:
                frame = pd.DataFrame(t.pairwise.p, columns=t.pairwise.labels).assign(entry=t.pairwise.labels)
                add_table(f"{t.key}__pairwise", "pairwise", frame[["entry", *t.pairwise.labels]],
                          {**meta, "how": t.pairwise.how}, path, f"{heading}: P(row better than column)")
            if t.references is not None and not t.references.empty:
                add_table(f"{t.key}__references", "references", t.references, meta, path,
                          f"{heading}: the papers' values beside ours")
            if t.drift:
                frame = pd.DataFrame([{"entry": d["label"], **{f"drift_{k}": v for k, v in d["drift"].items()},
                                       **{f"c_neg_{k}": v for k, v in (d.get("c_neg") or {}).items()}}
                                      for d in t.drift])
                add_table(f"{t.key}__drift", "drift", frame, meta, path, f"{heading}: count drift")
    for fam in fams:
        mine = [b for b in benchmarks if b.family.key == fam.key]
        if not mine:
            continue
        path = f"families/{fam.key}.html"
        body = [f'<p class="note">{esc(fam.description)}</p>' if fam.description else "", "<h2>Benchmarks</h2><ul>"]
        body += [f"<li>{link(f'../benchmarks/{b.slug}.html', ' · '.join(x for x in (b.dataset, b.split) if x))} "
                 f"({sum(len(t.rows) for t in b.tables)} entries, {len(b.tables)} rankings)</li>" for b in mine]
        body.append("</ul>")
        for family, key, heading, caption, frame in papers:
            if family == fam.key:
                add_table(key, "paper_table", frame, {"family": family, "caption": caption}, path, heading)
                body += [f"<h2>{esc(heading)}</h2>", f'<p class="note">{esc(caption)}</p>', _frame_html(frame),
                         pages.data_links(key, 1)]
        files[path] = page(fam.display, "\n".join(body), 1, title, base, path, nav=nav)
    for e in entries.values():
        path = f"entries/{e.entry_id}.html"
        t_href = f"../benchmarks/{slug(e.family, e.dataset or 'none', e.split or 'none')}.html#{e.table}"
        body = pages.entry_body(e, [runs[r] for r in e.run_ids if r in runs], t_href, schema)
        files[path] = page(f"{e.model}", body, 1, title, base, path, nav=nav)
    shown_state = {k: int(v) for k, v in state.items() if k.startswith("n_") and pd.notna(v)}
    if pd.notna(state.get("last_run")):
        shown_state["latest run started"] = pd.Timestamp(state["last_run"]).strftime("%Y-%m-%d %H:%M:%S")
    files["index.html"] = page(title, _overview(benchmarks, fams, shown_state, options), 0, title, base,
                               "index.html", nav=nav)
    files["site.json"] = machine.dumps({
        "schema": machine.SITE_SCHEMA, "schema_version": machine.SCHEMA_VERSION, "title": title, "base_url": base,
        "tables": sorted(manifest_tables, key=lambda x: x["key"]),
        "entries": {e.entry_id: {"family": e.family, "model": e.model, "dataset": e.dataset, "split": e.split,
                                 "context": e.context, "run_ids": e.run_ids, "table": e.table, "rank": e.rank,
                                 "tie_group": e.tie_group, "values": e.values} for e in entries.values()}})
    for name in ("site.css", "site.js", "favicon.svg"):
        files[f"assets/{name}"] = (ASSETS / name).read_bytes()
    return files
