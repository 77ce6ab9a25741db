"""Staleness by where it came from, for a collector that samples ahead (``data.concurrent``): a
round's versions behind at consumption split into those that passed while it was in flight and
those while it waited in the queue (``lag.inflight_behind``, ``lag.queue_behind``, each with its
``_max``). The cut is the trainer's version when it saw the round done: at the start of a step or
while waiting for one, so a round that finished during an update counts that update in flight; a
round found in the spool after a restart or a resume is seen then. Each unit queue
(:mod:`.units`) holds one; the episode stream's (:mod:`.episode_queue`) gives each unit's cut
itself, the trainer's version when the unit finished."""

from __future__ import annotations

from typing import Any


class StalenessSplit:
    def __init__(self):
        self.seen: dict[int, int] = {}  # round -> the trainer's version when it was seen done
        self.split: list[tuple[int, int]] = []  # this step's rounds: (in flight, in the queue)

    def done(self, r: int, version: int) -> None:
        self.seen.setdefault(r, version)

    def consumed(
        self, r: int, sampled: int, version: int, seen: int | None = None
    ) -> tuple[int, int]:
        """Round ``r``, sampled by weights version ``sampled`` (its oldest token's), consumed at
        ``version``: its (in flight, in the queue) versions. ``seen``: the cut where the caller
        knows it (the episode stream's, from when the unit finished), else as :meth:`done` saw it
        (``version`` if never)."""

        marked = self.seen.pop(r, version)
        seen = marked if seen is None else seen
        self.split.append((seen - sampled, version - seen))
        return self.split[-1]

    def metrics(self) -> dict[str, float]:
        """This step's split (mean and max over its rounds), and a fresh start for the next."""

        out = {}
        for i, part in enumerate(("inflight", "queue")):
            if self.split:
                values = [s[i] for s in self.split]
                out[f"lag.{part}_behind"] = sum(values) / len(values)
                out[f"lag.{part}_behind_max"] = float(max(values))
        self.split = []
        return out


def bound_passed(
    spec: Any, staleness: int | None, inflight: int, queued: int, total: int
) -> str | None:
    """The reason a unit with this staleness (versions passed in flight, in the queue, in all) is
    dropped, or None: past ``data.concurrent.inflight`` or ``queued`` (``spec``: the concurrent
    section; a bound with ``wait`` is never passed by design, and where it is, after a restart or a
    resume, it drops as ``drop`` would), or past ``data.staleness`` (``staleness``)."""

    for part, bound, reason in (
        (inflight, spec.inflight, "stale_inflight"),
        (queued, spec.queued, "stale_queue"),
    ):
        if bound is not None and part > bound.versions:
            return reason
    return "staleness" if staleness is not None and total > staleness else None
