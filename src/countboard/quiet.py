"""What third-party libraries may not print on a user's terminal: the one list, applied by every entry point.

A command or a sweep prints the platform's own lines only. The libraries below announce things a user of
Countboard cannot act on: PyTensor that it links to no BLAS (PyMC's NUTS then uses PyTensor's NumPy C-API
fallback; the NUTS fits it serves are the multi-class BCC and the binary cross-check, timed in
``docs/benchmarks.md``), ArviZ its coming refactor, and a few libraries their INFO lines (ArviZ's optional
packages, Matplotlib's font cache, MLflow creating a new store's tables, Sentence Transformers loading the
bundled encoder) that Hydra's or the CLI's logging would show, and Hugging Face's progress bars when offline.

``silence()`` filters exactly these warnings (category and message) and raises exactly these loggers to WARNING,
so any other warning still reaches the user, and ``tests/test_quiet.py`` fails when a new one appears in a sweep.
With ``COUNTBOARD_DEBUG=1`` (``countboard --debug``) or ``COUNTBOARD_VERBOSE=1`` (``countboard-sweep -v``: every
library's lines, without the tracebacks of debugging) nothing is filtered. Entry points call it first
(``cli.main``, ``countboard-sweep``) and again in each job, whose process may be a fresh worker.

To silence another library's line: add its warning (category, the start of its message as a regular expression)
to ``WARNINGS`` or its logger to ``LOGGERS``, with the reason it cannot help a user.
"""

from __future__ import annotations

import logging
import os
import warnings

from countboard.errors import debug_enabled

#: (category, regular expression matched at the start of the message): third-party warnings a user cannot act on.
WARNINGS: tuple[tuple[type[Warning], str], ...] = (
    # pytensor.link.c.cmodule.default_blas_ldflags, once per process on the first compiled function. Pip wheels
    # bring no BLAS PyTensor can link: the OpenBLAS bundled with NumPy and SciPy exports only prefixed symbols
    # (scipy_dgemm_64_, scipy_dgemm_), never the dgemm_ its C code calls; its advice is to reinstall with conda.
    (UserWarning, r"PyTensor could not link to a BLAS installation"),
    # arviz/__init__.py, once a day on import: an announcement of ArviZ 1.0, nothing this version does.
    (FutureWarning, r"\s*ArviZ is undergoing a major refactor"),
)

#: Loggers whose INFO lines are not the user's business (their warnings and errors still show).
LOGGERS: tuple[str, ...] = (
    "arviz",  # arviz.preview: "arviz_base not installed" on every import
    "matplotlib",  # matplotlib.font_manager: "generated new fontManager" on a first run
    "mlflow.store.db.utils",  # "Creating initial MLflow database tables" / "Updating database tables"
    "alembic",  # the schema migrations behind the lines above
    "sentence_transformers",  # "Loading SentenceTransformer model from <path>" (the bundled MiniLM)
    # a multirun's launch report: joblib's `Joblib.Parallel(n_jobs=2,backend=loky,…) is launching 2 jobs`, the
    # sweep's output folder and each job's overrides, which the sweep's progress line and summary give
    "hydra_plugins.hydra_joblib_launcher",
    "hydra_plugins.hydra_submitit_launcher",
    "hydra._internal.core_plugins.basic_launcher",
)

#: Hugging Face's progress bars (transformers' "Loading weights" bar on every model load, downloads): off when
#: downloads are off (``HF_HUB_OFFLINE``, as in the demo and the tests), where no download's progress is lost;
#: read once by ``huggingface_hub`` on import, so set before any model is loaded. A value the user set is kept.
PROGRESS_ENV = "HF_HUB_DISABLE_PROGRESS_BARS"
OFFLINE_ENV = "HF_HUB_OFFLINE"
#: MLflow's "Downloading artifacts" bar, drawn for every artifact the platform reads back (``compare`` reads each
#: cell's small tables): off unless the user set it.
MLFLOW_PROGRESS_ENV = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
#: Set (``countboard-sweep -v``) to let every library's lines through, in every job of a sweep.
VERBOSE_ENV = "COUNTBOARD_VERBOSE"


def verbose_enabled() -> bool:
    """True when ``COUNTBOARD_VERBOSE`` asks for every library's lines."""
    return os.environ.get(VERBOSE_ENV, "").lower() not in ("", "0", "false", "no")


def silence() -> bool:
    """Filter ``WARNINGS`` and quieten ``LOGGERS`` in this process, unless debugging or verbose; True when it did.

    Idempotent: a second call adds no duplicate filter.
    """
    if debug_enabled() or verbose_enabled():
        return False
    for category, message in WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    if os.environ.get(OFFLINE_ENV, "").lower() in ("1", "true", "yes", "on"):
        os.environ.setdefault(PROGRESS_ENV, "1")
    os.environ.setdefault(MLFLOW_PROGRESS_ENV, "false")
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET or logger.level < logging.WARNING:
            logger.setLevel(logging.WARNING)
    return True
