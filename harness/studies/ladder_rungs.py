"""The ladder's first three rungs: checks of one policy that train nothing.

    1 contract         fresh rollouts through the trajectory-contract checks
    2 frozen_batch     one update on a frozen batch, twice and across a micro-batch split
    3 no_update_eval   the initial policy evaluated repeatedly on the validation split, then again
                       after an engine version bump (same weights): every instance must score the same

Each returns its row and its one verdict row (see :mod:`sixblanks.harness.studies.ladder_stats`).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from ..rollout.agent import run_episodes
from ..rollout.engine import SamplerMismatch, SamplingParams
from ..seeds import TRAIN_SEED_RANGE
from ..training.contract import fresh_episodes, recompute_logprobs, sample_and_check
from ..training.evaluate import evaluate
from .ladder_stats import SPLIT, RungResult, judge_no_update, verdict

REPEATS = 2
"""Evaluations before the engine version bump; one more follows it."""


def engine_name(engine) -> str:
    """The engine class that sampled a rung's rollouts (HFEngine, VLLMEngine), for its evidence."""

    return type(engine).__name__


def contract_rung(
    engine, model, tok, task, rollout, group_size: int, seed: int
) -> list[RungResult]:
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
            RungResult(1, "contract", "fresh rollouts", "pass", summary, detail=detail),
            verdict(1, "contract", "pass", reason),
        ]
    fails = "; ".join(f"{f.name}: {f.detail}" for f in rep.failures)
    reason = "trajectory contract broken: " + ", ".join(f.name for f in rep.failures)
    return [
        RungResult(
            1,
            "contract",
            "fresh rollouts",
            "fail",
            f"trajectory contract broken: {fails}",
            detail=detail,
        ),
        verdict(1, "contract", "fail", reason),
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


def _frozen_batch(engine, model, tok, task, rollout, blanks):
    """One batch of episodes with its pi_old log-probs, advantages, trained mask and loss weights
    (a process reward model's inputs stood in for), to update on repeatedly."""

    from sixblanks.algorithms.loss import compute_advantages
    from sixblanks.algorithms.normalization import loss_weights

    from ..training.policy import policy_logprobs

    r = rollout
    G = blanks.data.group_size or r.group_size
    l_max = r.max_new_tokens * max(1, task.max_turns)
    instances = task.instances(list(range(r.prompts_per_step)))
    batch = run_episodes(
        engine,
        tok,
        task,
        instances,
        G,
        SamplingParams(r.temperature, r.top_p, r.top_k, r.max_new_tokens),
        generator=torch.Generator().manual_seed(0),
    )
    with torch.no_grad():
        old, _ = policy_logprobs(model, batch.tokens, batch.attention_mask, r.temperature)
    adv, mask, _ = (
        compute_advantages(
            blanks,
            batch.reward,
            batch.action_mask,
            batch.group_ids,
            old_logp=old,
            ref_logp=old,
            baseline_rewards=batch.reward * 0,
            l_max=l_max,
            **batch.advantage_inputs(),
            # a process reward model's inputs, stood in for: this rung checks the loss and its
            # gradient on a frozen batch, not the second model
            step_scores=torch.where(batch.step_labels.isnan(), 0.5, batch.step_labels),
            process_rewards=torch.zeros_like(old),
        )
        if blanks.advantage.estimator != "gae"
        else (batch.action_mask * 0, batch.action_mask, {})
    )
    n = blanks.normalization
    w = loss_weights(
        mask, n.mode, l_max, n.count_empty_rows, **batch.unit_ids(list(range(batch.size)))
    )
    return batch, old, adv, mask, w


def _loss_and_grad(model, blanks, rollout, batch, old, adv, mask, w, splits: list[list[int]]):
    """The policy loss of ``batch`` accumulated over the row ``splits`` (micro-batches) and the
    gradient it leaves (flattened, copied)."""

    from sixblanks.algorithms.loss import policy_loss

    from ..training.policy import policy_logprobs

    model.zero_grad(set_to_none=True)
    total = 0.0
    for rows in splits:
        sub = batch.select(rows)
        lp, _ = policy_logprobs(model, sub.tokens, sub.attention_mask, rollout.temperature)
        loss, _ = policy_loss(
            blanks,
            lp,
            old[rows],
            adv[rows],
            mask[rows],
            w[rows],
            ref_logp=old[rows],
            behavior_logp=batch.behavior_logprobs[rows],  # off-policy corrections need it
        )
        loss.backward()
        total += float(loss.detach())
    g = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return total, g.clone()


def frozen_batch_rung(engine, model, tok, task, rollout, blanks) -> list[RungResult]:
    """Rung 2: one update on a frozen batch reproduces on a repeat and across a micro-batch split."""

    batch, old, adv, mask, w = _frozen_batch(engine, model, tok, task, rollout, blanks)

    def loss_and_grad(splits: list[list[int]]):
        return _loss_and_grad(model, blanks, rollout, batch, old, adv, mask, w, splits)

    rows = list(range(batch.size))
    l1, g1 = loss_and_grad([rows])
    l2, g2 = loss_and_grad([rows])
    half = batch.size // 2
    l3, g3 = loss_and_grad([rows[:half], rows[half:]])
    g_max = float(g1.abs().max())
    scale = max(g_max, 1e-12)
    rep_diff = float((g1 - g2).abs().max()) / scale
    split_diff = float((g1 - g3).abs().max()) / scale
    detail = {
        "loss": [l1, l2, l3],
        "grad_abs_max": g_max,
        "grad_rel_diff_repeat": rep_diff,
        "grad_rel_diff_split": split_diff,
        "engine": engine_name(engine),
    }
    ok = (
        abs(l1 - l2) <= 1e-6 * max(1, abs(l1))
        and abs(l1 - l3) <= 1e-5 * max(1, abs(l1))
        and rep_diff <= 1e-4
        and split_diff <= 1e-3
    )
    ev = (
        f"loss {l1:.6g} / repeat {l2:.6g} / 2 micro-batches {l3:.6g}; max relative grad difference: repeat "
        f"{rep_diff:.2g}, split {split_diff:.2g}"
    )
    if not ok:
        status, ev = "fail", "update not reproducible on a frozen batch: " + ev
        reason = f"the update differs on a repeat ({rep_diff:.2g}) or a micro-batch split ({split_diff:.2g})"
    elif g_max == 0.0:
        # a zero gradient reproduces trivially: no advantage signal in the batch, nothing shown
        status = "inconclusive"
        reason = f"the frozen batch's gradient is zero ({batch.size} samples without advantage signal): nothing to reproduce"
        ev = reason + "; " + ev
    else:
        status = "pass"
        reason = "one update reproduces on a repeat and across a micro-batch split"
    return [
        RungResult(2, "frozen_batch", "repeat + micro-batch split", status, ev, detail=detail),
        verdict(2, "frozen_batch", status, reason),
    ]


def no_update_rung(engine, model, tok, task, n: int, rollout) -> list[RungResult]:
    """``REPEATS`` evaluations of the unchanged policy on the validation split, then one after an
    engine version bump that reloads the same weights; every instance is compared across all."""

    runs: list[dict[str, Any]] = []
    for i in range(REPEATS + 1):
        if i == REPEATS:
            engine.load_weights({k: v.clone() for k, v in model.state_dict().items()})
        runs.append(
            evaluate(
                engine,
                tok,
                task,
                n,
                max_new_tokens=rollout.max_new_tokens,
                seed=0,
                max_context_tokens=rollout.max_prompt_tokens,
                split=SPLIT,
            )
        )
    status, ev, reason, detail = judge_no_update(
        [list(e["per_instance"]) for e in runs], REPEATS, tuple(task.reward_range)
    )
    splits = sorted({str(e.get("split")) for e in runs})  # what evaluate says it scored
    detail |= {"split": "/".join(splits), "engine": engine_name(engine)}
    label = f"{REPEATS + 1} evaluations, same policy"
    return [
        RungResult(3, "no_update_eval", label, status, ev, detail=detail),
        verdict(3, "no_update_eval", status, reason, split=SPLIT, n=n),
    ]
