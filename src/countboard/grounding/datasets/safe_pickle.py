"""Reading pickled annotation files without running code from them.

``pickle.load`` calls whatever callable a file names, so a crafted annotation file runs arbitrary code. The
restricted unpickler here resolves only the globals that plain data needs: containers, strings, numbers, and numpy
arrays, scalars and dtypes. Anything else is refused with a message that names the file and the global; loading it
anyway is an explicit opt-in (``trusted=True``) for files whose origin the user vouches for.
"""

from __future__ import annotations

import _compat_pickle
import io
import pickle
from pathlib import Path
from typing import Any

from countboard.errors import ConfigError

#: ``(module, name)`` pairs a data-only pickle may name. ``_codecs.encode`` rebuilds ``bytes`` in protocol 2;
#: ``numpy`` entries rebuild arrays, scalars and dtypes (both the ``numpy.core`` and ``numpy._core`` spellings).
SAFE_GLOBALS = frozenset({
    ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "complex"), ("builtins", "bytearray"),
    ("builtins", "slice"), ("builtins", "range"), ("collections", "OrderedDict"), ("_codecs", "encode"),
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "scalar"),
})


class UnsafePickleError(ConfigError):
    """A pickle names a global outside ``SAFE_GLOBALS``."""


class RestrictedUnpickler(pickle.Unpickler):
    """An ``Unpickler`` whose ``find_class`` only resolves ``SAFE_GLOBALS``."""

    def find_class(self, module: str, name: str) -> Any:
        # Python 2 names (``__builtin__.set``, ``copy_reg``) are checked under their Python 3 spelling, the one
        # ``pickle`` itself maps them to.
        module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        if (module, name) not in SAFE_GLOBALS:
            raise pickle.UnpicklingError(f"global {module}.{name} is not plain data")
        return super().find_class(module, name)


def restricted_loads(data: bytes, encoding: str = "ASCII") -> Any:
    """Unpickle ``data`` allowing only plain containers, str/bytes, numbers and numpy values.

    Raises:
        pickle.UnpicklingError: when the data names any other global.

    Example:
        >>> import numpy as np
        >>> restricted_loads(pickle.dumps([{"a": 1, "b": np.arange(2)}]))[0]["b"].tolist()
        [0, 1]
        >>> restricted_loads(pickle.dumps(len))
        Traceback (most recent call last):
        ...
        _pickle.UnpicklingError: global builtins.len is not plain data
    """
    return RestrictedUnpickler(io.BytesIO(data), encoding=encoding).load()


def load_pickle(path: Path, key: str, *, trusted: bool = False, encoding: str = "latin1") -> Any:
    """Load a pickled annotation file: restricted unless ``trusted``.

    Args:
        path: The file.
        key: Config key that names the file and the opt-in, for the message (e.g. ``dataset.refs_file``).
        trusted: Load with the full ``pickle`` (runs any code the file names); only for files you trust.
        encoding: Decoding of Python 2 ``str`` objects (``latin1`` reads the published Python 2 pickles).

    Raises:
        UnsafePickleError: when the file names a global that plain data does not need.
        ConfigError: when the file is not a pickle at all.
    """
    data = Path(path).read_bytes()
    try:
        if trusted:
            return pickle.loads(data, encoding=encoding)  # noqa: S301 - explicit opt-in by the user
        return restricted_loads(data, encoding=encoding)
    except pickle.UnpicklingError as err:
        if "is not plain data" in str(err):
            raise UnsafePickleError(
                f"{path} ({key}): refused to unpickle, {err}; if you trust this file, set "
                f"{key.rsplit('.', 1)[0]}.allow_unsafe_pickle=true") from None
        raise ConfigError(f"{path} ({key}): not a readable pickle ({err})") from None
    except (EOFError, ValueError, TypeError, AttributeError, ImportError) as err:
        raise ConfigError(f"{path} ({key}): not a readable pickle ({type(err).__name__}: {err})") from None
