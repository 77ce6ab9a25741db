"""Synchronous on-policy rounds: sample ``prompts_per_step`` instances, G episodes each, with the
current policy; with dynamic sampling (DAPO), drop groups whose rewards are all equal and sample new
rounds until the step's groups are filled or the round cap is hit. Every round is reserved at its
worst case before launch and charged at its actual cost; dropped groups are discarded by reason; the
census of each step says how many groups were launched, kept and dropped, and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sixblanks.algorithms.data import DynamicSampler

from ...rollout.trajectory import TrajectoryBatch
from ..base import Collected, Collector, TrainingError
from ..context import RunContext
from ..meter import UNIT_KINDS
from .greedy import GreedyBaseline
from .lagged import LaggedPolicy, drop_stale
from .pool import PromptPool
from .replay import ReplayBuffer


@dataclass
class Kept:
    """What a step's rounds kept: the rows of each round (``[n, T]`` batches), the greedy rollouts
    of their instances, and the last round's lag measurement."""

    batches: list[TrajectoryBatch] = field(default_factory=list)
    greedy: list[TrajectoryBatch] = field(default_factory=list)
    lag_metrics: dict[str, float] = field(default_factory=dict)


class OnPolicyRounds(Collector):
    def __init__(self, ctx: RunContext, greedy: GreedyBaseline | None = None):
        self.ctx = ctx
        self.greedy = greedy
        self.n_prompts = ctx.settings.rollout.prompts_per_step
        self.group_counter = 0
        d = ctx.blanks.data
        # a concurrent collector lags by itself (broadcast_every is its broadcast frequency)
        lagged = (d.lag or d.broadcast_every > 1) and d.concurrent is None
        self.lagged = LaggedPolicy(ctx, d.lag, d.broadcast_every) if lagged else None
        self.replay = ReplayBuffer(ctx) if ctx.blanks.data.replay is not None else None
        self.engine = ctx.engine  # the behaviour policy's engine of the current step
        self.snapshots = False  # keep environment snapshots (a branching collector needs them)
        self.prompt_pool = (
            PromptPool(
                d.prompt_pool,
                ctx.settings.train_seed,
                ctx.rng,
                d.retire_pass_rate,
                d.curriculum,
                ctx.task,
            )
            if d.prompt_pool is not None
            else None
        )
        self.retired_now = 0  # prompts retired by this step's rounds

    def worst_case(self) -> dict[str, float]:
        """One round (with its greedy rollouts): a step that cannot afford one does not start."""

        n = self.n_prompts * (self.ctx.group_size + (1 if self.greedy is not None else 0))
        worst = self.ctx.worst_rollouts(n)
        if self.replay is not None:
            worst["replayed_tokens"] = self.replay.worst_case_tokens()
        return worst

    def round_worst(self) -> dict[str, float]:
        """One round's own worst case (a subclass's worst_case may add what follows the round)."""

        return OnPolicyRounds.worst_case(self)

    def round(self) -> tuple[TrajectoryBatch, TrajectoryBatch | None] | None:
        """Reserve, generate, commit one round. None: it would not fit."""

        ctx = self.ctx
        # a round is launched only when it, the update, the weight sync and a checkpoint fit
        charge = ctx.meter.reserve(self.round_worst(), f"rollouts step {ctx.step}", UNIT_KINDS)
        if charge is None:
            return None
        with charge:
            calls0 = ctx.gate.counts()
            if self.prompt_pool is None:
                seeds, instances = None, ctx.train_instances(self.n_prompts)
            else:
                seeds = self.prompt_pool.draw(self.n_prompts)
                instances = ctx.task.instances(seeds)
            batch = ctx.episodes(
                self.engine,
                instances,
                ctx.group_size,
                group_offset=self.group_counter,
                snapshots=self.snapshots,
            )
            self.group_counter += len(instances)
            greedy = self.greedy.run(instances, self.engine) if self.greedy is not None else None
            done = [batch] + ([greedy] if greedy is not None else [])
            charge.actual = ctx.rollout_cost(done, calls0)
        if greedy is not None:
            self.greedy.charge(greedy)
        if (
            self.prompt_pool is not None
        ):  # each prompt's pass rate, before any filter drops its group
            self.retired_now += self.prompt_pool.record(seeds, batch.reward, batch.group_ids)
        return batch, greedy

    def collect(self) -> Collected:
        """The step's rounds until its groups are filled (or the round cap, or the budget, stops
        them): the kept rows, the census of every launched group, and the replayed rows after the
        fresh ones."""

        ctx, d = self.ctx, self.ctx.blanks.data
        self.engine = self.lagged.engine_for_step() if self.lagged is not None else ctx.engine
        rounds = d.max_sampling_rounds if d.dynamic_sampling else 1
        filtering = d.dynamic_sampling or d.zero_variance_filter
        sampler = DynamicSampler(self.n_prompts, rounds, filtering, d.accuracy_filter)
        self.retired_now = 0
        skipped_before = dict(self.prompt_pool.skipped) if self.prompt_pool is not None else {}
        kept = self.sample_rounds(sampler)
        census = self.closed_census(sampler, skipped_before)
        record = census.as_dict()
        if not kept.batches and census.rounds == 0:
            return Collected(None, census=record, nothing_fit=True)
        metrics = self.census_metrics(census, kept.lag_metrics)
        if not kept.batches:
            return Collected(None, {"skipped": 1.0, **metrics}, record)
        batch, replayed = self.with_replay(
            TrajectoryBatch.concat(kept.batches, ctx.pad_id), metrics
        )
        return Collected(
            batch,
            metrics,
            record,
            TrajectoryBatch.concat(kept.greedy, ctx.pad_id).reward if kept.greedy else None,
            census.groups_launched,
            replayed_rows=replayed,
        )

    def sample_rounds(self, sampler: DynamicSampler) -> Kept:
        """Rounds until ``sampler`` is done or one does not fit: stale rows dropped (a lagged or
        concurrent policy), then the groups the filter drops (discarded by reason)."""

        ctx, d = self.ctx, self.ctx.blanks.data
        # the zero-variance filter drops like dynamic sampling, in one round, never resampling
        reason = "zero_variance_filter" if d.zero_variance_filter else "dynamic_sampling"
        kept = Kept()
        while not sampler.done:
            out = self.round()
            if out is None:
                break
            batch, greedy = out
            if self.lagged is not None or d.staleness is not None or d.concurrent is not None:
                keep, kept.lag_metrics = drop_stale(ctx, batch)
                if not keep:
                    sampler.add_empty_round()
                    continue
                if len(keep) < batch.size:  # whole groups (one round, one version): i // G holds
                    batch = batch.select(keep)
                    if greedy is not None:
                        greedy = greedy.select(sorted({i // ctx.group_size for i in keep}))
            tokens = batch.row_action_tokens()
            keep = set(sampler.add_round(batch.reward, batch.group_ids, tokens))
            rows = [i for i, g in enumerate(batch.group_ids.tolist()) if g in keep]
            dropped = [i for i in range(batch.size) if i not in set(rows)]
            ctx.meter.discard(reason, float(tokens[dropped].sum()), len(dropped))
            if rows:
                kept.batches.append(batch.select(rows))
                if greedy is not None:  # the greedy rollout of each kept row's instance
                    kept.greedy.append(greedy.select([i // ctx.group_size for i in rows]))
        return kept

    def closed_census(self, sampler: DynamicSampler, skipped_before: dict[str, int]):
        """The sampler's census with the prompt pool's retired and skipped prompts; a round cap
        hit is an error where ``data.on_round_cap`` says so."""

        ctx, d = self.ctx, self.ctx.blanks.data
        census = sampler.census
        census.cap_hit = census.cap_hit and d.dynamic_sampling  # one round is the filter's design
        if self.prompt_pool is not None:
            census.prompts_retired = self.retired_now
        if d.curriculum is not None:  # skipped before launch: no tokens, but counted by reason
            census.prompts_skipped = {
                k: v - skipped_before[k] for k, v in self.prompt_pool.skipped.items()
            }
        if census.cap_hit and d.dynamic_sampling and d.on_round_cap == "error":
            raise TrainingError(
                f"{ctx.settings.name}: dynamic sampling kept {census.groups_kept}/{self.n_prompts} "
                f"groups after {census.rounds} rounds (data.max_sampling_rounds); set "
                "data.on_round_cap: train_short to continue"
            )
        return census

    def census_metrics(self, census, lag_metrics: dict[str, float]) -> dict[str, float]:
        """The step's sampling metrics, measured on every launched group before dynamic sampling
        drops any (one sample per prompt has no group to compare: no value)."""

        metrics = {"sampling_rounds": float(census.rounds), **lag_metrics}
        if self.prompt_pool is not None:
            metrics["pool.retired"] = float(len(self.prompt_pool.retired))
            metrics["pool.epochs"] = float(self.prompt_pool.epochs)
        if census.prompts_skipped is not None:
            for reason, count in census.prompts_skipped.items():
                metrics[f"curriculum.skipped_{reason}"] = float(count)
        if self.ctx.group_size > 1:
            metrics["trainable_group_frac"] = census.trainable_group_frac
        return metrics

    def with_replay(self, batch: TrajectoryBatch, metrics: dict[str, float]):
        """(``batch`` with past groups riding along after the fresh rows, the number of replayed
        rows); the buffer's metrics added to ``metrics``."""

        if self.replay is None:
            return batch, 0
        old = self.replay.draw()
        metrics["replay.evicted"] = float(self.replay.add(batch))
        metrics["replay.buffer_groups"] = float(len(self.replay.groups))
        if old is None:
            return batch, 0
        metrics["replay.groups"] = float(len(set(old.group_ids.tolist())))
        return TrajectoryBatch.concat([batch, old], self.ctx.pad_id), old.size

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"group_counter": self.group_counter}
        if self.prompt_pool is not None:
            state["prompt_pool"] = self.prompt_pool.state_dict()
        if self.lagged is not None:
            state["lagged"] = self.lagged.state_dict()
        if self.replay is not None:
            state["replay"] = self.replay.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.group_counter = state["group_counter"]
        if self.prompt_pool is not None:
            self.prompt_pool.load_state_dict(state["prompt_pool"])
        if self.lagged is not None:
            self.lagged.load_state_dict(state["lagged"])
        if self.replay is not None:
            self.replay.load_state_dict(state["replay"])
