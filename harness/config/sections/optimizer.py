"""The ``optimizer`` section (with what an arm may override of it) and the ``warm_start``."""

from __future__ import annotations

from pydantic import Field

from .base import Section


class OptimizerConfig(Section):
    lr: float = Field(
        3e-4,
        ge=0,
        description="3e-4 for the tiny model; unset, a pretrained model gets 1e-6. 0: the policy "
        "never moves (a frozen-policy probe, e.g. of the gradient's noise).",
    )
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float | None = Field(1.0, gt=0, description="Max gradient norm; None: off.")
    warmup_steps: int = Field(0, ge=0)


class OptimizerOverride(Section):
    lr: float | None = Field(None, ge=0)
    weight_decay: float | None = Field(None, ge=0)
    betas: tuple[float, float] | None = None
    grad_clip: float | None = Field(None, gt=0)
    warmup_steps: int | None = Field(None, ge=0)


class WarmStartConfig(Section):
    """SFT on task demonstrations: the common initial policy of every arm (cached by content
    hash)."""

    enabled: bool = True
    steps: int = Field(300, ge=0)
    batch_size: int = Field(32, gt=0)
    lr: float = Field(
        3e-3, gt=0, description="3e-3 for the tiny model; unset, a pretrained model gets 1e-5."
    )
    num_demos: int = Field(2000, gt=0)
    seed: int = 0
