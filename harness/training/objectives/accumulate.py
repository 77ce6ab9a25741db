"""The one minibatch / micro-batch routine every objective uses.

``epochs`` passes over the batch's units (rows, or pairs for DPO), each split into ``minibatches``
optimizer steps; each minibatch's gradient is accumulated over micro-batches of at most
``micro_batch_size`` units. The loss weights of a minibatch are computed once on the whole
minibatch (the Z blank), so summing the micro-batch losses gives the minibatch loss exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from sixblanks.algorithms.critic import target_kl_exceeded
from sixblanks.algorithms.data import minibatches

from ...stopping import stop_point
from ..context import RunContext

Weights = torch.Tensor | dict[str, torch.Tensor]
"""Loss weights of a minibatch's units, sliced along with them (several kinds: a dict)."""
MicroStep = Callable[[list[int], Weights, int], dict[str, float]]
"""(unit indices of the micro-batch, their weights, epoch) -> summable metrics; calls backward."""


@dataclass
class UpdatePass:
    """What one update pass over a batch did: its optimizer steps, metrics, the gradient norm of
    each step and, where it stopped early (a target KL), why."""

    optimizer_steps: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    """The pass's metrics (:func:`finish`): token means, extremes, minibatch averages."""
    grad_norms: list[float] = field(default_factory=list)
    early_stop: dict[str, Any] | None = None

    @property
    def grad_norm(self) -> float:
        return float(sum(self.grad_norms) / max(1, len(self.grad_norms)))

    def early_stop_metrics(self) -> dict[str, float]:
        """Where the target-KL rule stopped the epochs (-1: it did not)."""

        stop = self.early_stop
        out = {
            "early_stop_epoch": float(stop["epoch"]) if stop else -1.0,
            "early_stop_minibatch": float(stop["minibatch"]) if stop else -1.0,
        }
        if stop:
            out["early_stop_approx_kl"] = stop["approx_kl"]
        return out

    def summary(self) -> dict[str, float]:
        """The averaged metrics, the mean gradient norm and the number of optimizer steps."""

        return {
            **self.metrics,
            "grad_norm": self.grad_norm,
            "optimizer_steps": float(self.optimizer_steps),
        }


PLAIN_MEANS = {
    "clip_frac": ("clip_count", "action_tokens"),
    "ratio_mean": ("ratio_sum", "action_tokens"),
    "value_clip_frac": ("value_clip_count", "value_tokens"),
    "entropy_token_mean": ("entropy_token_sum", "action_tokens"),
    # the bypass form's corrections (weight.old_policy: rollout), measured in the loss
    "bypass.zeroed_frac": ("bypass_zeroed_count", "action_tokens"),
    "tis.truncated_frac": ("tis_capped_count", "action_tokens"),
    # within-sequence spread of the token log-ratios, and sequences one outlier token pushed out
    "ratio.seq_logratio_std": ("seq_logratio_std_sum", "seq_count"),
    "ratio.outlier_seq_frac": ("seq_outlier_count", "seq_count"),
}
"""Metrics that are plain means over tokens: (numerator count, denominator count), both summed over
every micro-batch, minibatch and epoch of the pass; a metric whose numerator no micro-step reported
is absent."""

SPREADS = {
    # the spread across sequences of the sequence log-ratio: the scale a sequence-level clip acts on
    "ratio.seq_logratio_spread": ("seq_logratio_sum", "seq_logratio_sqsum", "seq_count"),
}
"""Standard deviations (ddof 0) over the pass: (sum, sum of squares, count), each summed over every
micro-batch, minibatch and epoch."""


def merge(into: dict[str, float], met: dict[str, float]) -> None:
    """Add metrics up: sums, except ``*_max`` (a maximum) and ``*_min`` (a minimum)."""

    for k, v in met.items():
        if k not in into:
            into[k] = v
        elif k.endswith("_max"):
            into[k] = max(into[k], v)
        elif k.endswith("_min"):
            into[k] = min(into[k], v)
        else:
            into[k] += v


def finish(sums: dict[str, float], n_minibatches: int) -> dict[str, float]:
    """A pass's metrics: plain means over tokens (:data:`PLAIN_MEANS`), extremes over the whole
    pass, everything else (Z-weighted minibatch losses) averaged over its minibatches."""

    sums = dict(sums)
    out = {}
    for name, (total, squares, count) in SPREADS.items():
        if total in sums and squares in sums and count in sums:
            n = max(sums[count], 1.0)
            mean = sums.pop(total) / n
            out[name] = max(sums.pop(squares) / n - mean * mean, 0.0) ** 0.5
    for name, (num, den) in PLAIN_MEANS.items():
        if den in sums and num in sums:
            out[name] = sums.pop(num) / max(sums[den], 1.0)
    for den in {d for _, d in PLAIN_MEANS.values()}:
        sums.pop(den, None)
    for k, v in sums.items():
        out[k] = v if k.endswith(("_max", "_min")) else v / max(1, n_minibatches)
    return out


