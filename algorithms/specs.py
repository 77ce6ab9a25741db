"""The specs of five blanks (mask, weight, advantage, normalization, regularizer) and the base of
every spec: pure data (no torch, no I/O), every field defaulted, unknown fields refused so that a
typo in an override never falls back to a default silently. The data blank's specs are in
:mod:`.data_specs`; the six together in :class:`~.blanks.Blanks`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class MaskSpec(Spec):
    """m: which tokens are trained actions.

    Prompt, padding and observation tokens are always masked (that is the
    trajectory contract, not a choice). The choices are extra masks.
    """

    overlong_filter: bool = Field(
        False,
        description="DAPO overlong filtering: m = 0 on every token of a truncated (no-EOS) sample.",
    )


class GateSpec(Spec):
    """A gate between pi_old (recomputed by the trainer; pi_theta in the bypass form) and the
    behaviour policy that sampled, with k = pi_old/pi_behaviour per token: a mask (tokens or
    sequences outside the band leave the gradient and Z, discard reason 'masking'), a clamp (the
    IS weight clamped into the band) or a weight (IcePop/KPop: k on the tokens kept, 0 outside,
    every token staying in Z)."""

    level: Literal["token", "sequence", "sequence_sum"] = Field(
        "token",
        description="token: per token; sequence: on the sequence's geometric-mean ratio (or mean "
        "KL); sequence_sum: on the product of its token ratios (the sum of log k, as verl's "
        "seq_sum_k1; ratio metric only).",
    )
    metric: Literal["ratio", "kl", "binary_kl"] = Field(
        "ratio",
        description="ratio: k in [low, high]; kl: the k3 KL (k - 1 - log k) <= high; binary_kl "
        "(KPop): max of the two binary KLs between the token's probabilities under pi_old and "
        "pi_behaviour <= high.",
    )
    mode: Literal["mask", "clamp", "weight"] = Field(
        "mask",
        description="mask: drop what is outside (it leaves Z); clamp: weight by the ratio clamped "
        "into [low, high]; weight: weight each kept token by its k, 0 outside, all in Z (IcePop).",
    )
    low: float = Field(0.5, ge=0, description="Lower bound of the ratio (ignored for the KLs).")
    high: float = Field(2.0, gt=0, description="Upper bound of the ratio, or of the KL.")


class ClipScaleSpec(Spec):
    """Clip bounds on the ratio's own scale: eps_low = low * sigma and eps_high = high * sigma,
    where sigma is the spread (standard deviation over sequences) of the sequence log-ratio
    log s_i = mean_t log(pi/pi_old) measured once per run, on the first minibatch after an
    optimizer step at the full learning rate (past any warm-up) that moved the policy (the first
    minibatch of a step has s = 1 exactly and is not clipped, whatever the bounds), and fixed
    from then on. A sequence ratio is a mean of many token log-ratios, so its
    spread is far smaller than a token ratio's and depends on the policy, the learning rate and the
    lengths: bounds copied from a paper's model (GSPO's 3e-4/4e-4 on Qwen3-30B) clip a different
    share elsewhere."""

    low: float = Field(
        2.0, gt=0, description="eps_low as a multiple of the measured sequence log-ratio spread."
    )
    high: float = Field(
        8.0 / 3.0,
        gt=0,
        description="eps_high as a multiple of the spread (default 8/3: GSPO's 4:3 asymmetry).",
    )


class WeightSpec(Spec):
    """w: importance ratio, its level and its trust region."""

    ratio: Literal["none", "token", "sequence", "gspo_token", "behavior"] = Field(
        "token",
        description=(
            "none: w = 1 (pure on-policy REINFORCE, no ratio); token: r_t = pi/pi_old per token; "
            "sequence: GSPO s_i = exp(mean_t log r_t) (geometric mean); gspo_token: the "
            "stop-gradient token form of GSPO; behavior: rho_t = pi/pi_rollout (SAO's DIS, "
            "no pi_old)."
        ),
    )
    trust_region: Literal["none", "clip", "sapo", "dis", "cispo", "dppo_tv", "dppo_kl"] = Field(
        "clip",
        description="clip: PPO min(rA, clip(r)A); sapo: soft gate (4/tau) sigmoid(tau(r-1)); dis: "
        "SAO's band 1-eps_low < rho < 1+eps_high (strict), tokens outside it masked; cispo: "
        "-sg(clip(r, 1-eps_low, 1+eps_high)) A log pi (every token keeps a gradient); dppo_tv / "
        "dppo_kl: -A sg(min(r, ratio_cap)) M log pi with DPPO's binary total-variation / KL mask "
        "M keyed to the sign of A (thresholds eps_low, eps_high); none: rA.",
    )
    eps_low: float = Field(
        0.2, gt=0, description="Lower clip range: r >= 1 - eps_low (DPPO: the threshold delta_low)."
    )
    eps_high: float = Field(
        0.2,
        gt=0,
        description="Upper clip range: r <= 1 + eps_high (clip-higher when > eps_low; DPPO: the "
        "threshold delta_high).",
    )
    dual_clip_c: float | None = Field(
        None,
        gt=1,
        description="Dual clip (Ye et al. 2020): for A < 0 the loss is capped at -c*A. None: off.",
    )
    tau_pos: float = Field(1.0, gt=0, description="SAPO temperature for A > 0.")
    tau_neg: float = Field(
        1.05, gt=0, description="SAPO temperature for A <= 0 (A = 0 takes tau_neg)."
    )
    tis_cap: float | None = Field(
        None,
        gt=0,
        description=(
            "Truncated importance sampling: multiply by min(pi_old/pi_behavior, C), detached. "
            "None: off."
        ),
    )
    tis_form: Literal["token", "sequence", "token_mask", "sequence_mask"] = Field(
        "token",
        description="How tis_cap acts: token: weight min(ratio_t, C); sequence: weight "
        "min(prod_t ratio_t, C) per sequence (summed log-differences, as TRL); token_mask / "
        "sequence_mask: drop the tokens (sequences) whose ratio exceeds C instead (discard reason "
        "'masking').",
    )
    ratio_cap: float | None = Field(
        None,
        gt=0,
        description="DPPO: C in -A sg(min(r, C)) M log pi, the truncation of the detached ratio "
        "(the authors' code: 10; verl: clip_ratio_c, 3 by default); None: no truncation.",
    )
    old_policy: Literal["recomputed", "rollout"] = Field(
        "recomputed",
        description="recomputed: pi_old is the trainer's forward of the pre-update weights, and "
        "the corrections (tis_cap, gate) weigh pi_old/pi_rollout once per batch (decoupled, three "
        "policies); rollout: the bypass form, pi_old := the rollout engine's log-probs (no "
        "recomputation), the ratio is pi/pi_rollout and the corrections use pi_theta/pi_rollout "
        "recomputed in each micro-batch, zeroing tokens without removing them from Z.",
    )
    gate: GateSpec | None = Field(
        None,
        description="A ratio/KL gate between the trainer's pi_old and the rollout engine's "
        "behaviour policy (IcePop-style); None: off.",
    )
    log_ratio_clamp: float = Field(
        20.0, gt=0, description="Clamp on log r before exp (verl: 20; GSPO: 10)."
    )
    clip_scale: ClipScaleSpec | None = Field(
        None,
        description="Sequence-level clip bounds as multiples of the measured spread of the "
        "sequence log-ratio (measured once, after the run's first optimizer step at the full "
        "learning rate that moved the policy, then fixed); eps_low/eps_high apply until it is "
        "measured. None: eps_low/eps_high as given (absolute).",
    )
    sequence: Literal["trajectory", "turn"] = Field(
        "trajectory",
        description="What a sequence ratio averages over in a multi-turn episode: trajectory (all "
        "of the episode's action tokens, one ratio per episode) or turn (each turn's own tokens: "
        "one ratio, and one mean advantage, per turn). Single-turn data: the same.",
    )
    target_kl: float | None = Field(
        None,
        gt=0,
        description=(
            "Stop the update epochs once approx_kl > 1.5 target_kl (per minibatch, before the "
            "step)."
        ),
    )


class CriticSpec(Spec):
    """The value model of the 'gae' estimator (a second model, paid for in the same budget)."""

    trunk: Literal["separate", "shared", "frozen_attention"] = Field(
        "separate",
        description="separate: a value head on a copy of the policy architecture; shared: on the "
        "policy's trunk; frozen_attention: a copy whose attention, embeddings and norms are frozen "
        "and whose MLP projections train (SAO's frozen attention with trainable MoE projections, "
        "stood in for by the dense MLPs of a small model).",
    )
    granularity: Literal["token", "turn", "sequence"] = Field(
        "token",
        description=(
            "Where values are predicted: every action token, the first token of each turn, or once "
            "per sequence."
        ),
    )
    bootstrap_truncated: bool = Field(
        True, description="At a time-limit truncation, bootstrap with V(next state) instead of 0."
    )
    whiten: Literal["batch", "group", "none"] = Field(
        "batch", description="Population over which advantages are whitened."
    )
    value_clip: float | None = Field(
        0.2, gt=0, description="eps_v: clip V around V_old in the value loss; None: off."
    )
    vf_coef: float = Field(
        0.1, gt=0, description="Weight of the value loss (shared trunk: in the joint loss)."
    )
    lr: float | None = Field(
        None, gt=0, description="Critic learning rate (separate trunk); None: the policy's."
    )
    updates_per_step: int = Field(
        1, ge=1, description="Critic optimizer steps per policy step (SAO: 2)."
    )
    policy_lambda_alpha: float | None = Field(
        None,
        gt=0,
        description="SAO: the policy's advantages use a per-sample lambda = 1 - 1/(alpha l), l the "
        "sample's response length in action tokens, while the critic's returns keep advantage.lam; "
        "None: one lambda for both.",
    )
    targets: Literal["gae", "vtrace"] = Field(
        "gae",
        description="gae: GAE(lambda) advantages and returns; vtrace: V-trace targets and policy "
        "advantages (Espeholt et al. 2018) with rho = pi_old/pi_behaviour clipped at rho_bar, "
        "c_bar, rho_bar_pg, for data sampled by a lagged or asynchronous behaviour policy.",
    )
    rho_bar: float = Field(1.0, gt=0, description="V-trace: clip of rho in the TD errors.")
    c_bar: float = Field(1.0, gt=0, description="V-trace: clip of the traces c (<= rho_bar).")
    rho_bar_pg: float = Field(
        1.0, gt=0, description="V-trace: clip of rho in the policy advantage."
    )


class PrmSpec(Spec):
    """The explicit process reward model of the 'prm' estimator: a step scorer
    whose score of each step (in [0, 1]) becomes process supervision. A trained scorer is a second
    model, paid for in the same budget (its device time is labelled 'prm')."""

    scorer: str = Field(
        "trained",
        description="trained: a head trained online on the environment's step labels (BCE; each "
        "batch is scored before the scorer trains on it, so its calibration is measured on unseen "
        "steps); 'module:function': a user-supplied scorer f(observations, actions) -> one score "
        "in [0, 1] per action, each call counted as one judge call.",
    )
    trunk: Literal["separate", "shared"] = Field(
        "separate",
        description="trained scorer: separate: a head on its own copy of the policy's trunk (from "
        "the warm start), trained whole; shared: a head on the policy's own hidden states "
        "(detached: the PRM's loss does not move the policy).",
    )
    mode: Literal["sum", "min", "advantage"] = Field(
        "advantage",
        description="How step scores s_k enter A. sum: R' = sum_k s_k (+ R), group-normalized; "
        "every extra step adds a score, so longer episodes total more (step-count hacking). min: "
        "R' = min_k s_k (+ R), group-normalized; an extra step can only lower it. advantage "
        "(DeepSeekMath process supervision): s_k normalized over the task group's steps, and turn "
        "k's tokens get the sum of the normalized scores of steps k.. (+ the group-normalized R); "
        "an early step of a long episode sums more terms.",
    )
    outcome: bool = Field(
        True, description="Keep the outcome reward R next to the process rewards."
    )
    lr: float | None = Field(
        None, gt=0, description="Trained scorer's learning rate; None: the policy's."
    )
    calibration_bins: int = Field(
        5, ge=2, le=20, description="Bins of the reliability plot (per step position)."
    )


class PrimeSpec(Spec):
    """PRIME's implicit PRM (Cui et al. 2025): a second causal LM pi_phi (a copy of
    the warm start) trained online on outcome labels with BCE(sigma(beta sum_t log pi_phi/pi_ref),
    r_o); its token rewards beta log(pi_phi/pi_ref) feed the 'prime' estimator. Its forward and
    backward passes are charged in the same budget (device time labelled 'prime')."""

    beta: float = Field(0.05, gt=0, description="beta of the implicit reward (PRIME: 0.05).")
    lr: float | None = Field(
        None,
        gt=0,
        description="Implicit PRM learning rate; None: the policy's (PRIME: 1e-6 at 7B).",
    )
    update: Literal["before", "after"] = Field(
        "before",
        description="Train the PRM on a batch before its process rewards are computed (PRIME's "
        "default) or after (the rewards come from the PRM that has not seen the batch).",
    )
    probes: int = Field(
        4,
        ge=0,
        description="Intervention test per step: up to this many correct episodes get one step "
        "corrupted, and the process reward at that step must drop (0: off).",
    )


class AdvantageSpec(Spec):
    """A: credit estimator, baseline, scaling and credit unit."""

    estimator: Literal[
        "unit",
        "return",
        "batch_mean",
        "loo",
        "group_norm",
        "group_mean",
        "group_mean_batch_std",
        "reinforce_pp",
        "reinforce_pp_baseline",
        "remax",
        "turn_return",
        "gigpo",
        "hierarchical",
        "prm",
        "prime",
        "gae",
    ] = Field(
        "group_norm",
        description=(
            "unit: A = 1 (SFT); return: A = R (no baseline); batch_mean: R - mean (per group when "
            "groups exist); loo: leave-one-out (RLOO); group_norm: (R - mean_g)/(std_g + eps) "
            "(GRPO); group_mean: R - mean_g (Dr. GRPO); group_mean_batch_std: "
            "(R - mean_g)/(std_batch + eps) (Lite PPO; advantage.batch_std picks the std); "
            "reinforce_pp: token returns whitened over the batch; reinforce_pp_baseline: "
            "R - mean_g then batch whitening; remax: R - R(greedy); turn_return: reward-to-go from "
            "each turn with gamma; gigpo: episode groups plus step groups of identical environment "
            "states (GiGPO); hierarchical: outcome credit for high-level (plan) turns and subgoal "
            "credit for low-level (execute) turns, each against its own group baseline; prm: an "
            "explicit process reward model's step scores (advantage.prm); prime: PRIME's implicit "
            "process rewards with leave-one-out baselines (advantage.prime); gae: critic + GAE."
        ),
    )
    std_ddof: Literal[0, 1] = Field(1, description="ddof of the group std (verl, TRL: 1).")
    std_eps: float = Field(
        1e-6, ge=0, description="Added to the std: (R - mean)/(std + eps). verl 1e-6, TRL 1e-4."
    )
    batch_std: Literal["rewards", "centered"] = Field(
        "rewards",
        description="group_mean_batch_std: the batch std of the raw rewards about the batch mean "
        "(rewards: ROLL's Lite PPO, TRL scale_rewards='batch') or of the group-centred rewards "
        "(centered: AReaL's group/batch norm, ScaleRL).",
    )
    singleton: Literal["zero", "raw"] = Field(
        "zero",
        description=(
            "Rule for a group of one sample: zero: A = 0 (no signal); raw: A = R (verl grpo)."
        ),
    )
    whiten_eps: float = Field(
        1e-8, gt=0, description="Batch whitening: (A - mu)/sqrt(var + eps), ddof 0."
    )
    gamma: float = Field(1.0, ge=0, le=1, description="Discount for token/turn returns.")
    turn_baseline: Literal["none", "group"] = Field(
        "group",
        description=(
            "turn_return: subtract the group's mean return at the same turn index (or none)."
        ),
    )
    lam: float = Field(1.0, ge=0, le=1, description="GAE lambda.")
    gigpo_omega: float = Field(
        1.0, ge=0, description="gigpo: weight omega of the step-level advantage A^S."
    )
    gigpo_norm: Literal["mean_norm", "mean_std_norm"] = Field(
        "mean_norm",
        description="gigpo: F_norm = 1 (mean_norm, the verl-agent function default) or the group's "
        "std (ddof 1) + 1e-6 (mean_std_norm), for both A^E and A^S.",
    )
    hierarchical_norm: Literal["mean_norm", "mean_std_norm"] = Field(
        "mean_norm",
        description="hierarchical: F = 1 (mean_norm) or the pool's std (ddof 1) + 1e-6 "
        "(mean_std_norm) in A = (x - mean)/F, at both levels (pools: the task group's high-level "
        "turns; its low-level turns at one subgoal index).",
    )
    critic: CriticSpec = CriticSpec()
    prm: PrmSpec = PrmSpec()
    prime: PrimeSpec = PrimeSpec()


class NormalizationSpec(Spec):
    """Z: the loss denominator, always over the whole optimizer-step batch."""

    mode: Literal[
        "token-mean",
        "seq-mean-token-mean",
        "seq-mean-token-sum",
        "constant",
        "token-sum",
        "prompt-mean",
        "task-mean",
        "turn-mean",
    ] = Field(
        "token-mean",
        description=(
            "token-mean: sum(m l)/sum(m); seq-mean-token-mean: (1/B) sum_i sum_t m l / T_i; "
            "seq-mean-token-sum: (1/B) sum_i sum_t m l; constant: sum(m l)/(B * L_max) (Dr. GRPO); "
            "token-sum: sum(m l) (verl); prompt-mean: a token-mean inside each prompt's group, "
            "then the mean over prompts (ScaleRL); task-mean: the mean over prompts of the mean of "
            "their sequences' token-means; turn-mean: each environment turn weighs alike. "
            "Underscores may replace the hyphens (token_sum)."
        ),
    )
    l_max: int | None = Field(
        None,
        gt=0,
        description=(
            "L_max for mode constant; None: the rollout's max_new_tokens (the generation budget)."
        ),
    )
    count_empty_rows: bool = Field(
        False,
        description="Whether all-masked rows count in B (TRL: yes; verl: yes on its engine path, "
        "no in its single-process fallback), and groups with no "
        "action token in P (prompt-mean, task-mean).",
    )

    @field_validator("mode", mode="before")
    @classmethod
    def _hyphens(cls, v: object) -> object:
        return v.replace("_", "-") if isinstance(v, str) else v


class RegularizerSpec(Spec):
    """R: what is added to the objective (KL in the reward belongs to A, but is declared here)."""

    reward_kl_coef: float = Field(
        0.0, ge=0, description="beta of KL to the reference placed in the reward."
    )
    reward_kl_estimator: Literal["k1", "k2", "k3", "k3+"] = Field(
        "k1",
        description="Only k1 gives the reverse-KL gradient in the reward (k3+ is k3 there: no "
        "gradient flows through a reward).",
    )
    loss_kl_coef: float = Field(
        0.0, ge=0, description="beta of KL to the reference added to the loss."
    )
    loss_kl_estimator: Literal["k1", "k2", "k3", "k3+"] = Field(
        "k3",
        description="k2: reverse KL gradient; k3: forward KL gradient; k3+: straight-through, k3's "
        "value with k2's gradient (verl's 'low_var_kl+').",
    )
    entropy_coef: float = Field(0.0, ge=0, description="alpha of the entropy bonus -alpha*H.")
    dpo_beta: float = Field(0.1, gt=0, description="DPO beta (objective dpo only).")
    dpo_label_smoothing: float = Field(
        0.0, ge=0, lt=0.5, description="DPO label smoothing (objective dpo only)."
    )
