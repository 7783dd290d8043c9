"""A run's protocol: what it measures beyond its model, dataset and task, as a short stable key and a label.

Two runs of one model, dataset, split and task measure different things when a parameter of the task or the model
that changes what is measured differs (``task.mosaic=official``, ``task.tau``, ``model.target_layer``,
``task.classifier=textblob``, ...). Their protocol tells them apart, so the leaderboard never lets one replace the
other. Every parameter of the ``task`` and ``model`` nodes counts, except:

- metadata (``name``, ``description``, ...), Hydra's keys, and subset filters (``max_images``, ...: they make a run
  partial instead);
- operational knobs and replicates: ``device``, every ``*batch_size``, ``seed`` (``COMMON_OPERATIONAL``), and the keys a class lists in its
  ``operational_params`` (``{key: reason}``, dotted keys for nested mappings), like ``OPERATIONAL_KEYS`` for the
  top-level keys;
- a value equal to the constructor's default (or the class's ``protocol_defaults``), so that adding a parameter
  whose default keeps the old behaviour does not split the runs made before it.

Of the top-level keys, those of ``config.HASH_DEFAULTS`` (``precision``) count when not at their default: faster
math that can change the records is another protocol (``precision=bf16``).

A class's ``path_params`` are paths on one machine: only their file name counts. A nested node with a ``_target_``
(a GeckoNum evaluator, a text classifier) counts by its ``name`` plus its own non-default parameters.

The key covers every such parameter. The label names those that also differ from the node's own config file
(``conf/task/praco_mosaic.yaml``, ``conf/model/owlv2.yaml``: what the user changed), so that a model whose config
sets its constructor's parameters (``procedural_good``) reads as ``default``; an interpolated value
(``${model.name}``) is never named.

The protocol is derived from the run's flattened params, as MLflow stores them (strings), so the engine (which tags
each run with ``key`` and ``label``: tags ``protocol`` and ``protocol_label`` of ``tracking.tags``) and the index
(which derives it for runs logged before the tag existed, ``of_run``) agree.

Example:
    >>> p = derive({"task._target_": "countboard.counting.tasks.praco.PracoMosaic", "task.mosaic": "official",
    ...             "task.orientation": "vertical", "task.n_figures": "4"})
    >>> p.label
    'mosaic=official'
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from countboard.config import HASH_DEFAULTS, META_KEYS, SUBSET_NODE_KEYS

#: Label of a protocol in which every parameter has its default value.
DEFAULT_LABEL = "default"
#: Groups whose parameters make the protocol (the model and the dataset are already their own entry columns).
GROUPS = ("task", "model")

#: Node keys that never change what is measured, in every node.
COMMON_OPERATIONAL: dict[str, str] = {
    "device": "cpu and cuda compute the same records (up to float rounding)",
    "*batch_size": "how many items go through a model at once",
    "seed": "random draws: runs that differ only in seeds are replicates of one protocol (as the top-level seed)",
}
_HYDRA_KEYS = ("_target_", "_recursive_", "_partial_", "_convert_", "defaults")
_LABEL_VALUE_MAX = 40


@dataclass(frozen=True)
class Protocol:
    """``key``: 10 hex characters of the non-default protocol parameters; ``label``: them, readable."""

    key: str
    label: str


def derive(params: Mapping[str, Any], groups: tuple[str, ...] = GROUPS) -> Protocol:
    """The protocol of a run from its flattened params (``{"task.mosaic": "official", ...}``; values as logged)."""
    nested = _unflatten(params)
    diffs: dict[str, str] = {}
    named: dict[str, str] = {}
    for group in groups:
        node = nested.get(group)
        if isinstance(node, dict):
            prefix = "" if group == "task" else f"{group}."
            found = _node_diffs(node, prefix)
            diffs.update(found)
            configured = _conf_values(group, str(node.get("name", "")))
            named.update({k: v for k, v in found.items() if _named(configured.get(k[len(prefix):]), v)})
    for key, default in HASH_DEFAULTS.items():
        if key in nested and not isinstance(nested[key], dict) and _norm(nested[key]) != _norm(default):
            diffs[key] = named[key] = _norm(nested[key])
    blob = json.dumps(sorted(diffs.items()))
    key = hashlib.sha256(blob.encode()).hexdigest()[:10]
    label = ", ".join(f"{k}={_short(v)}" for k, v in named.items()) or DEFAULT_LABEL
    return Protocol(key, label)


def _named(configured: Any, value: str) -> bool:
    """Whether a protocol value goes into the label: it differs from the node's config file, which did not take
    it from elsewhere (an interpolation)."""
    if configured is None:
        return True
    if isinstance(configured, str) and "${" in configured:
        return False
    return _norm(configured) != value


@functools.lru_cache(maxsize=256)
def _conf_values(group: str, name: str) -> dict[str, Any]:
    """Flattened values of ``conf/<group>/<name>.yaml`` (with the same group's configs in its ``defaults``)."""
    import yaml

    from countboard.paths import conf_dir

    if not name or "/" in name or "\\" in name or name.startswith("."):
        return {}
    try:
        doc = yaml.safe_load((conf_dir() / group / f"{name}.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}
    if not isinstance(doc, dict):
        return {}
    out: dict[str, Any] = {}
    for base in doc.pop("defaults", None) or ():
        if isinstance(base, str) and base != "_self_":
            out.update(_conf_values(group, base))
    out.update(_flat(doc))
    return out


def of_run(key: str | None, label: str | None, params: Mapping[str, str]) -> Protocol:
    """The protocol a run was tagged with (its key and label tags), else the one its params give (runs logged
    before the tag existed)."""
    if key:
        return Protocol(key, label or DEFAULT_LABEL)
    # only the params of the groups and of HASH_DEFAULTS count: runs that differ in others (seeds, names) share
    # one derivation (an index of 30,000 runs derives a few hundred)
    return _derive_items(tuple((k, v) for k, v in params.items() if str(k).split(".", 1)[0] in _DERIVED_FROM))


_DERIVED_FROM = frozenset((*GROUPS, *HASH_DEFAULTS))


@functools.lru_cache(maxsize=4096)
def _derive_items(items: tuple[tuple[str, Any], ...]) -> Protocol:
    return derive(dict(items))


def _unflatten(params: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for flat, value in params.items():
        node = out
        *parents, last = str(flat).split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):  # a key that is both a value and a prefix: keep the value
                break
            node = child
        else:
            node.setdefault(last, value)
    return out


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, Mapping):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


@functools.lru_cache(maxsize=256)
def _declared(target: str) -> tuple[dict[str, str], dict[str, Any], tuple[str, ...]]:
    """(operational keys, defaults by dotted key, path keys) of the class named ``target``; empty when it cannot
    be imported (a class that was renamed since the run: then every non-operational parameter counts)."""
    import importlib

    module, _, name = str(target).rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
        params = inspect.signature(cls.__init__).parameters
    except Exception:
        return dict(COMMON_OPERATIONAL), {}, ()
    defaults: dict[str, Any] = {}
    for p in params.values():
        if p.name != "self" and p.default is not inspect.Parameter.empty:
            defaults.update(_flat({p.name: p.default}) if isinstance(p.default, Mapping) else {p.name: p.default})
    defaults.update(getattr(cls, "protocol_defaults", {}))
    operational = {**COMMON_OPERATIONAL, **getattr(cls, "operational_params", {})}
    return operational, defaults, tuple(getattr(cls, "path_params", ()))


def _is_operational(key: str, operational: Mapping[str, str]) -> bool:
    leaf = key.rsplit(".", 1)[-1]
    return any(key == k or (k.startswith("*") and leaf.endswith(k[1:])) or key.startswith(f"{k}.")
               for k in operational)


def _node_diffs(node: dict[str, Any], prefix: str) -> dict[str, str]:
    """``{label key: value}`` of the node's protocol parameters that differ from their defaults."""
    operational, defaults, paths = _declared(str(node.get("_target_", "")))
    out: dict[str, str] = {}
    for key, value in node.items():
        if key in _HYDRA_KEYS or key in META_KEYS or key in SUBSET_NODE_KEYS or _is_operational(key, operational):
            continue
        if isinstance(value, dict) and "_target_" in value:  # a nested node: its name, then its own parameters
            out[f"{prefix}{key}"] = _norm(value.get("name") or str(value["_target_"]).rsplit(".", 1)[-1])
            out.update(_node_diffs(value, f"{prefix}{key}."))
            continue
        for sub, v in (_flat(value, f"{key}.") if isinstance(value, dict) else {key: value}).items():
            if _is_operational(sub, operational):
                continue
            text = _norm(v)
            if sub in paths and text != "None":
                text = text.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
            if sub in defaults and _norm(defaults[sub]) == text:
                continue
            out[f"{prefix}{sub}"] = text
    return out


def _norm(value: Any) -> str:
    """A value as MLflow stores it, made comparable: ``50`` and ``50.0`` agree, ``null`` is ``None``, a tuple is the
    JSON list the engine logs."""
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value), default=str)
    text = str(value)
    if text in ("None", "null"):
        return "None"
    if text in ("True", "False", "true", "false"):
        return text.capitalize()
    try:
        number = float(text)
    except ValueError:
        return text
    if not math.isfinite(number):
        return text
    return str(int(number)) if number.is_integer() and abs(number) < 2**53 else repr(number)


def _short(text: str) -> str:
    return text if len(text) <= _LABEL_VALUE_MAX else text[: _LABEL_VALUE_MAX - 1] + "…"