def accumulate(
    ctx: RunContext,
    units: int,
    weigh: Callable[[list[int]], Weights | None],
    micro_step: MicroStep,
    *,
    optimizers: tuple[torch.optim.Optimizer, ...] = (),
    after_step: Callable[[list[int]], None] | None = None,
    before_step: Callable[[], None] | None = None,
) -> UpdatePass:
    """Run the data blank's epochs x minibatches over ``units`` and step the policy after each.

    Target KL (``weight.target_kl``): where micro-steps report ``approx_kl_num`` (their approx KL to
    pi_old times their share of the loss weights), the minibatch's approx KL is checked before its
    step, and the epochs stop once it exceeds 1.5 x target_kl.

    Args:
        weigh: loss weights of a minibatch's units (``[n, T]``, ``[n]``, or a dict of such), or None
            to skip the minibatch.
        micro_step: loss and backward of one micro-batch.
        optimizers: further optimizers zeroed with the policy's (a separate critic).
        after_step: runs after each policy step with the minibatch's units (critic steps).
        before_step: runs before each policy step, its gradient accumulated and not yet clipped
            (the gradient-noise probe reads it).
    """

    d = ctx.blanks.data
    out, sums = UpdatePass(), {}
    n_mb = 0
    for epoch, rows in minibatches(units, d.minibatches, d.epochs, ctx.gen):
        weights = weigh(rows)
        if weights is None:
            continue
        for opt in (ctx.optimizer, *optimizers):
            opt.zero_grad(set_to_none=True)
        mbm = _minibatch_backward(ctx, rows, weights, epoch, micro_step)
        if "approx_kl_num" in mbm:
            w = weights["loss"] if isinstance(weights, dict) else weights
            kl_mb = mbm.pop("approx_kl_num") / max(float(w.sum()), 1e-12)
            mbm["approx_kl"] = kl_mb
            if target_kl_exceeded(kl_mb, ctx.blanks.weight.target_kl):
                out.early_stop = {"epoch": epoch, "minibatch": n_mb, "approx_kl": kl_mb}
                ctx.optimizer.zero_grad(set_to_none=True)
                break
        if ctx.dp is not None:  # the ranks' gradients were averaged: their sum is the update
            ctx.dp.scale_grads(ctx.model)
        if before_step is not None:
            before_step()
        out.grad_norms.append(ctx.clip_and_step())
        if after_step is not None:
            after_step(rows)
        out.optimizer_steps += 1
        n_mb += 1
        merge(sums, mbm)
    out.metrics = finish(sums, n_mb)
    return out


def _minibatch_backward(
    ctx: RunContext, rows: list[int], weights: Weights, epoch: int, micro_step: MicroStep
) -> dict[str, float]:
    """A minibatch's gradient, accumulated over micro-batches of at most ``micro_batch_size`` of
    its units (or, data parallel, over this rank's share of them), and its metrics summed."""

    if ctx.dp is not None:  # this rank's share of the rows, the metrics of all of them
        return ranks_micro_steps(ctx, rows, weights, epoch, micro_step)
    micro = ctx.settings.rollout.micro_batch_size
    mbm: dict[str, float] = {}
    for s in range(0, len(rows), micro):
        stop_point("update")  # Ctrl-C: between micro-batches (harness/stopping.py)
        part = slice(s, s + micro)
        merge(mbm, micro_step(rows[part], _take(weights, part), epoch))
    return mbm


def _take(weights: Weights, part) -> Weights:
    """The weights of some of a minibatch's units (a slice, or a list of positions)."""

    if isinstance(weights, dict):
        return {k: v[part] for k, v in weights.items()}
    return weights[part]


def ranks_micro_steps(
    ctx: RunContext, rows: list[int], weights: Weights, epoch: int, micro_step: MicroStep
) -> dict[str, float]:
    """One minibatch under data parallelism: this rank's contiguous share of its rows, in as many
    micro-batches as every other rank runs (a rank out of rows forwards the minibatch's first
    row at weight zero: a backward that changes nothing but takes part in the collectives; its
    metrics are dropped); gradients synchronized on the last. Returns the micro-steps' metrics
    merged over every rank (the whole minibatch's)."""

    dp, mine = ctx.dp, {}
    parts = dp.micro_parts(len(rows), ctx.settings.rollout.micro_batch_size)
    for i, pos in enumerate(parts):
        stop_point("update")
        w = _take(weights, pos or [0])
        if not pos:
            w = {k: v * 0 for k, v in w.items()} if isinstance(w, dict) else w * 0
        with dp.sync(ctx.train_module, on=i == len(parts) - 1):
            met = micro_step([rows[j] for j in pos or [0]], w, epoch)
        if pos:
            merge(mine, met)
    return dp.merge_metrics(mine, merge)
