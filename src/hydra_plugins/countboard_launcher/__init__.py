"""Countboard's SLURM launcher plugin (``hydra/launcher=slurm_cpu|slurm_gpu``; see countboard.tracking.slurm)."""
