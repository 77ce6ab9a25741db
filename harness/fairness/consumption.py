"""A run's own flags in the fairness audit (:func:`run_flags`: run by other code, consumption
short of the matched budget), and how much of that budget a finished run was bound to leave
unspent.

A run stops when the worst case of its next step no longer fits in what is left of its budget
(the training loop reserves a step before it starts), so every run ends with up to one step's
worst case unspent: with answers of up to 36 tokens and 64 samples a step, 2,304 launched tokens,
11.5% of a 20,000-token budget. A run that left less than that could not have taken another step;
one that left more stopped for another reason, and is the one the audit flags.

    slack = step_slack(cfg)          # {arm: {task: {counter: tokens}}}
    flagged = used < limit - slack[arm][task].get(counter, 0.0)
"""

from __future__ import annotations

from typing import Any

from ..config import ExperimentConfig
from ..config.budget_checks import step_worst
from ..config.check_arms import resolved_arms, task_turns
from .flag import Flag


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


def run_flags(
    cfg: ExperimentConfig,
    arm: str,
    runs: list[dict[str, Any]],
    code: str,
    slack: dict[str, dict[str, float]],
) -> list[Flag]:
    """A run's flags: run by other code; consumption short of the matched budget, for a finished
    run that spent under 90% of it and left room for another step (``slack``: per task, what one
    step of the arm reserves per counter, :func:`step_slack`; a run that left less
    could not take one), or not final, for a run that did not finish."""

    flags = []
    for run in runs:
        if run["code_version"] != code:
            why = f"run by other code ({run['code_version']}; now {code}), reused on request"
            flags.append(Flag(arm, "code", why + " (--reuse-finished)", run["run_id"]))
        counters = run["counters"] or {}
        for counter, limit in cfg.budget.items():
            used = counters.get(counter, 0.0)
            step = slack.get(run.get("task"), {}).get(counter, 0.0)
            if run["state"] == "finished" and used < 0.9 * limit and limit - used > step:
                why = (
                    f"consumed {used:g} of {limit:g} {counter} (< 90% of the matched budget, "
                    f"with room left for another step: it reserves {step:g})"
                )
                flags.append(Flag(arm, "consumption", why, run["run_id"]))
            if run["state"] != "finished":
                why = f"run is {run['state']}: consumption not final"
                flags.append(Flag(arm, "consumption", why, run["run_id"]))
    return flags
