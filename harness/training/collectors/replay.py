"""A replay buffer of prompt groups (``data.replay``): each step's batch is its fresh groups plus up
to ``per_step`` groups drawn uniformly (from the run's generator) among those replayed fewer than
``reuse`` times; fresh groups join the buffer after the draw, and beyond ``capacity`` groups the
oldest (``fifo``) or a random one leaves. Replayed rows are appended after the fresh ones, and the
loop counts their trained tokens as ``replayed_tokens``: they were launched, and accepted or
discarded, once, when they were fresh."""

from __future__ import annotations

from typing import Any

import torch

from ...rollout.trajectory import TrajectoryBatch
from ..context import RunContext


class ReplayBuffer:
    def __init__(self, ctx: RunContext):
        self.ctx, self.spec = ctx, ctx.blanks.data.replay
        self.groups: list[
            dict[str, Any]
        ] = []  # {"batch": one group's rows, "uses": replays so far}

    def draw(self) -> TrajectoryBatch | None:
        """Up to ``per_step`` groups to train on again (their use counted), or None."""

        spec = self.spec
        eligible = [g for g in self.groups if g["uses"] < spec.reuse]
        k = min(spec.per_step, len(eligible))
        if k == 0:
            return None
        pick = sorted(torch.randperm(len(eligible), generator=self.ctx.gen)[:k].tolist())
        chosen = [eligible[i] for i in pick]
        for g in chosen:
            g["uses"] += 1
        self.groups = [g for g in self.groups if g["uses"] < spec.reuse]  # used up: they leave
        return TrajectoryBatch.concat([g["batch"] for g in chosen], self.ctx.pad_id)

    def add(self, batch: TrajectoryBatch) -> int:
        """Put a fresh batch's groups in; returns how many groups were evicted."""

        ids = batch.group_ids.tolist()
        for gid in dict.fromkeys(ids):
            rows = [i for i, g in enumerate(ids) if g == gid]
            self.groups.append({"batch": batch.select(rows), "uses": 0})
        evicted = 0
        while len(self.groups) > self.spec.capacity:
            i = 0
            if self.spec.eviction == "random":
                i = int(torch.randint(len(self.groups), (1,), generator=self.ctx.gen))
            self.groups.pop(i)
            evicted += 1
        return evicted

    def worst_case_tokens(self) -> float:
        """The most a draw can replay: per_step groups of G episodes at the length limits."""

        rollout = self.ctx.settings.rollout
        return float(
            self.spec.per_step * self.ctx.group_size * self.ctx.turns * rollout.max_new_tokens
        )

    def state_dict(self) -> dict[str, Any]:
        return {"groups": self.groups}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.groups = list(state["groups"])
