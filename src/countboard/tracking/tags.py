"""The run tags: every tag name Countboard writes or reads, defined here only (as MLflow keeps its own in
``mlflow/utils/mlflow_tags.py``), and ``RunTags``, the identity of a result run that every writer sets and the
index reads back.

A writer builds ``RunTags(...)`` and logs ``to_tags()``; a reader calls ``RunTags.from_tags(run.tags)``. A new tag
is a constant here (and a field of ``RunTags`` when it says what a run *is*); ``tests/test_contracts.py`` fails on a
tag name spelled as a literal anywhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import lru_cache

# --- MLflow's own ---------------------------------------------------------------------------------------------
PARENT = "mlflow.parentRunId"
RUN_NAME = "mlflow.runName"
EXPERIMENT_KIND = "mlflow.experimentKind"
#: Experiments are classic ML experiments: MLflow versions that read the tag open them on their runs, not in the
#: GenAI view (``tracking.mlflow_ui`` says what MLflow 3.17 reads instead). The store's Default experiment, which
#: MLflow creates untagged, gets the same kind.
EXPERIMENT_KIND_ML = "custom_model_development"
DEFAULT_EXPERIMENT_ID = "0"

# --- what a run is ----------------------------------------------------------------------------------------------
ROLE = "countboard.role"
ROLE_CELL, ROLE_SWEEP, ROLE_LEASE, ROLE_COMPARISON = "cell", "sweep", "lease", "comparison"
#: Roles of runs that summarise other runs (a multirun's parent, a generator comparison): never ranking entries.
AGGREGATE_ROLES = (ROLE_SWEEP, ROLE_COMPARISON)
KIND = "countboard.kind"
KIND_TRAINING = "training"

# --- identity: what was evaluated, on what, how ------------------------------------------------------------------
MODEL, MODEL_KIND, DATASET, SPLIT, TASK, FAMILY = "model", "model_kind", "dataset", "split", "task", "family"
GENERATOR, EVALUATOR, CLASSIFIER = "generator", "evaluator", "classifier"
CONFIG_HASH, REPLICATE_HASH, SEED, DATA_FINGERPRINT = "config_hash", "replicate_hash", "seed", "data_fingerprint"
SOURCE = "source"
#: What a run measures beyond model, dataset and task (``countboard.protocol``): its key and its readable label.
PROTOCOL, PROTOCOL_LABEL = "protocol", "protocol_label"
SOURCE_HUMAN_ANNOTATIONS, SOURCE_PRACO_RELEASE = "human_annotations", "praco_release"

# --- provenance -------------------------------------------------------------------------------------------------
GIT_COMMIT, COUNTBOARD_VERSION, DEVICE, HOST = "git_commit", "countboard_version", "device", "host"
PRECISION, GPU = "precision", "gpu"
#: ``countboard.versions.<distribution>``: the installed version of each of ``LIBRARIES`` a cell run started with.
LIBRARY_VERSION_PREFIX = "countboard.versions."
LIBRARIES = ("torch", "torchvision", "transformers", "mlflow", "numpy", "scipy", "pandas", "duckdb", "pillow",
             "hydra-core")

# --- coverage and outcome of a cell run ------------------------------------------------------------------------
PARTIAL, SUBSET, N_UNITS, TOTAL_UNITS = "partial", "subset", "n_units", "total_units"
N_FAILED_UNITS, ERROR = "n_failed_units", "error"
#: Metrics a run could not compute (NaN or infinite on its units), each with the reason: ``key: reason; ...``.
MISSING_METRICS = "missing_metrics"

# --- a multirun's parent ----------------------------------------------------------------------------------------
SWEEP_HASH, OVERRIDES, N_CHILDREN, N_FAILED_CHILDREN = "sweep_hash", "overrides", "n_children", "n_failed_children"

# --- ownership: the process that writes a run, leases, imports --------------------------------------------------
OWNER, OWNER_PID_START = "owner", "owner.pid_start"
#: When the owner of a sweep's parent run last said it is alive (seconds since the epoch; ``tracking.lease``).
OWNER_HEARTBEAT = "owner.heartbeat"
LEASE_KEY, LEASE_HOST, LEASE_PID, LEASE_PID_START = "lease.key", "lease.host", "lease.pid", "lease.pid_start"
LEASE_HEARTBEAT, LEASE_STATE = "lease.heartbeat", "lease.state"
IMPORT_HOST, IMPORT_PID = "import_host", "import_pid"

# --- the artifact manifest (``tracking.manifest``) ----------------------------------------------------------------
MANIFEST = "countboard.artifacts"
MANIFEST_PARTS = "countboard.artifacts.parts"

# --- what tasks add (``TaskResult.tags``) ------------------------------------------------------------------------
ATTRIBUTE, BCC_METHOD, AUTOEVAL_UNIT = "attribute", "bcc_method", "autoeval_unit"
HUMAN_SOURCE, ANNOTATORS, LABEL_FILE_PROBLEMS = "human_source", "annotators", "label_file_problems"
PRACO_N_CLASSES, PRACO_ORIENTATION, PRACO_MOSAIC = "praco.n_classes", "praco.orientation", "praco.mosaic"
PRACO_ALL_CLASS_IMAGES = "praco.all_class_images"

# --- what a model adds (``Counter.run_tags``) ---------------------------------------------------------------------
PRACO_REPO_REVISION, PRACO_COUNTER = "praco.repo_revision", "praco.counter"
PRACO_FILTERED_CHECKPOINTS = "praco.filtered_checkpoints"
PG_ACCURACY_K_OF_N, PG_UNCERTAINTY_K_OF_N = "pg_accuracy_k_of_n", "pg_uncertainty_k_of_n"
EXPLAINER_METHOD, EXPLAINER_DETAIL = "explainer_method", "explainer_detail"
#: How a run's bootstrap intervals were drawn (``countboard.metrics.bootstrap.describe``).
BOOTSTRAP = "bootstrap"


@lru_cache(maxsize=1)
def library_versions() -> dict[str, str]:
    """``{countboard.versions.<name>: version}`` of the ``LIBRARIES`` installed (read from their metadata, none
    imported); a library not installed is left out.

    Example:
        >>> library_versions()[LIBRARY_VERSION_PREFIX + "numpy"] != ""
        True
    """
    from importlib import metadata

    out = {}
    for name in LIBRARIES:
        try:
            out[f"{LIBRARY_VERSION_PREFIX}{name}"] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _tag(name: str):
    return field(default=None, metadata={"tag": name})


@dataclass(frozen=True)
class RunTags:
    """The identity of a run as its tags say it; None is a tag not set.

    ``to_tags()`` gives the tags to log (values as strings, None left out, ``extra`` added as is); ``from_tags()``
    reads them back, every tag it does not know kept in ``extra``.

    Example:
        >>> t = RunTags(model="m", task="praco_negative", role=ROLE_CELL, partial=True, seed=0)
        >>> tags = t.to_tags()
        >>> tags[ROLE], tags[PARTIAL], tags[SEED]
        ('cell', 'true', '0')
        >>> RunTags.from_tags(tags) == t
        True
    """

    role: str | None = _tag(ROLE)
    model: str | None = _tag(MODEL)
    model_kind: str | None = _tag(MODEL_KIND)
    dataset: str | None = _tag(DATASET)
    split: str | None = _tag(SPLIT)
    task: str | None = _tag(TASK)
    family: str | None = _tag(FAMILY)
    generator: str | None = _tag(GENERATOR)
    evaluator: str | None = _tag(EVALUATOR)
    classifier: str | None = _tag(CLASSIFIER)
    config_hash: str | None = _tag(CONFIG_HASH)
    replicate_hash: str | None = _tag(REPLICATE_HASH)
    seed: int | None = _tag(SEED)
    data_fingerprint: str | None = _tag(DATA_FINGERPRINT)
    source: str | None = _tag(SOURCE)
    protocol: str | None = _tag(PROTOCOL)
    protocol_label: str | None = _tag(PROTOCOL_LABEL)
    parent: str | None = _tag(PARENT)
    partial: bool | None = _tag(PARTIAL)
    git_commit: str | None = _tag(GIT_COMMIT)
    countboard_version: str | None = _tag(COUNTBOARD_VERSION)
    device: str | None = _tag(DEVICE)
    precision: str | None = _tag(PRECISION)
    host: str | None = _tag(HOST)
    gpu: str | None = _tag(GPU)
    extra: Mapping[str, str] = field(default_factory=dict)

    def to_tags(self) -> dict[str, str]:
        """The tags to log: one per field that is set, then ``extra``."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "extra" or value is None:
                continue
            out[f.metadata["tag"]] = str(value).lower() if isinstance(value, bool) else str(value)
        out.update({k: str(v) for k, v in self.extra.items()})
        return out

    @classmethod
    def from_tags(cls, tags: Mapping[str, str]) -> RunTags:
        """Read a run's tags (unknown ones into ``extra``; a ``seed`` or ``partial`` that does not parse is None)."""
        known, values = {}, {}
        for f in fields(cls):
            if f.name != "extra":
                known[f.metadata["tag"]] = f.name
        for key, raw in tags.items():
            name = known.get(key)
            if name == "seed":
                values[name] = int(raw) if str(raw).lstrip("-").isdigit() else None
            elif name == "partial":
                values[name] = {"true": True, "false": False}.get(str(raw).lower())
            elif name is not None:
                values[name] = raw
        values["extra"] = {k: v for k, v in tags.items() if k not in known}
        return cls(**values)

    @property
    def judge(self) -> str | None:
        """Who judged the run's outputs: its ``evaluator`` tag, else its model when it is tagged with a generator
        other than itself (a classifier scoring a generator's images)."""
        if self.evaluator:
            return self.evaluator
        return self.model if self.generator not in (None, self.model) else None
