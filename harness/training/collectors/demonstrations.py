"""SFT demonstrations: each task's oracle played through the agent loop (harness/rollout/agent.py),
so multi-turn demonstrations carry real observations; mask 1 on the oracle's action tokens only.

The oracle plays as a rollout engine (:class:`OracleEngine`): where a policy would generate, it
answers each episode with ``task.oracle(instance, observations)``, tokenized; the agent loop does
the rest as for any rollout (environment steps, verifier calls, context limit, failed samples).

Two sources: fresh training instances every step (the ``sft`` preset), or minibatches drawn from a
fixed pool (the warm start). Demonstration tokens count as launched (and, once trained, accepted),
each demonstration as a rollout launched, and what playing them took as a rollout's does: its
environment steps, verifier calls and judge calls. Nothing is sampled, so no prompt tokens are
charged (a prompt fed to a policy to sample from). A pool was played once, when it was made: what
that took (``pool_cost``, from :func:`demonstration_pool`) is charged once, in the first step.
"""

from __future__ import annotations

from typing import Any

import torch

from ...rollout.agent import episodes_to_batch, play, start_episode
from ...rollout.engine import Generation, RolloutEngine, SamplingParams
from ...rollout.trajectory import TrajectoryBatch
from ...seeds import train_seeds
from ...tasks.base import Task
from ...tasks.verify import VerifierGate
from ..base import Collected, Collector, TrainingError
from ..context import RunContext, tool_cost

PLAYBACK = ("env_steps", "verifier_calls", "judge_calls", "tool_calls", "tool_seconds")
"""What playing demonstrations costs besides their tokens and rollouts (the code tool's programs
where a demonstration calls it)."""


class OracleEngine(RolloutEngine):
    """A rollout engine whose "generations" are the task's oracle actions for ``episodes`` (those
    the agent loop plays): each call answers the episodes not done, in order, with the oracle's next
    action, tokenized without special tokens; log-probs 0 (nothing was sampled)."""

    def __init__(self, task: Task, tokenizer, episodes: list):
        self.task, self.tokenizer, self.episodes = task, tokenizer, episodes

    def generate(self, prompts, params, n=1, generator=None) -> list[list[Generation]]:
        active = [ep for ep in self.episodes if not ep.done]
        if (
            n != 1
            or len(active) != len(prompts)
            or any(ep.tokens != list(p) for ep, p in zip(active, prompts))
        ):
            raise TrainingError("the oracle's playback lost track of its episodes")
        out = []
        for ep in active:
            action = self.task.oracle(ep.instance, ep.observations)
            ids = list(self.tokenizer(action, add_special_tokens=False)["input_ids"])
            out.append([Generation(ids, [0.0] * len(ids), "stop", action)])
        return out

    def load_weights(self, state_dict=None) -> None:
        pass


def play_demonstrations(
    task: Task,
    tokenizer,
    seeds: list[int],
    max_context_tokens: int = 512,
    gate: VerifierGate | None = None,
    params: SamplingParams | None = None,
) -> tuple[TrajectoryBatch, dict[str, float]]:
    """Oracle episodes of ``task`` on instances ``seeds`` through the agent loop, each its own
    group, with mask 1 on the oracle's action tokens; and what playing them took (environment steps,
    verifier and judge calls, counted on ``gate``). ``params``: the loop's limits (its
    ``max_new_tokens`` is kept free of the context after an observation; default 0)."""

    if not task.has_oracle:
        raise ValueError(
            f"task '{task.name}' has no demonstration oracle; disable warm_start or add one"
        )
    gate = gate or VerifierGate(task, timeout_s=None)
    calls0 = gate.counts()
    instances = task.instances(seeds)
    episodes = [start_episode(task, inst, gate, tokenizer, g) for g, inst in enumerate(instances)]
    params = params or SamplingParams(temperature=0.0, max_new_tokens=0)
    play(
        OracleEngine(task, tokenizer, episodes),
        tokenizer,
        task,
        episodes,
        params,
        max_context_tokens,
    )
    batch = episodes_to_batch(episodes, tokenizer, 0, task.name)
    verifier, judge = gate.counts()
    cost = {
        "env_steps": float(int(batch.n_turns.sum())),
        "verifier_calls": float(verifier - calls0[0]),
        "judge_calls": float(judge - calls0[1]),
        **tool_cost([batch]),
    }
    return batch, cost


