"""REINFORCE and its baselines: none, the mean, leave-one-out, a greedy decode, whitened returns."""

from __future__ import annotations

from .base import Preset, blanks_of

_NO_RATIO = {"ratio": "none", "trust_region": "none"}

FAMILY = (
    Preset(
        "reinforce",
        blanks_of(weight=_NO_RATIO, advantage={"estimator": "return"}),
        "On-policy REINFORCE: A = R, no baseline, w = 1.",
        ("Z token-mean (verl's default), so it shares Z with most presets.",),
    ),
    Preset(
        "reinforce_baseline",
        blanks_of(weight=_NO_RATIO, advantage={"estimator": "batch_mean"}),
        "REINFORCE with a mean baseline: A = R - mean R (per prompt group when groups exist).",
        (
            "The mean includes the sample itself, which shrinks the gradient by (N-1)/N; "
            "see reinforce_loo.",
        ),
    ),
    Preset(
        "reinforce_loo",
        blanks_of(weight=_NO_RATIO, advantage={"estimator": "loo"}),
        "REINFORCE with a leave-one-out baseline, on-policy, w = 1.",
        ("Singleton group: A = 0 (no other sample to compare with).",),
    ),
    Preset(
        "rloo",
        blanks_of(
            advantage={"estimator": "loo"},
            regularizer={"reward_kl_coef": 0.05, "reward_kl_estimator": "k1"},
        ),
        "RLOO (Ahmadian et al. 2024): leave-one-out baseline, k1 KL to the reference in the "
        "sequence reward.",
        (
            "KL beta 0.05 (TRL RLOOConfig; the paper used 0.03).",
            "Token ratio with PPO clip 0.2 and token-mean Z (verl form), not TRL's clipped "
            "sequence-product ratio.",
            "Singleton group: A = 0 (verl rloo_vectorized).",
        ),
    ),
    Preset(
        "reinforce_pp",
        blanks_of(
            advantage={"estimator": "reinforce_pp", "gamma": 1.0},
            regularizer={"reward_kl_coef": 0.01, "reward_kl_estimator": "k1"},
        ),
        "REINFORCE++ (Hu et al. 2025): token returns with k1 KL in the reward, whitened over all "
        "valid tokens of the batch.",
        (
            "Whitening ddof 0 with (var + 1e-8)^-1/2 (OpenRLHF), PPO clip 0.2, token-mean Z.",
            "KL coefficient 0.01 (OpenRLHF default).",
        ),
    ),
    Preset(
        "reinforce_pp_baseline",
        blanks_of(
            advantage={"estimator": "reinforce_pp_baseline"},
            regularizer={"loss_kl_coef": 1e-5, "loss_kl_estimator": "k2"},
        ),
        "REINFORCE++-baseline: A' = R - mean_group R (no std), broadcast, then whitened over the "
        "batch; k2 KL in the loss.",
        ("k2 loss coefficient 1e-5 (OpenRLHF example); no KL in the reward.",),
    ),
    Preset(
        "remax",
        blanks_of(weight=_NO_RATIO, advantage={"estimator": "remax"}, data={"group_size": 1}),
        "ReMax (Li et al. 2023): A = R(sample) - R(greedy decode of the current policy), one "
        "sample per prompt.",
        (
            "The greedy rollout shares the environment seed, prompt format, length limit and "
            "verifier of the sample, and its tokens and verifier call are charged to the budget.",
        ),
    ),
)
