"""A run's datasets tracked the MLflow way (``log_inputs``): the MLflow runs table shows them in its "Dataset"
column, filters runs by them (``dataset.name``, ``dataset.digest``, ``dataset.context``) and lists each dataset's
runs.

A cell logs the dataset it evaluated: its config name, the data fingerprint as digest (``countboard.fingerprint``:
what the files are, so a copy elsewhere is the same dataset and edited annotations another), where it was read
from, and its split as context. An import logs the released data it was scored from. Logging the same dataset
into a run again (a resumed cell) adds nothing: MLflow keeps one input per dataset and run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Context of a dataset that names no split.
DEFAULT_CONTEXT = "eval"
_DIGEST_MAX = 36  # MLflow's column


@dataclass(frozen=True)
class DatasetRef:
    """One dataset a run read.

    Args:
        name: The dataset's name (``fsc147``, ``geckonum``).
        digest: Its data fingerprint.
        source: Where it was read from (a folder, a file, a URL).
        context: The split (``test``, ``val``), or what the run used it for.
        source_type: MLflow's kind of source (``local``, ``http``, ``code``).
    """

    name: str
    digest: str
    source: str
    context: str = DEFAULT_CONTEXT
    source_type: str = "local"

    @classmethod
    def from_config(cls, node: Mapping[str, Any], digest: str) -> DatasetRef:
        """The dataset of a resolved dataset config node: its ``name``, ``root`` (else its ``_target_``) and
        ``split``; a dataset without a data fingerprint (one generated from its config) is digested by its node.

        Example:
            >>> DatasetRef.from_config({"name": "fsc147", "root": "/data/fsc147", "split": "val"}, "ab12")
            DatasetRef(name='fsc147', digest='ab12', source='/data/fsc147', context='val', source_type='local')
        """
        if not digest:
            digest = hashlib.sha256(json.dumps(dict(node), sort_keys=True, default=str).encode()).hexdigest()[:16]
        root = node.get("root")
        source, kind = (str(Path(str(root)).expanduser().resolve()), "local") if root else (str(node.get("_target_", "")), "code")
        return cls(name=str(node.get("name", "dataset")), digest=digest, source=source,
                   context=str(node.get("split") or DEFAULT_CONTEXT), source_type=kind)


def dataset_inputs(refs: list[DatasetRef]) -> list:
    """MLflow ``DatasetInput`` entities of ``refs``, their context in the input tag MLflow's runs table reads."""
    from mlflow.entities import Dataset, DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    return [DatasetInput(Dataset(ref.name, ref.digest[:_DIGEST_MAX], ref.source_type, ref.source),
                         [InputTag(MLFLOW_DATASET_CONTEXT, ref.context)]) for ref in refs]
