"""Rung 1, the contract: fresh rollouts of the warm-start policy through the trajectory-contract
checks (masks, behavior against recomputed log-probs, ratio 1 on-policy, rewards, groups, turns),
with the sampler-trainer mismatch the arm's training rollouts carry."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np

from ...rollout.engine import SamplerMismatch
from ...seeds import TRAIN_SEED_RANGE
from ...training.contract import fresh_episodes, recompute_logprobs, sample_and_check
from .rows import CONTRACT, RungResult, engine_name


def contract_rung(
    engine, model, tok, task, rollout, group_size: int, seed: int
) -> list[RungResult]:
    """Rung 1 on ``engine``'s rollouts of ``model``: ``rollout.prompts_per_step`` training
    instances drawn with ``seed``, ``group_size`` samples each, through the contract checks."""

    r = rollout
    rng = np.random.default_rng(seed)
    instances = task.instances(
        [int(x) for x in rng.integers(0, TRAIN_SEED_RANGE, r.prompts_per_step)]
    )
    batch, rep = sample_and_check(
        engine,
        model,
        tok,
        task,
        instances,
        group_size,
        r,
        seed=seed,
        reward_range=task.reward_range,
    )
    figures = mismatch_figures(engine, model, tok, task, instances, group_size, r, seed, batch)
    detail = {**rep.to_dict(), "engine": engine_name(engine), "mismatch": figures}
    if rep.passed:
        reason = f"every contract check holds on {len(instances) * group_size} fresh rollouts"
        summary = rep.summary() + _mismatch_line(figures)
        return [
            CONTRACT.row("fresh rollouts", "pass", summary, detail=detail),
            CONTRACT.verdict("pass", reason),
        ]
    fails = "; ".join(f"{f.name}: {f.detail}" for f in rep.failures)
    reason = "trajectory contract broken: " + ", ".join(f.name for f in rep.failures)
    return [
        CONTRACT.row(
            "fresh rollouts", "fail", f"trajectory contract broken: {fails}", detail=detail
        ),
        CONTRACT.verdict("fail", reason),
    ]


def mismatch_figures(
    engine, model, tok, task, instances, group_size: int, rollout, seed: int, batch
) -> dict[str, Any]:
    """The sampler-trainer mismatch the arm's training rollouts carry (every figure of
    :func:`~sixblanks.algorithms.weights.mismatch_stats`, before any correction): of the contract's
    own rollouts, or, where ``rollout.mismatch`` corrupts the training sampler on purpose (the
    contract is checked on the clean one), of the same instances sampled through it.
    ``injected``: the settings, or None."""

    from sixblanks.algorithms.weights import mismatch_stats

    injected = SamplerMismatch.of(getattr(rollout, "mismatch", None))
    if injected is not None:
        batch = fresh_episodes(engine, tok, task, instances, group_size, rollout, seed, injected)
    trainer = recompute_logprobs(model, batch, rollout.temperature, rollout.top_k, rollout.top_p)
    stats = mismatch_stats(trainer, batch.behavior_logprobs, batch.action_mask)
    return {
        "injected": None if injected is None else asdict(injected),
        **stats,
    }


def _mismatch_line(figures: dict[str, Any]) -> str:
    """The rung's sentence on the mismatch: the injected one's size, else nothing (float noise)."""

    if figures.get("injected") is None or "mismatch.kl" not in figures:
        return ""
    return (
        f"; the training sampler's injected mismatch: KL {figures['mismatch.kl']:.3g}, "
        f"mean |k - 1| {figures['mismatch.ratio_abs_dev']:.3g}, ESS {figures['mismatch.ess']:.3g} "
        "(before any correction)"
    )
