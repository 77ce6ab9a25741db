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
from sixblanks.algorithms.data import minibatches

from ..context import RunContext

Weights = torch.Tensor | dict[str, torch.Tensor]
"""Loss weights of a minibatch's units, sliced along with them (several kinds: a dict)."""
MicroStep = Callable[[list[int], Weights, int], dict[str, float]]
"""(unit indices of the micro-batch, their weights, epoch) -> summable metrics; calls backward."""


@dataclass
class Pass:
    optimizer_steps: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    """Metrics averaged over the minibatches that stepped."""
    grad_norms: list[float] = field(default_factory=list)
    early_stop: dict[str, Any] | None = None

    @property
    def grad_norm(self) -> float:
        return float(sum(self.grad_norms) / max(1, len(self.grad_norms)))

    def summary(self) -> dict[str, float]:
        """The averaged metrics, the mean gradient norm and the number of optimizer steps."""

        return {
            **self.metrics,
            "grad_norm": self.grad_norm,
            "optimizer_steps": float(self.optimizer_steps),
        }


def merge(into: dict[str, float], met: dict[str, float]) -> None:
    """Add micro-batch metrics (weighted sums); ``ratio_max`` is a maximum."""

    for k, v in met.items():
        into[k] = max(into.get(k, 0.0), v) if k == "ratio_max" else into.get(k, 0.0) + v


def accumulate(
    ctx: RunContext,
    units: int,
    weigh: Callable[[list[int]], Weights | None],
    micro_step: MicroStep,
    *,
    optimizers: tuple[torch.optim.Optimizer, ...] = (),
    before_step: Callable[[int, int, dict[str, float], Weights], dict | None] | None = None,
    after_step: Callable[[list[int]], None] | None = None,
) -> Pass:
    """Run the data blank's epochs x minibatches over ``units`` and step the policy after each.

    Args:
        weigh: loss weights of a minibatch's units (``[n, T]``, ``[n]``, or a dict of such), or None
            to skip the minibatch.
        micro_step: loss and backward of one micro-batch.
        optimizers: further optimizers zeroed with the policy's (a separate critic).
        before_step: (epoch, minibatch, metrics, weights) -> an early-stop record to stop before
            this step (target KL), or None.
        after_step: runs after each policy step with the minibatch's units (critic steps).
    """

    d = ctx.blanks.data
    micro = ctx.settings.rollout.micro_batch_size
    out, sums = Pass(), {}
    n_mb = 0
    for epoch, rows in minibatches(units, d.minibatches, d.epochs, ctx.gen):
        weights = weigh(rows)
        if weights is None:
            continue
        for opt in (ctx.optimizer, *optimizers):
            opt.zero_grad(set_to_none=True)
        mbm: dict[str, float] = {}
        for s in range(0, len(rows), micro):
            part = slice(s, s + micro)
            w = (
                {k: v[part] for k, v in weights.items()}
                if isinstance(weights, dict)
                else weights[part]
            )
            merge(mbm, micro_step(rows[part], w, epoch))
        if before_step is not None:
            stop = before_step(epoch, n_mb, mbm, weights)
            if stop is not None:
                out.early_stop = stop
                ctx.optimizer.zero_grad(set_to_none=True)
                break
        out.grad_norms.append(ctx.clip_and_step())
        if after_step is not None:
            after_step(rows)
        out.optimizer_steps += 1
        n_mb += 1
        merge_sum(sums, mbm)
    out.metrics = {k: v / max(1, n_mb) for k, v in sums.items()}
    return out


def merge_sum(into: dict[str, float], met: dict[str, float]) -> None:
    for k, v in met.items():
        into[k] = into.get(k, 0.0) + v
