"""Asynchronous training (``data.concurrent``): a concurrent collector samples ahead of the trainer.

Work goes out in *units*, each under a *permit*: its worst case reserved on the budget before the
request goes out. The collector (:mod:`.worker`: another process or a Ray actor, its own engine;
:mod:`.stream_worker` for groups) samples it with the weights last broadcast and spools it
(:mod:`.spool`); the trainer takes finished units, commits each one's measured cost (tokens,
episodes, environment steps, verifier and judge calls, the collector's device time including
loading weights) and tops the launched units up. The collector's wall time overlaps the trainer's
and is not added: ``wall_seconds`` stays the run's elapsed time, of which the trainer's waiting is
``async.wait_seconds``.

:class:`ConcurrentRounds` is that machinery, the same for every kind of unit: the collector
process (started, restarted, stopped: :mod:`.collector_process`), its spool, the units launched
(``requests``, ``permits``) and finished (``ready``), the costs counted, the broadcasts, the drain
at the end and the resume.
What a unit is, when one may be launched and which finished ones the trainer takes is its unit
queue's (:mod:`.units`), the one object it is built with: :class:`~.units.RoundQueue` (the
default, ``consume: round``: up to ``queue`` rounds of ``prompts_per_step`` groups, taken in
order) or :class:`~.episode_queue.EpisodeQueue` (``consume: episode``: groups taken as they finish).
The queue uses only the collector's public surface (:class:`~.units.QueueHost`: ``top_up``,
``wait_until``, ``wait_for``, ``consume``, ``charge_spooled`` and the units launched and ready);
no subclass overrides a private method.

Weights go out every ``data.broadcast_every`` versions (a file each, charged as ``broadcast``);
samples carry the version that made them (lag, bound, corrections: as with ``data.lag``; split by
where it passed: :mod:`.staleness`). Every spool file is counted once: when consumed or, when it
never can be (queued at the end; made after the checkpoint a killed trainer resumed from, by
weights the resumed run never had), as launched and discarded (``unconsumed``). A dead or stuck
collector is restarted (``restarts`` times): units it spooled are used, the rest launched again;
a resumed trainer replays what its checkpoint launched."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..base import TrainingError
from ..context import RunContext
from .collector_process import CollectorProcess
from .onpolicy import OnPolicyRounds
from .spool import Spool
from .units import QueueHost, RoundQueue, UnitQueue

POLL_SECONDS = 0.2


class ConcurrentRounds(CollectorProcess, OnPolicyRounds):
    """The trainer's side of a concurrent collector; ``queue`` makes its unit queue (``units``)
    from it: :class:`~.units.RoundQueue` unless given."""

    def __init__(self, ctx: RunContext, queue: Callable[[QueueHost], UnitQueue] = RoundQueue):
        super().__init__(ctx)
        self.spec = ctx.blanks.data.concurrent
        self.every = ctx.blanks.data.broadcast_every
        self.spool: Spool | None = None  # under settings.work_dir, made when the collector starts
        self.next_round = 0  # units requested so far (the next one's number)
        self.requests: dict[int, dict[str, Any]] = {}  # launched, not yet consumed
        self.permits: dict[int, Any] = {}  # unit -> its reservation on this process's ledger
        self.ready: dict[int, str] = {}  # unit -> its spool file, done and not yet consumed
        self.counted: set[str] = set()  # spool files whose cost is in the ledger
        self.checkpointed: set[str] = set()  # counted at the last checkpoint: prunable at the next
        self.broadcast_version: int | None = None
        self.restarts, self.incarnation = 0.0, 0
        self.worker, self.resumed, self.wait_seconds, self.drained = None, False, 0.0, {}
        self.closing = False  # close() has begun: what is aborted now is drained, not relaunched
        self.units: UnitQueue = queue(self)

    def worst_case(self) -> dict[str, float]:
        """While units are launched ahead their permits are reserved: only a replay draw is new;
        with none, the unit queue's (at least one unit must fit for the step to start)."""
        worst = super().worst_case()
        if self.requests:
            return {k: v for k, v in worst.items() if k == "replayed_tokens"}
        return self.units.start_worst(worst)

    def update_bound(self, worst: dict[str, float]) -> tuple[float, float]:
        return super().update_bound(super().worst_case())  # a round's: not the units ahead

    def _reserve(self, r: int, time_estimate: bool = True):
        """Unit ``r``'s permit: the queue's worst case of a unit, on this process's ledger (with
        the rollouts' time estimate where ``time_estimate``); None: it does not fit."""
        meter = self.ctx.meter
        amounts = meter.limited(self.units.unit_worst(), ("rollouts",) if time_estimate else ())
        return meter.ledger.reserve(amounts, label=f"rollouts {self.units.noun} {r}")

    def _exact(self, rec: dict[str, Any], name: str):
        """A reservation of a spooled unit's known cost (work done before this process knew)."""
        meter = self.ctx.meter
        res = meter.ledger.reserve(meter.limited(rec["cost"]), label=f"spooled {name}")
        if res is None:
            raise TrainingError(f"{self.ctx.settings.name}: spooled {name} does not fit the budget")
        return res

    def _commit(self, rec: dict[str, Any], name: str, res) -> None:
        """Spooled unit ``name`` (its record ``rec``) counted: its measured cost committed under
        ``res``, its device and broadcast time recorded."""
        meter = self.ctx.meter
        meter.ledger.commit(res, {**rec["cost"], "device_seconds": float(rec["device_seconds"])})
        b = float(rec.get("broadcast_seconds", 0.0))
        meter.record("rollouts", float(rec["device_seconds"]) - b, float(rec["wall_seconds"]))
        if b:
            meter.record("broadcast", b, 0.0)
        self.counted.add(name)

    def charge_spooled(self, name: str, reason: str, res=None) -> None:
        """Count a spooled unit that will never be trained on: launched, and discarded for
        ``reason`` (under ``res``, its permit, or a reservation of its known cost)."""

        rec = self.spool.load(name)
        self._commit(rec, name, res if res is not None else self._exact(rec, name))
        b = rec["batch"]
        self.ctx.meter.discard(reason, float(b.row_action_tokens().sum()), b.size)

    def consume(self, r: int, name: str) -> dict[str, Any]:
        """Unit ``r``'s spool record (file ``name``), taken: counted under its permit, no longer
        launched."""

        rec = self.spool.load(name)
        self._commit(rec, name, self.permits.pop(r))
        del self.requests[r]
        return rec

    def _discard(self, name: str, res=None) -> None:
        """A spooled unit never consumed: charged as ``unconsumed``, a drained round."""

        self.charge_spooled(name, "unconsumed", res)
        self.drained["async.drained_rounds"] = self.drained.get("async.drained_rounds", 0.0) + 1

    def broadcast(self) -> None:
        """Write the current weights for the collector (charged as ``broadcast``)."""
        v = self.ctx.engine.policy_version
        with self.ctx.meter.charge(f"broadcast version {v}"):
            path = self.spool.write_weights(self.ctx.model, v, self.broadcast_version)
        self.broadcast_version = v
        if self.worker is not None:
            self.worker.broadcast(v, str(path))

    def begin(self) -> None:
        self.wait_seconds, self.drained = 0.0, {}
        if self.worker is None:
            self.spool = self.spool or Spool(self.ctx.settings.work_dir, self.spec.keep_spool)
            if self.resumed:
                self._recover()
            self._start()
        v = self.ctx.engine.policy_version
        if v % self.every == 0 and v != self.broadcast_version:
            self.broadcast()
        self.top_up()
        while (msg := self.worker.poll(0.0)) is not None:  # what is ready now, without waiting
            self._message(msg)

    def top_up(self) -> None:
        """Launch units until the queue's capacity is reached, it admits no more, or the budget
        has no room for one more."""

        units = self.units
        while len(self.requests) < units.capacity():
            if not units.admits():
                return
            r = self.next_round
            res = self._reserve(r, units.carries_time(r))
            if res is None:
                return
            req = units.request(r)
            self.requests[r], self.permits[r] = req, res
            self.next_round += 1
            self.worker.send(req)

    def _message(self, msg: tuple[str, int, Any]) -> None:
        kind, got, detail = msg
        if kind == "error":
            where = f"round {got}" if got >= 0 else "start-up or loading weights"
            raise TrainingError(
                f"{self.ctx.settings.name}: the concurrent collector failed ({where}):\n{detail}"
            )
        self.units.report(kind, got, detail)

    def wait_for(self, r: int) -> str | None:
        """Unit ``r``'s spool file, once ready, taken from ``ready`` (None: it was aborted
        meanwhile)."""
        self.wait_until(lambda: r in self.ready or r not in self.requests)
        return self.ready.pop(r, None)

    def wait_until(self, done: Callable[[], bool]) -> None:
        """Handle the collector's messages until ``done()`` (restarting a dead or stuck one); the
        time is added to ``wait_seconds``."""
        w0 = last = time.perf_counter()
        while not done():  # each poll is a stop point (Ctrl-C, harness/stopping.py)
            msg = self.worker.poll(POLL_SECONDS)
            if msg is not None:
                self._message(msg)
                last = time.perf_counter()
            elif not self.worker.alive():
                while (msg := self.worker.poll(0.0)) is not None:  # its last words first
                    self._message(msg)
                if not done():
                    self._restart(f"died ({self.worker.death()})")
                last = time.perf_counter()
            elif time.perf_counter() - last > self.spec.round_timeout:
                self._restart(f"reported nothing for {self.spec.round_timeout:g} s (stuck)")
                last = time.perf_counter()
        self.wait_seconds += time.perf_counter() - w0

    def round(self):
        """The next batch, as the unit queue takes it (None: the budget is spent)."""
        return self.units.take()

    def collect(self):
        self.units.begin_step()
        self.begin()
        ready = float(len(self.ready))
        out = super().collect()
        out.metrics["async.rounds_ready"], out.metrics["async.restarts"] = ready, self.restarts
        out.metrics["async.wait_seconds"] = self.wait_seconds
        return self.units.end_step(out)

    def close(self, drain: bool = True) -> dict[str, float]:
        """The end of the run: units still launched are finished and counted as launched and
        discarded (``drain``); the collector stops. Without ``drain`` (the run failed, Ctrl-C, a
        drain that raised) it is killed and its permits released: a resume recounts from the
        checkpoint. Returns the drain's ``async.drained_rounds`` and ``async.wait_seconds``."""

        self.closing = True
        self.wait_seconds, self.drained, drained = 0.0, {}, False
        if self.worker is None:
            return {}
        try:
            if drain and self.requests:
                with self.ctx.meter.charge("drain collector"):  # the wait, on the run's clock
                    for r in sorted(self.requests):
                        if (name := self.wait_for(r)) is not None:  # None: aborted meanwhile
                            self._discard(name, self.permits.pop(r))
                            del self.requests[r]
            drained = drain
        finally:
            self.worker.stop(kill=not drained)
            self.worker = None
            for res in self.permits.values():
                self.ctx.meter.ledger.release(res)
            self.permits.clear()
            self.spool.close(self.counted if drain else set())
        return {**self.drained, "async.wait_seconds": self.wait_seconds} if self.drained else {}

    def state_dict(self) -> dict[str, Any]:
        if self.spool is not None:  # the last checkpoint is written: what it counted can go
            self.spool.prune(self.checkpointed)
            self.counted -= self.checkpointed if not self.spec.keep_spool else set()
        self.checkpointed = set(self.counted)
        return {
            **super().state_dict(),
            "next_round": self.next_round,
            "requests": dict(self.requests),
            "counted": sorted(self.counted),
            "broadcast_version": self.broadcast_version,
            "restarts": self.restarts,
            **self.units.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.next_round, self.restarts = state["next_round"], state["restarts"]
        self.requests = {int(r): q for r, q in state["requests"].items()}
        self.counted, self.broadcast_version = set(state["counted"]), state["broadcast_version"]
        self.units.load_state_dict(state)
        self.resumed = True
