"""The sections of experiments about experiments: the ablation ladder and the hyperparameter
search."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from .sections import (
    Budget,
    Credentialed,
    Section,
)


class LadderConfig(Section):
    arm: str | None = Field(None, description="Arm to debug; None: the first arm.")
    budget: Budget = Field(
        default_factory=dict,
        description="Budget per rung experiment; empty: a tenth of the main budget.",
    )
    seeds: list[int] = Field(default_factory=lambda: [0])
    advantage_variants: list[str] = Field(
        default_factory=lambda: ["group_norm", "group_mean", "loo"]
    )
    normalization_variants: list[str] = Field(
        default_factory=lambda: ["token-mean", "seq-mean-token-mean", "constant"]
    )
    lr_factors: list[float] = Field(default_factory=lambda: [0.3, 1.0, 3.0])
    clip_variants: list[tuple[float, float]] = Field(
        default_factory=lambda: [(0.2, 0.2), (0.2, 0.28)],
        description="Rung 7: (eps_low, eps_high) pairs tried on an arm with a token-level PPO "
        "clip.",
    )
    scale_factors: list[float] = Field(
        default_factory=lambda: [0.5, 2.0],
        description="Rung 7: factors applied to the arm's own bounds where token-scale pairs do "
        "not fit: a sequence-level clip (GSPO's ratio lives on another scale) and SAPO's "
        "temperatures (tau_pos, tau_neg).",
    )
    kl_variants: list[float] = Field(default_factory=lambda: [0.0, 0.04])
    credit_variants: list[str] = Field(
        default_factory=lambda: ["ppo_turn", "prm_grpo", "gigpo"],
        description="Rung 8: presets whose advantage blank (estimator, critic, PRM, gamma) is "
        "swapped into the arm one at a time, every other blank the arm's (a trained PRM only "
        "where the task gives step labels).",
    )


class ParamSpace(Section):
    type: Literal["float", "int", "categorical"]
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: list[Any] | None = None

    @model_validator(mode="after")
    def _complete(self) -> ParamSpace:
        if self.type == "categorical":
            if not self.choices:
                raise ValueError(
                    "choices: a categorical parameter needs a non-empty list of choices"
                )
        else:
            if self.low is None or self.high is None:
                raise ValueError("low: float and int parameters need low and high")
            if self.low >= self.high:
                raise ValueError(f"high: must be > low ({self.low})")
            if self.log and self.low <= 0:
                raise ValueError("low: a log-scale parameter needs low > 0")
        return self


class SweepConfig(Section):
    n_trials: int = Field(8, ge=1)
    parallel: int = Field(
        1,
        ge=1,
        description="Trials run at once per study (local processes or Ray tasks); each reserves "
        "its budget on the search budget first, so the total is never exceeded.",
    )
    sampler: Literal["tpe", "random"] = "tpe"
    seed: int = 0
    pruner: Literal["median", "successive_halving", "hyperband", "none"] = "successive_halving"
    trial_budget: Budget = Field(default_factory=dict)
    total_budget: Budget = Field(default_factory=dict)
    storage: Credentialed = Field(
        None,
        description="Optuna storage URL; None: a journal file in the output directory. A password "
        "in it is used to connect and shown nowhere (`user:***@`); better, leave it out and set "
        "PGPASSWORD or a PGPASSFILE.",
    )
    space: dict[str, dict[str, ParamSpace]] = Field(
        default_factory=dict,
        description="arm -> {dotted field path (e.g. optimizer.lr, blanks.weight.eps_high): "
        "space}.",
    )
    confirm_seeds: list[int] = Field(
        default_factory=lambda: [100, 101],
        description="Fresh seeds the defaults and the best configuration of each arm are re-run "
        "on after the search; [] skips the confirmation (trials only, no report).",
    )
