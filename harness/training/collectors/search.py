"""Search as a collector: for each of ``prompts_per_step`` instances the search
policy draws ``data.search.n`` independent episodes (best-of-N), or searches over turns (beam or
best-first tree: :mod:`harness.rollout.search`), the verifier scores the finished ones, and the
selection keeps the best one (or every passing one, or all). The selected trajectories are the
step's batch (SFT distils them; a policy gradient trains on them with the behaviour log-probs they
carry); the rest are discarded as ``search_selection``, so the launched tokens count what the
selection cost. A token several selected leaves share (a beam or tree prefix) trains once.

Every sample is charged to the totals (launched tokens, episodes, env steps, verifier calls) and
to the search counters (``search_tokens``, ``search_env_steps``, ``search_verifier_calls``), so a
budget can match either. ``search.policy: initial`` searches with the frozen initial policy
(distillation of its best-of-N); ``current``, with the policy being trained (expert iteration:
each step is one iteration of search then distillation).
"""

from __future__ import annotations

from typing import Any

import torch

from sixblanks.algorithms.data import SamplingCensus, group_verdicts

from ...rollout.agent import episodes_to_batch
from ...rollout.search import SearchTree, search, verifier_guide
from ...rollout.trajectory import TrajectoryBatch
from ..base import Collected, Collector
from ..context import RunContext
from ..meter import UNIT_KINDS
from ..process_reward import TreeValue

SEARCH_OF = {
    "launched_tokens": "search_tokens",
    "env_steps": "search_env_steps",
    "verifier_calls": "search_verifier_calls",
}
"""Each total and the search counter that also carries the search's share of it."""


def select(batch: TrajectoryBatch, how: str, min_reward: float) -> list[int]:
    """Rows kept from ``batch`` (a group per prompt): the best sample of each group (first among
    ties) or every one at or above ``min_reward`` (``all_passing``), or every one (``all``); never
    a failed sample."""

    keep = []
    for group in group_rows(batch):
        rows = [r for r in group if not batch.failed[r]]
        passing = [r for r in rows if float(batch.reward[r]) >= min_reward]
        if how == "best" and passing:
            keep.append(max(passing, key=lambda r: (float(batch.reward[r]), -r)))
        elif how == "all_passing":
            keep += passing
        elif how == "all":
            keep += rows
    return keep


def group_rows(batch: TrajectoryBatch) -> list[list[int]]:
    """Rows of each group, groups in order of first appearance."""

    groups: dict[int, list[int]] = {}
    for r in range(batch.size):
        groups.setdefault(int(batch.group_ids[r]), []).append(r)
    return list(groups.values())


def train_once(batch: TrajectoryBatch, paths: list[list[int]], keep: list[int]) -> None:
    """Zero the action mask of each kept row's turns whose node an earlier kept row already trains
    (``paths[r][k]``: the node turn k of row r led to): a shared prefix enters the gradient once."""

    seen: set[int] = set()
    for r in keep:
        for k, node in enumerate(paths[r]):
            if node in seen:
                batch.action_mask[r][batch.turn_ids[r] == k] = 0.0
            seen.add(node)


