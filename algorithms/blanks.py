"""The six blanks of the policy-gradient template, as typed specs.

    grad J = 1/Z * sum_{i,t} m * w * A * grad log pi(x_{i,t} | h_{i,t})  -  grad R

A named algorithm is a value of :class:`Blanks`. Every field has a default, so a
preset only states what it changes, and an arm in ``experiments.yaml`` may
override any field by its dotted path (``weight.eps_high``).

These are pure data: no torch, no I/O. Unknown fields are rejected so that a
typo in an override never silently falls back to a default.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class MaskSpec(_Spec):
    """m: which tokens are trained actions.

    Prompt, padding and observation tokens are always masked (that is the
    trajectory contract, not a choice). The choices are extra masks.
    """

    overlong_filter: bool = Field(
        False,
        description="DAPO overlong filtering: m = 0 on every token of a truncated (no-EOS) sample.",
    )


class GateSpec(_Spec):
    """A ratio/KL gate between pi_old (recomputed by the trainer) and the behaviour policy that
    sampled (FORMULAS §20): a mask (tokens or sequences outside the band leave the gradient and Z,
    discard reason 'masking') or a clamp (the IS weight clamped into the band)."""

    level: Literal["token", "sequence"] = Field(
        "token",
        description="token: per token; sequence: on the sequence's geometric-mean ratio or mean KL.",
    )
    metric: Literal["ratio", "kl"] = Field(
        "ratio", description="ratio: pi_old/pi_behavior in [low, high]; kl: k3 KL <= high."
    )
    mode: Literal["mask", "clamp"] = Field(
        "mask",
        description="mask: drop what is outside; clamp: weight by the ratio clamped into [low, high].",
    )
    low: float = Field(0.5, ge=0, description="Lower bound of the ratio (ignored for kl).")
    high: float = Field(2.0, gt=0, description="Upper bound of the ratio, or of the KL.")


class WeightSpec(_Spec):
    """w: importance ratio, its level and its trust region."""

    ratio: Literal["none", "token", "sequence", "gspo_token", "behavior"] = Field(
        "token",
        description=(
            "none: w = 1 (pure on-policy REINFORCE, no ratio); token: r_t = pi/pi_old per token; "
            "sequence: GSPO s_i = exp(mean_t log r_t) (geometric mean); gspo_token: the "
            "stop-gradient token form of GSPO; behavior: rho_t = pi/pi_rollout (SAO's DIS, no pi_old)."
        ),
    )
    trust_region: Literal["none", "clip", "sapo", "dis"] = Field(
        "clip",
        description="clip: PPO min(rA, clip(r)A); sapo: soft gate (4/tau) sigmoid(tau(r-1)); dis: "
        "SAO's band 1-eps_low < rho < 1+eps_high (strict), tokens outside it masked; none: rA.",
    )
    eps_low: float = Field(0.2, gt=0, description="Lower clip range: r >= 1 - eps_low.")
    eps_high: float = Field(
        0.2, gt=0, description="Upper clip range: r <= 1 + eps_high (clip-higher when > eps_low)."
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
        description="Truncated importance sampling: multiply by min(pi_old/pi_behavior, C), detached. None: off.",
    )
    tis_form: Literal["token", "sequence", "token_mask", "sequence_mask"] = Field(
        "token",
        description="How tis_cap acts: token: weight min(ratio_t, C); sequence: weight "
        "min(prod_t ratio_t, C) per sequence (summed log-differences, as TRL); token_mask / "
        "sequence_mask: drop the tokens (sequences) whose ratio exceeds C instead (discard reason "
        "'masking').",
    )
    gate: GateSpec | None = Field(
        None,
        description="A ratio/KL gate between the trainer's pi_old and the rollout engine's "
        "behaviour policy (IcePop-style); None: off.",
    )
    log_ratio_clamp: float = Field(
        20.0, gt=0, description="Clamp on log r before exp (verl: 20; GSPO: 10)."
    )
    target_kl: float | None = Field(
        None,
        gt=0,
        description="Stop the update epochs once approx_kl > 1.5 target_kl (per minibatch, before the step).",
    )


class CriticSpec(_Spec):
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
        description="Where values are predicted: every action token, the first token of each turn, or once per sequence.",
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
        "advantages (Espeholt et al. 2018) with rho = pi_old/pi_behaviour clipped at rho_bar, c_bar, "
        "rho_bar_pg, for data sampled by a lagged or asynchronous behaviour policy.",
    )
    rho_bar: float = Field(1.0, gt=0, description="V-trace: clip of rho in the TD errors.")
    c_bar: float = Field(1.0, gt=0, description="V-trace: clip of the traces c (<= rho_bar).")
    rho_bar_pg: float = Field(
        1.0, gt=0, description="V-trace: clip of rho in the policy advantage."
    )


class PrmSpec(_Spec):
    """The explicit process reward model of the 'prm' estimator (FORMULAS §16): a step scorer
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


