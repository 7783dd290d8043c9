"""Image galleries from a run's logged artifacts, paged: mosaic density maps, GradCAM overlays, generated images."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import data
import widgets
from countboard.escaping import md, md_code
from countboard.schema import FigureInfo
from sections import Ctx, pick_entry

PAGE_SIZE = 8
COLUMNS = 4


def _page(files: list, key: str) -> list:
    """The slice of ``files`` on the page picked by a number input (shown only when there is more than one)."""
    pages = max(1, -(-len(files) // PAGE_SIZE))
    page = 1
    if pages > 1:
        page = int(st.number_input(f"Page (of {pages})", min_value=1, max_value=pages, value=1, key=key))
    return files[(page - 1) * PAGE_SIZE:page * PAGE_SIZE]


def _grid(images: list[tuple[object, str]]) -> None:
    cols = st.columns(COLUMNS)
    for i, (image, caption) in enumerate(images):
        cols[i % COLUMNS].image(image, caption=caption)


def _pngs(ctx: Ctx, prefix: str, what: str, name: str) -> tuple[str, list[str]] | None:
    ids = [r for ids in ctx.df.run_ids for r in ids]
    files = data.artifacts(ids, prefix)
    files = files[files.path.str.lower().str.endswith(".png")] if not files.empty else files
    if files.empty:
        widgets.missing(what, f"{prefix}*.png")
        return None
    entry = pick_entry(ctx, name, set(files.run_id))
    run_id = next(r for r in ctx.entry_runs(entry) if r in set(files.run_id))
    return run_id, list(files[files.run_id == run_id].path)


def mosaic_caption(path: str, pairs: pd.DataFrame | None) -> str:
    """The figure's name, with the counts of its mosaic when the pairs table has a row for it.

    Example:
        >>> pairs = pd.DataFrame({"figure": ["00"], "gt": [3], "c_pos": [2.5], "c_neg": [0.0]})
        >>> mosaic_caption("figures/mosaic_00.png", pairs)
        'mosaic_00 · gt=3, c_pos=2.5, c_neg=0.0'
    """
    stem = path.rsplit("/", 1)[-1].removesuffix(".png")
    if pairs is None or pairs.empty or "figure" not in pairs:
        return stem
    match = pairs[pairs["figure"].astype(str) == stem.removeprefix("mosaic_")]
    counts = [c for c in ("gt", "c_pos", "c_neg", "c_single") if c in pairs]
    if match.empty or not counts:
        return stem
    row = match.iloc[0]
    return stem + " · " + ", ".join(f"{c}={row[c]:.1f}" if isinstance(row[c], float) else f"{c}={row[c]}"
                                    for c in counts)


def draw_density_gallery(ctx: Ctx, fig: FigureInfo) -> None:
    st.subheader("Mosaic density maps (image | map | counts of both halves)")
    found = _pngs(ctx, fig.get("prefix"), "mosaic density maps", "density")
    if found is None:
        return
    run_id, paths = found
    pairs = data.read_table(run_id, fig.get("pairs")) if fig.get("pairs") else None
    shown = _page(paths, f"{ctx.prefix}_density_page")
    _grid([(str(p), mosaic_caption(path, pairs)) for path in shown if (p := data.artifact_file(run_id, path))])
    st.caption(f"{len(paths)} maps logged by run {run_id[:8]}.")


def draw_overlay_gallery(ctx: Ctx, fig: FigureInfo) -> None:
    st.subheader("GradCAM overlays")
    found = _pngs(ctx, fig.get("prefix"), "GradCAM overlays", "overlays")
    if found is None:
        return
    run_id, paths = found
    shown = _page(paths, f"{ctx.prefix}_overlay_page")
    _grid([(str(p), path.rsplit("/", 1)[-1]) for path in shown if (p := data.artifact_file(run_id, path))])
    st.caption(f"{len(paths)} overlays logged by run {run_id[:8]} (phrase, soft IoU and IO ratio in each image).")


@st.cache_data(max_entries=8, show_spinner=False)
def _zip_images(path: str, mtime_ns: int) -> dict[str, bytes]:
    import zipfile

    with zipfile.ZipFile(path) as zf:
        return {n.rsplit("/", 1)[-1].removesuffix(".png"): zf.read(n) for n in sorted(zf.namelist())
                if n.lower().endswith(".png")}


def draw_image_gallery(ctx: Ctx, fig: FigureInfo) -> None:
    st.subheader("Generated images")
    path = fig.get("zip")
    ids = [r for ids in ctx.df.run_ids for r in ids]
    files = data.artifacts(ids, path)
    entry = pick_entry(ctx, "images", set(files[files.path == path].run_id) if not files.empty else set())
    if entry is None:
        widgets.missing("generated images", path)
        return
    local = data.artifact_file(data.first_with(ctx.entry_runs(entry), path), path)
    if local is None:
        widgets.missing("generated images", path)
        return
    images = _zip_images(str(local), local.stat().st_mtime_ns)
    shown = _page(sorted(images), f"{ctx.prefix}_images_page")
    _grid([(images[k], k) for k in shown])
    st.caption(f"{len(images)} images in {md_code(path)} of {md(ctx.labels[entry])} (the annotation sample).")