class SearchRounds(Collector):
    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.spec = ctx.blanks.data.search
        self.n_prompts = ctx.settings.rollout.prompts_per_step
        self.group_counter = 0
        self.previous_success: float | None = None
        # the frozen initial policy (the reference) searches for distillation
        self.engine = ctx.engine
        if self.spec.policy == "initial":
            self.engine = ctx.hf_engine(ctx.ref_model)
        self.value = None
        if self.spec.mode != "best_of_n" and self.spec.guide == "value":
            model = ctx.ref_model if self.spec.policy == "initial" else ctx.model
            self.value = TreeValue(model, self.spec.value_lr, self.spec.value_steps, ctx.device)

    def calls(self) -> int:
        """The most generation calls (one action each) a step's search can make."""

        sp, n = self.spec, self.n_prompts
        if sp.mode == "best_of_n":
            return n * sp.n * self.ctx.turns
        if sp.mode == "beam":
            return n * self.ctx.turns * sp.beam * sp.expand
        return n * sp.expansions * sp.expand

    def worst_case(self) -> dict[str, float]:
        ctx, r, calls = self.ctx, self.ctx.settings.rollout, self.calls()
        if self.spec.mode == "best_of_n":  # n episodes per prompt, each up to every turn
            worst = ctx.worst_rollouts(self.n_prompts * self.spec.n)
            return {**worst, **{s: worst[t] for t, s in SEARCH_OF.items()}}
        replay = float(calls * (ctx.turns - 1))
        worst = {  # per generation call: one action at the limits, one step, its verifier calls
            "launched_tokens": float(calls * r.max_new_tokens),
            "prompt_tokens": float(calls * r.max_prompt_tokens),
            "rollouts_launched": float(calls),  # a tip per child at most
            "env_steps": calls + replay,  # a fork replays its prefix where it cannot restore
            "verifier_calls": calls + replay,
            "judge_calls": (calls + replay) * ctx.judge_calls_per_verify,
        }
        return {**worst, **{s: worst[t] for t, s in SEARCH_OF.items()}}

    def collect(self) -> Collected:
        ctx, spec = self.ctx, self.spec
        charge = ctx.meter.reserve(
            self.worst_case(), f"rollouts search step {ctx.step}", UNIT_KINDS
        )
        if charge is None:
            return Collected(None, nothing_fit=True)
        tree, extra = None, {}
        with charge:
            calls0 = ctx.gate.counts()
            instances = ctx.train_instances(self.n_prompts)
            if spec.mode == "best_of_n":
                batch = ctx.episodes(
                    self.engine, instances, spec.n, group_offset=self.group_counter
                )
                cost = ctx.rollout_cost([batch], calls0)
            else:
                tree = self.search(instances)
                batch = episodes_to_batch(
                    [n.episode for n in tree.leaves],
                    ctx.tokenizer,
                    self.engine.policy_version,
                    ctx.task.name,
                )
                batch.group_ids += self.group_counter
                cost = {
                    **tree.cost(),
                    **dict(
                        zip(
                            ("verifier_calls", "judge_calls"),
                            (float(c - c0) for c, c0 in zip(ctx.gate.counts(), calls0)),
                        )
                    ),
                }
            self.group_counter += self.n_prompts
            charge.actual = {**cost, **{s: cost[t] for t, s in SEARCH_OF.items()}}
        keep = select(batch, spec.select, spec.min_reward)
        if tree is not None:
            paths = [n.path for n in tree.leaves]
            train_once(batch, paths, keep)
            if spec.tree_labels:  # the node values replace the environment's step labels
                labels, K = tree.labels(tree.leaves), batch.step_labels.shape[1]
                batch.step_labels = torch.full_like(batch.step_labels, float("nan"))
                batch.step_labels[:, : min(K, labels.shape[1])] = labels[:, :K]
            extra = self.tree_metrics(tree)
        self.discards(batch, keep, cost, tree)
        metrics = {**self.metrics(batch, keep, cost), **extra}
        census = self.census(batch, keep, cost)
        if not keep:  # nothing passed: the whole search was the price of finding nothing
            return Collected(None, {"skipped": 1.0, **metrics}, census)
        return Collected(batch.select(keep), metrics, census, groups_launched=self.n_prompts)

    def search(self, instances) -> SearchTree:
        ctx, spec = self.ctx, self.spec
        guide = verifier_guide
        if self.value is not None:
            value = self.value

            def guide(eps):
                part = episodes_to_batch(eps, ctx.tokenizer, 0, ctx.task.name)
                return value.scores(part)

        return search(
            self.engine,
            ctx.tokenizer,
            ctx.task,
            instances,
            ctx.params,
            ctx.gate,
            mode=spec.mode,
            expand=spec.expand,
            beam=spec.beam,
            expansions=spec.expansions,
            guide=guide,
            max_context_tokens=ctx.settings.rollout.max_prompt_tokens,
            generator=ctx.gen,
        )

    def discards(self, batch: TrajectoryBatch, keep: list[int], cost, tree) -> None:
        """Everything launched and not kept: failed samples' own tokens as ``failed``, the rest
        as ``search_selection`` (unselected samples, pruned nodes, and with a tree the prefix
        tokens no kept leaf trains)."""

        ctx = self.ctx
        if tree is None:
            tokens = batch.row_action_tokens()
            failed = [r for r in range(batch.size) if batch.failed[r]]
            failed_tokens = float(tokens[failed].sum())
            n_failed = len(failed)
        else:
            own = [n for n in tree.tips if n.episode.failure is not None]
            failed_tokens = float(
                sum(
                    e - s
                    for n in own
                    for k, s, e in n.episode.segments
                    if k == "action" and s >= n.born[0]
                )
            )
            n_failed = len(own)
        accepted = float(batch.action_mask[keep].sum()) if keep else 0.0
        ctx.meter.discard("failed", failed_tokens, n_failed)
        ctx.meter.discard(
            "search_selection",
            cost["launched_tokens"] - accepted - failed_tokens,
            cost["rollouts_launched"] - len(keep) - n_failed,
        )

    def tree_metrics(self, tree: SearchTree) -> dict[str, float]:
        forks = max(1, len(tree.nodes) - self.n_prompts)
        out = {
            "search.nodes": float(len(tree.nodes) - self.n_prompts),
            "search.leaves": float(len(tree.leaves)),
            "search.restored_frac": tree.restored / forks,
            "search.replayed_steps": float(tree.replayed_steps),
        }
        if self.value is not None:  # measured on this tree, then trained on it
            tips = [n for n in tree.tips if n.path]
            if tips:
                part = episodes_to_batch(
                    [n.episode for n in tips], self.ctx.tokenizer, 0, self.ctx.task.name
                )
                out.update(self.value.fit(part, tree.labels(tips)))
        return out

    def census(self, batch: TrajectoryBatch, keep: list[int], cost: dict) -> dict[str, Any]:
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
        c.responses_launched, c.responses_accepted = int(cost["rollouts_launched"]), len(keep)
        c.tokens_launched = int(cost["launched_tokens"])
        c.tokens_accepted = int(batch.action_mask[keep].sum()) if keep else 0
        return c.as_dict()

    def metrics(self, batch: TrajectoryBatch, keep: list[int], cost: dict) -> dict[str, float]:
        ok = [r for r in range(batch.size) if not batch.failed[r]]
        groups = [[r for r in g if not batch.failed[r]] for g in group_rows(batch)]
        best = [max(float(batch.reward[r]) for r in g) for g in groups if g]
        # a prompt with no finished sample counts as unsolved
        success = sum(b >= self.spec.min_reward for b in best) / self.n_prompts
        accepted = float(batch.action_mask[keep].sum()) if keep else 0.0
        mean_all = float(batch.reward[ok].mean()) if ok else 0.0
        out = {
            "search.samples": float(batch.size),
            "search.selected": float(len(keep)),
            "search.reward_mean": mean_all,
            "search.best_reward_mean": sum(best) / len(best) if best else 0.0,
            "search.success_rate": success,
            # launched tokens per trained token: what success filtering would hide
            "search.selection_cost": cost["launched_tokens"] / accepted if accepted else 0.0,
            "expert_iteration.iteration": float(self.ctx.step + 1),
        }
        if keep:  # the selection's shift of the training distribution from what was sampled
            out["search.selection_bias"] = float(batch.reward[keep].mean()) - mean_all
        if self.previous_success is not None:
            out["expert_iteration.improvement"] = success - self.previous_success
        self.previous_success = success
        return out

    def state_dict(self) -> dict[str, Any]:
        out = {"group_counter": self.group_counter, "previous_success": self.previous_success}
        if self.value is not None:
            out["value"] = self.value.state_dict()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.group_counter = state["group_counter"]
        self.previous_success = state["previous_success"]
        if self.value is not None:
            self.value.load_state_dict(state["value"])
