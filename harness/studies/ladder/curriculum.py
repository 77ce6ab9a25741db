"""Rung 4, the curriculum: the task's difficulty distribution, and the share of groups with a
reward spread (a learning signal for a group-relative arm) at the start and over a short run."""

from __future__ import annotations

import random
from collections.abc import Sequence

from ...seeds import train_seeds
from .context import RungContext
from .rows import CURRICULUM, RungResult

DIFFICULTY_SEEDS = 200
"""Training instances whose difficulty the histogram counts (drawn as training draws them, so the
histogram is that of what the arm trains on, and no held-out problem is looked at)."""
SIGNAL_FLOOR = 0.1
"""Under this share of groups with a learning signal the rung cannot call the curriculum fine."""


def curriculum(ctx: RungContext) -> list[RungResult]:
    import numpy as np  # loaded when the rung runs: the registry is read without it

    seeds = train_seeds(random.Random(0), DIFFICULTY_SEEDS, ctx.task)
    diffs = [i.difficulty for i in ctx.task.instances(seeds)]
    name = f"ladder rung {CURRICULUM.number} ({CURRICULUM.name}) short run"
    run = ctx.train(seed=ctx.seeds[0], name=name)
    hist = {str(k): int(v) for k, v in zip(*np.unique(diffs, return_counts=True))}
    if run.diverged:
        reason = f"the short run diverged: {run.error}"
        detail = {"hist": hist, "engine": run.engine}
        ev = f"difficulty histogram {hist}; {reason}"
        return [
            CURRICULUM.row("short run", "inconclusive", ev, detail=detail),
            CURRICULUM.verdict("inconclusive", reason),
        ]
    tr = [t for t in run.trainable if t is not None]
    start = tr[0] if tr else 0.0
    mean = float(np.mean(tr)) if tr else 0.0
    detail = {
        "difficulty_hist": hist,
        "trainable_start": start,
        "trainable_mean": mean,
        "trainable": tr,
        "engine": run.engine,
        "split": run.split,
    }
    ev = (
        f"difficulty histogram {hist}; trainable-group fraction {start:.2f} at the start, "
        f"{mean:.2f} over the run"
    )
    status, reason = _judge_signal(ctx, run.trainable, mean)
    if status == "fail":
        ev = f"{reason}: {ev}"
    return [
        CURRICULUM.row("short run", status, ev, detail=detail),
        CURRICULUM.verdict(status, reason),
    ]


def _judge_signal(
    ctx: RungContext, trainable: Sequence[float | None], mean: float
) -> tuple[str, str]:
    """(status, reason) of the short run's trainable-group fractions, one per step (None where a
    step measured none); ``mean``: the mean of those measured."""

    data = ctx.cfg.resolved_blanks(ctx.arm).data
    G = data.group_size or ctx.rollout.group_size
    measured = [t for t in trainable if t is not None]
    if not measured and trainable:  # steps ran, none measured its groups
        if data.source != "rollouts":
            return "inconclusive", (
                f"data.source '{data.source}': the arm's collector samples no groups of "
                "the policy's own whose reward variance it measures"
            )
        if G == 1:
            return "inconclusive", (
                "the arm samples one response per prompt: no group of 2+ samples whose "
                "reward variance could be measured"
            )
        return "inconclusive", "no step measured the trainable-group fraction of its groups"
    if not measured:
        return "inconclusive", "no training step fit the rung budget: no group was measured"
    if mean == 0.0:
        return "fail", "no group has reward variance (every task too easy or too hard)"
    if mean < SIGNAL_FLOOR:
        return "inconclusive", (
            f"only {mean:.2f} of the groups carry a learning signal (under {SIGNAL_FLOOR:.2f})"
        )
    return "pass", f"{mean:.2f} of the groups carry a learning signal over a short run"
