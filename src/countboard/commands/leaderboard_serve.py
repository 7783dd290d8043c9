"""``streamlit run`` of the leaderboard, its modules imported while the server starts.

A fresh Streamlit server imports what a page needs (pandas, DuckDB, Plotly, SciPy and the app's own modules) when
the first visitor's script runs, and that visitor waits for it. ``countboard leaderboard`` runs Streamlit through
this module instead, which imports the app's modules (``WARM``) in a background thread as the server starts: by
the time a browser connects they are in ``sys.modules``, where the page's ``import`` finds them (a visitor who
comes first waits only for what is left). ``python -m countboard.commands.leaderboard_serve run APP [options]``
takes ``streamlit``'s own arguments.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from pathlib import Path

log = logging.getLogger(__name__)

#: The app's shared modules (``leaderboard/``), in the order the pages import them; they import the rest.
WARM = ("data", "queries", "labels", "ranking", "widgets", "figures", "sections", "galleries", "family")


def warm(app_dir: str, wait_s: float = 60.0) -> None:
    """Import ``WARM`` from the app's folder (the folder Streamlit puts on ``sys.path`` for the app), once the
    Streamlit runtime exists (``st.cache_data`` binds a function to the runtime's caches when it is decorated)."""
    import time

    from streamlit.runtime import Runtime

    deadline = time.monotonic() + wait_s
    while not Runtime.exists():
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)
    if app_dir not in sys.path:
        sys.path.insert(0, app_dir)
    for name in WARM:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the page will import it again and show its own error
            log.debug("warm-up import of %s failed: %s", name, exc)


def main(argv: list[str] | None = None) -> int:
    from streamlit.web import cli

    argv = sys.argv[1:] if argv is None else argv
    app = next((a for a in argv if a.endswith(".py")), None)
    if app is not None:
        threading.Thread(target=warm, args=(str(Path(app).resolve().parent),), name="warm-up", daemon=True).start()
    sys.argv = ["streamlit", *argv]
    return cli.main(prog_name="streamlit")


if __name__ == "__main__":
    sys.exit(main())
