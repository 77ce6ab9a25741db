"""Deterministic lag (``data.lag: k``): each batch is sampled with the policy of k versions earlier;
with ``data.broadcast_every: n`` the behaviour policy gets new weights only every n versions.

A ring keeps CPU snapshots of the last k + 1 policy versions (a version is the weights after a
step's sync); a frozen copy of the policy, loaded with the snapshot of version ``max(0, v - k)``
where v is the trainer's version, samples the round. Nothing else changes: the trainer recomputes
pi_old with the current weights, so the lag shows up as behaviour-vs-current divergence (the
``mismatch.*`` metrics) and truncated IS (``weight.tis_cap``) can correct it. Same process, same
RNG: a lagged run is reproducible bit for bit from its seed, and ``lag: 0`` never builds this at
all.
"""

from __future__ import annotations

from typing import Any

import torch

from sixblanks.algorithms.offpolicy import within_staleness

from ...rollout.engine import HFEngine
from ..base import TrainingError
from ..context import RunContext, frozen_copy


def snapshot(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


class LaggedPolicy:
    """The behaviour policy k versions behind the trainer, with its own HF engine."""

    def __init__(self, ctx: RunContext, lag: int, every: int = 1):
        if ctx.settings.rollout.backend != "hf":
            raise TrainingError(
                f"{ctx.settings.name}: data.lag needs rollout.backend 'hf' (a vLLM engine holds "
                "one weight version); with vLLM, lag through data.concurrent (a collector with "
                "an engine of its own)"
            )
        self.ctx, self.lag, self.every = ctx, lag, every
        self.model = frozen_copy(ctx.model)
        self.engine = ctx.hf_engine(self.model)
        self.ring: dict[int, dict[str, torch.Tensor]] = {}
        self.loaded: int | None = None

    def engine_for_step(self) -> HFEngine:
        """The engine that samples this step: weights of version max(0, v - lag), rounded down to
        the last broadcast (a multiple of ``data.broadcast_every``)."""

        v = self.ctx.engine.policy_version
        if v not in self.ring:
            self.ring[v] = snapshot(self.ctx.model)
        target = max(0, v - self.lag)
        target = max(min(self.ring), target - target % self.every)
        for old in [u for u in self.ring if u < target]:
            del self.ring[old]
        if self.loaded != target:
            self.model.load_state_dict(self.ring[target])
            self.loaded = target
        self.engine.policy_version = target
        return self.engine

    def state_dict(self) -> dict[str, Any]:
        return {"ring": self.ring}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ring = dict(state["ring"])
        self.loaded = None


def drop_stale(ctx: RunContext, batch) -> tuple[list[int], dict[str, float]]:
    """Bounded staleness (``data.staleness: K``): rows more than K versions behind the trainer are
    discarded (reason ``staleness``). Returns (the row indices kept, lag metrics of the batch)."""

    behind = (ctx.engine.policy_version - batch.policy_version).clamp(min=0)
    metrics = {
        "lag.versions_behind": float(behind.double().mean()),
        "lag.versions_behind_max": float(behind.max()) if batch.size else 0.0,
    }
    bound = ctx.blanks.data.staleness
    stale = (
        ~within_staleness(behind, bound)
        if bound is not None
        else torch.zeros_like(behind, dtype=torch.bool)
    )
    if bool((~stale).any()):  # what is kept: never more than the bound behind
        metrics["lag.kept_behind_max"] = float(behind[~stale].max())
    if bool(stale.any()):
        tokens = batch.row_action_tokens()
        ctx.meter.discard("staleness", float(tokens[stale].sum()), int(stale.sum()))
        metrics["lag.stale_dropped"] = float(stale.sum())
    return (~stale).nonzero().flatten().tolist(), metrics
