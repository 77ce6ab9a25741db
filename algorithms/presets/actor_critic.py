"""Presets with a learned critic: classic RLHF PPO (token or turn level) and SAO."""

from __future__ import annotations

from ..blanks import deep_merge
from .base import Preset, blanks_of

# classic RLHF PPO (TRL PPOTrainer defaults); ppo_turn differs only in the critic's granularity
_PPO = dict(
    weight={"eps_low": 0.2, "eps_high": 0.2},
    advantage={
        "estimator": "gae",
        "gamma": 1.0,
        "lam": 0.95,
        "critic": {
            "trunk": "separate",
            "granularity": "token",
            "bootstrap_truncated": True,
            "whiten": "batch",
            "value_clip": 0.2,
            "vf_coef": 0.1,
        },
    },
    normalization={"mode": "token-mean"},
    regularizer={"reward_kl_coef": 0.05, "reward_kl_estimator": "k1"},
    data={"epochs": 4, "minibatches": 1},
)

_SAO_CRITIC = {
    "trunk": "frozen_attention",
    "granularity": "token",
    "bootstrap_truncated": True,
    "whiten": "batch",
    "value_clip": None,
    "vf_coef": 0.1,
    "updates_per_step": 2,
    "policy_lambda_alpha": 1.5,
}

FAMILY = (
    Preset(
        "ppo",
        blanks_of(**_PPO),
        "Classic RLHF PPO: separate token-level critic, GAE (gamma 1, lambda 0.95), clip 0.2, k1 "
        "KL in the reward (0.05), 4 epochs.",
        (
            "TRL PPOTrainer's defaults: lambda 0.95, value clip 0.2 relative to the old value, "
            "vf_coef 0.1, KL 0.05 in the reward.",
            "Advantages whitened over the batch's valid tokens; returns are not whitened.",
            "Symmetric clip, no dual clip, no target-KL stop (as in verl, TRL and OpenRLHF).",
            "Token-mean Z over the whole optimizer-step batch; the critic is a second model, "
            "charged to device-seconds.",
        ),
    ),
    Preset(
        "ppo_turn",
        blanks_of(**deep_merge(_PPO, {"advantage": {"critic": {"granularity": "turn"}}})),
        "PPO with a turn-level critic for multi-turn tasks: one value per turn, skip-observation "
        "GAE across turns.",
        (
            "Values predicted at the first action token of each turn and held for the turn; "
            "observation tokens skipped.",
            "Turn rewards sit on each turn's last action token; gamma counts action tokens (1.0 "
            "here, so it is moot).",
            "Time-limit truncation bootstraps with V of the next state.",
        ),
    ),
    Preset(
        "sao",
        blanks_of(
            weight={"ratio": "behavior", "trust_region": "dis", "eps_low": 0.3, "eps_high": 5.0},
            advantage={"estimator": "gae", "gamma": 1.0, "lam": 1.0, "critic": _SAO_CRITIC},
            normalization={"mode": "token-mean"},
            data={"group_size": 1},
        ),
        "SAO (Hou et al. 2026): one rollout per prompt, critic + skip-observation token GAE "
        "(policy lambda 1 - 1/(1.5 l), critic lambda 1), DIS band 0.7 < pi/pi_rollout < 6.0 "
        "(math eps 0.3/5.0), 2 critic updates per actor update, no KL or entropy.",
        (
            "From secondary sources: whether f(rho) is detached and whether rejected "
            "tokens stay in Z are unstated; here f is detached and tokens outside the band at the "
            "batch's start leave Z (discard reason 'dis').",
            "The critic's frozen attention with trainable MoE projections is stood in for by a "
            "copy of the policy whose attention, embeddings and norms are frozen and whose MLPs "
            "train.",
            "Synchronous by default (reproducible): one rollout per prompt, consumed by the next "
            "update. As published, each rollout is consumed as soon as it finishes: "
            "data.concurrent {consume: episode} (a collector process keeps every launched rollout "
            "in flight and the trainer updates at a batch's worth of finished ones); with "
            "data.lag, deterministically k versions behind. DIS masks what drifted out of the "
            "band.",
        ),
    ),
)
