"""A framework's known trap as a record (:class:`Trap`), and the traps that more than one framework
has: their one-line summaries, shared so that TRL's and verl's reports say the same thing.

Each framework's own traps, and when each fires, are in its ``*_traps`` module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Trap:
    """A known trap of a framework: its id, one line on what goes wrong, whether the configuration
    read triggers it and why (or why not)."""

    id: str
    summary: str
    fired: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "summary": self.summary, "fired": self.fired, "detail": self.detail}


SHARED = {
    "cispo_cap": "CISPO's clip differs by framework: TRL caps absolutely, min(r, epsilon_high), "
    "and epsilon_high unset is epsilon = 0.2, scaling every token's gradient by at most 0.2 "
    "(5.0 recommended); verl's default band is [1-clip_ratio_low, 1+clip_ratio_high] = "
    "[0.8, 1.2]; SkyRL/ScaleRL/AReaL/ART use [0, 5]; Trinity [0, 1.28] with a hard mask. "
    "sixblanks' cispo band is [1-eps_low, 1+eps_high].",
    "batch_std": "'Batch std' has two meanings: TRL scale_rewards='batch' (and ROLL's Lite PPO) "
    "divide by the std of the raw rewards about the batch mean; AReaL's group/batch "
    "normalization and ScaleRL by the std of the group-centred rewards (sixblanks "
    "advantage.batch_std: rewards | centered).",
    "off_policy_uncorrected": "An off-policy ratio with no correction: rollouts come from another "
    "engine (vLLM/SGLang) or lag the trainer, the ratio is pi/pi_old with pi_old recomputed by the "
    "trainer, and nothing weighs pi_old/pi_rollout (TRL vllm_importance_sampling_correction, verl "
    "algorithm.rollout_correction).",
    "default_aggregation": "The framework's default loss aggregation sets the gradient's scale: "
    "TRL defaults to loss_type 'dapo' (token-mean over the step's tokens), TRL 'grpo' and the GRPO "
    "paper average per sequence (seq-mean-token-mean), verl defaults to token-mean; porting a "
    "recipe across them re-weighs every token by its sequence's length (a ~10x gradient-norm "
    "gap is reported in AI-Hypercomputer/maxtext#4025).",
    "dr_grpo_half": "Dr. GRPO is two changes: no std in the advantage AND a constant denominator; "
    "setting one of them (TRL loss_type='dr_grpo' keeps scale_rewards='group' unless told; verl "
    "needs norm_adv_by_std_in_grpo=false and loss_agg_mode=seq-mean-token-sum-norm) gives half "
    "of it.",
    "gspo_clip_range": "A sequence-level (GSPO) ratio with a token-level clip range: the GSPO "
    "paper clips the geometric-mean ratio at 3e-4/4e-4; the frameworks' defaults (0.2) clip "
    "almost nothing.",
}
"""The summary of each trap that TRL and verl both have, by its id."""


def shared_trap(tid: str, fired: bool, detail: str) -> Trap:
    """The shared trap ``tid`` with this configuration's verdict and detail."""

    return Trap(tid, SHARED[tid], fired, detail)
