"""Imagined rounds in a learned world model (``data.world_model``): each step runs
the usual real round(s); the world model (:mod:`harness.worldmodel`) is measured on the step's real
transitions before it trains on them (its held-out error: real-environment validation), then trains
on the most recent real transitions; after ``warmup_steps``, ``imagined_rounds`` rounds roll the
current policy in the model and join the step's batch.

Ledger: an imagined round's policy tokens are launched tokens like any sample the policy draws; its
steps are ``imagined_env_steps``, never ``env_steps`` (the real environment's alone), and it makes
no verifier call. Each imagined round is reserved at its worst case before launch.
"""

from __future__ import annotations

import random
from typing import Any

from ...rollout.agent import run_episodes
from ...rollout.trajectory import TrajectoryBatch
from ...tasks.verify import VerifierGate
from ..base import Collected, TrainingError
from ..context import RunContext
from ..meter import UNIT_KINDS, add_costs
from ..world_model import ImaginedTask, Transition, WorldModel, transitions
from .onpolicy import OnPolicyRounds


class ImaginedRounds(OnPolicyRounds):
    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        self.spec = ctx.blanks.data.world_model
        if ctx.turns < 2:
            raise TrainingError(
                f"{ctx.settings.name}: data.world_model learns the environment's responses between "
                f"turns; task '{ctx.task.name}' is single-turn (use guess_number, chain_arithmetic "
                "or plan_execute)"
            )
        self.model = WorldModel(
            ctx.ref_model, ctx.tokenizer, self.spec.lr, self.spec.max_obs_tokens, ctx.device
        )
        self.imagined = ImaginedTask(ctx.task, self.model, ctx.tokenizer)
        self.buffer: list[Transition] = []
        self.rng = random.Random(ctx.settings.train_seed)
        self.imagine = False  # this step's imagined rounds fit (set by worst_case)

    def imagined_worst(self) -> dict[str, float]:
        worst = self.ctx.worst_rollouts(self.n_prompts * self.ctx.group_size)
        worst["imagined_env_steps"] = worst.pop("env_steps")
        worst["verifier_calls"] = worst["judge_calls"] = 0.0
        return worst

    def worst_case(self) -> dict[str, float]:
        """The real round, plus the imagined rounds when they will run this step: past the
        warm-up, and while the budget still has room for them (else the step is real only)."""

        worst = super().worst_case()
        self.imagine = self.ctx.step >= self.spec.warmup_steps and self.spec.imagined_rounds > 0
        if self.imagine:
            full = dict(worst)
            for k, v in self.imagined_worst().items():
                full[k] = full.get(k, 0.0) + v * self.spec.imagined_rounds
            d = self.ctx.blanks.data  # with the update it bounds, as the loop admits a step
            bound = {
                "optimizer_steps": float(d.epochs * d.minibatches),
                "accepted_tokens": full["launched_tokens"],
                "rollouts_accepted": full["rollouts_launched"],
            }
            self.imagine = bool(self.buffer) and self.ctx.meter.fits(
                add_costs(full, bound), time_of=UNIT_KINDS
            )
            worst = full if self.imagine else worst
        return worst

    def collect(self) -> Collected:
        collected = super().collect()
        ctx, spec = self.ctx, self.spec
        if collected.batch is None:
            return collected
        fresh = transitions(collected.batch)
        metrics = self.model.measure(fresh)  # before training on them: held out
        self.buffer = (self.buffer + fresh)[-spec.buffer :]
        if self.buffer:  # every real episode so far failed: nothing to learn from yet
            # its own kind of time: a time-limited step's admission reserves it
            with ctx.meter.charge(f"world_model fit step {ctx.step}"):
                metrics["world_model.loss"] = self.model.fit(
                    self.buffer, spec.train_steps, spec.batch_size, self.rng
                )
        batches = [collected.batch]
        if self.imagine:
            for _ in range(spec.imagined_rounds):
                got = self.imagined_round()
                if got is None:
                    metrics["world_model.skipped"] = 1.0
                    break
                batches.append(got)
        imagined = batches[1:]
        metrics["world_model.imagined_episodes"] = float(sum(b.size for b in imagined))
        metrics["world_model.imagined_reward_mean"] = (
            float(TrajectoryBatch.concat(imagined, ctx.pad_id).reward.mean()) if imagined else 0.0
        )
        if imagined:  # the imagined rows follow the real ones (no replay buffer: refused)
            collected.batch = TrajectoryBatch.concat(batches, ctx.pad_id)
        collected.metrics.update(metrics)
        return collected

    def imagined_round(self) -> TrajectoryBatch | None:
        ctx = self.ctx
        charge = ctx.meter.reserve(
            self.imagined_worst(), f"imagined rollouts step {ctx.step}", UNIT_KINDS
        )
        if charge is None:
            return None
        with charge:
            batch = run_episodes(
                self.engine,
                ctx.tokenizer,
                self.imagined,
                ctx.train_instances(self.n_prompts),
                ctx.group_size,
                ctx.params,
                VerifierGate(self.imagined, timeout_s=None),
                max_context_tokens=ctx.settings.rollout.max_prompt_tokens,
                generator=ctx.gen,
                group_offset=self.group_counter,
            )
            self.group_counter += self.n_prompts
            cost = ctx.rollout_cost([batch], ctx.gate.counts())  # no real verifier call
            cost["imagined_env_steps"] = cost.pop("env_steps")
            charge.actual = cost
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "world_model": self.model.state_dict(),
            "buffer": [(t.context, t.obs, t.reward, t.done) for t in self.buffer],
            "rng": self.rng.getstate(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.model.load_state_dict(state["world_model"])
        self.buffer = [Transition(*t) for t in state["buffer"]]
        self.rng.setstate(state["rng"])
