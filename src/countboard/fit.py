"""What fits what: the kinds of model and dataset a task takes, checked before anything is built or any run exists.

A task class declares ``model_kinds`` and ``dataset_kinds`` (``countboard.results.Task``; empty: any kind); a
model or dataset config node declares its ``kind`` (``conf/model/*.yaml``, ``conf/dataset/*.yaml``). A cell whose
model or dataset is of another kind is refused in one line that names the options that fit, read from ``conf/``:

    task=praco_negative takes a counter; sd15 is a generator; counters: class_blind, clipseg, …

A node without a ``kind`` (a user's own config) is not refused: nothing says what it is.
"""

from __future__ import annotations

import functools
from typing import Any

from countboard.errors import ConfigError

#: What a kind is called in a sentence ("takes a counter"), and in a list ("counters: …").
KIND_WORDS: dict[str, tuple[str, str]] = {
    "counter": ("a counter", "counters"),
    "generator": ("a text-to-image generator", "text-to-image generators"),
    "vlm": ("a vision-language model", "vision-language models"),
    "text_generator": ("a text generator", "text generators"),
    "classifier": ("a classifier", "classifiers"),
    "counting": ("a counting dataset (one class per image, FSC-147 layout)", "counting datasets"),
    "multiclass_counting": ("a multi-class counting dataset (PrACo++ layout)", "multi-class counting datasets"),
    "grounding": ("a grounding dataset (phrases with boxes)", "grounding datasets"),
    "image_prompts": ("a prompt set for image generators", "prompt sets for image generators"),
    "text_prompts": ("a prompt set for text generators", "prompt sets for text generators"),
    "judged_outputs": ("a set of judged generator outputs", "sets of judged generator outputs"),
}


def kinds_of(kind: Any) -> tuple[str, ...]:
    """A ``kind`` as the kinds it names: a config may give one (``kind: counting``) or several, for a dataset that
    more than one protocol reads (``kind: [counting, multiclass_counting]``)."""
    if kind is None:
        return ()
    return (str(kind),) if isinstance(kind, str) else tuple(str(k) for k in kind)


def _word(kind: Any, plural: bool = False) -> str:
    if not isinstance(kind, str):
        return " and ".join(_word(k, plural) for k in kinds_of(kind))
    words = KIND_WORDS.get(kind)
    return words[plural] if words else (f"{kind} options" if plural else f"a {kind}")


@functools.lru_cache(maxsize=8)
def conf_kinds(group: str) -> dict[str, str | tuple[str, ...]]:
    """``{option: kind}`` of the options of ``conf/<group>/`` (a ``kind`` set by a config in its ``defaults``
    counts; several kinds as a tuple); options without a kind are left out."""
    import yaml

    from countboard.paths import conf_dir

    docs: dict[str, dict] = {}
    for path in sorted((conf_dir() / group).glob("*.yaml")):
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue
        docs[path.stem] = doc if isinstance(doc, dict) else {}

    def kind_of(name: str, seen: frozenset[str] = frozenset()) -> str | tuple[str, ...] | None:
        doc = docs.get(name, {})
        if doc.get("kind"):
            kinds = kinds_of(doc["kind"])
            return kinds[0] if len(kinds) == 1 else kinds
        for base in doc.get("defaults") or ():
            if isinstance(base, str) and base in docs and base not in seen:
                found = kind_of(base, seen | {name})
                if found:
                    return found
        return None

    return {name: kind for name in docs if (kind := kind_of(name))}


