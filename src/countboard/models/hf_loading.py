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
