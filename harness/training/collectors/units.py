"""What a concurrent collector launches and takes (``data.concurrent``): its unit queue.

A concurrent collector (:class:`~.concurrent.ConcurrentRounds`) runs the collector process, the
spool, the permits (each launched unit's worst case reserved on the budget) and the broadcasts, the
same whatever a unit is. What differs between consuming whole rounds and consuming groups as they
finish is held by one object it is built with, a :class:`UnitQueue`:

- the *permits*: what one unit may cost, how many may be launched ahead, whether one more may be
  launched now (a staleness bound's admission) and what its request is (new prompts, or a unit
  aborted by the collector launched again);
- the *finished units*: what the collector process reports, what a restart or a resume finds in
  the spool, and which finished units the trainer takes for its next batch (in launch order, or in
  finish order with bounds), with their staleness split (:mod:`.staleness`);
- what a step adds before and after its rounds (a wait before the update, its metrics).

:class:`RoundQueue` (here) is the round-level queue (``consume: round``);
:class:`~.episode_queue.EpisodeQueue` the episode-level one (``consume: episode``). A queue holds
the collector it serves and uses only its public surface, :class:`QueueHost`; the collector calls
the queue only through :class:`UnitQueue`. No class overrides another's private methods.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ...rollout.trajectory import TrajectoryBatch
from ...seeds import train_seeds
from ..base import Collected
from ..context import RunContext
from .spool import Spool
from .staleness import StalenessSplit


class QueueHost(Protocol):
    """What a unit queue may use of the concurrent collector it serves
    (:class:`~.concurrent.ConcurrentRounds`): its settings, the units launched and not consumed
    (``requests``: unit -> its request; ``permits``: unit -> its reservation), those finished and
    not consumed (``ready``: unit -> its spool file), and these methods."""

    ctx: RunContext
    spec: Any  # data.concurrent
    n_prompts: int
    requests: dict[int, dict[str, Any]]
    permits: dict[int, Any]
    ready: dict[int, str]
    spool: Spool
    counted: set[str]  # spool files whose cost is in the ledger
    worker: Any  # None while stopped
    closing: bool  # the run drains
    drained: dict[str, float]  # the drain's metrics
    wait_seconds: float
    broadcast_version: int | None
    group_counter: int

    def top_up(self) -> None:
        """Launch units while the queue admits them and the budget has room."""

    def wait_until(self, done: Callable[[], bool]) -> None:
        """Handle the collector's reports until ``done()``."""

    def wait_for(self, r: int) -> str | None:
        """Unit ``r``'s spool file once ready, taken from ``ready`` (None: aborted)."""

    def consume(self, r: int, name: str) -> dict[str, Any]:
        """Unit ``r``'s record, counted under its permit and no longer launched."""

    def charge_spooled(self, name: str, reason: str, res: Any = None) -> None:
        """A spooled unit counted as launched and discarded for ``reason``."""

    def round_worst(self) -> dict[str, float]:
        """One round's worst case with its replay draw."""


class UnitQueue(Protocol):
    """The interface a concurrent collector calls; ``noun`` names a unit in reservation labels."""

    noun: str

    def unit_worst(self) -> dict[str, float]:
        """One unit's worst case, by ledger counter: what each permit reserves."""

    def start_worst(self, worst: dict[str, float]) -> dict[str, float]:
        """A step's worst case when nothing is launched ahead; ``worst``: one round's with its
        replay draw (the synchronous collector's)."""

    def capacity(self) -> int:
        """The most units launched and not consumed."""

    def admits(self) -> bool:
        """Whether one more unit may be launched now (below :meth:`capacity`)."""

    def carries_time(self, r: int) -> bool:
        """Whether unit ``r``'s permit carries the rollouts' time estimate."""

    def request(self, r: int) -> dict[str, Any]:
        """Unit ``r``'s request to the collector process (its prompts drawn now)."""

    def report(self, kind: str, r: int, detail: Any) -> None:
        """A message from the collector process about unit ``r`` (any kind but ``error``)."""

    def found(self, spooled: dict[int, str]) -> None:
        """After a dead or stuck collector is stopped: the units launched, not ready, that it
        spooled and never reported (unit -> its file)."""

    def recount_aborted(self) -> None:
        """A resume's first pass over the spool, before the rest is counted or replayed."""

    def resumed(self) -> None:
        """A resume's spool is counted; ``ready`` holds what it replays."""

    def take(self) -> tuple[TrajectoryBatch, None] | None:
        """The next batch, once finished (None: nothing launched, the budget is spent)."""

    def begin_step(self) -> None:
        """A step starts (before its units are topped up)."""

    def end_step(self, out: Collected) -> Collected:
        """A step's rounds are taken: ``out`` with this queue's metrics."""

    def state_dict(self) -> dict[str, Any]:
        """What a resume needs, merged into the collector's state."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """From the collector's state."""


class RoundQueue:
    """Round-level units (:class:`UnitQueue`): a round of ``prompts_per_step`` groups each, up to
    ``queue`` launched ahead, taken whole in the order they were launched. The staleness split
    (``lag.inflight_behind``, ``lag.queue_behind``) cuts where the trainer saw a round done."""

    noun = "round"

    def __init__(self, collector: QueueHost):
        self.collector = collector
        self.staleness = StalenessSplit()  # in flight and in the queue

    def unit_worst(self) -> dict[str, float]:
        worst = self.collector.round_worst()
        worst.pop("replayed_tokens", None)  # drawn at the step, reserved by its admission
        return worst

    def start_worst(self, worst: dict[str, float]) -> dict[str, float]:
        return dict(worst)  # a whole round must fit

    def capacity(self) -> int:
        return self.collector.spec.queue

    def admits(self) -> bool:
        return True

    def carries_time(self, r: int) -> bool:
        return True

    def request(self, r: int) -> dict[str, Any]:
        c, ctx = self.collector, self.collector.ctx
        n = c.n_prompts
        req = {
            "round": r,
            "seeds": train_seeds(ctx.rng, n, ctx.task),
            "group_offset": c.group_counter,
            "gen_seed": ctx.settings.train_seed * 1_000_003 + r,
            "min_version": c.broadcast_version,  # no older weights: worker.process_main
        }
        c.group_counter += n
        return req

    def report(self, kind: str, r: int, detail: Any) -> None:
        c = self.collector
        if r in c.requests:  # "done": its spool file
            c.ready[r] = detail
            self.staleness.done(r, c.ctx.engine.policy_version)

    def found(self, spooled: dict[int, str]) -> None:
        self.collector.ready.update(spooled)

    def recount_aborted(self) -> None:
        pass  # the round collector aborts nothing

    def resumed(self) -> None:
        pass

    def take(self) -> tuple[TrajectoryBatch, None] | None:
        c = self.collector
        if not c.requests:
            return None  # nothing launched ahead and no room to launch: the budget is spent
        r = min(c.requests)  # in the order they were launched
        rec = c.consume(r, c.wait_for(r))
        self.staleness.consumed(r, int(rec["version"]), c.ctx.engine.policy_version)
        c.top_up()
        return rec["batch"], None

    def begin_step(self) -> None:
        pass

    def end_step(self, out: Collected) -> Collected:
        out.metrics.update(self.staleness.metrics())
        return out

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
