"""DPO as an objective: pairs (chosen, rejected) against the frozen reference, mean over pairs.

The minibatch routine splits pairs (not rows), so a pair's two sequences stay in one micro-batch.
"""

from __future__ import annotations

from typing import Any

import torch
from sixblanks.algorithms.loss import dpo_loss

from ..base import Collected, Prepared, Stateless, TrainingError
from ..context import RunContext
from .accumulate import accumulate


class DPO(Stateless):
    def __init__(self, ctx: RunContext):
        self.ctx = ctx

    def prepare(self, collected: Collected) -> Prepared:
        batch = collected.batch
        ref_logp = self.ctx.batched_logprobs(self.ctx.ref_model, batch)
        return Prepared(
            batch,
            batch.action_mask,
            collected.pairs,
            {"ref_logp": ref_logp},
            dict(collected.metrics),
            collected,
        )

    def update(self, p: Prepared) -> dict[str, Any]:
        ctx, reg, k = self.ctx, self.ctx.blanks.regularizer, p.units
        dev = ctx.device
        kl_sum = [0.0]

        def weigh(pairs: list[int]) -> torch.Tensor:
            return torch.full((len(pairs),), 1.0 / k, dtype=torch.float64)  # the mean over pairs

        def micro_step(pairs: list[int], weights: torch.Tensor, epoch: int) -> dict[str, float]:
            n = len(pairs)
            share = n / k  # this micro-batch's share of the mean over pairs (exactly 1 when whole)
            sub = p.batch.select(pairs + [i + k for i in pairs])  # chosen, then rejected
            m = sub.action_mask.to(dev)
            logp, _ = ctx.logprobs(ctx.model, sub, grad=True)
            ref_lp = p.tensors["ref_logp"][pairs + [i + k for i in pairs]].to(dev)
            seq, ref_seq = (logp * m).sum(1), (ref_lp * m).sum(1)
            loss, met = dpo_loss(
                seq[:n], seq[n:], ref_seq[:n], ref_seq[n:], reg.dpo_beta, reg.dpo_label_smoothing
            )
            if not torch.isfinite(loss):
                raise TrainingError(
                    f"{ctx.settings.name}: DPO loss is {float(loss)} at step {ctx.step}"
                )
            (loss * share).backward()
            kl_sum[0] += float(((logp.detach() - ref_lp) * m).sum())
            return {key: v * share for key, v in met.items()}

        ctx.model.train()
        out = accumulate(ctx, p.units, weigh, micro_step)
        ctx.model.eval()
        return {
            **out.summary(),
            **p.metrics,
            "pairs": float(k),
            "kl": kl_sum[0] / float(p.mask.sum()),
        }
