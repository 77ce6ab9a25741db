"""GRPO and the methods that change one of its blanks: the advantage's std (Dr. GRPO, Lite PPO),
the clip and the sampling (DAPO), the ratio's level (GSPO) or the trust region's shape (SAPO)."""

from __future__ import annotations

from typing import Any

from ..blanks import Blanks
from .base import SEQ_MEAN_TOKEN_MEAN, Preset, blanks_of


def _gspo(ratio: str, scaled: bool) -> Blanks:
    """GSPO's blanks (the paper's 3e-4/4e-4, clamp 10, 4 minibatches, seq-mean-token-mean, no KL),
    with the bounds scaled to the measured spread (2 and 8/3 of it, the paper's 4:3) or absolute."""

    weight: dict[str, Any] = {
        "ratio": ratio,
        "eps_low": 3e-4,
        "eps_high": 4e-4,
        "log_ratio_clamp": 10.0,
    }
    if scaled:
        weight["clip_scale"] = {"low": 2.0, "high": 8.0 / 3.0}
    return blanks_of(
        weight=weight,
        advantage={"estimator": "group_norm"},
        normalization=SEQ_MEAN_TOKEN_MEAN,
        data={"minibatches": 4},
    )


_GRPO = (
    Preset(
        "grpo",
        blanks_of(
            advantage={"estimator": "group_norm", "std_ddof": 1, "std_eps": 1e-6},
            normalization=SEQ_MEAN_TOKEN_MEAN,
            regularizer={"loss_kl_coef": 0.04, "loss_kl_estimator": "k3"},
        ),
        "GRPO, DeepSeekMath form: group mean/std advantage, PPO clip 0.2, k3 KL in the loss "
        "(beta 0.04), seq-mean-token-mean.",
        (
            "seq-mean-token-mean as in the paper (verl defaults to token-mean, TRL to 'dapo').",
            "std ddof 1, (std + 1e-6) (verl); group statistics in float64; equal-reward groups get "
            "A = 0 exactly.",
            "No dual clip (the paper has none; verl turns it on with c = 3).",
            "Singleton group: A = 0 (no signal), unlike verl's A = R.",
        ),
    ),
    Preset(
        "dr_grpo",
        blanks_of(
            advantage={"estimator": "group_mean"},
            normalization={"mode": "constant"},
        ),
        "Dr. GRPO (Liu et al. 2025): A = R - mean_group (no std), Z = B * L_max (constant), no KL.",
        (
            "Both changes of the paper: A without std AND a constant denominator (OpenRLHF/AReaL "
            "change only A).",
        ),
    ),
    Preset(
        "dapo",
        blanks_of(
            weight={"eps_low": 0.2, "eps_high": 0.28},
            advantage={"estimator": "group_norm"},
            normalization={"mode": "token-mean"},
            data={
                "dynamic_sampling": True,
                "max_sampling_rounds": 10,
                "overlong_shaping": {"enabled": True, "cache": 4, "factor": 1.0},
            },
        ),
        "DAPO (Yu et al. 2025): clip-higher 0.2/0.28, dynamic sampling (std > 0) with an attempt "
        "census, token-mean, soft overlong penalty, no KL.",
        (
            "Overlong shaping with L_cache 4 tokens (scaled down from 4096 for short tiny-model "
            "answers); overlong filtering off, as in most paper runs.",
            "At the round cap it trains on the short batch and records it (verl's recipe raises "
            "instead: set data.on_round_cap: error).",
        ),
    ),
)

_GSPO = (
    Preset(
        "gspo",
        _gspo("sequence", scaled=True),
        "GSPO (Zheng et al. 2025): sequence ratio s_i = exp(mean_t log r), clip bounds 2 and 8/3 "
        "times the measured spread of log s_i (the paper's 4:3 asymmetry), 4 minibatches per "
        "rollout batch, no KL.",
        (
            "Sequence form, aggregated per sequence (TRL 'sequence'), not verl's token-mean "
            "GSPO-token.",
            "Bounds on the ratio's own scale (weight.clip_scale): the spread of the sequence "
            "log-ratio is measured once, after the run's first optimizer step at the full learning "
            "rate, and eps = 2 and 8/3 times it; the paper's 3e-4/4e-4 were set for Qwen3-30B and "
            "clip a different share of another policy's sequences. The absolute paper values: "
            "preset gspo_paper.",
        ),
    ),
    Preset(
        "gspo_paper",
        _gspo("sequence", scaled=False),
        "GSPO with the paper's absolute clip bounds 3e-4/4e-4 (set for Qwen3-30B), 4 minibatches "
        "per rollout batch, no KL.",
        (
            "Sequence form, aggregated per sequence (TRL 'sequence').",
            "The bounds are absolute, copied from the paper: on a policy whose sequence log-ratios "
            "spread differently they clip a different share (compare clip_frac with "
            "ratio.seq_logratio_spread); preset gspo scales them to the measured spread.",
        ),
    ),
    Preset(
        "gspo_token",
        _gspo("gspo_token", scaled=True),
        "GSPO-token: the stop-gradient token form; equals GSPO when A is per sequence and Z is "
        "seq-mean-token-mean. Bounds as gspo's (2 and 8/3 times the measured spread).",
        (
            "Aggregated seq-mean-token-mean (the paper's), not verl's actor token-mean.",
            "Bounds on the ratio's own scale (weight.clip_scale), as preset gspo; the paper's "
            "absolute 3e-4/4e-4: preset gspo_token_paper.",
        ),
    ),
    Preset(
        "gspo_token_paper",
        _gspo("gspo_token", scaled=False),
        "GSPO-token with the paper's absolute clip bounds 3e-4/4e-4.",
        ("Aggregated seq-mean-token-mean (the paper's), not verl's actor token-mean.",),
    ),
)

_SOFT_AND_LITE = (
    Preset(
        "sapo",
        blanks_of(
            weight={"trust_region": "sapo", "tau_pos": 1.0, "tau_neg": 1.05},
            advantage={"estimator": "group_norm"},
            normalization=SEQ_MEAN_TOKEN_MEAN,
        ),
        "SAPO (Gao et al. 2025): soft gate f(r) = (4/tau) sigmoid(tau (r-1)), tau 1.0/1.05, "
        "seq-mean-token-mean.",
        (
            "Gradient weight 4p(1-p) r equals 1 at r = 1 for any tau; compare with PPO by "
            "gradients, not loss values.",
        ),
    ),
    Preset(
        "lite_ppo",
        blanks_of(
            advantage={
                "estimator": "group_mean_batch_std",
                "batch_std": "rewards",
                "std_ddof": 1,
                "std_eps": 1e-6,
            },
            normalization={"mode": "token-mean"},
        ),
        "Lite PPO (Liu et al. 2025, 'Tricks or Traps'): group-mean baseline with the batch's std, "
        "token-level aggregation, PPO clip 0.2, no KL.",
        (
            "Batch std of the raw rewards, ddof 1, eps 1e-6: ROLL (the authors' code) and TRL "
            "scale_rewards='batch' (eps 1e-4). AReaL's group/batch norm takes the std of the "
            "group-centred rewards instead (advantage.batch_std: centered).",
        ),
    ),
)

FAMILY = (*_GRPO, *_GSPO, *_SOFT_AND_LITE)
