"""The job's numerics: CUDA determinism flags (set and restored without a GPU), autocast per precision, identity."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from omegaconf import OmegaConf

from countboard.cell import config_hash
from countboard.config import Config, validate
from countboard.errors import ConfigError
from countboard.models.precision import autocast_dtype, cuda_determinism, numerics


def _flags():
    return (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark,
            torch.backends.cudnn.deterministic, torch.are_deterministic_algorithms_enabled(),
            torch.get_float32_matmul_precision())


def test_cpu_fp32_changes_nothing():
    before = _flags()
    with numerics("cpu", "fp32"):
        assert _flags() == before
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
    assert _flags() == before


@pytest.mark.parametrize(("precision", "dtype"), [("bf16", torch.bfloat16), ("fp16", torch.float16),
                                                  ("tf32", torch.float32), ("fp32", torch.float32)])
def test_autocast_per_precision_on_cpu(precision, dtype):
    lin = torch.nn.Linear(4, 3)
    with numerics("cpu", precision):
        assert lin(torch.ones(2, 4)).dtype == dtype
    assert lin(torch.ones(2, 4)).dtype == torch.float32


@pytest.mark.parametrize(("device", "precision", "tf32"), [("cuda", "fp32", False), ("cuda:1", "bf16", False),
                                                          ("cuda", "tf32", True)])
def test_cuda_jobs_get_deterministic_math_and_their_flags_back(device, precision, tf32, monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    torch.backends.cudnn.benchmark = True  # a setting the job must override and give back
    try:
        before = _flags()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # autocast on "cuda" without a GPU warns that it is disabled
            with numerics(device, precision):
                inside = _flags()
                assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
                assert torch.utils.deterministic.fill_uninitialized_memory is False  # no NaN fill per allocation
        assert torch.utils.deterministic.fill_uninitialized_memory is True
        assert inside == (tf32, tf32, False, True, True, "high" if tf32 else "highest")
        assert _flags() == before
    finally:
        torch.backends.cudnn.benchmark = False


def test_flags_come_back_after_an_exception():
    before = _flags()
    with pytest.raises(RuntimeError, match="boom"), cuda_determinism():
        raise RuntimeError("boom")
    assert _flags() == before


def test_unknown_precision_is_one_clear_error():
    with pytest.raises(ConfigError, match="precision='int8' is not one of: fp32, tf32, bf16, fp16"):
        autocast_dtype("int8")
    cfg = OmegaConf.create({"seed": 0, "batch_size": 8, "checkpoint_every": 16, "precision": "half"})
    with pytest.raises(ConfigError, match="precision='half'"):
        validate(cfg)


def test_precision_is_part_of_the_cell_but_fp32_keeps_the_old_identity():
    cfg = OmegaConf.structured(Config)
    without_key = OmegaConf.create({k: v for k, v in OmegaConf.to_container(cfg).items() if k != "precision"})
    assert config_hash(cfg) == config_hash(without_key)  # cells computed before the key existed are found again
    hashes = {p: config_hash(OmegaConf.merge(cfg, {"precision": p})) for p in ("fp32", "tf32", "bf16", "fp16")}
    assert hashes["fp32"] == config_hash(cfg)
    assert len(set(hashes.values())) == 4