class PrimeSpec(_Spec):
    """PRIME's implicit PRM (Cui et al. 2025, FORMULAS §15): a second causal LM pi_phi (a copy of
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


class AdvantageSpec(_Spec):
    """A: credit estimator, baseline, scaling and credit unit."""

    estimator: Literal[
        "unit",
        "return",
        "batch_mean",
        "loo",
        "group_norm",
        "group_mean",
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
            "groups exist); loo: leave-one-out (RLOO); group_norm: (R - mean_g)/(std_g + eps) (GRPO); "
            "group_mean: R - mean_g (Dr. GRPO); reinforce_pp: token returns whitened over the batch; "
            "reinforce_pp_baseline: R - mean_g then batch whitening; remax: R - R(greedy); "
            "turn_return: reward-to-go from each turn with gamma; gigpo: episode groups plus "
            "step groups of identical environment states (GiGPO); hierarchical: outcome credit for "
            "high-level (plan) turns and subgoal credit for low-level (execute) turns, each against "
            "its own group baseline; prm: an explicit process reward "
            "model's step scores (advantage.prm); prime: PRIME's implicit process rewards with "
            "leave-one-out baselines (advantage.prime); gae: critic + GAE."
        ),
    )
    std_ddof: Literal[0, 1] = Field(1, description="ddof of the group std (verl, TRL: 1).")
    std_eps: float = Field(
        1e-6, ge=0, description="Added to the std: (R - mean)/(std + eps). verl 1e-6, TRL 1e-4."
    )
    singleton: Literal["zero", "raw"] = Field(
        "zero",
        description="Rule for a group of one sample: zero: A = 0 (no signal); raw: A = R (verl grpo).",
    )
    whiten_eps: float = Field(
        1e-8, gt=0, description="Batch whitening: (A - mu)/sqrt(var + eps), ddof 0."
    )
    gamma: float = Field(1.0, ge=0, le=1, description="Discount for token/turn returns.")
    turn_baseline: Literal["none", "group"] = Field(
        "group",
        description="turn_return: subtract the group's mean return at the same turn index (or none).",
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


class NormalizationSpec(_Spec):
    """Z: the loss denominator, always over the whole optimizer-step batch."""

    mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "constant"] = Field(
        "token-mean",
        description=(
            "token-mean: sum(m l)/sum(m); seq-mean-token-mean: (1/B) sum_i sum_t m l / T_i; "
            "seq-mean-token-sum: (1/B) sum_i sum_t m l; constant: sum(m l)/(B * L_max) (Dr. GRPO)."
        ),
    )
    l_max: int | None = Field(
        None,
        gt=0,
        description="L_max for mode constant; None: the rollout's max_new_tokens (the generation budget).",
    )
    count_empty_rows: bool = Field(
        False, description="Whether all-masked rows count in B (TRL: yes; verl: no)."
    )


class RegularizerSpec(_Spec):
    """R: what is added to the objective (KL in the reward belongs to A, but is declared here)."""

    reward_kl_coef: float = Field(
        0.0, ge=0, description="beta of KL to the reference placed in the reward."
    )
    reward_kl_estimator: Literal["k1", "k2", "k3"] = Field(
        "k1", description="Only k1 gives the reverse-KL gradient in the reward."
    )
    loss_kl_coef: float = Field(
        0.0, ge=0, description="beta of KL to the reference added to the loss."
    )
    loss_kl_estimator: Literal["k1", "k2", "k3"] = Field(
        "k3", description="k2: reverse KL gradient; k3: forward KL gradient."
    )
    entropy_coef: float = Field(0.0, ge=0, description="alpha of the entropy bonus -alpha*H.")
    dpo_beta: float = Field(0.1, gt=0, description="DPO beta (objective dpo only).")
    dpo_label_smoothing: float = Field(
        0.0, ge=0, lt=0.5, description="DPO label smoothing (objective dpo only)."
    )


class OverlongShaping(_Spec):
    """DAPO soft overlong punishment: 0 up to L_max - L_cache, then linear to -factor at L_max."""

    enabled: bool = Field(False, description="Add the length penalty to R before the advantage.")
    cache: int = Field(4, gt=0, description="L_cache, in tokens.")
    factor: float = Field(1.0, gt=0, description="Penalty at L_max.")


class ReplaySpec(_Spec):
    """A replay buffer of prompt groups (FORMULAS §20's seventh control): each step trains on its
    fresh groups plus ``per_step`` groups drawn from the buffer, each group at most ``reuse`` more
    times; beyond ``capacity`` groups the buffer evicts. Replayed tokens are counted apart
    (``replayed_tokens``), never launched or accepted again."""

    capacity: int = Field(32, ge=1, description="Groups the buffer keeps.")
    reuse: int = Field(1, ge=1, description="Times a group may be replayed after its first use.")
    per_step: int = Field(4, ge=1, description="Groups replayed into each step's batch.")
    eviction: Literal["fifo", "random"] = Field(
        "fifo", description="Which group leaves a full buffer: the oldest, or one at random."
    )


class ConcurrentSpec(_Spec):
    """A concurrent collector (FORMULAS §19): rollouts run beside the trainer in another process
    (or a Ray actor) with an engine of its own, on the weights last broadcast to it, while the
    trainer updates. Up to ``queue`` rounds are launched ahead, each reserved on the budget before
    launch; the trainer consumes them in order as they are ready."""

    queue: int = Field(
        2, ge=1, description="Rounds launched ahead of the trainer (the bounded queue's size)."
    )
    backend: Literal["process", "ray"] = Field(
        "process", description="process: a child process on this machine; ray: a Ray actor."
    )
    restarts: int = Field(
        3, ge=0, description="Times a dead (or stuck) collector is restarted before the run fails."
    )
    round_timeout: float = Field(
        900.0,
        gt=0,
        description="Seconds the trainer waits for a round without any report from the collector "
        "before it counts the collector as stuck and restarts it.",
    )
    keep_spool: bool = Field(
        False,
        description="Keep every round's trajectories in the run directory's spool (for "
        "inspection); by default a round's file is deleted once a checkpoint has counted it.",
    )


class PotentialShaping(_Spec):
    """Potential-based shaping (FORMULAS §16): each turn's reward gains gamma Phi(s') - Phi(s),
    Phi the task's potential of a state (``Env.potential()``), 0 at the end of an episode."""

    enabled: bool = Field(False, description="Add the shaping terms to the turn rewards before A.")
    gamma: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Discount of the shaping terms; None: the learner's (advantage.gamma), which "
        "keeps the optimal policy unchanged.",
    )


