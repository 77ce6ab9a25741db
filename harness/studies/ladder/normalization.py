"""Rung 6, normalization: each Z of ``ladder.normalization_variants`` against the arm's, twice
where its gradient scale differs: as is (the weighting and the scale changed), and scale-matched
(the weighting only).

A mode's scale is its total loss weight on one sampled batch (the sum of its weights,
:func:`total_loss_weights`); its ratio c to the nominal's scales the gradient by c, which AdamW's
steps ignore except through the gradient-norm clip: the scale-matched variant clips at
``grad_clip`` x c, and so takes the steps of its weights rescaled to the nominal's total. Without
a clip every variant is its own scale-matched one.
"""

from __future__ import annotations

import random
from typing import Any

from ...seeds import train_seeds
from .context import RungContext, Variants
from .rows import NORMALIZATION, RungResult

SAME_SCALE = 1e-6
"""A ratio of total loss weights this close to 1 is the nominal's scale."""


def normalization(ctx: RungContext) -> list[RungResult]:
    from .stats import explain_scale  # numpy: loaded when the rung runs

    nominal = ctx.spec.blanks["normalization"]["mode"]
    key = f"Z={nominal} (nominal)"
    modes = [m.replace("_", "-") for m in ctx.cfg.ladder.normalization_variants]
    modes = [m for m in dict.fromkeys(modes) if m != nominal]
    clip = ctx.spec.optimizer.get("grad_clip")
    totals = total_loss_weights(ctx, [nominal, *modes]) if clip and modes else {}
    variants: Variants = {key: {}}
    scale: dict[str, dict[str, Any]] = {}
    for mode in modes:
        over = {"blanks_over": {"normalization": {"mode": mode}}}
        variants[f"Z={mode}"] = over
        scale[f"Z={mode}"] = _scale_of(ctx, mode, totals, nominal, clip)
        matched = scale[f"Z={mode}"].get("matched")
        if matched:
            variants[matched] = over | {
                "optimizer": {"grad_clip": clip * scale[f"Z={mode}"]["ratio"]}
            }
    rows = ctx.compare(*NORMALIZATION, variants, key)
    return explain_scale(rows, scale, clip)


def _scale_of(
    ctx: RungContext, mode: str, totals: dict[str, float], nominal: str, clip: float | None
) -> dict[str, Any]:
    """Mode ``mode``'s gradient scale against the nominal's: its ratio of total loss weights and
    the label of its scale-matched variant (None: none, its scale is the nominal's, unmeasured or,
    for an actor-critic arm, not matchable)."""

    if not totals or min(totals[mode], totals[nominal]) <= 0:  # no clip, or no token
        return {"mode": mode, "ratio": None, "matched": None}
    c = totals[mode] / totals[nominal]
    # an actor-critic arm's critic steps under the same clip, its value loss a token mean
    # whatever Z is: no clip rescales the policy's gradient alone
    critic = ctx.spec.blanks["advantage"]["estimator"] == "gae"
    if critic and abs(c - 1.0) > SAME_SCALE:
        return {"mode": mode, "ratio": c, "matched": None, "unmatchable": True}
    matched = None
    if abs(c - 1.0) > SAME_SCALE:
        matched = f"Z={mode} (scale-matched: grad_clip x{c:.3g})"
    return {
        "mode": mode,
        "total_weight": totals[mode],
        "nominal_total_weight": totals[nominal],
        "ratio": c,
        "matched": matched,
        "matched_grad_clip": clip * c if matched else None,
    }


def total_loss_weights(ctx: RungContext, modes: list[str]) -> dict[str, float]:
    """The sum of each mode's loss weights on one batch the arm's initial policy samples (rung
    2's prompts and generator): the scale a mode gives the gradient, relative to another's."""

    import numpy as np
    import torch

    from sixblanks.algorithms.normalization import loss_weights

    from ...rollout.agent import run_episodes
    from ...rollout.engine import SamplingParams

    model, tok = ctx.policy()
    r = ctx.rollout
    G = ctx.spec.blanks["data"].get("group_size") or r.group_size
    batch = run_episodes(
        ctx.engine(model, tok),
        tok,
        ctx.task,
        # training problems, drawn as the arm's own batches draw them: never a held-out one
        ctx.task.instances(train_seeds(random.Random(0), r.prompts_per_step, ctx.task)),
        G,
        SamplingParams(r.temperature, r.top_p, r.top_k, r.max_new_tokens),
        generator=torch.Generator().manual_seed(0),
    )
    n = ctx.spec.blanks["normalization"]
    l_max = n.get("l_max") or r.max_new_tokens * max(1, ctx.task.max_turns)
    # per optimizer step: the weights are computed on each minibatch (a mean mode sums to 1
    # on each, token-sum to the minibatch's tokens), so a step's scale is a minibatch's total
    parts = np.array_split(np.arange(batch.size), ctx.spec.blanks["data"]["minibatches"])
    out = {}
    for m in modes:
        sums = []
        for part in parts:
            rows = [int(i) for i in part]
            if not rows:
                continue
            w = loss_weights(
                batch.action_mask[rows], m, l_max, n["count_empty_rows"], **batch.unit_ids(rows)
            )
            sums.append(float(w.sum()))
        out[m] = float(np.mean(sums)) if sums else 0.0
    return out
