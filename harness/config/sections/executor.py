"""Where the runs execute (``executor``) and where they are tracked (``tracking``), with the
address type that keeps a password out of every dump."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, PlainSerializer, field_validator

from ...redact import known, redact_opt
from .base import Section

Credentialed = Annotated[
    str | None, AfterValidator(known), PlainSerializer(redact_opt, return_type=str | None)
]
"""An address that may carry user-info (``scheme://user:password@host``): the field holds the real
value, to connect with; every dump of it (the stored definition, experiment.json, MLflow, reports)
writes the password masked (:mod:`~sixblanks.harness.redact`), so it never reaches a file, a
message or a result's identity. A dump validated again in the same process gets the real value
back (:func:`~sixblanks.harness.redact.known`)."""


class ExecutorConfig(Section):
    kind: Literal["local", "ray"] = "local"
    workers: int | None = Field(
        None, ge=1, description="Parallel runs; None: a sensible default for the machine."
    )
    address: Credentialed = Field(
        None, description="Ray: address of an existing cluster; None starts a local one."
    )
    num_cpus: float = Field(1.0, gt=0, description="Ray: CPUs per run.")
    num_gpus: float = Field(
        0.0,
        ge=0,
        description="Ray: GPUs per run. A fraction shares a GPU (0.5: two runs on one GPU; their "
        "vLLM engines take that share of rollout.vllm.gpu_memory_utilization each); above 1, whole "
        "GPUs.",
    )
    memory_gib: float | None = Field(
        None,
        gt=0,
        description="Ray: memory per run in GiB (Ray's `memory` resource); None: not asked.",
    )
    checkpoint_seconds: float = Field(
        30.0,
        ge=0,
        description="Checkpoint a run after a step once this many seconds passed (0: every step).",
    )
    share_start_evaluations: bool = Field(
        False,
        description="Compute each start evaluation once for the runs whose evaluation inputs are "
        "equal (the arms of one seed start from the same policy): the first to finish it stores "
        "it, the others read it (bit for bit the same; marked `reused` in their evaluation "
        "records, which then spend nothing). Shared across experiments through the machine's "
        "warm-start cache. Not for the code tool, a judge, a beam search or data-parallel runs.",
    )

    @field_validator("num_gpus")
    @classmethod
    def _whole_gpus(cls, v: float) -> float:
        if v > 1 and v != int(v):
            raise ValueError(
                f"num_gpus {v:g}: a share of one GPU (below 1) or whole GPUs (Ray places no "
                "fraction above 1)"
            )
        return v


class TrackingConfig(Section):
    mlflow: bool = True
    uri: Credentialed = Field(
        None,
        description="Tracking URI; None: MLFLOW_TRACKING_URI or sqlite in the output directory. "
        "A password in it is used to connect and shown nowhere (`user:***@`); better, give it in "
        "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD.",
    )
    experiment: str | None = Field(
        None, description="MLflow experiment name; None: the experiment's name."
    )
