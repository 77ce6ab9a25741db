"""SFT demonstrations: each task's oracle played through its environment, so multi-turn
demonstrations carry real observations; mask 1 on the oracle's action tokens only.

Two sources: fresh training instances every step (the ``sft`` preset), or minibatches drawn from a
fixed pool (the warm start). Demonstration tokens count as launched (and, once trained, accepted).
"""

from __future__ import annotations

from typing import Any

import torch

from ...rollout.agent import Episode, encode_observation, episodes_to_batch, state_key
from ...rollout.trajectory import TrajectoryBatch
from ...seeds import train_seeds
from ...tasks.base import Task
from ...tasks.verify import VerifierGate
from ..base import Collected, Collector, TrainingError
from ..context import RunContext


def demonstration_batch(
    task: Task, tokenizer, seeds: list[int], max_context_tokens: int = 512
) -> TrajectoryBatch:
    """Oracle episodes of ``task`` on instances ``seeds``, with mask 1 on the oracle's action tokens."""

    if not task.has_oracle:
        raise ValueError(
            f"task '{task.name}' has no demonstration oracle; disable warm_start or add one"
        )
    gate = VerifierGate(task, timeout_s=None)
    episodes = []
    for seed in seeds:
        inst = task.make_instance(seed)
        env = task.make_env(inst, gate)
        obs, _ = env.reset(seed=inst.seed)
        ep = Episode(inst, len(episodes), env)
        ep.observations.append(obs)
        ep.add("obs", encode_observation(tokenizer, obs, first=True, task=task))
        ep.state_keys.append(state_key(ep.observations))
        for turn in range(max(1, task.max_turns)):
            action = task.oracle(inst, ep.observations)
            ids = tokenizer(action, add_special_tokens=False)["input_ids"]
            ep.add("action", ids, None, turn)
            ep.actions.append(action)
            res = env.step(action)
            ep.turn_rewards.append(res.reward)
            ep.terminated = bool(res.terminated)
            if res.terminated or res.truncated:
                ep.truncated = bool(res.truncated) and not res.terminated
                break
            obs_ids = encode_observation(tokenizer, res.observation, first=False, task=task)
            if len(ep.tokens) + len(obs_ids) > max_context_tokens:
                break
            ep.observations.append(res.observation)
            ep.add("obs", obs_ids)
            ep.state_keys.append(state_key(ep.observations))
        episodes.append(ep)
    return episodes_to_batch(episodes, tokenizer, 0, task.name)


class Demonstrations(Collector):
    """``pool`` None: n = prompts_per_step x G fresh oracle demonstrations per step. With a ``pool``,
    ``batch_size`` rows drawn uniformly with replacement (from ``seed``) each step."""

    def __init__(
        self,
        ctx: RunContext,
        pool: TrajectoryBatch | None = None,
        batch_size: int = 0,
        seed: int = 0,
    ):
        self.ctx, self.pool = ctx, pool
        rollout = ctx.settings.rollout
        self.n = (
            min(batch_size, pool.size)
            if pool is not None
            else rollout.prompts_per_step * ctx.group_size
        )
        self.pool_gen = torch.Generator().manual_seed(seed)
        longest = int(pool.row_action_tokens().max()) if pool is not None else 0
        self.max_tokens = max(longest, rollout.max_new_tokens * ctx.turns)

    def worst_case(self) -> dict[str, float]:
        return {
            "launched_tokens": float(self.n * self.max_tokens),
            "rollouts_launched": float(self.n),
        }

    def collect(self) -> Collected:
        ctx = self.ctx  # one reservation: the loop checked that the step's worst case fits
        with ctx.meter.must_reserve(self.worst_case(), f"demonstrations step {ctx.step}") as charge:
            if self.pool is None:
                seeds = train_seeds(ctx.rng, self.n)
                batch = demonstration_batch(ctx.task, ctx.tokenizer, seeds)
            else:
                idx = torch.randint(0, self.pool.size, (self.n,), generator=self.pool_gen)
                batch = self.pool.select(idx)
            tokens = float(batch.action_mask.sum())
            if tokens > self.worst_case()["launched_tokens"]:
                raise TrainingError(
                    "demonstrations are longer than rollout.max_new_tokens x the task's turns allows"
                )
            charge.actual = {"launched_tokens": tokens, "rollouts_launched": float(batch.size)}
        return Collected(batch)

    def state_dict(self) -> dict[str, Any]:
        return {"pool_gen": self.pool_gen.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pool_gen.set_state(state["pool_gen"])
