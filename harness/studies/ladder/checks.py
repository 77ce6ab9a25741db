"""Rungs 1-3 as the ladder runs them: checks of the warm-start policy that train nothing.

Their work is in :mod:`.contract`, :mod:`.frozen_batch` and :mod:`.no_update`, imported when the
rung runs: they load torch, and the registry that lists the rungs is read without it.
"""

from __future__ import annotations

from ...layout import ExperimentDir
from .context import RungContext
from .rows import FROZEN_BATCH, RungResult


def contract(ctx: RungContext) -> list[RungResult]:
    """Rung 1: fresh rollouts of the warm-start policy, with the arm's group size, through the
    trajectory-contract checks."""

    from .contract import contract_rung

    model, tok = ctx.policy()
    G = ctx.spec.blanks["data"].get("group_size") or ctx.rollout.group_size
    engine = ctx.engine(model, tok)
    return contract_rung(engine, model, tok, ctx.task, ctx.rollout, G, ctx.seeds[0])


def frozen_batch(ctx: RungContext) -> list[RungResult]:
    """Rung 2: the arm's update as its runs build it (policy, reference, engine, objective), on a
    frozen batch stored in the output folder (``ExperimentDir.ladder_frozen_batch``)."""

    from ...orchestration.runner import build_trainer
    from ...training import TrainingError
    from .frozen_batch import frozen_batch_check

    try:
        trainer = build_trainer(ctx.spec, ctx.warm)
    except TrainingError as exc:  # e.g. a trained PRM on a task without step labels
        reason = f"the arm's update cannot be built: {exc}"
        return [
            FROZEN_BATCH.row("repeat + micro-batch split", "fail", reason),
            FROZEN_BATCH.verdict("fail", reason),
        ]
    path = ExperimentDir(ctx.out).ladder_frozen_batch
    return frozen_batch_check(trainer, path, policy=str(ctx.warm))


def no_update_eval(ctx: RungContext) -> list[RungResult]:
    """Rung 3: the warm-start policy evaluated repeatedly on the arm's evaluation size of
    validation instances, before and after an engine version bump."""

    from .no_update import no_update_rung

    model, tok = ctx.policy()
    n = int(ctx.spec.eval.get("size") or ctx.spec.task["eval_size"])
    engine = ctx.engine(model, tok)
    return no_update_rung(engine, model, tok, ctx.task, n, ctx.rollout)
