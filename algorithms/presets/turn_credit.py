"""Credit finer than the episode for multi-turn and multi-step tasks: per-turn baselines, anchor
states (GiGPO), two levels, process reward models (explicit and implicit), and branches rolled from
a restored state."""

from __future__ import annotations

from .base import SEQ_MEAN_TOKEN_MEAN, Preset, blanks_of

_TURN_RETURN = {"estimator": "turn_return", "gamma": 1.0, "turn_baseline": "group"}

_TURN_BASELINES = (
    Preset(
        "turn_grpo",
        blanks_of(advantage=_TURN_RETURN),
        "Turn-level credit for multi-turn tasks: each turn's reward-to-go minus the "
        "group's mean reward-to-go at the same turn index, on that turn's action tokens.",
        (
            "No canonical paper: gamma 1.0 per environment step, group-mean baseline per turn "
            "index, no std scaling; ratio and clip as grpo, but token-mean Z and no KL in the "
            "loss.",
            "KL in the reward (when set) is taken from each turn's reward, token by token.",
            "Per-turn-index groups shrink at late turns: a turn reached by one sample only gets "
            "A = 0.",
        ),
    ),
    Preset(
        "gigpo",
        blanks_of(
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
        blanks_of(advantage={"estimator": "hierarchical", "hierarchical_norm": "mean_std_norm"}),
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
)

_PROCESS_REWARDS = (
    Preset(
        "prm_grpo",
        blanks_of(
            advantage={"estimator": "prm", "prm": {"mode": "advantage", "outcome": True}},
            normalization=SEQ_MEAN_TOKEN_MEAN,  # every other blank as grpo
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
        blanks_of(
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
)

_BRANCHES = (
    Preset(
        "branch_grpo",
        blanks_of(
            advantage=_TURN_RETURN,
            data={"branching": {"turns": [1], "width": 4, "per_group": 1}},
        ),
        "Branching counterfactuals: turn_grpo, plus M = 4 continuations rolled from the restored "
        "state before turn 1 of one episode per group; each branch point is a group, so the "
        "action there is credited by its continuation return against its siblings'.",
        (
            "No canonical paper (siblings rolled from one restored state isolate the credit of "
            "the action taken there): the environment is restored from its snapshot, or replayed "
            "from the seed and the actions where it has none (said in branch.restored_frac, "
            "replayed steps charged).",
            "Siblings share the environment's state and randomness; they differ by the policy's "
            "samples. The prefix is context (mask 0); the continuations train with turn_grpo's "
            "per-turn-index group baseline.",
            "Every branch token, environment step and verifier call counts in the ledger: at a "
            "matched launched-token budget the branches take the place of fresh episodes.",
        ),
    ),
)

FAMILY = (*_TURN_BASELINES, *_PROCESS_REWARDS, *_BRANCHES)
