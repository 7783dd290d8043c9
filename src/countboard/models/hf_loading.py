"""Loading transformers models and processors with an error that says how to make them available offline."""

from __future__ import annotations

from countboard.errors import ConfigError


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