def demonstration_pool(
    task: Task, tokenizer, seeds: list[int], max_context_tokens: int = 512, env_workers: int = 1
) -> tuple[TrajectoryBatch, dict[str, float]]:
    """:func:`play_demonstrations` for a pool made outside any run (the warm start's), where a
    failed sample would silently train on nothing: a demonstration that failed (its environment or
    verifier raised) raises here. Returns the pool and what playing it took (``pool_cost`` of
    :class:`Demonstrations`). ``env_workers``: threads for its environment steps (a code tool's
    programs)."""

    params = SamplingParams(temperature=0.0, max_new_tokens=0, env_workers=env_workers)
    batch, cost = play_demonstrations(task, tokenizer, seeds, max_context_tokens, params=params)
    if bool(batch.failed.any()):
        i = int(batch.failed.nonzero()[0])
        raise ValueError(
            f"task '{task.name}': the demonstration of instance {int(batch.instance_seeds[i])} "
            f"failed: {batch.failure_reasons[i]}"
        )
    return batch, cost


def demonstration_batch(
    task: Task, tokenizer, seeds: list[int], max_context_tokens: int = 512
) -> TrajectoryBatch:
    """The pool of :func:`demonstration_pool`, without its cost."""

    return demonstration_pool(task, tokenizer, seeds, max_context_tokens)[0]


class Demonstrations(Collector):
    """``pool`` None: n = prompts_per_step x G fresh oracle demonstrations per step, played through
    the agent loop on the run's verifier gate. With a ``pool``, ``batch_size`` rows drawn uniformly
    with replacement (from ``seed``) each step; ``pool_cost``: what playing the pool took, charged
    in the first step (None: made elsewhere, uncharged)."""

    def __init__(
        self,
        ctx: RunContext,
        pool: TrajectoryBatch | None = None,
        batch_size: int = 0,
        seed: int = 0,
        pool_cost: dict[str, float] | None = None,
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
        self.unpaid = {k: float(v) for k, v in (pool_cost or {}).items() if k in PLAYBACK}

    def worst_case(self) -> dict[str, float]:
        worst = {
            "launched_tokens": float(self.n * self.max_tokens),
            "rollouts_launched": float(self.n),
        }
        if self.pool is None:  # each demonstration may take every turn, a verifier call each
            rollouts = self.ctx.worst_rollouts(self.n)
            worst.update({k: rollouts[k] for k in PLAYBACK if k in rollouts})
        else:
            worst.update(self.unpaid)
        return worst

    def collect(self) -> Collected:
        ctx = self.ctx  # one reservation: the loop checked that the step's worst case fits
        with ctx.meter.must_reserve(self.worst_case(), f"demonstrations step {ctx.step}") as charge:
            if self.pool is None:
                seeds = train_seeds(ctx.rng, self.n, ctx.task)
                batch, cost = play_demonstrations(
                    ctx.task,
                    ctx.tokenizer,
                    seeds,
                    ctx.settings.rollout.max_prompt_tokens,
                    ctx.gate,
                    ctx.params,
                )
            else:
                idx = torch.randint(0, self.pool.size, (self.n,), generator=self.pool_gen)
                batch, cost = self.pool.select(idx), self.unpaid
            tokens = float(batch.launched_tokens())
            if tokens > self.worst_case()["launched_tokens"]:
                raise TrainingError(
                    "demonstrations are longer than rollout.max_new_tokens x the task's turns "
                    "allows"
                )
            charge.actual = {"launched_tokens": tokens, "rollouts_launched": float(batch.size)}
            charge.actual.update(cost)
        self.unpaid = {}
        return Collected(batch)

    def state_dict(self) -> dict[str, Any]:
        return {"pool_gen": self.pool_gen.get_state(), "unpaid": dict(self.unpaid)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pool_gen.set_state(state["pool_gen"])
        self.unpaid = dict(state.get("unpaid", {}))
