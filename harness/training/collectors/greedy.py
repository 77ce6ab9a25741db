"""The greedy baseline of ReMax: one greedy (temperature 0) rollout of each instance a round
samples, run in the same round and charged with it. Its tokens are a cost of the estimator:
launched, never trained on (discarded as "baseline")."""

from __future__ import annotations

from ...rollout.agent import run_episodes
from ...rollout.engine import SamplingParams
from ...rollout.trajectory import TrajectoryBatch
from ..context import RunContext


class GreedyBaseline:
    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.params = SamplingParams(0.0, 1.0, 0, ctx.settings.rollout.max_new_tokens)

    def run(self, instances, engine=None) -> TrajectoryBatch:
        """Greedy rollouts of ``instances`` with ``engine`` (default: the current policy's)."""

        ctx = self.ctx
        return run_episodes(
            engine or ctx.engine,
            ctx.tokenizer,
            ctx.task,
            instances,
            1,
            self.params,
            ctx.gate,
            max_context_tokens=ctx.settings.rollout.max_prompt_tokens,
            generator=ctx.gen,
        )

    def charge(self, batch: TrajectoryBatch) -> None:
        self.ctx.meter.discard("baseline", batch.launched_tokens(), batch.size)
