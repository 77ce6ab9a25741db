"""DPO as an objective: pairs (chosen, rejected) against the frozen reference, mean over pairs.

The minibatch routine splits pairs (not rows), so a pair's two sequences stay in one micro-batch.
"""

from __future__ import annotations

from typing import Any

import torch

from sixblanks.algorithms.loss import dpo_loss

from ..base import Collected, Objective, Prepared, Stateless, TrainingError
from ..context import RunContext
from .accumulate import accumulate


class DPO(Stateless, Objective):
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
        )

    def update(self, p: Prepared) -> dict[str, Any]:
        ctx, reg, k = self.ctx, self.ctx.blanks.regularizer, p.units
        dev = ctx.device

        def weigh(pairs: list[int]) -> torch.Tensor:
            return torch.full((len(pairs),), float(len(pairs)))  # the loss: a mean over these pairs

        def micro_step(pairs: list[int], weights: torch.Tensor, epoch: int) -> dict[str, float]:
            n = len(pairs)
            share = n / float(weights[0])  # this micro-batch's share of the minibatch (1 if whole)
            rows = pairs + [i + k for i in pairs]  # chosen, then rejected
            sub = p.batch.select(rows)
            m = sub.action_mask.to(dev)
            logp, _ = ctx.logprobs(ctx.model, sub, grad=True)
            ref_lp = p.tensors["ref_logp"][rows].to(dev)
            seq, ref_seq = (logp * m).sum(1), (ref_lp * m).sum(1)
            loss, met = dpo_loss(
                seq[:n], seq[n:], ref_seq[:n], ref_seq[n:], reg.dpo_beta, reg.dpo_label_smoothing
            )
            if not torch.isfinite(loss):
                raise TrainingError(
                    f"{ctx.settings.name}: DPO loss is {float(loss)} at step {ctx.step}"
                )
            (loss * share).backward()
            return {
                **{key: v * share for key, v in met.items()},
                "kl_num": float(((logp.detach() - ref_lp) * m).sum()),
                "kl_den": float(m.sum()),
            }

        ctx.model.train()
        out = accumulate(ctx, p.units, weigh, micro_step)
        ctx.model.eval()
        metrics = out.summary()
        kl = metrics.pop("kl_num") / max(
            metrics.pop("kl_den"), 1.0
        )  # token-mean KL to the reference
        return {**metrics, **p.metrics, "pairs": float(k), "kl": kl}
