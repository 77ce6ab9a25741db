"""Branching counterfactuals: synchronous rounds, then, at chosen turns of
some of the round's episodes, the environment is brought back to the state before that turn and M
continuations are rolled from it. The continuations of one branch point form a group of their own:
they share the state (and the environment's randomness) and differ only by what the policy samples,
so a group baseline at that turn credits the action by its continuation return against its
siblings (``turn_return``: the mean return from the same turn; any group estimator compares the
continuations' returns). The prefix is context (mask 0); only the continuations train.

Every branch token, environment step (the continuations' and, where a task cannot snapshot, the
replayed prefix's) and verifier call is reserved at its worst case before launch and charged.
"""

from __future__ import annotations

from ...rollout.agent import branch_episodes
from ...rollout.trajectory import TrajectoryBatch
from ..base import Collected, TrainingError
from ..context import RunContext
from ..meter import add_costs
from .onpolicy import OnPolicyRounds


class BranchingRounds(OnPolicyRounds):
    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        self.snapshots = True  # the rounds keep each environment's state before each action
        self.spec = ctx.blanks.data.branching
        last = max(self.spec.turns)
        if last >= ctx.turns:
            raise TrainingError(
                f"{ctx.settings.name}: data.branching.turns: turn {last} never happens in task "
                f"'{ctx.task.name}' (at most {ctx.turns} turn(s), numbered from 0)"
            )
        self.max_points = self.n_prompts * self.spec.per_group * len(self.spec.turns)

    def branch_worst(self) -> dict[str, float]:
        rows = self.max_points * self.spec.width
        worst = self.ctx.worst_rollouts(rows)
        replay = float(rows * max(self.spec.turns))  # a prefix replayed where there is no snapshot
        worst["env_steps"] += replay
        worst["verifier_calls"] += replay
        return worst

    def worst_case(self) -> dict[str, float]:
        return add_costs(super().worst_case(), self.branch_worst())

    def points(self, batch: TrajectoryBatch) -> list[tuple[int, int]]:
        """(row, turn): per task group and branch turn, the first ``per_group`` episodes that took
        an action at that turn (and did not fail)."""

        out = []
        for k in self.spec.turns:
            taken: dict[int, int] = {}
            for i in range(batch.size):
                g = int(batch.group_ids[i])
                if batch.failed[i] or len(batch.actions[i]) <= k:
                    continue
                if taken.get(g, 0) < self.spec.per_group:
                    taken[g] = taken.get(g, 0) + 1
                    out.append((i, k))
        return out

    def collect(self) -> Collected:
        collected = super().collect()
        batch, ctx = collected.batch, self.ctx
        if batch is None:
            return collected
        points = self.points(batch)
        metrics = {"branch.points": float(len(points)), "branch.rows": 0.0}
        if not points:  # no episode reached a branch turn: nothing reserved
            collected.metrics.update(metrics)
            return collected
        charge = ctx.meter.reserve(self.branch_worst(), f"rollouts branches step {ctx.step}")
        if charge is None:  # the rounds used the room (dynamic sampling)
            metrics["branch.skipped"] = 1.0
            collected.metrics.update(metrics)
            return collected
        with charge:
            calls0 = ctx.gate.counts()
            out = branch_episodes(
                self.engine,
                ctx.tokenizer,
                ctx.task,
                batch,
                points,
                self.spec.width,
                ctx.params,
                ctx.gate,
                max_context_tokens=ctx.settings.rollout.max_prompt_tokens,
                generator=ctx.gen,
                group_offset=self.group_counter,
            )
            self.group_counter += len(points)
            cost = ctx.rollout_cost([out.batch], calls0)
            # the prefix's steps were not taken again, except where they were replayed
            prefix = sum(k for _, k in points) * self.spec.width
            cost["env_steps"] += out.replayed_steps - prefix
            charge.actual = cost
        metrics.update(
            {
                "branch.rows": float(out.batch.size),
                "branch.launched_tokens": cost["launched_tokens"],
                "branch.env_steps": cost["env_steps"],
                "branch.restored_frac": out.restored / max(1, out.batch.size),
                "branch.replayed_steps": float(out.replayed_steps),
                "branch.return_spread": _spread(out.batch, points, self.spec.width),
            }
        )
        collected.batch = TrajectoryBatch.concat([batch, out.batch], ctx.pad_id)
        collected.metrics.update(metrics)
        return collected


def _spread(batch: TrajectoryBatch, points: list[tuple[int, int]], width: int) -> float:
    """Mean over branch points of (max - min) continuation return from the branched turn: how much
    the action there changed the outcome (0: the siblings all did the same)."""

    spreads = []
    for p, (_, k) in enumerate(points):
        rows = range(p * width, (p + 1) * width)
        returns = [float(batch.turn_rewards[r, k:].sum()) for r in rows]
        spreads.append(max(returns) - min(returns))
    return sum(spreads) / len(spreads) if spreads else 0.0
