"""Trust regions and caps on the ratio to the rollout policy, for rollouts that lag the learner or
come from another engine: CISPO, DPPO, IcePop and ScaleRL."""

from __future__ import annotations

from .base import Preset, blanks_of

FAMILY = (
    Preset(
        "cispo",
        blanks_of(
            weight={"trust_region": "cispo", "eps_low": 1.0, "eps_high": 4.0},
            advantage={"estimator": "group_norm"},
            normalization={"mode": "token-mean"},
            data={"minibatches": 4},
        ),
        "CISPO (MiniMax-M1, 2025): l = -sg(clip(r, 0, 5)) A log pi, every token keeps a gradient; "
        "group-normalized A, token-mean, 4 minibatches, no KL.",
        (
            "Cap r <= 5 with no lower bound (eps_low 1, eps_high 4), as SkyRL, AReaL, ART and "
            "ScaleRL (MiniMax-M1 states only an upper cap).",
            "4 minibatches per rollout batch (as gspo here): with one on-policy update r = 1 and "
            "CISPO is REINFORCE with group-normalized advantages.",
        ),
    ),
    Preset(
        "dppo",
        blanks_of(
            weight={
                "ratio": "behavior",
                "trust_region": "dppo_tv",
                "eps_low": 0.2,
                "eps_high": 0.2,
                "ratio_cap": 10.0,
            },
            advantage={"estimator": "group_norm"},
            normalization={"mode": "token-mean"},
            data={"minibatches": 4},
        ),
        "DPPO (Rethinking the Trust Region in LLM RL, 2026): binary total-variation mask keyed to "
        "the sign of A, anchored on the rollout policy, l = -A sg(min(rho, 10)) M log pi; "
        "4 minibatches.",
        (
            "Anchor pi_rollout for both the ratio and the mask, C = 10: the authors' Stable-RL "
            "(SkyRL and prime-rl anchor there too). verl anchors on pi_old (weight.ratio: token) "
            "with C = clip_ratio_c, 3 by default (its 20.0 fallback is never reached).",
            "delta 0.2/0.2 (SkyRL, prime-rl); the binary KL mask is trust_region dppo_kl "
            "(verl's example: 0.05).",
        ),
    ),
    Preset(
        "icepop",
        blanks_of(
            weight={
                "gate": {
                    "level": "token",
                    "metric": "ratio",
                    "mode": "weight",
                    "low": 0.5,
                    "high": 5.0,
                }
            },
            advantage={"estimator": "group_norm"},
            normalization={"mode": "token-mean"},
        ),
        "IcePop (Ring-1T, 2025): PPO clip 0.2 times M(k) = k 1[0.5 <= k <= 5], "
        "k = pi_old/pi_rollout per token; group-normalized A, token-mean.",
        (
            "Decoupled form (pi_old recomputed); tokens outside [0.5, 5] weigh 0 and stay in Z, as "
            "in verl (rollout_is_threshold '0.5_5.0'), OpenRLHF, AReaL and TRL. The bypass form "
            "(verl's bypass_pg_token_icepop) is REINFORCE: weight.ratio and trust_region none, "
            "old_policy: rollout. KPop is gate metric binary_kl.",
        ),
    ),
    Preset(
        "scalerl",
        blanks_of(
            weight={"ratio": "behavior", "trust_region": "cispo", "eps_low": 1.0, "eps_high": 4.0},
            advantage={
                "estimator": "group_mean_batch_std",
                "batch_std": "centered",
                "std_ddof": 1,
            },
            normalization={"mode": "prompt-mean"},
            data={"zero_variance_filter": True, "prompt_pool": 256, "retire_pass_rate": 0.9},
        ),
        "ScaleRL (Khatri et al. 2025): CISPO on rho = pi/pi_rollout capped at 5, prompt-mean loss, "
        "batch-std advantages, zero-variance filtering, no-positive-resampling (pass rate 0.9).",
        (
            "The ratio is against the generator's log-probs (PipelineRL computes no pi_old), cap "
            "eps_max = 5 as TRL's and SkyRL's ScaleRL recipes.",
            "Advantages (R - mean_g) / std_batch of the group-centred values, ddof 1 (AReaL's "
            "form; the paper's Bessel correction is not stated: ddof 0 scales A by "
            "sqrt(N/(N-1))).",
            "Zero-variance groups leave the batch without resampling; a prompt whose pass rate "
            "reaches 0.9 is never sampled again; prompts come from a pool of 256 "
            "(data.prompt_pool: a dataset visited in epochs, where retiring matters).",
            "Synchronous here: ScaleRL's PipelineRL-8 asynchrony (data.concurrent) draws its own "
            "prompts, so it cannot retire them from a pool.",
        ),
    ),
)
