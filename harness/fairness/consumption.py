"""How much of the matched budget a finished run was bound to leave unspent.

A run stops when the worst case of its next step no longer fits in what is left of its budget
(the training loop reserves a step before it starts), so every run ends with up to one step's
worst case unspent: with answers of up to 36 tokens and 64 samples a step, 2,304 launched tokens,
11.5% of a 20,000-token budget. A run that left less than that could not have taken another step;
one that left more stopped for another reason, and is the one the audit flags.

    slack = step_slack(cfg)          # {arm: {task: {counter: tokens}}}
    flagged = used < limit - slack[arm][task].get(counter, 0.0)
"""

from __future__ import annotations

from ..config import ExperimentConfig
from ..config.budget_checks import step_worst
from ..config.check_arms import resolved_arms, task_turns


def step_slack(cfg: ExperimentConfig) -> dict[str, dict[str, dict[str, float]]]:
    """Per arm and task of ``cfg``: what one training step reserves before it starts, per budget
    counter (a lower bound: branch points and imagined rounds are left out), i.e. the unspent
    budget a run may end with for want of room for one more step."""

    out: dict[str, dict[str, dict[str, float]]] = {}
    tasks = [(t, task_turns(t)) for t in cfg.tasks or []]
    for arm in resolved_arms(cfg):
        per_task = out.setdefault(arm.name, {})
        for task, turns in tasks:
            judge = task.judge.max_calls_per_verify if task.judge is not None else 0
            worst = step_worst(arm, turns or 1, judge)
            per_task[task.name] = {k: float(v) for k, (v, _) in worst.items()}
    return out
