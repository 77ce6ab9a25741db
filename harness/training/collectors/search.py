"""Search as a collector (issue 19, item 1: best-of-N): for each of ``prompts_per_step`` instances
the search policy draws ``data.search.n`` episodes, the verifier scores them, and the selection keeps
the best one (or every passing one) at or above ``min_reward``. The selected trajectories are the
step's batch (SFT distils them); the rest are discarded as ``search_selection``, so the launched
tokens count what the selection cost.

Every sample is charged to the totals (launched tokens, episodes, env steps, verifier calls) and
to the search counters (``search_tokens``, ``search_env_steps``, ``search_verifier_calls``), so a
budget can match either. ``search.policy: initial`` searches with the frozen initial policy
(distillation of its best-of-N); ``current``, with the policy being trained (expert iteration:
each step is one iteration of search then distillation).
"""

from __future__ import annotations

from typing import Any

from sixblanks.algorithms.data import SamplingCensus, group_verdicts

from ...rollout.engine import HFEngine
from ...rollout.trajectory import TrajectoryBatch
from ..base import Collected
from ..context import RunContext
from ..meter import UNIT_KINDS

SEARCH_OF = {
    "launched_tokens": "search_tokens",
    "env_steps": "search_env_steps",
    "verifier_calls": "search_verifier_calls",
}
"""Each total and the search counter that also carries the search's share of it."""


def select(batch: TrajectoryBatch, n: int, how: str, min_reward: float) -> list[int]:
    """Rows kept from ``batch`` (consecutive groups of ``n`` samples per prompt): the best sample of
    each group (first among ties) or every passing one; only samples at or above ``min_reward``
    that did not fail."""

    keep = []
    for g in range(batch.size // n):
        rows = [r for r in range(g * n, (g + 1) * n) if not batch.failed[r]]
        passing = [r for r in rows if float(batch.reward[r]) >= min_reward]
        if how == "best" and passing:
            keep.append(max(passing, key=lambda r: (float(batch.reward[r]), -r)))
        elif how == "all_passing":
            keep += passing
    return keep


class SearchRounds:
    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.spec = ctx.blanks.data.search
        self.n_prompts = ctx.settings.rollout.prompts_per_step
        self.group_counter = 0
        self.previous_success: float | None = None
        # the frozen initial policy (the reference) searches for distillation
        self.engine = ctx.engine
        if self.spec.policy == "initial":
            self.engine = HFEngine(ctx.ref_model, ctx.tokenizer)

    def worst_case(self) -> dict[str, float]:
        worst = self.ctx.worst_rollouts(self.n_prompts * self.spec.n)
        return {**worst, **{s: worst[t] for t, s in SEARCH_OF.items()}}

    def collect(self) -> Collected:
        ctx, spec = self.ctx, self.spec
        charge = ctx.meter.reserve(
            self.worst_case(), f"rollouts search step {ctx.step}", UNIT_KINDS
        )
        if charge is None:
            return Collected(None, nothing_fit=True)
        with charge:
            calls0 = ctx.gate.counts()
            instances = ctx.train_instances(self.n_prompts)
            batch = ctx.episodes(self.engine, instances, spec.n, group_offset=self.group_counter)
            self.group_counter += self.n_prompts
            cost = ctx.rollout_cost([batch], calls0)
            charge.actual = {**cost, **{s: cost[t] for t, s in SEARCH_OF.items()}}
        keep = select(batch, spec.n, spec.select, spec.min_reward)
        tokens, kept = batch.row_action_tokens(), set(keep)
        failed = [r for r in range(batch.size) if batch.failed[r]]
        dropped = [r for r in range(batch.size) if r not in kept and not batch.failed[r]]
        ctx.meter.discard("failed", float(tokens[failed].sum()), len(failed))
        ctx.meter.discard("search_selection", float(tokens[dropped].sum()), len(dropped))
        metrics = self.metrics(batch, keep, cost)
        census = self.census(batch, keep, tokens)
        if not keep:  # nothing passed: the whole search was the price of finding nothing
            return Collected(None, {"skipped": 1.0, **metrics}, census)
        return Collected(batch.select(keep), metrics, census, groups_launched=self.n_prompts)

    def census(self, batch: TrajectoryBatch, keep: list[int], tokens) -> dict[str, Any]:
        """The step's census, as dynamic sampling keeps one: every prompt's group launched, kept
        (something selected) or dropped, a group with no passing sample as ``all_wrong`` (by the
        selection's standard, ``min_reward``)."""

        c = SamplingCensus(rounds=1, prompts_sampled=self.n_prompts)
        c.groups_launched = self.n_prompts
        verdicts = group_verdicts(batch.reward, batch.group_ids)
        c.groups_varied = sum(v == "keep" for v in verdicts.values())
        chosen = {int(batch.group_ids[r]) for r in keep}
        c.groups_kept = len(chosen)
        c.groups_dropped["all_wrong"] = self.n_prompts - len(chosen)
        c.responses_launched, c.responses_accepted = batch.size, len(keep)
        c.tokens_launched = int(tokens.sum())
        c.tokens_accepted = int(tokens[keep].sum()) if keep else 0
        return c.as_dict()

    def metrics(self, batch: TrajectoryBatch, keep: list[int], cost: dict) -> dict[str, float]:
        n = self.spec.n
        best = batch.reward.view(-1, n).max(1).values if batch.size else batch.reward
        success = float((best >= self.spec.min_reward).double().mean()) if batch.size else 0.0
        kept_tokens = float(batch.row_action_tokens()[keep].sum()) if keep else 0.0
        out = {
            "search.samples": float(batch.size),
            "search.selected": float(len(keep)),
            "search.reward_mean": float(batch.reward.mean()) if batch.size else 0.0,
            "search.best_reward_mean": float(best.mean()) if batch.size else 0.0,
            "search.success_rate": success,
            # launched tokens per selected token: what success filtering would hide
            "search.selection_cost": cost["launched_tokens"] / kept_tokens if kept_tokens else 0.0,
            "expert_iteration.iteration": float(self.ctx.step + 1),
        }
        if self.previous_success is not None:
            out["expert_iteration.improvement"] = success - self.previous_success
        self.previous_success = success
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"group_counter": self.group_counter, "previous_success": self.previous_success}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.group_counter = state["group_counter"]
        self.previous_success = state["previous_success"]
