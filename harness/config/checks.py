"""Cross-field checks of a parsed experiment: settings each valid alone whose runs cannot work,
would never end, or would train on nothing. Called by :func:`~.loading.validate_mapping` on a
configuration that parsed, before any model is loaded; each problem is one ``key.path: message``
line.

- clip bounds outside their meaningful range (``weight.eps_low`` >= 1: a lower bound
  1 - eps_low <= 0 clips nothing; a gate band that excludes ratio 1; a truncated-IS cap below 1);
- a group size of 1 with a group-relative advantage (every advantage exactly 0) or with dynamic
  sampling (every group dropped);
- more minibatches than a step's batch has rows (``algorithms.data.minibatches`` would run fewer
  optimizer steps than the step reserves);
- a branching turn the task never reaches (the run would fail at its start);
- a reward fault (``fault.rewards``) on an arm whose objective reads no reward (SFT, DPO), and the
  gradient-noise probe (``rollout.grad_noise_probe``) on arms whose objective has none;
- a sampler mismatch the rollout backend cannot inject (``rollout.mismatch.logit_noise`` on vLLM);
- a budget (``budget``, and an explicit ``sweep.trial_budget`` or ``ladder.budget``) below the worst
  case one training step reserves, so no step is ever admitted; or one whose counters an arm never
  charges, so its runs would never end.

:func:`cautions` lists what is valid but works against the arm (printed, never refused): among them
absolute clip bounds on a sequence ratio far from the spread of its log measured on the built-in
tiny policy, the one policy whose spread is known before a run.

The worst case of one step mirrors the training loop's admission (``Trainer.step``): the collector's
``worst_case()`` (``RunContext.worst_rollouts`` and the collectors' additions) plus the update's
bound (``Trainer.worst_update``). Only what is certain is checked: additions that depend on the run
(branch points, imagined rounds, time) are left out, so the computed cost is a lower bound.

Each kind has its module: the arms as checked (``check_arms``), their blanks (``blank_checks``),
the budgets (``budget_checks``) and the cautions (``caution_checks``); this one runs them all.
"""

from __future__ import annotations

from .blank_checks import (
    branching_problems,
    env_worker_problems,
    fault_problems,
    group_problems,
    minibatch_problems,
    mismatch_problems,
    prm_label_problems,
    probe_problems,
    weight_problems,
)
from .budget_checks import budget_problems, step_worst
from .caution_checks import SPREAD_FAR, TINY_SEQ_SPREAD, TINY_SEQ_SPREAD_LR, cautions
from .check_arms import resolved_arms, task_turns
from .experiment_config import ExperimentConfig
from .parallel_checks import parallel_problems
from .tool_checks import tool_problems

__all__ = [
    "SPREAD_FAR",
    "TINY_SEQ_SPREAD",
    "TINY_SEQ_SPREAD_LR",
    "cautions",
    "resolved_arms",
    "run_problems",
    "step_worst",
]

_STEP_KEYS = ("rollout.", "blanks.data.", "blanks.objective", "blanks.advantage.")
"""Sweep-space paths that change what one step costs: an arm tuned on them is not checked."""


def run_problems(cfg: ExperimentConfig) -> list[str]:
    """Every problem of ``cfg``'s runs that shows before any of them starts."""

    arms = resolved_arms(cfg)
    tasks = [(t, task_turns(t)) for t in cfg.tasks or []]
    out: list[str] = []
    for arm in arms:
        out += weight_problems(arm)
        out += minibatch_problems(arm)
        out += branching_problems(arm, [(t.name, n) for t, n in tasks])
        out += fault_problems(cfg, arm)
        out += env_worker_problems(arm)
        out += [p for p in mismatch_problems(cfg, arm) if p not in out]  # one line a key
    out += group_problems(arms)
    out += prm_label_problems(arms, [t for t, _ in tasks])
    out += probe_problems(cfg, arms)
    out += budget_problems("budget", cfg.budget, arms, tasks)
    out += parallel_problems(cfg) + tool_problems(cfg)
    first = tasks[:1]  # the ladder and the sweep run the first task
    sw = cfg.sweep
    if "trial_budget" in sw.model_fields_set and sw.trial_budget:
        tuned = [
            a
            for a in arms
            if a.name in sw.space and not any(p.startswith(_STEP_KEYS) for p in sw.space[a.name])
        ]
        out += budget_problems("sweep.trial_budget", sw.trial_budget, tuned, first)
    lad = cfg.ladder
    if "budget" in lad.model_fields_set and lad.budget and arms:
        arm = [a for a in arms if a.name == (lad.arm or next(iter(cfg.arms)))]
        out += budget_problems("ladder.budget", lad.budget, arm, first)
    return out
