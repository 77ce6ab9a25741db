"""A run's share of one GPU, and its vLLM engine's memory share within it. A run placed on a Ray
cluster with a fractional GPU request (0.5: two runs on one GPU) has the share set in its process
environment for the task's duration; its vLLM engine then takes that share of the configured
``gpu_memory_utilization``, so co-located runs do not overcommit the device's memory."""

from __future__ import annotations

import os

SHARE_VAR = "SIXBLANKS_GPU_SHARE"
"""The GPU share of the run in this process (set by :func:`run_placed` for the task's duration)."""


def gpu_share(num_gpus: float) -> float:
    """The share of one GPU a run holds: its request below 1, else 1 (whole GPUs)."""

    return float(num_gpus) if 0 < num_gpus < 1 else 1.0


def engine_memory_share(gpu_memory_utilization: float, share: float | None = None) -> float:
    """vLLM's ``gpu_memory_utilization`` for a run holding ``share`` of a GPU (default: this
    process's share, 1 outside a Ray task): the configured share of the run's slice of the
    device."""

    if share is None:
        share = float(os.environ.get(SHARE_VAR, "1"))
    return float(gpu_memory_utilization) * min(1.0, max(share, 0.0))