class WorldModelSpec(_Spec):
    """A learned world model (issue 19): a causal LM copied from the initial policy, trained on the
    real transitions of each step to predict the environment's next observation, the turn's reward
    and the episode's end. Each step's real transitions are its held-out validation before it trains
    on them. After warmup_steps, each step also rolls imagined episodes in it; their steps are
    counted in imagined_env_steps, never in env_steps."""

    imagined_rounds: int = Field(
        1,
        ge=0,
        description="Imagined rounds per step (each prompts_per_step x G episodes in the learned "
        "model), trained on with the step's real round.",
    )
    warmup_steps: int = Field(
        2, ge=0, description="Steps of real rounds only, before the first imagined round."
    )
    train_steps: int = Field(8, ge=1, description="Optimizer steps of the model per step.")
    batch_size: int = Field(16, ge=1, description="Transitions per optimizer step of the model.")
    lr: float = Field(1e-3, gt=0, description="The model's learning rate.")
    buffer: int = Field(
        2048, ge=1, description="The most recent real transitions kept to train the model on."
    )
    max_obs_tokens: int = Field(
        8, ge=1, description="The longest observation the model generates (it stops at a newline)."
    )


class BranchSpec(_Spec):
    """Branching counterfactuals: at chosen turns, the environment's state is restored (or the
    seed and action prefix replayed) and M continuations are rolled from it; each branch point's
    continuations form a group, so the group baseline at that turn credits the action by its
    continuation return against its siblings. Every branch token and env step is charged."""

    turns: list[int] = Field(
        [1], min_length=1, description="Turn indices to branch at (0 is the first action)."
    )
    width: int = Field(4, ge=2, description="M: continuations rolled from each branch point.")
    per_group: int = Field(
        1, ge=1, description="Episodes of each task group that branch at each of those turns."
    )