@functools.lru_cache(maxsize=64)
def _declared(task_target: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    from hydra.utils import get_class

    try:
        cls = get_class(task_target)
    except Exception:  # an unknown target is reported, with the valid keys, when the task is built
        return (), ()
    return tuple(getattr(cls, "model_kinds", ())), tuple(getattr(cls, "dataset_kinds", ()))


def misfits(task: str, task_target: str, model: tuple[str, Any], dataset: tuple[str, Any]) -> list[str]:
    """One sentence per part of a cell that its task does not take: ``model`` and ``dataset`` are ``(name,
    kind)``. Empty when the cell fits.

    Example:
        >>> misfits("praco_negative", "countboard.counting.tasks.praco.PracoNegative", ("sd15", "generator"),
        ...         ("synthetic_shapes", "counting"))[0].split("; ")[:2]
        ['task=praco_negative takes a counter', 'model=sd15 is a text-to-image generator']
    """
    model_kinds, dataset_kinds = _declared(task_target)
    out = []
    for group, (name, kind), wanted in (("model", model, model_kinds), ("dataset", dataset, dataset_kinds)):
        if not wanted or kind is None or set(kinds_of(kind)) & set(wanted):
            continue
        takes = " or ".join(_word(k) for k in wanted)
        options = conf_kinds(group)
        lists = "; ".join(f"{_word(k, plural=True)}: {', '.join(fit)}" for k in wanted
                          if (fit := sorted(o for o, ok in options.items() if k in kinds_of(ok))))
        out.append(f"task={task} takes {takes}; {group}={name} is {_word(kind)}"
                   + (f"; {lists}" if lists else "") + f" (choose with {group}=<option>)")
    return out


def node_misfits(task: str, task_target: str, nodes: dict[str, tuple[str, str | None]]) -> list[str]:
    """One sentence per model node inside the task's config (``task.evaluator``) of a kind the task does not take
    there (its class's ``node_kinds``); ``nodes``: ``{key: (name, kind)}``.

    Example:
        >>> misfits_ = node_misfits("geckonum_autoeval", "countboard.numeracy.tasks.geckonum.GeckoNumAutoEval",
        ...                         {"evaluator": ("sd15", "generator")})
        >>> misfits_[0].split("; ")[:2]
        ['task=geckonum_autoeval takes a counter as task.evaluator', 'sd15 is a text-to-image generator']
    """
    from hydra.utils import get_class

    try:
        declared = dict(getattr(get_class(task_target), "node_kinds", {}))
    except Exception:  # reported when the task is built
        return []
    out = []
    for key, wanted in declared.items():
        name, kind = nodes.get(key, (None, None))
        if not wanted or kind is None or set(kinds_of(kind)) & set(wanted):
            continue
        options = conf_kinds("model")
        fitting = ", ".join(sorted(o for o, k in options.items() if set(kinds_of(k)) & set(wanted)))
        out.append(f"task={task} takes {' or '.join(_word(k) for k in wanted)} as task.{key}; {name} is "
                   f"{_word(kind)}; {' and '.join(_word(k, plural=True) for k in wanted)}: {fitting} (choose with "
                   f"model@task.{key}=<option>)")
    return out


def check_fit(cfg: Any) -> None:
    """Raise ``ConfigError`` when the cell's task does not take its model, its dataset or a model node of its own
    config (one line)."""
    target = str(cfg.task.get("_target_", ""))
    found = misfits(str(cfg.task.get("name", "?")), target,
                    (_choice(cfg, "model"), cfg.model.get("kind")), (_choice(cfg, "dataset"), cfg.dataset.get("kind")))
    nodes = {k: (str(v.get("name", k)), v.get("kind")) for k, v in cfg.task.items()
             if hasattr(v, "get") and "_target_" in v}
    found += node_misfits(str(cfg.task.get("name", "?")), target, nodes)
    if found:
        raise ConfigError(" and ".join(found))


def _choice(cfg: Any, group: str) -> str:
    """The option the user chose for ``group`` (``sd15``), else the node's name."""
    try:
        from hydra.core.hydra_config import HydraConfig

        choice = HydraConfig.get().runtime.choices.get(group)
        if choice:
            return str(choice)
    except (ValueError, ImportError):  # outside a Hydra app (a test composing a config)
        pass
    return str(cfg[group].get("name", "?"))
