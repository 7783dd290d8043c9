"""Structured-config schemas, the one list of operational keys, and the checks every job passes first.

A top-level or tracking key with a typo fails at composition (the dataclasses below). ``validate`` checks values
before any run exists. ``OPERATIONAL_KEYS`` is the one place that says which top-level keys change *how* a cell
runs rather than *what* it computes: those stay out of ``config_hash``; every other key is part of it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from countboard.errors import ConfigError, CountboardError


class Device(StrEnum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class Precision(StrEnum):
    fp32 = "fp32"
    tf32 = "tf32"
    bf16 = "bf16"
    fp16 = "fp16"


#: The value of ``batch_size`` and ``num_workers`` that lets the job choose (``countboard.batching``,
#: ``countboard.inputs``).
AUTO = "auto"


class OnBusy(StrEnum):
    skip = "skip"
    wait = "wait"


#: Top-level keys left out of ``config_hash``, each with the reason. Every other key identifies the cell.
OPERATIONAL_KEYS: dict[str, str] = {
    "tracking": "where results are written, not what they are",
    "force": "whether to rerun a finished cell, not what the cell computes",
    "device": "cpu and cuda compute the same records: a CUDA job runs with TF32 off and deterministic algorithms "
              "(models.precision); faster math that can change a record is the semantic key `precision`",
    "batch_size": "how many units go through the model at once (a number, or auto: by memory); records do not "
                  "depend on it",
    "num_workers": "how many processes decode the inputs ahead of the model; the inputs are the same",
    "checkpoint_every": "how often records are saved; the records are the same",
    "progress": "whether a progress bar is drawn",
    "data_dir": "a path on this machine; the data's identity is the dataset fingerprint in the hash",
    "on_busy": "what to do while another process owns the cell",
    "lease_ttl_s": "how long a silent owner keeps its claim on a cell",
    "retry_failed": "whether failed units of a finished run are computed again",
    "hydra": "Hydra's own settings: output folders, launcher, sweeper",
}

#: Keys of the ``model`` node that say how the model is fed, not what it computes (``models.device_batch``): which
#: images share an encoder call changes no record, so they stay out of ``config_hash`` as ``OPERATIONAL_KEYS`` do.
MODEL_FEEDING_KEYS: dict[str, str] = {
    "image_batch_size": "images per encoder call (a number, or auto: sized by the device); every image is encoded "
                        "independently",
}

#: Semantic keys added after cells existed, with their default: a default value stays out of ``config_hash`` so the
#: cells computed before the key existed keep their identity; any other value is part of it.
HASH_DEFAULTS: dict[str, str] = {"precision": Precision.fp32.value}

#: Precisions whose records may differ from fp32's (a run tag names them so the leaderboard can label the rows).
PRECISION_CHANGES_RECORDS = frozenset({Precision.tf32.value, Precision.bf16.value, Precision.fp16.value})

#: Keys of a model/dataset/task node that describe it and are not constructor arguments.
META_KEYS = ("name", "kind", "display_name", "description")
#: Keys of a model/dataset/task node that keep only part of the data when set: a run with one is partial.
SUBSET_NODE_KEYS = ("max_samples", "max_images", "max_prompts", "max_items")

#: Keys whose values give several runs of one cell (aggregated as mean ± spread in the index).
REPLICATE_KEYS = ("seed",)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.,:=+@()·-]*$")
NAME_MAX = 200


@dataclass
class TrackingConf:
    kind: str = "local"
    store_dir: str | None = "mlruns"
    uri: str | None = None
    artifact_root: str | None = None
    experiment: str = "countboard/{family}"
    timeout_s: int = 10


@dataclass
class Config:
    model: Any = None
    dataset: Any = None
    task: Any = None
    tracking: TrackingConf = field(default_factory=TrackingConf)
    device: Device = Device.auto
    precision: Precision = Precision.fp32
    seed: int = 0
    batch_size: Any = 8  # a positive number or "auto" (checked by validate)
    num_workers: Any = "auto"  # a non-negative number or "auto"
    checkpoint_every: int = 16
    max_samples: int | None = None
    force: bool = False
    progress: bool = True
    data_dir: str = "data"
    on_busy: OnBusy = OnBusy.skip
    lease_ttl_s: float = 60.0
    retry_failed: bool = True


#: Prefix of the project's config resolvers: a value written ``${cb.equals:${.name},CountGDPlusPlus}`` is derived
#: from other keys (the user never has to set it), and ``config_hash`` takes its value, not its text.
RESOLVER_PREFIX = "cb."


def _equals(a: Any, b: Any) -> bool:
    """``${cb.equals:A,B}``: whether two config values are the same (compared as text)."""
    return str(a) == str(b)


def register_resolvers() -> None:
    """Register the ``cb.*`` resolvers of the configs (idempotent; every process that composes or resolves a
    config calls it: the sweep, each launcher worker's job)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(f"{RESOLVER_PREFIX}equals"):
        OmegaConf.register_new_resolver(f"{RESOLVER_PREFIX}equals", _equals)


def register_configs() -> None:
    from hydra.core.config_store import (
        ConfigStore,  # Hydra: imported when a sweep composes, not by every reader
    )

    register_resolvers()

    cs = ConfigStore.instance()
    cs.store(name="countboard_schema", node=Config)
    cs.store(group="tracking", name="countboard_tracking_schema", node=TrackingConf)


def validate_name(name: str, what: str) -> str:
    """``name`` if it is safe as an experiment or run name (no path separators, no ``..``, bounded length).

    Example:
        >>> validate_name("countboard", "tracking.experiment")
        'countboard'
    """
    text = str(name)
    if not text or len(text) > NAME_MAX or ".." in text or not _NAME.match(text):
        raise ConfigError(
            f"{what}={text[:80]!r} is not a valid name: use 1-{NAME_MAX} letters, digits, spaces and _ . , : = + @ "
            "( ) · - (no '/', '\\' or '..'), starting with a letter or digit")
    return text


def validate_experiment(pattern: str, what: str) -> str:
    """``pattern`` if it is safe as an experiment name or name pattern: names as ``validate_name`` allows, joined
    by ``/``, one of which may hold the placeholder ``{family}`` (``countboard/{family}``).

    Example:
        >>> validate_experiment("countboard/{family}", "tracking.experiment")
        'countboard/{family}'
    """
    text = str(pattern)
    if text.count("{family}") > 1 or len(text) > NAME_MAX:
        raise ConfigError(f"{what}={text[:80]!r} is not a valid name: use {{family}} at most once and at most "
                          f"{NAME_MAX} characters")
    for part in text.replace("{family}", "family").split("/"):
        try:
            validate_name(part, what)
        except ConfigError:
            raise ConfigError(
                f"{what}={text[:80]!r} is not a valid name: use names of 1-{NAME_MAX} letters, digits, spaces and "
                "_ . , : = + @ ( ) · - joined by '/' (no '\\', '..' or empty part), each starting with a letter or "
                "digit; {family} stands for the run's family") from None
    return text


def clean_run_name(name: str) -> str:
    """A run name made safe: characters outside the allowed set and ``..`` become ``_``, at most 200 characters.

    Run names never enter paths (artifacts live under the run id), so a name is cleaned rather than refused.

    Example:
        >>> clean_run_name("compare a/b ../x")
        'compare a_b __x'
    """
    text = re.sub(r"[^A-Za-z0-9 _.,:=+@()·-]", "_", str(name)).replace("..", "_")[:NAME_MAX].strip()
    return text if text and _NAME.match(text) else f"run {text}".strip()[:NAME_MAX]


def _positive_int(cfg, key: str, allow_none: bool = False, also: str = "") -> None:
    value = cfg.get(key)
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        hint = " (or null for all units)" if allow_none else f" or {also}" if also else ""
        raise ConfigError(f"{key}={value!r} must be a positive integer{hint}")


def validate(cfg) -> None:
    """Check the values of a composed job config; raise ``ConfigError`` naming the key and the fix.

    Runs before any store call, so a bad value never leaves a run behind.
    """
    _positive_int(cfg, "checkpoint_every")
    if str(cfg.get("batch_size")) != AUTO:
        _positive_int(cfg, "batch_size", also="auto (chosen by memory)")
    workers = cfg.get("num_workers", AUTO)
    if str(workers) != AUTO and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 0):
        raise ConfigError(f"num_workers={workers!r} must be a non-negative integer (0: decode in the job's "
                          "process) or auto")
    _positive_int(cfg, "max_samples", allow_none=True)
    seed = cfg.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed={seed!r} must be a non-negative integer")
    ttl = cfg.get("lease_ttl_s", 60.0)
    if not isinstance(ttl, (int, float)) or ttl <= 0:
        raise ConfigError(f"lease_ttl_s={ttl!r} must be a positive number of seconds")
    if str(cfg.get("device", "auto")) not in {d.value for d in Device}:
        raise ConfigError(f"device={cfg.get('device')!r} is not one of: {', '.join(d.value for d in Device)}")
    if str(cfg.get("precision", "fp32")) not in {p.value for p in Precision}:
        raise ConfigError(f"precision={cfg.get('precision')!r} is not one of: "
                          f"{', '.join(p.value for p in Precision)}")
    tracking = cfg.get("tracking")
    if tracking is not None:
        validate_experiment(tracking.get("experiment", "countboard/{family}"), "tracking.experiment")
        timeout = tracking.get("timeout_s", 10)
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ConfigError(f"tracking.timeout_s={timeout!r} must be a positive number of seconds")
        store_dir = tracking.get("store_dir")
        if tracking.get("kind", "local") == "local" and store_dir:
            path = Path(str(store_dir)).expanduser()
            if path.exists() and not path.is_dir():
                raise ConfigError(f"tracking.store_dir={store_dir} is a file, not a store directory; "
                                  "point it at a directory (it is created if missing)")