class SearchSpec(_Spec):
    """Search as a data source (issue 19): best-of-N, beam or tree search per prompt, then
    selection. Every sample the search draws is charged to the totals and to the search counters
    (search_tokens, search_env_steps, search_verifier_calls); samples not selected are discarded as
    'search_selection', so the cost of selection stays in the ledger. Selection biases what trains:
    the kept samples are not draws from the policy (search.selection_bias is logged)."""

    mode: Literal["best_of_n", "beam", "tree"] = Field(
        "best_of_n",
        description="best_of_n: n independent samples per prompt, scored by the verifier; beam: "
        "over turns, each kept node expanded 'expand' times and the 'beam' best unfinished children "
        "kept (by the guide); tree: best-first, each round expanding the best frontier node "
        "'expand' times, 'expansions' rounds. Beam and tree fork the environment (snapshot, else "
        "replay of seed and actions, counted).",
    )
    n: int = Field(8, ge=1, description="best_of_n: samples per prompt.")
    beam: int = Field(2, ge=1, description="beam: unfinished nodes kept per prompt each turn.")
    expand: int = Field(2, ge=1, description="beam/tree: children of each expanded node.")
    expansions: int = Field(
        8,
        ge=1,
        description="tree: expansion rounds per prompt (one node expanded per round); a prompt "
        "whose search reaches no finished episode contributes nothing.",
    )
    guide: Literal["verifier", "value"] = Field(
        "verifier",
        description="What ranks partial episodes (beam/tree): verifier: the return so far plus the "
        "task's potential of the current state (0 where it has none); value: a value model trained "
        "on the tree's own Monte Carlo node values (the mean reward of the finished leaves under "
        "each node), step after step.",
    )
    value_lr: float = Field(1e-4, gt=0, description="guide value: the value model's learning rate.")
    value_steps: int = Field(
        4, ge=1, description="guide value: optimizer steps on each search's tree labels."
    )
    tree_labels: bool = Field(
        False,
        description="beam/tree: give the selected trajectories the tree's Monte Carlo node values "
        "as step labels (the value of the node each action led to), for a process reward model "
        "(advantage.estimator 'prm') to train on, in place of the environment's step labels.",
    )
    select: Literal["best", "all_passing", "all"] = Field(
        "best",
        description="best: the highest-reward sample of each prompt (the first among ties); "
        "all_passing: every sample at or above min_reward; all: every finished sample (for a "
        "policy gradient that needs the whole group). A token shared by several selected leaves "
        "(a beam or tree prefix) trains once, in the first of them.",
    )
    min_reward: float = Field(
        1.0,
        description="A selected sample must reach this reward (rejection sampling); a prompt whose "
        "samples all fall short contributes nothing. Not used by select 'all'.",
    )
    policy: Literal["current", "initial"] = Field(
        "current",
        description="current: search with the policy being trained (expert iteration: search, "
        "distill, repeat); initial: with the frozen initial policy (distillation of its best-of-N).",
    )

    @model_validator(mode="after")
    def _per_mode(self) -> SearchSpec:
        if self.mode == "best_of_n" and (self.guide != "verifier" or self.tree_labels):
            raise ValueError(
                "data.search.guide / tree_labels: a guide and tree labels need a tree "
                "(mode 'beam' or 'tree'); best_of_n samples independently"
            )
        return self


