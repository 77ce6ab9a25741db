"""The selection matrix as data: the questions a situation answers (:data:`QUESTIONS`), the
rows read top to bottom (:data:`ROWS`: a starting preset, its blank overrides, why, the main
warning, the ladder rung to check first), the notes that hold across rows, the conflicts refused,
and the built-in tasks of starter experiments. Light to import (no torch): the CLI builds its
options from :data:`QUESTIONS`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# --------------------------------------------------------------------------- the questions


@dataclass(frozen=True)
class Question:
    name: str
    choices: tuple[str, ...]
    default: str
    help: str
    """One line: what the question asks and what each answer means (the CLI option's help)."""
    prompt: str
    """The question asked on a terminal."""


QUESTIONS: tuple[Question, ...] = (
    Question(
        "demos",
        ("none", "some", "plenty"),
        "some",
        "Demonstrations (or an oracle) for the warm start: none | some | plenty.",
        "Demonstrations or an oracle for a warm start?",
    ),
    Question(
        "signal",
        ("verifiable", "learned", "preference", "none"),
        "verifiable",
        "The reward: verifiable (a checker) | learned (a reward model or judge) | "
        "preference (pairs only) | none (demonstrations only).",
        "What scores a response?",
    ),
    Question(
        "state",
        ("repeatable", "changing"),
        "repeatable",
        "Can one prompt or environment state be sampled several times? repeatable (a group of "
        "samples per prompt) | changing (a live environment whose state moves on: one sample per "
        "state).",
        "Can a prompt or state be sampled several times (repeatable), or does it move on after "
        "one sample (changing)?",
    ),
    Question(
        "sampling",
        ("cheap", "expensive"),
        "cheap",
        "Cost of one rollout: cheap | expensive.",
        "Is sampling a rollout cheap or expensive?",
    ),
    Question(
        "horizon",
        ("single", "multi"),
        "single",
        "Turns per episode: single | multi (an environment answers between turns).",
        "Single-turn or multi-turn episodes?",
    ),
    Question(
        "intermediate",
        ("none", "labels", "potential", "states"),
        "none",
        "Intermediate signal of a multi-turn task: none | labels (the environment labels steps) | "
        "potential (a shaping potential of the state exists) | states (environment states recur "
        "across a group).",
        "What does the environment say between turns?",
    ),
    Question(
        "asynchronous",
        ("no", "yes"),
        "no",
        "Must generation run ahead of training (slow environments, long rollouts)? no | yes.",
        "Must generation run ahead of training?",
    ),
    Question(
        "risk",
        ("low", "high"),
        "low",
        "Environment risk: low | high (its actions are costly or unsafe).",
        "Are environment actions costly or unsafe?",
    ),
    Question(
        "model",
        ("dense", "moe"),
        "dense",
        "The policy: dense | moe (a mixture of experts: routing that changes between rollout and "
        "update makes token-level importance ratios noisy).",
        "Is the policy dense or a mixture of experts (moe)?",
    ),
    Question(
        "concern",
        ("none", "length", "clipping", "entropy"),
        "none",
        "What a first run showed or you worry about: none | length (response lengths vary widely, "
        "long reasoning) | clipping (a hard clip discards many tokens' gradient: a high clip "
        "fraction) | entropy (long reasoning with a verifier stalls: the entropy collapses and "
        "more groups come out all right or all wrong).",
        "Any concern from a first run: none, length (lengths vary widely), clipping (a high "
        "clip fraction) or entropy (the entropy collapses, groups all right or all wrong)?",
    ),
)

QUESTION_BY_NAME: dict[str, Question] = {q.name: q for q in QUESTIONS}
DEFAULTS: dict[str, str] = {q.name: q.default for q in QUESTIONS}

When = Mapping[str, tuple[str, ...]]
"""Conditions: question name -> the answers that satisfy it; a question not named: any answer."""


def matches(when: When, answers: Mapping[str, str]) -> bool:
    return all(answers[q] in accepted for q, accepted in when.items())


# --------------------------------------------------------------------------- the matrix


@dataclass(frozen=True)
class Row:
    id: str
    when: When
    situation: str
    """The situation in words (the guide's table's first column)."""
    preset: str
    why: str
    warning: str
    """The main warning: what goes wrong first with this choice, and what to watch."""
    rung: int
    """The ablation-ladder rung to check first, by its number (its name: the ladder's registry,
    :data:`~sixblanks.harness.studies.ladder.registry.RUNG_NAMES`)."""
    rung_why: str
    """Why that rung of the ladder is the one to check first."""
    overrides: Mapping[str, Any] = field(default_factory=dict)
    """Blank overrides of the starter arm (validated by ``resolve(preset, overrides)``)."""
    arm: str = ""
    """Arm name in the starter experiment; empty: the preset's name."""
    budget: Mapping[str, float] = field(default_factory=lambda: {"launched_tokens": 8000})
    """The starter's budget (matched across its arms)."""
    baseline_note: str = ""
    """What the starter's grpo baseline arm means for this row, when it needs saying."""
    ladder: Mapping[str, Any] = field(default_factory=dict)
    """Settings of the starter's ladder section beside its arm, where the ladder's defaults would
    not test what :attr:`rung_why` says (e.g. the variants of rung 5 or 8)."""

    @property
    def arm_name(self) -> str:
        return self.arm or self.preset


# what the ladder's group measures and the grpo baseline mean for a one-sample arm
_GROUP_OF_ONE = (
    "(Rung 4 measures the share of groups with unequal rewards, which a group of one never has: "
    "for this arm it reads inconclusive.)"
)

_GROUP_BASELINE_NOTE = (
    "grpo needs several samples of one prompt, which a changing state cannot give (at one sample "
    "per prompt every group advantage is 0, and validation refuses it); on the toy task, whose "
    "prompts repeat, it samples groups of 8 at the same launched tokens: what a repeatable state "
    "would buy, not an arm your task can run."
)


ROWS: tuple[Row, ...] = (
    Row(
        "preference",
        {"signal": ("preference",)},
        "only preference pairs, no reward to roll out against",
        "dpo",
        "Only comparisons between responses exist, nothing that scores a fresh sample of the "
        "trained policy: DPO learns from pairs, anchored to the reference policy. Its pairs never "
        "come from the policy it trains: they are read from data.pairs.file or, without one (as "
        "in the starter), made every step from G rollouts of each prompt by the reference "
        "policy, scored by the task's verifier: the best and the worst response of each group "
        "whose rewards differ.",
        "Offline: no exploration; the pairs come from a fixed policy, so the gains stop where its "
        "responses stop. Pairs made from rollouts cost rollouts: the budget charges all G "
        "responses of a group for its one pair (the rest are discarded as pair_selection, a group "
        "of equal rewards as no_preference). Judge it on held-out evaluation, not on the pair "
        "loss.",
        2,
        "The starter's pairs come from the reference policy's rollouts, whose contract rung 1 "
        "checks as for any arm (with data.pairs.file, DPO trains on none of them); rung 2 is the "
        "first check of DPO's own update: it computes the arm's DPO loss on a frozen batch of its "
        "pairs, which must give the same loss and gradients on a repeat and across micro-batch "
        "splits (sequence log-prob sums).",
        baseline_note="grpo is the online arm a preference-only task cannot run: here the toy "
        "task's verifier stands in, to show what exploration would buy (the same verifier scores "
        "the reference rollouts dpo makes its pairs from; put your own pairs in data.pairs.file).",
    ),
    Row(
        "demonstrations_only",
        {"signal": ("none",)},
        "demonstrations only, no reward at all",
        "sft",
        "With no reward of any kind, imitation is the only learning signal: SFT on the "
        "demonstrations is the whole recipe.",
        "Imitation ceiling: nothing improves past the demonstrations, and errors compound off "
        "their distribution.",
        3,
        "Without a reward, held-out evaluation is the only measure: make sure it is reproducible "
        "(the same score on repeats and after an engine version bump) before reading any "
        "difference.",
        baseline_note="the toy task has a verifier, so a grpo arm shows what a reward would add; "
        "on your task without one, compare against the warm start (the report's start score).",
    ),
    Row(
        "changing_single_turn",
        {
            "state": ("changing",),
            "signal": ("verifiable",),
            "horizon": ("single",),
            "sampling": ("cheap",),
            "asynchronous": ("no",),
        },
        "one sample per prompt: single turn, states that do not repeat, cheap rollouts, a verifier",
        "reinforce_baseline",
        "When a prompt cannot be posed twice (its state has moved on) there is no group to compare "
        "with, so no group baseline. With a verifier, cheap samples and one turn, REINFORCE with "
        "the batch's mean reward as its baseline is the simplest estimator that still centres the "
        "advantage: no critic, no importance ratio, each sample trained on once, on-policy.",
        "The baseline is the mean over the batch's other prompts, blind to each prompt's "
        "difficulty: an easy prompt gets a positive advantage whatever the answer, so the variance "
        "is high (use large batches), and the mean includes the sample itself (the gradient "
        "shrinks by (N-1)/N). No trust region: the learning rate alone bounds a step.",
        5,
        "Rung 5 varies the advantage estimator alone; the group estimators give A = 0 at one "
        "sample per prompt, so the starter sets ladder.advantage_variants to batch_mean, return "
        "(no baseline) and reinforce_pp (batch whitening): whether the batch baseline earns its "
        "place. " + _GROUP_OF_ONE,
        overrides={"data": {"group_size": 1}},
        arm="reinforce_baseline_g1",
        baseline_note=_GROUP_BASELINE_NOTE,
        ladder={"advantage_variants": ["batch_mean", "return", "reinforce_pp"]},
    ),
    Row(
        "changing_state",
        {"state": ("changing",)},
        "one sample per state in a live environment whose state changes: multi-turn, expensive "
        "rollouts, asynchronous or a learned reward",
        "sao",
        "When the environment's state moves on after each sample, the same prompt or state cannot "
        "be sampled G times, so there is no group to compare with. SAO takes one rollout per "
        "prompt, gives credit with a critic (token-level GAE, a per-sample lambda, the critic's "
        "attention frozen) and corrects the update against the rollout's own log-probabilities "
        "with DIS, which masks the tokens whose ratio pi/pi_rollout leaves the band (0.7, 6.0).",
        "All credit comes from the critic, a second model paid from the same budget: a badly fit "
        "value function misdirects every advantage (watch value_loss and explained_variance). DIS "
        "drops the tokens outside its band: a growing dropped.dis_tokens means the sampler and "
        "the trainer disagree (rung 1's mismatch figures).",
        8,
        "Rung 8 lends the arm other advantage blanks alone; GiGPO and a PRM's group outcome need "
        "groups, so the starter sets ladder.credit_variants to reinforce_baseline (the batch "
        "mean, no critic), ppo (a token critic, GAE lambda 0.95) and ppo_turn (a turn critic): "
        "whether SAO's critic earns its cost at one sample per state. " + _GROUP_OF_ONE,
        baseline_note=_GROUP_BASELINE_NOTE + " SAO's critic stands in for that group baseline.",
        ladder={"credit_variants": ["reinforce_baseline", "ppo", "ppo_turn"]},
    ),
    Row(
        "risky_environment",
        {"risk": ("high",)},
        "environment actions are costly or unsafe",
        "grpo",
        "Every environment execution costs or risks something, so each should feed more than one "
        "update: a replay buffer reuses past groups (data.replay), truncated IS corrects them "
        "against the policy that sampled them, and GRPO's KL in the loss keeps the policy near "
        "the reference.",
        "Replayed groups are off-policy: watch the importance ratios and the clip fraction and "
        "keep reuse low. Sandbox the environment: nothing here makes exploration safe.",
        7,
        "Off-policy reuse is held in check by the clip, the KL and the learning rate, which rung "
        "7 varies; rung 9 compares only lagged or concurrent sampling and is inconclusive for a "
        "replay arm.",
        overrides={
            "data": {"replay": {"capacity": 32, "reuse": 1, "per_step": 2}},
            "weight": {"tis_cap": 2.0},
            "regularizer": {"loss_kl_coef": 0.04, "loss_kl_estimator": "k3"},
        },
        arm="grpo_replay",
        budget={"env_steps": 2000},
        baseline_note="the same arm without replay, at the same number of environment steps: "
        "what reuse buys.",
    ),
    Row(
        "asynchronous",
        {"asynchronous": ("yes",)},
        "generation must run ahead of training",
        "grpo",
        "A concurrent collector samples while the trainer updates (data.concurrent); a staleness "
        "bound drops samples too many versions behind, and truncated IS corrects the rest "
        "against the policy that sampled them.",
        "Stale samples bias the update: compare with the same arm synchronous at the same budget "
        "(the starter's grpo arm) before trusting a speed-up.",
        9,
        "Rung 9 runs the arm against its synchronous setting and fails when asynchrony loses.",
        overrides={
            "data": {"concurrent": {"queue": 2}, "staleness": 2},
            "weight": {"tis_cap": 2.0},
        },
        arm="grpo_async",
        baseline_note="the same arm synchronous.",
    ),
    Row(
        "process_labels",
        {"horizon": ("multi",), "intermediate": ("labels",)},
        "multi-turn, the environment labels each step",
        "prm_grpo",
        "Step labels train a process reward model online; its step scores give each step its own "
        "credit beside the group-normalized outcome.",
        "A learned PRM is exploitable: watch prm.auc and prm.brier and the report's reliability "
        "plot; keep the outcome reward in the advantage.",
        8,
        "Rung 8 lends the arm's advantage blank each credit scheme alone (a turn critic, a PRM, "
        "GiGPO): whether the PRM's credit beats the alternatives on the same budget.",
    ),
    Row(
        "potential_shaping",
        {"horizon": ("multi",), "intermediate": ("potential",)},
        "multi-turn, a potential of the state exists",
        "turn_grpo",
        "Potential-based shaping adds gamma Phi(s') - Phi(s) to each turn's reward: dense "
        "feedback that leaves the optimal policy unchanged.",
        "Shaping keeps the optimum only with the learner's gamma (leave "
        "potential_shaping.gamma unset) and Phi = 0 at the end of an episode.",
        8,
        "Rung 8 swaps credit schemes into the advantage blank alone: whether shaped turn credit "
        "beats a critic, a PRM or GiGPO on the same budget.",
        overrides={"data": {"potential_shaping": {"enabled": True}}},
        arm="turn_grpo_shaped",
    ),
    Row(
        "recurring_states",
        {"horizon": ("multi",), "intermediate": ("states",)},
        "multi-turn, environment states recur across a group",
        "gigpo",
        "When a group's episodes pass through the same states, GiGPO compares the actions taken "
        "from each state (anchor groups): step-level credit with no extra model.",
        "An anchor group of one gives A^S = 0: watch gigpo.anchor_frac; when states rarely "
        "recur, GiGPO is episode-level GRPO.",
        8,
        "Rung 8 swaps credit schemes into the advantage blank alone: whether anchor-state credit "
        "beats a turn critic or a PRM on the same budget.",
    ),
    Row(
        "multi_turn_expensive",
        {"horizon": ("multi",), "sampling": ("expensive",)},
        "multi-turn, expensive rollouts, no intermediate signal",
        "ppo_turn",
        "With few samples per prompt, group baselines are poor; a turn-level critic shares what "
        "it learns across samples and prompts.",
        "The critic is a second model paid from the same budget, and a badly fit value function "
        "misdirects credit: read the PPO checklist (sixblanks explain ppo_turn).",
        8,
        "Rung 8 swaps credit schemes into the advantage blank alone: whether the critic earns "
        "its cost against group-based turn credit.",
    ),
    Row(
        "multi_turn",
        {"horizon": ("multi",)},
        "multi-turn, no intermediate signal",
        "turn_grpo",
        "Each turn is credited by its reward-to-go against the group's mean at the same turn "
        "index, instead of one outcome advantage for the whole episode.",
        "Per-turn-index groups shrink at late turns: a turn reached by one sample only gets A = 0.",
        8,
        "Rung 8 swaps credit schemes into the advantage blank alone: whether a critic, a PRM or "
        "GiGPO credits the turns better.",
    ),
    Row(
        "learned_reward",
        {"signal": ("learned",)},
        "a reward model or judge scores samples",
        "ppo",
        "Classic RLHF: PPO with a critic and a KL to the reference in the reward, which bounds "
        "how far the policy can chase the reward model's errors.",
        "Reward over-optimization: the learned score rises while true quality falls; keep the KL "
        "and check held-out with the true signal, not with the judge.",
        7,
        "The KL coefficient, the clip and the learning rate are the guard against "
        "over-optimization: rung 7 varies them.",
        baseline_note="put your reward model or judge in task.judge (docs/guide/tasks.md, judges) "
        "for both arms; the starter's toy task uses its verifier.",
    ),
    Row(
        "length_bias",
        {"concern": ("length",)},
        "response lengths vary widely (long reasoning): GRPO's length normalization is in question",
        "dr_grpo",
        "GRPO divides each response's loss by its own length |o| and each advantage by its "
        "group's std: the first makes a long wrong answer cost less per token than a short one, "
        "so wrong answers drift longer; the second up-weights prompts whose rewards barely "
        "differ. Dr. GRPO removes both (A = R - the group mean, a constant denominator B x "
        "L_max). The starter runs grpo against it at the same launched tokens, GRPO's KL kept on "
        "both: that comparison is the ablation.",
        "A constant denominator changes the gradient's scale with L_max and the batch, not only "
        "the length bias; under AdamW a constant scale cancels except through the gradient clip, "
        "so rung 6 runs each Z also scale-matched (the clip rescaled): a difference that survives "
        "it is the weighting's, not the step size's. Read the arms' response_length_correct and "
        "response_length_incorrect beside their scores.",
        6,
        "Rung 6 varies the normalization blank alone (constant is Dr. GRPO's, seq-mean-token-mean "
        "GRPO's 1/|o|, and token-mean), the advantage held at group_mean: whether the length fix "
        "itself pays; rung 5 then varies the other half, the std (group_norm against group_mean).",
        overrides={"regularizer": {"loss_kl_coef": 0.04}},
        arm="dr_grpo_kl",
        budget={"launched_tokens": 16000},
        baseline_note="the ablation's other end: the arms differ only in advantage.estimator "
        "(group_norm against group_mean) and normalization.mode (seq-mean-token-mean against "
        "constant), since the dr_grpo arm keeps GRPO's KL (0.04).",
    ),
    Row(
        "clip_fraction",
        {"concern": ("clipping",)},
        "a hard clip throws away many tokens' gradient (a high clip fraction)",
        "sapo",
        "A PPO clip zeroes the gradient of every token whose ratio left [1 - eps, 1 + eps] in the "
        "direction its advantage pushes: with a high clip fraction much of the batch trains on "
        "nothing, and the cut is abrupt. SAPO replaces it with a soft trust region, the gate f(r) "
        "= (4/tau) sigmoid(tau (r - 1)): the gradient weight is 1 at r = 1 and decays smoothly "
        "away from it, faster for negative advantages (tau_neg 1.05) than for positive ones "
        "(tau_pos 1.0).",
        "A soft gate still bounds the step, by its temperatures instead of eps: a lower tau lets "
        "far-off-policy tokens keep more of their gradient, so several updates per batch can "
        "drift; keep tau_neg >= tau_pos (negative advantages destabilize first). SAPO's loss is "
        "not on PPO's scale: compare the arms by held-out score and gradient norms, not loss "
        "values.",
        7,
        "Rung 7 varies SAPO's temperatures (tau_pos and tau_neg scaled together by "
        "ladder.scale_factors; token clip pairs do not apply to a gate), the KL and the learning "
        "rate: whether the gate's softness is set right.",
        baseline_note="the hard clip (0.2) SAPO's gate replaces: read its clip_frac; the arms also "
        "differ in the KL (grpo's 0.04, sapo none), as sixblanks explain -c shows.",
    ),
    Row(
        "open_reasoning",
        {"concern": ("entropy",)},
        "long reasoning with a verifier stalls: the entropy collapses, more groups come out all "
        "right or all wrong, long responses reach the length cap",
        "dapo",
        "The open reasoning-RL recipe (DAPO) changes four blanks of GRPO, each against one way "
        "such a run stalls: clip-higher (eps_high 0.28 above eps_low 0.2) lets a low-probability "
        "token's ratio rise further before the clip stops its gradient, which keeps the entropy "
        "from collapsing; dynamic sampling trains only on groups whose rewards differ (a group "
        "all right or all wrong has A = 0) and samples again until the batch is full; a "
        "token-level loss (token-mean) weighs every token of a long response alike; overlong "
        "shaping adds a penalty that grows over the last data.overlong_shaping.cache tokens "
        "before max_new_tokens, so a response nearing the cap is told so before truncation cuts "
        "it off. No KL.",
        "Dynamic sampling pays for the groups it drops: the budget counts every launched token, "
        "so at matched launched tokens the arm trains on fewer groups, and a step that reaches "
        "data.max_sampling_rounds trains on a short batch (the census records both). The overlong "
        "penalty changes the reward (the fairness audit flags it): compare the arms by held-out "
        "score, and keep overlong_penalty_correct_frac at 0 (a penalized correct answer means "
        "the penalty window is too wide for max_new_tokens).",
        4,
        "Rung 4 measures over a short run the share of groups whose rewards differ, counted "
        "before dynamic sampling drops the others: the share the arm trains on, the rest of its "
        "launched tokens spent on dropped groups (near 1 dynamic sampling changes nothing, near "
        "0 most of the budget is dropped). Rung 7 then varies the clip pair (clip-higher), rung 6 "
        "the token-level loss.",
        budget={"launched_tokens": 16000},
        baseline_note="the recipe's starting point: the arms differ in weight.eps_high (0.2 "
        "against 0.28), data.dynamic_sampling, normalization.mode (seq-mean-token-mean against "
        "token-mean), data.overlong_shaping and the KL (grpo's 0.04, dapo none), as sixblanks "
        "explain -c shows; the ladder's rungs take them apart one at a time.",
    ),
    Row(
        "mixture_of_experts",
        {"model": ("moe",)},
        "a mixture-of-experts policy (or very long sequences): token-level ratios are noisy",
        "gspo",
        "On a mixture-of-experts policy a token's experts can change between the rollout and the "
        "update, so token-level importance ratios swing for reasons other than the policy's "
        "change, and a long sequence adds that noise up. GSPO takes one ratio per sequence, s_i = "
        "exp(mean_t log pi/pi_old), and clips it at the sequence level: the ratio's unit matches "
        "the reward's (one per sequence).",
        "The clip bounds live on the sequence ratio's scale: s_i is a geometric mean of token "
        "ratios, so it moves far less than a token ratio, by an amount set by the policy, the "
        "lengths and the learning rate. Never reuse a token clip (0.2), and do not copy the "
        "paper's bounds (3e-4/4e-4, set for Qwen3-30B; preset gspo_paper) mechanically: gspo "
        "sets them as multiples of the measured spread of log s_i (weight.clip_scale); read "
        "clip_frac beside it.",
        7,
        "Rung 7 varies the clip on the ratio's own scale (the arm's bounds times "
        "ladder.scale_factors, never the token pairs), the KL and the learning rate: whether the "
        "bounds suit this policy's sequence ratios.",
        baseline_note="a token-ratio arm with the token clip 0.2; the starter's tiny model is "
        "dense, so put your mixture-of-experts policy in model.path to see what the sequence "
        "ratio buys. The arms also differ in the bounds and the KL (sixblanks explain -c).",
    ),
    Row(
        "expensive_sampling",
        {"sampling": ("expensive",)},
        "verifiable reward, expensive rollouts, single turn",
        "rloo",
        "Fewer samples per prompt (4), with a leave-one-out baseline that stays unbiased in small "
        "groups.",
        "Small groups give high-variance baselines, and more groups with all-equal rewards "
        "(A = 0).",
        5,
        "Rung 5 varies the advantage estimator alone: whether leave-one-out is the right "
        "baseline at this group size.",
        overrides={"data": {"group_size": 4}},
        arm="rloo_g4",
    ),
    Row(
        "default",
        {},
        "verifiable reward, cheap rollouts, single turn",
        "rloo",
        "Start with the simplest estimator that represents the credit structure: one outcome "
        "per response needs only a baseline per prompt, and the leave-one-out group mean is "
        "unbiased at any group size. Add a change (GRPO's std, DAPO's clip-higher and dynamic "
        "sampling, a critic) only when the ladder shows it pays.",
        "Groups whose rewards are all equal give A = 0: when most are all right or all wrong "
        "(rung 4's trainable share), dynamic sampling (dapo) is the next arm to try, compared at "
        "matched launched tokens.",
        5,
        "Rung 5 varies the advantage estimator alone (group std, batch whitening, no baseline): "
        "whether anything more than the leave-one-out baseline earns its place.",
    ),
)

ROW_BY_ID: dict[str, Row] = {r.id: r for r in ROWS}


@dataclass(frozen=True)
class Note:
    when: When
    text: str
    rows: tuple[str, ...] = ()
    """The row ids the note applies to (the recommended row must be one of them); empty: any row."""


def _rows_but(*ids: str) -> tuple[str, ...]:
    """Every row id of :data:`ROWS` except ``ids``."""

    return tuple(r.id for r in ROWS if r.id not in ids)


_NO_ROLLOUTS = ("preference", "demonstrations_only")
"""The rows whose arm never samples the policy it trains (DPO's pairs come from a file or the
reference policy's rollouts, SFT's data from demonstrations)."""
_ONE_SAMPLE = ("changing_single_turn", "changing_state")
_TOKEN_CLIP = _rows_but(*_NO_ROLLOUTS, *_ONE_SAMPLE, "clip_fraction", "mixture_of_experts")
"""The rows whose arm keeps a token ratio with a hard clip."""

NOTES: tuple[Note, ...] = (
    Note(
        {"demos": ("none",)},
        "No demonstrations: no warm start is possible. Start from a model that already follows "
        "the task's format (model.path or model.gguf) and turn the warm start off "
        "(warm_start.enabled: false, or warm_start.steps: 0), as the starter does; from a model "
        "that never answers in format every reward, and so every group advantage, is 0.",
    ),
    Note(
        {"demos": ("plenty",)},
        "Plenty of demonstrations: a longer warm start (the starter's warm_start.steps is 300), "
        "and SFT alone (preset sft) at the same budget is the baseline an RL arm has to beat.",
    ),
    Note(
        {"horizon": ("single",), "intermediate": ("labels", "potential", "states")},
        "--intermediate describes the steps of a multi-turn task; with --horizon single it was "
        "not used.",
    ),
    Note(
        {"horizon": ("multi",), "intermediate": ("labels", "potential")},
        "--intermediate was not used: the rows that read it compare a group's samples of one "
        "prompt, which a changing state cannot give; SAO's token-level critic gives each step its "
        "credit instead.",
        rows=("changing_state",),
    ),
    Note(
        {"risk": ("high",)},
        "--risk high: the risky_environment row replays groups of one prompt, which a changing "
        "state cannot give; here each sample is trained on once. Nothing here makes exploration "
        "safe: sandbox the environment.",
        rows=_ONE_SAMPLE,
    ),
    Note(
        {"asynchronous": ("yes",)},
        "--asynchronous yes: the sao arm as written is synchronous; add data.concurrent: {queue: "
        "2} to it to sample ahead (DIS masks the tokens that drift out of its band), then ladder "
        "rung 9 compares it with its synchronous setting.",
        rows=("changing_state",),
    ),
    Note(
        {"signal": ("learned",)},
        "--signal learned: SAO has no KL to the reference; add one to its arm "
        "(regularizer.reward_kl_coef: 0.05, as ppo's) to bound how far the policy chases the "
        "reward model's errors, and check held-out with the true signal, not with the judge.",
        rows=("changing_state",),
    ),
    Note(
        {"model": ("moe",)},
        "--model moe: this row's arm keeps a token-level ratio, which a mixture of experts' "
        "routing makes noisy (a row higher in the matrix matched first): watch clip_frac, "
        "and add an arm with weight.ratio: sequence (preset gspo), its bounds on the sequence "
        "ratio's own scale.",
        rows=(*_TOKEN_CLIP, "clip_fraction"),
    ),
    Note(
        {"concern": ("length",)},
        "--concern length was not used (a row higher in the matrix matched first); the length "
        "bias lives in the normalization blank: ladder rung 6 varies it alone (constant is Dr. "
        "GRPO's), and response_length_correct and response_length_incorrect show whether wrong "
        "answers grow.",
        rows=_rows_but(*_NO_ROLLOUTS, "length_bias"),
    ),
    Note(
        {"concern": ("clipping",)},
        "--concern clipping was not used (a row higher in the matrix matched first); SAPO's soft "
        "gate (weight.trust_region: sapo) can replace the arm's hard clip, and ladder rung 7 "
        "varies the clip.",
        rows=_TOKEN_CLIP,
    ),
    Note(
        {"concern": ("entropy",)},
        "--concern entropy was not used (a row higher in the matrix matched first); the open "
        "reasoning-RL recipe (preset dapo) answers it with clip-higher (weight.eps_high above "
        "weight.eps_low: more room for a low-probability token's ratio to rise) and dynamic "
        "sampling (data.dynamic_sampling: only groups whose rewards differ); ladder rung 4 "
        "measures the share of such groups, and rung 7 varies the clip.",
        rows=tuple(r for r in _TOKEN_CLIP if r != "open_reasoning"),
    ),
    Note(
        {"sampling": ("expensive",)},
        "--sampling expensive: this row's arms sample the starter's groups of 8; where a rollout "
        "is expensive, set data.group_size: 4 on both arms (the expensive_sampling row's choice) "
        "and expect more groups whose rewards are all equal (A = 0).",
        rows=("length_bias", "clip_fraction", "open_reasoning", "mixture_of_experts"),
    ),
)

CONFLICTS: tuple[Note, ...] = (
    Note(
        {"signal": ("none",), "demos": ("none",)},
        "--signal none (demonstrations only) with --demos none: there is nothing to learn from; "
        "give demonstrations (--demos some or plenty) or a signal",
    ),
    Note(
        {"state": ("changing",), "horizon": ("multi",), "intermediate": ("states",)},
        "--state changing (a state cannot be sampled twice) with --intermediate states (states "
        "recur across a group): the two contradict; answer --intermediate none if states do not "
        "recur, or --state repeatable if they do",
    ),
)


@dataclass(frozen=True)
class StarterTask:
    when: When
    name: str
    params: Mapping[str, Any]
    rollout: Mapping[str, Any]
    optimizer: Mapping[str, Any] = field(default_factory=dict)
    why: str = ""


# first match; the last entry matches everything
STARTER_TASKS: tuple[StarterTask, ...] = (
    StarterTask(
        {"horizon": ("multi",), "intermediate": ("labels",)},
        "chain_arithmetic",
        {"steps": 2, "digits": 1, "operators": "+", "outcome": "all"},
        {"max_new_tokens": 4, "group_size": 8, "prompts_per_step": 4},
        {"lr": 1.0e-4},
        "multi-step, each step labelled by the environment",
    ),
    StarterTask(
        {"horizon": ("multi",)},
        "guess_number",
        {"low": 1, "high": 16, "max_turns": 5},
        {"max_new_tokens": 4, "group_size": 8, "prompts_per_step": 4},
        {},
        "multi-turn, with a potential and recurring states",
    ),
    StarterTask(
        {"concern": ("length", "entropy")},
        "arithmetic",
        {"digits": 1, "operators": "+-*", "operands": 2},
        {"max_new_tokens": 16, "group_size": 8, "prompts_per_step": 4},
        {},
        "single-turn, verified; room for 16 tokens where a right answer takes 3, so lengths can "
        "drift and an overlong penalty spares a right answer",
    ),
    StarterTask(
        {},
        "arithmetic",
        {"digits": 1, "operators": "+-", "operands": 2},
        {"max_new_tokens": 6, "group_size": 8, "prompts_per_step": 4},
        {},
        "single-turn, verified",
    ),
)

WARM_START: dict[str, dict[str, Any]] = {
    "none": {"enabled": False},
    "some": {"steps": 150, "num_demos": 1000},
    "plenty": {"steps": 300, "num_demos": 2000},
}

BASELINE = "grpo"
MATCHED_UPDATES: dict[str, Any] = {"data": {"epochs": 1, "minibatches": 2}}
"""Every arm of a starter makes the same 2 optimizer steps per rollout batch, so the importance
ratios move off 1 and the trust regions act (skipped when an arm has no ratio: sft, dpo)."""
