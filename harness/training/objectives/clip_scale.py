"""weight.clip_scale: a sequence ratio's clip bounds as multiples of the spread of its
log-ratio, measured once per run after its first optimizer step that moved the policy, and kept
in the checkpoint."""

from __future__ import annotations

from typing import Any

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
        return self.ctx.blanks.weight.clip_scale is not None and self.measured is None

    def scaled(self, blanks):
        """``blanks`` with the measured bounds in eps_low/eps_high (unchanged before the
        measurement, or without clip_scale)."""

        if self.measured is None:
            return blanks
        eps = {k: self.measured[k] for k in ("eps_low", "eps_high")}
        return blanks.model_copy(update={"weight": blanks.weight.model_copy(update=eps)})

    def measure(self, batch: TrajectoryBatch, rows: list[int], mask, old_logp) -> None:
        """The spread over ``rows`` of the sequence log-ratio to pi_old ``[B, T]``, with the
        policy as the optimizer steps so far left it, sets the bounds for the rest of the run. A
        spread of 0 (the policy did not move: a warmed-up learning rate starts at 0) measures
        nothing, and the next minibatch tries again."""

        ctx, scale = self.ctx, self.ctx.blanks.weight.clip_scale
        was_training = ctx.model.training
        ctx.model.eval()
        logp = ctx.batched_logprobs(ctx.model, batch.select(rows))
        ctx.model.train(was_training)
        m = mask[rows]
        has = m.sum(1) > 0
        if int(has.sum()) < 2:
            return
        d = sequence_log_ratio(logp.double(), old_logp[rows].double(), m)[has]
        sigma = float(d.std(unbiased=False))
        if not sigma > 1e-12:  # also NaN
            return
        self.measured = {
            "sigma": sigma,
            "eps_low": scale.low * sigma,
            "eps_high": scale.high * sigma,
            "step": float(ctx.step),
        }

    def metrics(self) -> dict[str, float]:
        return {f"clip_scale.{k}": v for k, v in (self.measured or {}).items()}

    def state_dict(self) -> dict[str, Any]:
        return {"clip_scale": dict(self.measured)} if self.measured is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "clip_scale" in state:
            self.measured = dict(state["clip_scale"])
