"""Collectors: where a step's trajectories come from, charged to the budget as they are made.

A collector subclasses :class:`~sixblanks.harness.training.base.Collector`:
``worst_case() -> cost``, ``collect() -> Collected`` and ``state_dict()``; ``update_bound()`` and
``close()`` where the defaults do not fit (a concurrent collector). A new source of data (a
concurrent collector, a replay buffer, search) is a new file here.
"""

from __future__ import annotations

from ..context import RunContext
from .demonstrations import Demonstrations, demonstration_batch
from .greedy import GreedyBaseline
from .onpolicy import OnPolicyRounds
from .pairs import PreferencePairs


def make_collector(ctx: RunContext):
    """The collector the data blank names (``data.source``)."""

    if ctx.blanks.data.self_play is not None:
        from .selfplay import SelfPlayRounds

        greedy = GreedyBaseline(ctx) if ctx.blanks.advantage.estimator == "remax" else None
        return SelfPlayRounds(ctx, greedy)
    source = ctx.blanks.data.source
    if source == "demonstrations":
        return Demonstrations(ctx)
    if source == "search":
        from .search import SearchRounds

        return SearchRounds(ctx)
    if source == "preference_pairs":
        return PreferencePairs(ctx)
    if ctx.blanks.data.concurrent is not None:
        from .concurrent import ConcurrentRounds
        from .stream import EpisodeStream

        if ctx.blanks.data.concurrent.consume == "episode":
            return EpisodeStream(ctx)

        return ConcurrentRounds(ctx)
    if ctx.blanks.data.world_model is not None:
        from .imagined import ImaginedRounds

        return ImaginedRounds(ctx)
    if ctx.blanks.data.branching is not None:
        from .branching import BranchingRounds

        return BranchingRounds(ctx)
    greedy = GreedyBaseline(ctx) if ctx.blanks.advantage.estimator == "remax" else None
    return OnPolicyRounds(ctx, greedy)


__all__ = [
    "Demonstrations",
    "GreedyBaseline",
    "OnPolicyRounds",
    "PreferencePairs",
    "demonstration_batch",
    "make_collector",
]