class SelfPlaySpec(_Spec):
    """Self-play (issue 19): the policy plays a two-player game task (``nim``) against a pool of
    its past checkpoints, the initial policy first. Each task group's games are against one member
    drawn from the pool; the opponents' generated tokens are charged to ``opponent_tokens`` (never
    trained on). Progress is measured apart, against the task's fixed external opponents."""

    pool_size: int = Field(
        4, ge=1, description="Most past checkpoints kept; the oldest leaves when a new one comes."
    )
    snapshot_every: int = Field(
        1, ge=1, description="Steps between adding the current policy to the pool."
    )
    opponents: Literal["uniform", "latest"] = Field(
        "uniform",
        description="uniform: each group's opponent drawn uniformly from the pool; latest: the "
        "newest checkpoint.",
    )
    opponent_temperature: float | None = Field(
        None,
        ge=0,
        description="Sampling temperature of the checkpoint opponents (0: greedy); None: the "
        "rollout's. Their randomness is seeded by the game's position, so replays agree.",
    )


class DataSpec(_Spec):
    """(i): which samples, how many per prompt, how often reused."""

    source: Literal["rollouts", "demonstrations", "preference_pairs", "search"] = Field(
        "rollouts",
        description="rollouts: online; demonstrations: SFT; preference_pairs: DPO pairs from scored rollouts of the initial policy; search: the trajectories a search selects (data.search), distilled by SFT (objective sft) or trained by the policy gradient (objective pg: the samples carry the behaviour log-probs of the distribution actually sampled; the selection biases them).",
    )
    group_size: int | None = Field(
        None, ge=1, description="G samples per prompt; None: the rollout section's group_size."
    )
    dynamic_sampling: bool = Field(
        False, description="DAPO: drop groups whose rewards are all equal and resample."
    )
    max_sampling_rounds: int = Field(
        10, ge=1, description="Cap on generation rounds per step with dynamic sampling."
    )
    on_round_cap: Literal["error", "train_short"] = Field(
        "train_short",
        description="At the cap: error (verl recipe) or train on the short batch (recorded).",
    )
    epochs: int = Field(1, ge=1, description="Passes over each rollout batch.")
    minibatches: int = Field(1, ge=1, description="Optimizer steps per epoch.")
    overlong_shaping: OverlongShaping = Field(
        OverlongShaping(), description="DAPO length penalty added to R before A."
    )
    potential_shaping: PotentialShaping = Field(
        PotentialShaping(), description="gamma Phi(s') - Phi(s) added to each turn's reward."
    )
    search: SearchSpec = Field(
        SearchSpec(), description="The search of data.source 'search' (best-of-N and selection)."
    )
    branching: BranchSpec | None = Field(
        None,
        description="Branching counterfactuals: M continuations from restored states at chosen "
        "turns, each branch point a group of its own; None: off.",
    )
    world_model: WorldModelSpec | None = Field(
        None,
        description="A learned model of a multi-turn task's environment, trained on real "
        "transitions, that adds imagined episodes to each step (imagined_env_steps); None: off.",
    )
    accuracy_filter: tuple[float, float] | None = Field(
        None,
        description="PRIME's accuracy filter [low, high]: with dynamic sampling, a group whose mean "
        "reward lies outside the band is dropped (census verdict 'accuracy') and resampled; None: off.",
    )
    staleness: int | None = Field(
        None,
        ge=0,
        description="Bounded staleness: drop samples more than K policy versions behind the trainer "
        "(discard reason 'staleness'); None: no bound.",
    )
    broadcast_every: int = Field(
        1,
        ge=1,
        description="The behaviour policy receives new weights every n policy versions (a version: "
        "the weights after a step's update), so samples come from the last broadcast; 1: every step.",
    )
    replay: ReplaySpec | None = Field(
        None, description="A replay buffer of past groups (off-policy reuse); None: single use."
    )
    lag: int = Field(
        0,
        ge=0,
        description="Deterministic lag: sample each batch with the policy of k versions earlier (a "
        "ring of weight snapshots, reproducible from the seed); 0: synchronous.",
    )
    concurrent: ConcurrentSpec | None = Field(
        None,
        description="Asynchronous training: a concurrent collector (its own process and engine) "
        "samples ahead of the trainer; None: rollouts run in the trainer's process.",
    )
    self_play: SelfPlaySpec | None = Field(
        None,
        description="Self-play on a two-player game task: the opponents are a pool of past "
        "checkpoints of the policy; None: the task's own (scripted) opponent.",
    )

    @model_validator(mode="after")
    def _self_play(self) -> DataSpec:
        if self.self_play is not None and (
            self.source != "rollouts" or self.branching is not None or self.concurrent is not None
        ):
            raise ValueError(
                "data.self_play: games against the pool are online rollouts in the trainer's "
                "process (data.source 'rollouts'), not with data.branching or data.concurrent"
            )
        return self


