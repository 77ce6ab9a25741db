"""weight.clip_scale: a sequence ratio's clip bounds as multiples of the spread of its
log-ratio, measured once per run after its first optimizer step that moved the policy, and kept
in the checkpoint."""

from __future__ import annotations

from typing import Any

import torch

from sixblanks.algorithms.weights import sequence_log_ratio

from ...rollout.trajectory import TrajectoryBatch
from ..context import RunContext


class ClipScale:
    """The measurement (``measured``: the spread sigma, the bounds it set, the step) and the
    blanks with its bounds."""

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.measured: dict[str, float] | None = None

    @property
    def pending(self) -> bool:
        """Whether this step's updates measure: the bounds are unset and the learning rate is the
        full one (past any warm-up: a step at a fraction of it moves the policy that fraction as
        far); a learning rate of 0 never moves it, so nothing is ever measured."""

        opt = self.ctx.settings.optimizer
        full = not opt.warmup_steps or self.ctx.step + 1 >= opt.warmup_steps
        return (
            self.ctx.blanks.weight.clip_scale is not None
            and self.measured is None
            and full
            and opt.lr > 0
        )

    def scaled(self, blanks):
        """``blanks`` with the measured bounds in eps_low/eps_high (unchanged before the
        measurement, or without clip_scale)."""

        if self.measured is None:
            return blanks
        eps = {k: self.measured[k] for k in ("eps_low", "eps_high")}
        return blanks.model_copy(update={"weight": blanks.weight.model_copy(update=eps)})

    def measure(self, batch: TrajectoryBatch, rows: list[int], mask, old_logp) -> None:
        """The spread over ``rows`` of the sequence log-ratio to pi_old ``[B, T]`` (one value per
        sequence: per trajectory, or per turn with ``weight.sequence: turn``; clamped as the
        loss clamps it), with the policy as this step's first optimizer step left it, sets the
        bounds for the rest of the run. A spread of 0 (the policy did not move: the minibatch
        before had no gradient, every advantage 0) measures nothing, and the next minibatch
        tries again."""

        ctx, w = self.ctx, self.ctx.blanks.weight
        was_training = ctx.model.training
        ctx.model.eval()
        sub = batch.select(rows)
        logp = ctx.batched_logprobs(ctx.model, sub)
        ctx.model.train(was_training)
        d = sequence_values(
            logp.double(),
            old_logp[rows].double(),
            mask[rows],
            sub.turn_ids,
            w.sequence,
            w.log_ratio_clamp,
        )
        if d.numel() < 2:
            return
        sigma = float(d.std(unbiased=False))
        if not sigma > 1e-12:  # also NaN
            return
        self.measured = {
            "sigma": sigma,
            "eps_low": w.clip_scale.low * sigma,
            "eps_high": w.clip_scale.high * sigma,
            "step": float(ctx.step),
        }

    def metrics(self) -> dict[str, float]:
        return {f"clip_scale.{k}": v for k, v in (self.measured or {}).items()}

    def state_dict(self) -> dict[str, Any]:
        return {"clip_scale": dict(self.measured)} if self.measured is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "clip_scale" in state:
            self.measured = dict(state["clip_scale"])


def sequence_values(logp, old_logp, mask, turn_ids, sequence: str, clamp: float) -> torch.Tensor:
    """The log of each sequence's ratio: per row (``trajectory``) or per (row, turn) segment
    (``turn``) with an action token, the mean of log pi - log pi_old over its action tokens,
    clamped to [-clamp, clamp]. ``[B, T]`` inputs; returns ``[S]``, S the sequences."""

    m = mask > 0
    if sequence == "trajectory":
        has = m.any(1)
        return sequence_log_ratio(logp, old_logp, mask, clamp)[has]
    d = logp - old_logp
    out = []
    for i in range(d.shape[0]):
        for k in torch.unique(turn_ids[i][m[i]]).tolist():
            on = m[i] & (turn_ids[i] == k)
            out.append(d[i][on].mean().clamp(-clamp, clamp))
    return torch.stack(out) if out else d.new_zeros(0)
