"""The numerics a cell computes in: deterministic CUDA math and the ``precision`` autocast.

``numerics(device, precision)`` wraps everything a job computes with its model. On CUDA it switches TF32 off (unless
``precision=tf32``), turns cuDNN's autotuner off, asks for deterministic algorithms (warning, not failing, where an
op has none, without its NaN fill of new memory) and sets ``CUBLAS_WORKSPACE_CONFIG`` so cuBLAS reductions are
reproducible; a CPU job's settings are left as they are. With ``precision=bf16|fp16`` the block runs under ``torch.autocast`` on the job's device. Every
flag it sets is put back on exit, so cells run one after another in one process do not leak settings.

Which precisions can change a record, and so are part of a cell's identity, is ``config.PRECISION_CHANGES_RECORDS``.

Example:
    >>> import torch
    >>> with numerics("cpu", "bf16"):
    ...     (torch.ones(2, 2) @ torch.ones(2, 2)).dtype
    torch.bfloat16
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from countboard.config import Precision
from countboard.errors import ConfigError

#: cuBLAS needs a fixed workspace to give the same sums on every run (CUDA's reproducibility notes).
CUBLAS_WORKSPACE = ":4096:8"


def autocast_dtype(precision: str):
    """The ``torch`` dtype of autocast for ``precision`` (None for fp32 and tf32: no autocast)."""
    import torch

    value = str(getattr(precision, "value", precision))
    if value not in {p.value for p in Precision}:
        raise ConfigError(f"precision={value!r} is not one of: {', '.join(p.value for p in Precision)}")
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(value)


def device_type(device: str) -> str:
    """``"cuda"`` for ``cuda`` / ``cuda:N``, else the device string itself (``"cpu"``).

    Example:
        >>> device_type("cuda:1"), device_type("cpu")
        ('cuda', 'cpu')
    """
    return str(device).split(":", 1)[0]


@contextlib.contextmanager
def cuda_determinism(allow_tf32: bool = False) -> Iterator[None]:
    """Deterministic, TF32-free (unless ``allow_tf32``) CUDA math inside the block; the old flags come back after.

    Only flags are set: nothing here needs a GPU, so the block can be entered (and tested) on a CPU-only machine.
    """
    import torch

    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark,
             torch.backends.cudnn.deterministic, torch.are_deterministic_algorithms_enabled(),
             torch.is_deterministic_algorithms_warn_only_enabled(), torch.get_float32_matmul_precision(),
             torch.utils.deterministic.fill_uninitialized_memory)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    try:
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
        torch.backends.cudnn.allow_tf32 = allow_tf32
        torch.set_float32_matmul_precision("high" if allow_tf32 else "highest")
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        torch.use_deterministic_algorithms(True, warn_only=True)
        # deterministic mode would also fill every new tensor with NaN first (a kernel per allocation): only a
        # kernel that reads memory it never wrote would see the difference, and none of the models' kernels does
        torch.utils.deterministic.fill_uninitialized_memory = False
        yield
    finally:
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark,
         torch.backends.cudnn.deterministic) = saved[:4]
        torch.use_deterministic_algorithms(saved[4], warn_only=saved[5])
        torch.set_float32_matmul_precision(saved[6])
        torch.utils.deterministic.fill_uninitialized_memory = saved[7]


@contextlib.contextmanager
def numerics(device: str, precision: str = "fp32") -> Iterator[None]:
    """The job's numerics: CUDA determinism on a CUDA device, and autocast for ``bf16`` / ``fp16``.

    Args:
        device: The job's device (``cpu``, ``cuda`` or ``cuda:N``).
        precision: ``fp32`` (default: exact fp32 math, TF32 off), ``tf32`` (TF32 matmuls and convolutions on CUDA;
            on the CPU the same as fp32), ``bf16`` or ``fp16`` (autocast).
    """
    kind = device_type(device)
    if kind != "cuda" and str(getattr(precision, "value", precision)) in ("fp32", "tf32"):
        yield  # nothing to set: a CPU job in fp32 runs as it is, without importing torch (a toy model has none)
        return
    import torch

    dtype = autocast_dtype(precision)
    with contextlib.ExitStack() as stack:
        if kind == "cuda":
            stack.enter_context(cuda_determinism(allow_tf32=str(getattr(precision, "value", precision)) == "tf32"))
        if dtype is not None:
            stack.enter_context(torch.autocast(kind, dtype=dtype))
        yield
