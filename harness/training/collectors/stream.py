"""Episode-level consumption (``data.concurrent.consume: episode``): asynchrony one group at a
time. :class:`EpisodeStream` is the concurrent collector (:class:`~.concurrent.ConcurrentRounds`:
process, spool, ledger, broadcasts, resume) built with an :class:`~.episode_queue.EpisodeQueue`,
which holds what consuming groups as they finish means (the permits, the order, the staleness
split and its bounds); it overrides none of its methods.
"""

from __future__ import annotations

from ..context import RunContext
from .concurrent import ConcurrentRounds
from .episode_queue import EpisodeQueue


class EpisodeStream(ConcurrentRounds):
    """The concurrent collector with an :class:`EpisodeQueue` as its unit queue."""

    def __init__(self, ctx: RunContext):
        super().__init__(ctx, EpisodeQueue)