class Blanks(_Spec):
    """A full filling of the template; a named algorithm is one value of this."""

    objective: Literal["pg", "sft", "dpo"] = Field(
        "pg",
        description="pg: the policy-gradient template; sft: NLL (w=1, A=1); dpo: offline preference loss.",
    )
    mask: MaskSpec = MaskSpec()
    weight: WeightSpec = WeightSpec()
    advantage: AdvantageSpec = AdvantageSpec()
    normalization: NormalizationSpec = NormalizationSpec()
    regularizer: RegularizerSpec = RegularizerSpec()
    data: DataSpec = DataSpec()

    @model_validator(mode="after")
    def _consistent(self) -> Blanks:
        w = self.weight
        if w.trust_region == "sapo" and w.dual_clip_c is not None:
            raise ValueError(
                "weight.dual_clip_c: dual clip applies to trust_region 'clip', not 'sapo'"
            )
        if w.trust_region == "dis" and w.ratio != "behavior":
            raise ValueError(
                "weight.trust_region: 'dis' bands pi_theta/pi_rollout; set weight.ratio: behavior"
            )
        if w.tis_cap is not None and w.ratio == "behavior":
            raise ValueError(
                "weight.tis_cap: ratio 'behavior' already weighs against the behaviour policy; "
                "truncated IS on top would correct twice"
            )
        if (
            w.tis_cap is not None
            and not w.tis_form.endswith("_mask")
            and w.gate is not None
            and w.gate.mode == "clamp"
        ):
            raise ValueError(
                "weight.gate: a clamping gate and truncated IS both weigh by pi_old/pi_behaviour; "
                "use one (or a masking gate, or a mask form of tis)"
            )
        if w.tis_form != "token" and w.tis_cap is None:
            raise ValueError(f"weight.tis_form: '{w.tis_form}' needs weight.tis_cap (the cap C)")
        if w.gate is not None and w.gate.mode == "clamp" and w.gate.metric == "kl":
            raise ValueError("weight.gate: a KL gate can only mask (mode: mask), not clamp")
        if w.gate is not None and w.gate.metric == "ratio" and w.gate.low >= w.gate.high:
            raise ValueError("weight.gate: low must be below high")
        if w.ratio == "none" and w.trust_region != "none":
            raise ValueError(
                "weight.trust_region: ratio 'none' (w = 1) has no trust region; set trust_region: none"
            )
        source = {
            "pg": ("rollouts", "search"),
            "sft": ("demonstrations", "search"),
            "dpo": ("preference_pairs",),
        }
        if self.data.source not in source[self.objective]:
            raise ValueError(
                f"data.source: objective '{self.objective}' trains on "
                f"{' or '.join(repr(s) for s in source[self.objective])}, not '{self.data.source}'"
            )
        if self.data.source == "search" and self.objective == "pg":
            sp, d = self.data.search, self.data
            if sp.policy == "initial" and w.ratio != "behavior":
                raise ValueError(
                    "data.search.policy: 'initial' samples are off-policy for a policy gradient; "
                    "set weight.ratio: behavior (pi / pi_behaviour, from the carried log-probs)"
                )
            if (
                self.advantage.estimator == "prm"
                and self.advantage.prm.mode in ("sum", "min")
                and sp.mode != "best_of_n"
            ):
                raise ValueError(
                    "advantage.prm.mode: 'sum' and 'min' total each leaf's steps, and a beam or "
                    "tree prefix trains (and is scored) in one leaf only; use mode 'advantage'"
                )
            if d.dynamic_sampling or self.advantage.estimator == "remax" or d.branching:
                raise ValueError(
                    "data.source: 'search' selects its own samples: not with dynamic_sampling, "
                    "ReMax's greedy baseline or data.branching"
                )
        c = self.advantage.critic
        if c.targets == "vtrace" and c.policy_lambda_alpha is not None:
            raise ValueError(
                "advantage.critic.policy_lambda_alpha: SAO's length-adaptive lambda is for GAE "
                "targets, not vtrace"
            )
        if c.targets == "vtrace" and c.rho_bar < c.c_bar:
            raise ValueError("advantage.critic.c_bar: V-trace needs c_bar <= rho_bar")
        if self.advantage.estimator == "gae" and self.objective != "pg":
            raise ValueError("advantage.estimator: 'gae' needs objective 'pg'")
        if self.advantage.estimator == "gae" and (
            self.data.overlong_shaping.enabled
            or self.mask.overlong_filter
            or self.data.potential_shaping.enabled
        ):
            raise ValueError(
                "data.overlong_shaping / potential_shaping / mask.overlong_filter: not "
                "implemented for the critic "
                "(advantage.estimator 'gae'); its rewards and mask would ignore them"
            )
        if self.data.branching is not None and (
            self.data.concurrent is not None
            or self.data.replay is not None
            or self.advantage.estimator == "remax"
            or self.objective != "pg"
        ):
            raise ValueError(
                "data.branching: branches from the trainer's own rounds (objective pg), not with a "
                "concurrent collector, a replay buffer or ReMax's greedy baseline"
            )
        if self.data.world_model is not None and (
            self.data.source != "rollouts"
            or self.objective != "pg"
            or self.advantage.estimator == "remax"
            or any(
                getattr(self.data, k) is not None
                for k in ("concurrent", "branching", "replay", "self_play")
            )
        ):
            raise ValueError(
                "data.world_model: imagined rounds join the trainer's own online rounds (objective "
                "pg, data.source 'rollouts'), not with ReMax, a concurrent collector, branching, a "
                "replay buffer or self-play"
            )
        band = self.data.accuracy_filter
        if band is not None and (not self.data.dynamic_sampling or not band[0] <= band[1]):
            raise ValueError(
                "data.accuracy_filter: needs data.dynamic_sampling: true (dropped groups are "
                "resampled) and low <= high"
            )
        if self.data.staleness is not None and self.data.lag > self.data.staleness:
            raise ValueError(
                f"data.lag: {self.data.lag} versions exceeds data.staleness {self.data.staleness}: "
                "every sample would be dropped as stale"
            )
        if self.data.replay is not None and (
            self.data.source != "rollouts" or self.advantage.estimator == "remax"
        ):
            raise ValueError(
                "data.replay: only online rollouts can be replayed, and not with ReMax (a replayed "
                "group has no greedy baseline)"
            )
        if self.data.concurrent is not None and (
            self.data.source != "rollouts" or self.advantage.estimator == "remax" or self.data.lag
        ):
            raise ValueError(
                "data.concurrent: only online rollouts can be collected concurrently, not with "
                "ReMax (its greedy baseline runs in the trainer) nor with data.lag (the "
                "deterministic, same-process way to lag: use one of the two)"
            )
        if (self.data.lag or self.data.broadcast_every > 1) and self.data.source != "rollouts":
            raise ValueError("data.lag: only online rollouts (data.source 'rollouts') can lag")
        if self.data.epochs * self.data.minibatches > 1 and w.ratio == "none":
            raise ValueError(
                "data.epochs: reusing a batch (epochs x minibatches > 1) needs an importance ratio; weight.ratio is 'none'"
            )
        return self


BLANK_NAMES: tuple[str, ...] = (
    "mask",
    "weight",
    "advantage",
    "normalization",
    "regularizer",
    "data",
)


def flatten(blanks: Blanks) -> dict[str, Any]:
    """Blanks as a flat {dotted.path: value} dict (for diffs, tables, MLflow params)."""

    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            out[prefix] = value

    walk("", blanks.model_dump())
    return out


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Recursively merge ``override`` into a copy of ``base`` (override wins)."""

    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
