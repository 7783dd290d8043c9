"""Overview page (the app's home): what the index holds per family, and where it came from."""

from __future__ import annotations

import streamlit as st

import data
import queries
import widgets
from countboard.schema import load_schema

PAGE_OF_FAMILY = {"counters": "counters.py", "grounding": "grounding.py"}
GENERATOR_PAGE = "generators.py"


def main() -> None:
    st.title("Countboard")
    st.caption("Counting-centred evaluation of vision and vision-language models, read from the DuckDB index of "
               "the MLflow store.")
    if widgets.index_unusable():
        return
    counts = data.query(queries.FAMILY_COUNTS)
    if counts.empty:
        widgets.launch_hint("The index has no finished runs yet.",
                            "-m model=<model_a>,<model_b> dataset=<dataset> task=<task>")
    else:
        by_family = dict(zip(counts.family, counts.n, strict=True))
        for fam in load_schema().families.values():
            if fam.key == "engine":
                continue
            page = PAGE_OF_FAMILY.get(fam.key) or (GENERATOR_PAGE if "generator" in fam.model_kinds else None)
            n = int(by_family.get(fam.key, 0))
            label = f"{fam.display}: {n} finished run{'s' if n != 1 else ''}"
            if page:
                st.page_link(page, label=label)
            else:
                st.markdown(f"- {label}")
    meta = data.query(queries.META)
    if not meta.empty:
        info = dict(zip(meta.key, meta.value, strict=True))
        st.caption(f"Store `{info.get('store_uri')}`, indexed {info.get('indexed_at')} (index schema "
                   f"{info.get('schema_version')}). Refresh with `countboard index`.")


if __name__ == "__main__":
    main()