def check_node(cfg: Any, group: str, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """The keyword arguments of ``cfg[group]`` (metadata removed), checked against its ``_target_``'s signature:
    unknown keys (in nested ``_target_`` nodes too) and values of the wrong type fail, listing the valid keys.

    ``cfg[group]`` is a config node or a plain dict (e.g. a model node nested in a task's config).
    """
    from omegaconf import OmegaConf

    node = cfg[group]
    node = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else dict(node)
    for k in META_KEYS:
        node.pop(k, None)
    if "_target_" not in node:
        raise ConfigError(f"{group} has no `_target_`: choose one of the `{group.split('.')[0]}` configs "
                          f"(e.g. {group.split('.')[0]}=<name>)")
    _check_arguments(node, group, extra)
    return node


_HYDRA_KEYS = {"_target_", "_partial_", "_recursive_", "_convert_", "_args_"}


def _check_arguments(node: dict[str, Any], group: str, extra: tuple[str, ...] = ()) -> None:
    import inspect

    from hydra.utils import get_class

    try:
        cls = get_class(node["_target_"])
    except Exception as exc:
        raise ConfigError(f"{group}._target_={node['_target_']!r} cannot be imported: {exc}") from exc
    params = {k: p for k, p in inspect.signature(cls.__init__).parameters.items() if k != "self"}
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        valid = sorted(k for k, p in params.items() if k not in extra and p.kind is not p.VAR_POSITIONAL)
        unknown = sorted(set(node) - _HYDRA_KEYS - set(params))
        if unknown:
            listed = f"valid keys: {', '.join(valid)}" if valid else "it takes no keys"
            raise ConfigError(f"{group}.{unknown[0]} is not a key of {group} ({node['_target_']}); {listed} "
                              f"(besides {', '.join(META_KEYS)})")
        missing = [k for k, p in params.items() if p.default is inspect.Parameter.empty
                   and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and k not in node and k not in extra]
        if missing:
            raise ConfigError(f"{group} needs `{missing[0]}` for {node['_target_']}: add {group}.{missing[0]}=…")
    hints = _type_hints(cls.__init__)
    for key, value in node.items():
        if key in _HYDRA_KEYS:
            continue
        if isinstance(value, dict) and "_target_" in value and node.get("_recursive_", True):
            _check_arguments({k: v for k, v in value.items() if k not in META_KEYS}, f"{group}.{key}")
        elif key in hints and not _fits(value, hints[key]):
            raise ConfigError(f"{group}.{key}={value!r} is a {type(value).__name__}, but {node['_target_']} "
                              f"expects {_type_name(hints[key])}")


def _type_hints(fn) -> dict[str, Any]:
    import typing

    try:
        return typing.get_type_hints(fn)
    except Exception:  # an annotation that names what is imported only for type checking: no type check
        return {}


def _fits(value: Any, hint: Any) -> bool:
    """Whether a config value can be passed where ``hint`` is expected (unknown hints accept anything)."""
    import collections.abc as cabc
    import types
    import typing

    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, h) for h in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if value is None:
        return False
    base = origin or hint
    if base is bool:
        return isinstance(value, bool)
    if base is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if base is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if base is str:
        return isinstance(value, str)
    if base in (list, tuple, cabc.Sequence):
        return isinstance(value, (list, tuple))
    if base in (dict, cabc.Mapping):
        return isinstance(value, dict)
    if isinstance(base, type) and issubclass(base, os.PathLike):
        return isinstance(value, (str, os.PathLike))
    return True


