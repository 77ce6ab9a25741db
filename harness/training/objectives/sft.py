"""Supervised fine-tuning as an objective: the NLL of demonstrated action tokens (w = 1, A = 1),
with the Z blank's weights over the optimizer-step batch (token-mean for the sft preset). The warm
start and the ``sft`` preset both train through it."""

from __future__ import annotations

from typing import Any

import torch

from sixblanks.algorithms.loss import sft_loss
from sixblanks.algorithms.normalization import loss_weights

from ..base import Collected, Objective, Prepared, Stateless, TrainingError
from ..context import RunContext
from .accumulate import accumulate


class SFT(Stateless, Objective):
    def __init__(self, ctx: RunContext, kl_to_reference: bool = True):
        self.ctx = ctx
        self.kl_to_reference = kl_to_reference

    def prepare(self, collected: Collected) -> Prepared:
        batch = collected.batch
        tensors = {}
        if self.kl_to_reference:
            tensors["ref_logp"] = self.ctx.batched_logprobs(self.ctx.ref_model, batch)
        return Prepared(batch, batch.action_mask, batch.size, tensors, {})

    def update(self, p: Prepared) -> dict[str, Any]:
        ctx, n = self.ctx, self.ctx.blanks.normalization
        dev = ctx.device

        def weigh(rows: list[int]) -> torch.Tensor:
            return loss_weights(
                p.mask[rows], n.mode, ctx.l_max, n.count_empty_rows, **p.batch.unit_ids(rows)
            )

        def micro_step(rows: list[int], weights: torch.Tensor, epoch: int) -> dict[str, float]:
            sub = p.batch.select(rows)
            logp, _ = ctx.logprobs(ctx.model, sub, grad=True)
            m, w = p.mask[rows].to(dev), weights.to(dev)
            loss = sft_loss(logp, m, w)
            if not torch.isfinite(loss):
                raise TrainingError(
                    f"{ctx.settings.name}: SFT loss is {float(loss)} at step {ctx.step}"
                )
            loss.backward()
            met = {"loss": float(loss.detach())}
            if "ref_logp" in p.tensors:
                ref = p.tensors["ref_logp"][rows].to(dev)
                met["kl"] = float(((logp.detach() - ref) * m * w).sum())
            return met

        ctx.model.train()
        out = accumulate(ctx, p.units, weigh, micro_step)
        ctx.model.eval()
        return out.summary()
