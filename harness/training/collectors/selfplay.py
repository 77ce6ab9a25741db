"""Self-play rounds (``data.self_play``): on-policy rounds on a two-player game
task in which each task group plays one member of a pool of the policy's past checkpoints
(:class:`sixblanks.harness.training.opponents.PolicyPool`; the initial policy is the first member,
the current policy joins every ``snapshot_every`` steps, at most ``pool_size`` are kept). All G
games of a group face the same member, so the group baseline compares like with like.

Accounting: the policy's own tokens are launched tokens as for any rollout; the members' moves,
generated inside the environment, are ``opponent_tokens`` (never trained on, not launched): each
round reserves their worst case (every episode at every turn answered with ``max_new_tokens``)
with the round's and charges the count actually generated. Everything else (dynamic sampling,
lag, replay, ReMax's greedy games, against the same member) is the on-policy rounds' own.
"""

from __future__ import annotations

from typing import Any

from ...rollout.engine import SamplingParams
from ...rollout.trajectory import TrajectoryBatch
from ..base import Collected, TrainingError
from ..context import RunContext
from ..meter import UNIT_KINDS
from ..opponents import PolicyPool
from .greedy import GreedyBaseline
from .onpolicy import OnPolicyRounds


class SelfPlayRounds(OnPolicyRounds):
    def __init__(self, ctx: RunContext, greedy: GreedyBaseline | None = None):
        super().__init__(ctx, greedy)
        if not ctx.task.two_player:
            raise TrainingError(
                f"{ctx.settings.name}: data.self_play needs a two-player game task (nim), not "
                f"'{ctx.task.name}'"
            )
        self.spec = spec = ctx.blanks.data.self_play
        p = ctx.params
        temp = p.temperature if spec.opponent_temperature is None else spec.opponent_temperature
        stop = (ctx.task.stop,) if ctx.task.stop else ()
        params = SamplingParams(temp, p.top_p, p.top_k, p.max_new_tokens, stop)
        self.pool = PolicyPool(
            ctx.model,
            ctx.tokenizer,
            ctx.task,
            params,
            spec.pool_size,
            spec.opponents,
            ctx.settings.train_seed,
        )
        self.pool.add(ctx.engine.policy_version, ctx.model.state_dict())  # the initial policy
        self.played: list[int] = []
        self.games = self.wins = 0

    def worst_case(self) -> dict[str, float]:
        """The rounds' worst case, and the opponents': a reply of ``max_new_tokens`` to every
        move of every episode (greedy ones included)."""

        worst = super().worst_case()
        per = self.ctx.turns * self.ctx.settings.rollout.max_new_tokens
        worst["opponent_tokens"] = worst["rollouts_launched"] * per
        return worst

    def round(self) -> tuple[TrajectoryBatch, TrajectoryBatch | None] | None:
        """One round: each instance against a member drawn from the pool; reserved at the worst
        case, charged at the actual cost (the members' generated tokens as ``opponent_tokens``)."""

        ctx = self.ctx
        charge = ctx.meter.reserve(self.worst_case(), f"rollouts step {ctx.step}", UNIT_KINDS)
        if charge is None:
            return None
        with charge:
            calls0, tokens0 = ctx.gate.counts(), self.pool.tokens
            players = [self.pool.draw() for _ in range(self.n_prompts)]
            fresh = ctx.train_instances(self.n_prompts)
            instances = [ctx.task.against(i, p) for i, p in zip(fresh, players)]
            batch = ctx.episodes(
                self.engine, instances, ctx.group_size, group_offset=self.group_counter
            )
            self.group_counter += self.n_prompts
            greedy = self.greedy.run(instances, self.engine) if self.greedy is not None else None
            done = [batch] + ([greedy] if greedy is not None else [])
            cost = ctx.rollout_cost(done, calls0)
            charge.actual = {**cost, "opponent_tokens": float(self.pool.tokens - tokens0)}
        if greedy is not None:
            self.greedy.charge(greedy)
        self.played += [p.version for p in players]
        self.games += batch.size
        self.wins += int((batch.reward >= 1.0).sum())
        return batch, greedy

    def collect(self) -> Collected:
        ctx, spec = self.ctx, self.spec
        version = ctx.engine.policy_version
        due = ctx.step > 0 and ctx.step % spec.snapshot_every == 0
        added = due and version not in self.pool.members
        if added:  # the current policy joins (the oldest member leaves a full pool)
            self.pool.add(version, ctx.model.state_dict())
        self.played, self.games, self.wins, tokens0 = [], 0, 0, self.pool.tokens
        self.pool.moves.clear()  # the log keeps the step's moves only
        collected = super().collect()
        members = sorted(self.pool.members)
        collected.metrics.update(
            {
                "selfplay.pool_size": float(len(members)),
                "selfplay.pool_oldest": float(members[0]),
                "selfplay.pool_newest": float(members[-1]),
                "selfplay.snapshot_added": float(added),
                "selfplay.opponent_tokens": float(self.pool.tokens - tokens0),
            }
        )
        if self.played:  # what the step's games were: against whom, and how they went
            mean = sum(self.played) / len(self.played)
            collected.metrics["selfplay.opponent_version_mean"] = float(mean)
            collected.metrics["selfplay.train_win_rate"] = self.wins / max(1, self.games)
        return collected

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "pool": self.pool.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.pool.load_state_dict(state["pool"])