def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def check_nodes(cfg: Any) -> None:
    """Every key of the model, dataset and task nodes, checked before anything is built or any store touched."""
    for group, extra in (("model", ("device",)), ("dataset", ()), ("task", ())):
        if cfg.get(group) is None:
            raise ConfigError(f"no `{group}` chosen: add {group}=<name> to the command line")
        check_node(cfg, group, extra)


def instantiate_node(cfg: Any, group: str, **extra: Any) -> Any:
    """``hydra.utils.instantiate`` of ``cfg[group]`` without its metadata keys, with a clear error on bad keys.

    The one place where models, datasets and tasks are built from config (``extra``: e.g. ``device`` for a model).
    """
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(check_node(cfg, group, tuple(extra)), **extra, _convert_="all")
    except InstantiationException as exc:  # surface our own message, not Hydra's wrapper text
        cause = exc.__cause__
        if isinstance(cause, CountboardError):
            raise cause from None
        raise


#: Characters of Hydra's override grammar a value may mean as grammar (a sweep, a list, a dict, a function call,
#: an interpolation, a quote, an escape): a value holding one is never quoted for the user.
_GRAMMAR = set(",[]{}()'\"$\\")


def quote_values(argv: list[str]) -> list[str]:
    """``argv`` with each ``key=value`` override that Hydra's grammar cannot read, and whose value is plain text
    (a path with spaces, non-ASCII letters or ``=``: no character the grammar could mean), quoted as Hydra needs
    (``key='value'``); every other argument as given.

    Example:
        >>> quote_values(["dataset.root=/data/jeu de données/ss", "seed=1", "model=a,b"])
        ["dataset.root='/data/jeu de données/ss'", 'seed=1', 'model=a,b']
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = None
    out = []
    for arg in argv:
        key, eq, value = arg.partition("=")
        if arg.startswith("-") or not eq or not value or not re.fullmatch(r"[+~]{0,2}[\w.@/-]+", key) \
                or _GRAMMAR & set(value) or (value.isascii() and re.fullmatch(r"[\w./:@%~+*-]*", value)):
            out.append(arg)
            continue
        parser = parser or OverridesParser.create()
        try:
            parser.parse_overrides([arg])
            out.append(arg)
        except OverrideParseException:
            out.append(f"{key}='{value}'")
    return out


def unreadable_override(override: str, message: str) -> str:
    """One line for an override Hydra's grammar cannot read: the character it stopped at and its position in the
    override, and the fix (the value quoted for Hydra inside the shell's quotes).

    Example:
        >>> print(unreadable_override("task.note=a(b", "mismatched input '(' expecting <EOF>"))
        `task.note=a(b`: not an override Hydra can parse ('(' at position 2 of the value is not allowed unquoted); quote the value: 'task.note="a(b"'
    """
    key, eq, value = override.partition("=")
    head = f"`{override}`: not an override Hydra can parse"
    if not eq:
        return f"{head} (no `=`); write key=value or group=option"
    where = None
    caret = re.search(r"^(.*)\n( *)\^", message)
    if caret and override in caret.group(1):  # the lexer's marker, under the override quoted in its first line
        where = len(caret.group(2)) - caret.group(1).index(override)
    else:
        token = re.search(r"(?:mismatched|extraneous) input '([^']+)'", message)  # the token it did not expect
        found = override.find(token.group(1), len(key) + 1) if token else -1
        where = found if found >= 0 else None
    fix = f"'{key}=\"{value}\"'" if '"' not in value and "'" not in value else "key=\"value\" inside '…'"
    if where is None or not len(key) < where < len(override):
        return f"{head}; quote the value: {fix}"
    return (f"{head} ({override[where]!r} at position {where - len(key)} of the value is not allowed unquoted); "
            f"quote the value: {fix}")
