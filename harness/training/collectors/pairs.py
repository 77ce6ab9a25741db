"""DPO preference pairs: G >= 2 scored rollouts of each instance from the initial (reference) policy;
the best and the worst response of a group whose rewards differ make a pair. The other responses
are launched and discarded (as "dynamic_sampling": dropped by a data filter)."""

from __future__ import annotations

import torch

from ...rollout.engine import HFEngine
from ..base import Collected, Collector, Stateless
from ..context import RunContext


class PreferencePairs(Stateless, Collector):
    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.n_prompts = ctx.settings.rollout.prompts_per_step
        self.group_size = max(2, ctx.group_size)

    def worst_case(self) -> dict[str, float]:
        return self.ctx.worst_rollouts(self.n_prompts * self.group_size)

    def collect(self) -> Collected:
        ctx = self.ctx  # one reservation: the loop checked that the step's worst case fits
        with ctx.meter.must_reserve(self.worst_case(), f"pairs step {ctx.step}") as charge:
            calls0 = ctx.gate.counts()
            engine = HFEngine(ctx.ref_model, ctx.tokenizer)
            batch = ctx.episodes(engine, ctx.train_instances(self.n_prompts), self.group_size)
            charge.actual = ctx.rollout_cost([batch], calls0)
        chosen, rejected = [], []
        for g in torch.unique(batch.group_ids).tolist():
            rows = (batch.group_ids == g).nonzero().flatten()
            r = batch.reward[rows]
            if float(r.max()) > float(r.min()):
                chosen.append(int(rows[r.argmax()]))
                rejected.append(int(rows[r.argmin()]))
        unused = [i for i in range(batch.size) if i not in set(chosen) | set(rejected)]
        tokens = batch.row_action_tokens()
        ctx.meter.discard("dynamic_sampling", float(tokens[unused].sum()), len(unused))
        if not chosen:
            return Collected(None, {"skipped": 1.0, "pairs": 0.0})
        pair_batch = batch.select(chosen + rejected)
        return Collected(pair_batch, {"reward_mean": float(batch.reward.mean())}, pairs=len(chosen))
