"""Named algorithms as presets of the six blanks.

Each preset states which variant it implements where frameworks disagree: std epsilon, aggregation, dual clip, KL
placement, GSPO sequence vs token form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .blanks import Blanks, deep_merge, flatten
from .errors import UnknownNameError  # lives in .errors; importable from here as before


@dataclass(frozen=True)
class Preset:
    name: str
    blanks: Blanks
    summary: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    """Which variant this preset implements, and why (one line per choice)."""


def _b(**parts: dict[str, Any]) -> Blanks:
    return Blanks.model_validate(parts)


_PG_SEQ_MEAN = {"mode": "seq-mean-token-mean"}


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
    return _b(
        weight=weight,
        advantage={"estimator": "group_norm"},
        normalization=_PG_SEQ_MEAN,
        data={"minibatches": 4},
    )


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

PRESETS: dict[str, Preset] = {}


def register(preset: Preset) -> Preset:
    if preset.name in PRESETS:
        raise ValueError(f"preset '{preset.name}' is already registered")
    PRESETS[preset.name] = preset
    return preset


for _p in [
    Preset(
        "sft",
        _b(
            objective="sft",
            weight={"ratio": "none", "trust_region": "none"},
            advantage={"estimator": "unit"},
            normalization={"mode": "token-mean"},
            data={"source": "demonstrations"},
        ),
        "Supervised fine-tuning: NLL on demonstrated action tokens (w = 1, A = 1, Z = sum m).",
        ("Global token-mean over the optimizer-step batch, not a mean of micro-batch means.",),
    ),
    Preset(
        "reinforce",
        _b(weight={"ratio": "none", "trust_region": "none"}, advantage={"estimator": "return"}),
        "On-policy REINFORCE: A = R, no baseline, w = 1.",
        ("Z token-mean (verl's default), so it shares Z with most presets.",),
    ),
    Preset(
        "reinforce_baseline",
        _b(weight={"ratio": "none", "trust_region": "none"}, advantage={"estimator": "batch_mean"}),
        "REINFORCE with a mean baseline: A = R - mean R (per prompt group when groups exist).",
        (
            "The mean includes the sample itself, which shrinks the gradient by (N-1)/N; see reinforce_loo.",
        ),
    ),
    Preset(
        "reinforce_loo",
        _b(weight={"ratio": "none", "trust_region": "none"}, advantage={"estimator": "loo"}),
        "REINFORCE with a leave-one-out baseline, on-policy, w = 1.",
        ("Singleton group: A = 0 (no other sample to compare with).",),
    ),
    Preset(
        "rloo",
        _b(
            advantage={"estimator": "loo"},
            regularizer={"reward_kl_coef": 0.05, "reward_kl_estimator": "k1"},
        ),
        "RLOO (Ahmadian et al. 2024): leave-one-out baseline, k1 KL to the reference in the sequence reward.",
        (
            "KL beta 0.05 (TRL RLOOConfig; the paper used 0.03).",
            "Token ratio with PPO clip 0.2 and token-mean Z (verl form), not TRL's clipped sequence-product ratio.",
            "Singleton group: A = 0 (verl rloo_vectorized).",
        ),
    ),
    Preset(
        "reinforce_pp",
        _b(
            advantage={"estimator": "reinforce_pp", "gamma": 1.0},
            regularizer={"reward_kl_coef": 0.01, "reward_kl_estimator": "k1"},
        ),
        "REINFORCE++ (Hu et al. 2025): token returns with k1 KL in the reward, whitened over all valid tokens of the batch.",
        (
            "Whitening ddof 0 with (var + 1e-8)^-1/2 (OpenRLHF), PPO clip 0.2, token-mean Z.",
            "KL coefficient 0.01 (OpenRLHF default).",
        ),
    ),
    Preset(
        "reinforce_pp_baseline",
        _b(
            advantage={"estimator": "reinforce_pp_baseline"},
            regularizer={"loss_kl_coef": 1e-5, "loss_kl_estimator": "k2"},
        ),
        "REINFORCE++-baseline: A' = R - mean_group R (no std), broadcast, then whitened over the batch; k2 KL in the loss.",
        ("k2 loss coefficient 1e-5 (OpenRLHF example); no KL in the reward.",),
    ),
    Preset(
        "remax",
        _b(
            weight={"ratio": "none", "trust_region": "none"},
            advantage={"estimator": "remax"},
            data={"group_size": 1},
        ),
        "ReMax (Li et al. 2023): A = R(sample) - R(greedy decode of the current policy), one sample per prompt.",
        (
            "The greedy rollout shares the environment seed, prompt format, length limit and verifier of the sample, "
            "and its tokens and verifier call are charged to the budget.",
        ),
    ),
    Preset(
        "grpo",
        _b(
            advantage={"estimator": "group_norm", "std_ddof": 1, "std_eps": 1e-6},
            normalization=_PG_SEQ_MEAN,
            regularizer={"loss_kl_coef": 0.04, "loss_kl_estimator": "k3"},
        ),
        "GRPO, DeepSeekMath form: group mean/std advantage, PPO clip 0.2, k3 KL in the loss (beta 0.04), seq-mean-token-mean.",
        (
            "seq-mean-token-mean as in the paper (verl defaults to token-mean, TRL to 'dapo').",
            "std ddof 1, (std + 1e-6) (verl); group statistics in float64; equal-reward groups get A = 0 exactly.",
            "No dual clip (the paper has none; verl turns it on with c = 3).",
            "Singleton group: A = 0 (no signal), unlike verl's A = R.",
        ),
    ),
    Preset(
        "dr_grpo",
        _b(
            advantage={"estimator": "group_mean"},
            normalization={"mode": "constant"},
        ),
        "Dr. GRPO (Liu et al. 2025): A = R - mean_group (no std), Z = B * L_max (constant), no KL.",
        (
            "Both changes of the paper: A without std AND a constant denominator (OpenRLHF/AReaL change only A).",
        ),
    ),
    Preset(
        "dapo",
        _b(
            weight={"eps_low": 0.2, "eps_high": 0.28},
            advantage={"estimator": "group_norm"},
            normalization={"mode": "token-mean"},
            data={
                "dynamic_sampling": True,
                "max_sampling_rounds": 10,
                "overlong_shaping": {"enabled": True, "cache": 4, "factor": 1.0},
            },
        ),
        "DAPO (Yu et al. 2025): clip-higher 0.2/0.28, dynamic sampling (std > 0) with an attempt census, token-mean, soft overlong penalty, no KL.",
        (
            "Overlong shaping with L_cache 4 tokens (scaled down from 4096 for short tiny-model answers); overlong filtering off, as in most paper runs.",
            "At the round cap it trains on the short batch and records it (verl's recipe raises instead: set data.on_round_cap: error).",
        ),
    ),
    Preset(
        "gspo",
        _gspo("sequence", scaled=True),
        "GSPO (Zheng et al. 2025): sequence ratio s_i = exp(mean_t log r), clip bounds 2 and 8/3 "
        "times the measured spread of log s_i (the paper's 4:3 asymmetry), 4 minibatches per "
        "rollout batch, no KL.",
        (
            "Sequence form, aggregated per sequence (TRL 'sequence'), not verl's token-mean GSPO-token.",
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
    Preset(
        "sapo",
        _b(
            weight={"trust_region": "sapo", "tau_pos": 1.0, "tau_neg": 1.05},
            advantage={"estimator": "group_norm"},
            normalization=_PG_SEQ_MEAN,
        ),
        "SAPO (Gao et al. 2025): soft gate f(r) = (4/tau) sigmoid(tau (r-1)), tau 1.0/1.05, seq-mean-token-mean.",
        (
            "Gradient weight 4p(1-p) r equals 1 at r = 1 for any tau; compare with PPO by gradients, not loss values.",
        ),
    ),
    Preset(
        "ppo",
        _b(**_PPO),
        "Classic RLHF PPO: separate token-level critic, GAE (gamma 1, lambda 0.95), clip 0.2, k1 KL in the reward (0.05), 4 epochs.",
        (
            "TRL PPOTrainer's defaults: lambda 0.95, value clip 0.2 relative to the old value, vf_coef 0.1, KL 0.05 in the reward.",
            "Advantages whitened over the batch's valid tokens; returns are not whitened.",
            "Symmetric clip, no dual clip, no target-KL stop (as in verl, TRL and OpenRLHF).",
            "Token-mean Z over the whole optimizer-step batch; the critic is a second model, charged to device-seconds.",
        ),
    ),
    Preset(
        "ppo_turn",
        _b(**deep_merge(_PPO, {"advantage": {"critic": {"granularity": "turn"}}})),
        "PPO with a turn-level critic for multi-turn tasks: one value per turn, skip-observation GAE across turns.",
        (
            "Values predicted at the first action token of each turn and held for the turn; observation tokens skipped.",
            "Turn rewards sit on each turn's last action token; gamma counts action tokens (1.0 here, so it is moot).",
            "Time-limit truncation bootstraps with V of the next state.",
        ),
    ),
    Preset(
        "turn_grpo",
        _b(advantage={"estimator": "turn_return", "gamma": 1.0, "turn_baseline": "group"}),
        "Turn-level credit for multi-turn tasks: each turn's reward-to-go minus the "
        "group's mean reward-to-go at the same turn index, on that turn's action tokens.",
        (
            "No canonical paper: gamma 1.0 per environment step, group-mean baseline per turn index, "
            "no std scaling; ratio and clip as grpo, but token-mean Z and no KL in the loss.",
            "KL in the reward (when set) is taken from each turn's reward, token by token.",
            "Per-turn-index groups shrink at late turns: a turn reached by one sample only gets A = 0.",
        ),
    ),
    Preset(
        "gigpo",
        _b(
            advantage={
                "estimator": "gigpo",
                "gamma": 0.95,
                "gigpo_omega": 1.0,
                "gigpo_norm": "mean_norm",
            },
            regularizer={"loss_kl_coef": 0.01, "loss_kl_estimator": "k3"},
        ),
        "GiGPO (Feng et al. 2025): episode-level group advantage plus omega x a step-level one "
        "within anchor groups (steps of the task's group in the same environment state), "
        "discounted per step.",
        (
            "gamma 0.95, omega 1, mean_norm (F = 1): verl-agent's ALFWorld script and function "
            "default; k3 KL in the loss, 0.01.",
            "Anchor states are the environment's state keys (guess_number: the interval still open "
            "and the guesses left); a task without them falls back to the observation history, "
            "which rarely recurs. gigpo.anchor_frac reports the steps that found a group of two.",
            "A singleton anchor group gives A^S = 0.",
        ),
    ),
    Preset(
        "hier_grpo",
        _b(advantage={"estimator": "hierarchical", "hierarchical_norm": "mean_std_norm"}),
        "Hierarchical credit for two-level tasks (one baseline per level): "
        "high-level (plan) turns get the outcome R group-normalized over the task group's "
        "high-level turns; low-level (execute) turns get their subgoal reward (the environment's "
        "step label) group-normalized over the group's low-level turns at the same subgoal index.",
        (
            "No canonical paper: levels come from the environment (info level: 0 plan, 1 "
            "execute); a turn without a level gets the outcome advantage against the group's other "
            "such turns (a single-turn task: exactly grpo's advantage); ratio, clip and Z as "
            "turn_grpo.",
            "Each level's advantage is (x - mean)/(std + 1e-6) in its own pool (std ddof 1, as "
            "GRPO); a pool of one turn, or of equal values, gives A = 0.",
            "KL in the reward (when set) is taken from each turn's own reward, outcome or subgoal.",
        ),
    ),
    Preset(
        "prm_grpo",
        _b(
            advantage={"estimator": "prm", "prm": {"mode": "advantage", "outcome": True}},
            normalization=_PG_SEQ_MEAN,  # every other blank as grpo
            regularizer={"loss_kl_coef": 0.04, "loss_kl_estimator": "k3"},
        ),
        "GRPO with an explicit process reward model: a step scorer trained online "
        "on the environment's step labels; its normalized step scores, summed from each step on, "
        "join the group-normalized outcome (DeepSeekMath process supervision).",
        (
            "The scorer is a head on a copy of the policy's trunk (advantage.prm.trunk), trained "
            "with BCE on each batch's labelled steps after scoring it; its device time is charged "
            "in the same budget (credit_seconds).",
            "advantage.prm.mode picks sum, min or advantage; advantage.prm.outcome keeps R. Raw "
            "scores summed as rewards pay for more steps (step-count hacking); min cannot.",
            "Every other blank as grpo (seq-mean-token-mean, k3 KL 0.04 in the loss, clip 0.2). A "
            "scorer no better than chance (prm.auc near 0.5) adds noise that outweighs a rare "
            "outcome: compare against grpo at the same budget.",
            "The report's reliability plot shows the scorer's calibration per step position.",
        ),
    ),
    Preset(
        "prime",
        _b(
            advantage={"estimator": "prime", "prime": {"beta": 0.05, "update": "before"}},
            data={"dynamic_sampling": True, "accuracy_filter": (0.2, 0.8)},
            regularizer={"loss_kl_coef": 0.0},
            normalization={"mode": "token-mean"},
        ),
        "PRIME (Cui et al. 2025): an implicit PRM pi_phi trained online on outcome labels gives "
        "token rewards beta log(pi_phi/pi_ref); process and outcome rewards get leave-one-out "
        "baselines; PPO-clip loss; prompts outside the accuracy band [0.2, 0.8] are filtered.",
        (
            "beta 0.05, KL 0, accuracy filter [0.2, 0.8], PRM updated before its rewards are used "
            "(the PRIME repository's defaults); K is the rollout group size (PRIME: 4).",
            "Exact leave-one-out for the process term (the code's K/(K-1) form differs by "
            "(r - mean_i)/(K-1)), no rm_coef, no final whitening: the paper's formula.",
            "pi_phi starts from the warm start, as the reference; its forward and backward passes "
            "are charged in the same budget (credit_seconds). prime.auc (held out: each batch is "
            "scored before the PRM trains on it) and prime.intervention_drop validate it.",
        ),
    ),
    Preset(
        "branch_grpo",
        _b(
            advantage={"estimator": "turn_return", "gamma": 1.0, "turn_baseline": "group"},
            data={"branching": {"turns": [1], "width": 4, "per_group": 1}},
        ),
        "Branching counterfactuals: turn_grpo, plus M = 4 continuations rolled from the restored "
        "state before turn 1 of one episode per group; each branch point is a group, so the "
        "action there is credited by its continuation return against its siblings'.",
        (
            "No canonical paper (the chapter's branching remedy): the environment is restored from "
            "its snapshot, or replayed from the seed and the actions where it has none (said in "
            "branch.restored_frac, replayed steps charged).",
            "Siblings share the environment's state and randomness; they differ by the policy's "
            "samples. The prefix is context (mask 0); the continuations train with turn_grpo's "
            "per-turn-index group baseline.",
            "Every branch token, environment step and verifier call counts in the ledger: at a "
            "matched launched-token budget the branches take the place of fresh episodes.",
        ),
    ),
    Preset(
        "rft",
        _b(
            objective="sft",
            data={
                "source": "search",
                "search": {"mode": "best_of_n", "n": 8, "select": "best", "min_reward": 1.0},
            },
        ),
        "Expert iteration with rejection-sampling fine-tuning: each step, best-of-8 per prompt with "
        "the current policy, the best passing sample of each prompt distilled by SFT; repeat.",
        (
            "Every sample the search draws is launched and charged (search_tokens and the totals); "
            "the samples not selected are discarded as search_selection, so success filtering "
            "does not hide the selection cost (search.selection_cost: launched per selected token).",
            "Each step is one iteration: expert_iteration.iteration and .improvement (the change in "
            "the share of prompts the search solved) are logged.",
            "data.search.policy: initial distils the frozen initial policy's best-of-N instead.",
        ),
    ),
    Preset(
        "sao",
        _b(
            weight={"ratio": "behavior", "trust_region": "dis", "eps_low": 0.3, "eps_high": 5.0},
            advantage={
                "estimator": "gae",
                "gamma": 1.0,
                "lam": 1.0,
                "critic": {
                    "trunk": "frozen_attention",
                    "granularity": "token",
                    "bootstrap_truncated": True,
                    "whiten": "batch",
                    "value_clip": None,
                    "vf_coef": 0.1,
                    "updates_per_step": 2,
                    "policy_lambda_alpha": 1.5,
                },
            },
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
            "The critic's frozen attention with trainable MoE projections is stood in for by a copy of "
            "the policy whose attention, embeddings and norms are frozen and whose MLPs train.",
            "Synchronous by default (reproducible): one rollout per prompt, consumed by the next "
            "update. As published, each rollout is consumed as soon as it finishes: data.concurrent "
            "{consume: episode} (a collector process keeps every launched rollout in flight and "
            "the trainer updates at a batch's worth of finished ones); with data.lag, "
            "deterministically k versions behind. DIS masks what drifted out of the band.",
        ),
    ),
    Preset(
        "cispo",
        _b(
            weight={"trust_region": "cispo", "eps_low": 1.0, "eps_high": 4.0},
            advantage={"estimator": "group_norm"},
            normalization={"mode": "token-mean"},
            data={"minibatches": 4},
        ),
        "CISPO (MiniMax-M1, 2025): l = -sg(clip(r, 0, 5)) A log pi, every token keeps a gradient; group-normalized A, token-mean, 4 minibatches, no KL.",
        (
            "Cap r <= 5 with no lower bound (eps_low 1, eps_high 4), as SkyRL, AReaL, ART and "
            "ScaleRL (MiniMax-M1 states only an upper cap).",
            "4 minibatches per rollout batch (as gspo here): with one on-policy update r = 1 and "
            "CISPO is REINFORCE with group-normalized advantages.",
        ),
    ),
    Preset(
        "dppo",
        _b(
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
        "DPPO (Rethinking the Trust Region in LLM RL, 2026): binary total-variation mask keyed to the sign of A, anchored on the rollout policy, l = -A sg(min(rho, 10)) M log pi; 4 minibatches.",
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
        _b(
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
        "IcePop (Ring-1T, 2025): PPO clip 0.2 times M(k) = k 1[0.5 <= k <= 5], k = pi_old/pi_rollout per token; group-normalized A, token-mean.",
        (
            "Decoupled form (pi_old recomputed); tokens outside [0.5, 5] weigh 0 and stay in Z, as "
            "in verl (rollout_is_threshold '0.5_5.0'), OpenRLHF, AReaL and TRL. The bypass form "
            "(verl's bypass_pg_token_icepop) is REINFORCE: weight.ratio and trust_region none, "
            "old_policy: rollout. KPop is gate metric binary_kl.",
        ),
    ),
    Preset(
        "lite_ppo",
        _b(
            advantage={
                "estimator": "group_mean_batch_std",
                "batch_std": "rewards",
                "std_ddof": 1,
                "std_eps": 1e-6,
            },
            normalization={"mode": "token-mean"},
        ),
        "Lite PPO (Liu et al. 2025, 'Tricks or Traps'): group-mean baseline with the batch's std, token-level aggregation, PPO clip 0.2, no KL.",
        (
            "Batch std of the raw rewards, ddof 1, eps 1e-6: ROLL (the authors' code) and TRL "
            "scale_rewards='batch' (eps 1e-4). AReaL's group/batch norm takes the std of the "
            "group-centred rewards instead (advantage.batch_std: centered).",
        ),
    ),
    Preset(
        "scalerl",
        _b(
            weight={"ratio": "behavior", "trust_region": "cispo", "eps_low": 1.0, "eps_high": 4.0},
            advantage={
                "estimator": "group_mean_batch_std",
                "batch_std": "centered",
                "std_ddof": 1,
            },
            normalization={"mode": "prompt-mean"},
            data={"zero_variance_filter": True, "prompt_pool": 256, "retire_pass_rate": 0.9},
        ),
        "ScaleRL (Khatri et al. 2025): CISPO on rho = pi/pi_rollout capped at 5, prompt-mean loss, batch-std advantages, zero-variance filtering, no-positive-resampling (pass rate 0.9).",
        (
            "The ratio is against the generator's log-probs (PipelineRL computes no pi_old), cap "
            "eps_max = 5 as TRL's and SkyRL's ScaleRL recipes.",
            "Advantages (R - mean_g) / std_batch of the group-centred values, ddof 1 (AReaL's form; "
            "the paper's Bessel correction is not stated: ddof 0 scales A by sqrt(N/(N-1))).",
            "Zero-variance groups leave the batch without resampling; a prompt whose pass rate "
            "reaches 0.9 is never sampled again; prompts come from a pool of 256 (data.prompt_pool: "
            "a dataset visited in epochs, where retiring matters).",
            "Synchronous here: ScaleRL's PipelineRL-8 asynchrony (data.concurrent) draws its own "
            "prompts, so it cannot retire them from a pool.",
        ),
    ),
    Preset(
        "dpo",
        _b(
            objective="dpo",
            weight={"ratio": "none", "trust_region": "none"},
            advantage={"estimator": "unit"},
            regularizer={"dpo_beta": 0.1},
            data={"source": "preference_pairs"},
        ),
        "DPO (Rafailov et al. 2023), offline on preference pairs built from scored rollouts of the initial policy; beta 0.1.",
        ("Sequence log-prob sums, not means (means would length-normalize).",),
    ),
]:
    register(_p)


def preset_names() -> list[str]:
    return sorted(PRESETS)


def get_preset(name: str) -> Preset:
    """The preset called ``name``; raises :class:`UnknownNameError` listing the valid names."""

    try:
        return PRESETS[name]
    except KeyError:
        raise UnknownNameError("preset", name, list(PRESETS)) from None


def resolve(preset: str, overrides: dict[str, Any] | None = None) -> Blanks:
    """Blanks of ``preset`` with ``overrides`` (nested dict of blank fields) applied and validated."""

    base = get_preset(preset).blanks.model_dump()
    return Blanks.model_validate(deep_merge(base, overrides or {}))


def diff(a: Blanks, b: Blanks) -> dict[str, tuple[Any, Any]]:
    """{dotted.path: (value in a, value in b)} for every blank field that differs."""

    fa, fb = flatten(a), flatten(b)
    return {k: (fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)}
