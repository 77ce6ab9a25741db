"""One update pass of the policy-gradient objective over a prepared batch, and the sampler-mismatch
measurement it takes on its training forwards.

:class:`PolicyPass` holds what the shared minibatch routine (:mod:`.accumulate`) calls back into:
the loss weights of a minibatch, one micro-batch's loss and backward, and the hook before each
optimizer step. :class:`MismatchProbe` records the trainer's log-probs of the rows it first sees
before that first step and compares them with the rollout's.
"""

from __future__ import annotations

from typing import Any

import torch

from sixblanks.algorithms.critic import approx_kl
from sixblanks.algorithms.loss import correction_stats, policy_loss
from sixblanks.algorithms.normalization import loss_weights
from sixblanks.algorithms.weights import mismatch_stats

from ...rollout.trajectory import TrajectoryBatch
from ..base import Prepared, TrainingError
from ..context import RunContext
from ..diagnostics import ENTROPY_SUM, entropy_token_sum, trained_params
from .accumulate import UpdatePass, accumulate
from .clip_scale import ClipScale


class MismatchProbe:
    """The trainer's log-probs against the rollout's, where no separate forward measured them
    (pi_old taken from the training forward, or the bypass form). Taken on the training forwards
    before the first optimizer step (the policy still the sampler's weights), so no update's drift
    is counted as mismatch; with several minibatches, the first minibatch's rows."""

    def __init__(self, batch: TrajectoryBatch):
        self.batch = batch
        self.fresh = torch.zeros(batch.action_mask.shape, dtype=torch.float32)
        """``[B, T]``: the trainer's log-probs of the rows seen, 0 elsewhere."""
        self.seen = torch.zeros(batch.size, dtype=torch.bool)
        """``[B]``: the rows whose log-probs ``fresh`` holds."""

    def record(self, rows: list[int], logp: torch.Tensor) -> None:
        """Keep the log-probs ``logp`` (``[n, T]``, the micro-batch's ``rows``) of the rows not
        seen before."""

        first = [i for i, r in enumerate(rows) if not self.seen[r]]
        if first:
            idx = [rows[i] for i in first]
            self.fresh[idx] = logp.detach()[first].float().cpu()
            self.seen[idx] = True

    def metrics(self, ctx: RunContext, blanks, mask: torch.Tensor, reused: bool) -> dict:
        """The mismatch on the tokens trained (``mask [B, T]`` of the rows seen: a minibatch with
        none is never forwarded); with pi_old from the training forward (``reused``), the
        truncated-IS share measured on it too."""

        fresh, seen = self.fresh, self.seen
        if ctx.dp is not None:  # each rank saw its share of the rows
            fresh, seen = ctx.dp.union_rows(fresh, seen)
        on = mask * seen[:, None].to(mask.dtype)
        behavior = self.batch.behavior_logprobs
        out = mismatch_stats(fresh, behavior, on)
        if reused:
            out.update(correction_stats(blanks, fresh, behavior, on))
        return out


class PolicyPass:
    """The state of one update pass: the prepared batch, the blanks at the pass's start
    (``blanks``) and those the loss uses (``loss_blanks``: weight.clip_scale's bounds, once
    measured mid-pass), whether an optimizer step was taken yet, and the mismatch measurement
    (None where a separate forward measured it in ``prepare``)."""

    def __init__(self, ctx: RunContext, p: Prepared, scale: ClipScale, probe):
        self.ctx, self.p, self.scale, self.probe = ctx, p, scale, probe
        self.blanks = scale.scaled(ctx.blanks)
        self.loss_blanks = self.blanks
        self.reused = p.tensors["old_logp"] is None  # pi_old is the training forward's, detached
        self.stepped = False
        measure = self.reused or self.blanks.weight.old_policy == "rollout"
        self.mismatch = MismatchProbe(p.batch) if measure else None

    @property
    def target_kl(self) -> float | None:
        return self.blanks.weight.target_kl

    def run(self) -> UpdatePass:
        """The data blank's epochs x minibatches over the batch, the model in training mode."""

        self.ctx.model.train()
        out = accumulate(
            self.ctx, self.p.units, self.weigh, self.micro_step, before_step=self.before_step
        )
        self.ctx.model.eval()
        return out

    def weigh(self, rows: list[int]) -> torch.Tensor | None:
        """The loss weights (the Z blank) of a minibatch's rows, ``[n, T]``; None where no token is
        trained. The clip_scale measurement, still pending after a step, is taken here first."""

        ctx, batch, mask = self.ctx, self.p.batch, self.p.mask
        sub = mask[rows]
        if float(sub.sum()) == 0:
            return None
        if self.scale.pending and self.stepped:
            b = self.blanks
            old = batch.behavior_logprobs if b.weight.old_policy == "rollout" else self.old_logp
            self.scale.measure(batch, rows, mask, old)
            self.loss_blanks = self.scale.scaled(ctx.blanks)
        n = self.blanks.normalization
        return loss_weights(sub, n.mode, ctx.l_max, n.count_empty_rows, **batch.unit_ids(rows))

    @property
    def old_logp(self) -> torch.Tensor | None:
        """pi_old's log-probs ``[B, T]`` (None: taken from the training forward)."""

        return self.p.tensors["old_logp"]

    def micro_step(self, rows: list[int], weights: torch.Tensor, epoch: int) -> dict[str, float]:
        """One micro-batch: the template loss on ``rows`` (weights ``[n, T]``), backpropagated."""

        ctx, t, mask, dev = self.ctx, self.p.tensors, self.p.mask, self.ctx.device
        sub = self.p.batch.select(rows)
        logp, ent = ctx.logprobs(ctx.train_module, sub, entropy=True, grad=True)
        if self.mismatch is not None and not self.stepped:
            self.mismatch.record(rows, logp)
        old = logp.detach() if self.reused else t["old_logp"][rows].to(dev)
        ref = t["ref_logp"]
        loss, met = policy_loss(
            self.loss_blanks,
            logp,
            old,
            t["adv"][rows].to(dev),
            mask[rows].to(dev),
            weights.to(dev),
            behavior_logp=sub.behavior_logprobs.to(dev),
            ref_logp=ref[rows].to(dev) if ref is not None else None,
            entropy=ent,
            turn_ids=sub.turn_ids.to(dev),
        )
        met[ENTROPY_SUM] = entropy_token_sum(ent, mask[rows])
        self._check_finite(loss, met, epoch)
        loss.backward()
        if self.target_kl is not None:  # the routine stops the epochs past 1.5 x target_kl
            kl = approx_kl(logp, old, mask[rows].to(dev))
            met["approx_kl_num"] = kl * float(weights.sum())
        return met

    def _check_finite(self, loss: torch.Tensor, met: dict[str, float], epoch: int) -> None:
        if not torch.isfinite(loss):
            ctx = self.ctx
            raise TrainingError(
                f"{ctx.settings.name}: loss is {float(loss.detach())} at step {ctx.step} "
                f"(epoch {epoch}); metrics {met}. Lower optimizer.lr or check the rewards."
            )

    def before_step(self) -> None:
        """Before each optimizer step (its gradient accumulated): the gradient-noise probe reads
        it, and from here on the policy is no longer the sampler's."""

        self.stepped = True
        if self.probe is not None:
            self.probe.add_update(trained_params(self.ctx.model))

    def mismatch_metrics(self) -> dict[str, Any]:
        """The sampler mismatch measured on the pass's forwards (empty where none was taken)."""

        if self.mismatch is None:
            return {}
        return self.mismatch.metrics(self.ctx, self.blanks, self.p.mask, self.reused)
