"""Loading transformers models and processors with an error that says how to make them available offline."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from countboard.errors import ConfigError

#: The config key of the node a preflight is checking (``model``, or a task's ``task.evaluator``…), named in its
#: messages (``node_key``).
_NODE_KEY: ContextVar[str] = ContextVar("node_key", default="model")


@contextmanager
def node_key(key: str) -> Iterator[None]:
    """Within it, ``check_node_weights`` names the node ``key`` (``task.evaluator``) instead of ``model``."""
    token = _NODE_KEY.set(key)
    try:
        yield
    finally:
        _NODE_KEY.reset(token)


def current_node_key() -> str:
    """The key of the node being checked: ``model``, or a task's ``task.vlm``… (``node_key``)."""
    return _NODE_KEY.get()


def check_weights_present(model_id: str, what: str, *, key: str = "model.model_id", marker: str = "config.json",
                          local_files_only: bool = False, revision: str | None = None) -> None:
    """Before any run exists, one ``ConfigError`` line when the weights under ``model_id`` cannot be there: a local
    folder without ``marker`` (``config.json``; a diffusers pipeline's ``model_index.json``), or a hub id whose
    ``marker`` is not in the Hugging Face cache while downloads are off (``HF_HUB_OFFLINE=1`` or
    ``local_files_only``). With downloads on, loading decides (a download, or its own error).

    Args:
        model_id: Hub id or local folder.
        what: What is loaded, for the message (``"model=owlv2"``, ``"diffusers pipeline"``).
        key: The config key that sets ``model_id``, named in the fix.
        marker: The file every saved copy of it has.
        local_files_only: The model's own "no downloads" setting.
        revision: The hub revision asked for (None: the default branch).
    """
    model_id = str(model_id)
    folder = Path(model_id).expanduser()
    if folder.is_absolute() or model_id.startswith((".", "~")) or folder.is_dir():
        if not (folder / marker).is_file():
            raise ConfigError(f"cannot load {what} from the folder {str(folder)!r}: it has no {marker} (a folder "
                              f"saved with save_pretrained has one); point {key} to such a folder or to a hub id")
        return
    fix = f"Download it first (`hf download {model_id}`) or point {key} to a local folder saved with save_pretrained."
    from huggingface_hub import constants, try_to_load_from_cache

    if not (local_files_only or constants.HF_HUB_OFFLINE):
        return
    if not isinstance(try_to_load_from_cache(model_id, marker, revision=revision), str):
        raise ConfigError(f"cannot load {what} {model_id!r}: it is not in the Hugging Face cache "
                          f"({constants.HF_HUB_CACHE}) and downloads are off (HF_HUB_OFFLINE=1"
                          f"{' or local_files_only=true' if local_files_only else ''}). {fix}")


def check_node_weights(node) -> None:
    """``check_weights_present`` for a model config node that loads a transformers checkpoint from
    ``model_id`` (a node without one loads nothing from the hub and passes), named by its key (``node_key``)."""
    model_id = node.get("model_id")
    key = current_node_key()
    if isinstance(model_id, str) and model_id:
        check_weights_present(model_id, f"{key}={node.get('name', '?')}", key=f"{key}.model_id",
                              revision=node.get("revision"), local_files_only=bool(node.get("local_files_only", False)))


def load_pretrained(loader, model_id: str, what: str):
    """``loader.from_pretrained(model_id)``; a missing or unreadable model raises ``ConfigError``.

    Args:
        loader: A transformers class with ``from_pretrained`` (model or processor).
        model_id: Hub id or local directory.
        what: Name of the thing loaded, for the message (e.g. ``"OWLv2 processor"``).
    """
    try:
        return loader.from_pretrained(model_id)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"could not load the {what} from {model_id!r} ({exc}). Set `model.model_id` to a local directory saved "
            f"with save_pretrained, or put the hub files in the Hugging Face cache (HF_HOME) before running offline."
        ) from exc


def load_processor_and_model(processor_cls, model_cls, model_id: str, name: str, device: str):
    """The processor and the model (on ``device``, in eval mode) saved under ``model_id``, with ``load_pretrained``.

    Args:
        processor_cls, model_cls: transformers classes with ``from_pretrained``.
        model_id: Hub id or local directory.
        name: The model family, for messages (``"OWLv2"`` gives "OWLv2 processor" and "OWLv2 model").
        device: ``"cpu"`` or ``"cuda"``.
    """
    processor = load_pretrained(processor_cls, model_id, f"{name} processor")
    model = load_pretrained(model_cls, model_id, f"{name} model").to(device).eval()
    return processor, model


def byte_level_clip_tokenizer():
    """A CLIP tokenizer built offline: byte-level, no merges, every character a token (vocabulary of 514).

    For randomly initialised CLIP-family models (tests, throughput benchmarks) where no hub tokenizer can be had.

    Example:
        >>> len(byte_level_clip_tokenizer())
        514
    """
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import CLIPTokenizer

    chars = sorted(ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(chars)}
    vocab.update({c + "</w>": len(chars) + i for i, c in enumerate(chars)})
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    return CLIPTokenizer(vocab=vocab, merges=[])
