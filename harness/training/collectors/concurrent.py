"""Asynchronous training (``data.concurrent``): a concurrent collector samples ahead of the trainer.

Up to ``queue`` rounds are launched ahead, each a *permit*: its worst case reserved on the budget
before the request goes out. The collector (:mod:`.worker`: another process or a Ray actor, its
own engine) samples it with the weights last broadcast and spools it (:mod:`.spool`); the trainer
consumes rounds in order, commits each one's measured cost (tokens, episodes, environment steps,
verifier and judge calls, the collector's device time including loading weights) and tops the
queue up. The collector's wall time overlaps the trainer's and is not added: ``wall_seconds`` stays
the run's elapsed time, of which the trainer's waiting is ``async.wait_seconds``.

Weights go out every ``data.broadcast_every`` versions (a file each, charged as ``broadcast``);
samples carry the version that made them (lag, bound, corrections: as with ``data.lag``; split by
where it passed: :mod:`.staleness`). Every spool file is counted once: when consumed or, when it
never can be (queued at the end; made after the checkpoint a killed trainer resumed from, by
weights the resumed run never had), as launched and discarded (``unconsumed``). A dead or stuck
collector is restarted (``restarts`` times): rounds it spooled are used, the rest launched again;
a resumed trainer replays what its checkpoint launched. :mod:`.stream`: groups, not rounds."""

from __future__ import annotations

import time
import uuid
from typing import Any

from ...seeds import train_seeds
from ..base import TrainingError
from ..context import RunContext
from .onpolicy import OnPolicyRounds
from .spool import Spool
from .staleness import StalenessSplit
from .transport import ProcessWorker, RayWorker
from .worker import collector_init

POLL_SECONDS = 0.2


class ConcurrentRounds(OnPolicyRounds):
    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        self.spec = ctx.blanks.data.concurrent
        self.every = ctx.blanks.data.broadcast_every
        self.spool: Spool | None = None  # under settings.work_dir, made when the collector starts
        self.next_round = 0  # rounds requested so far
        self.requests: dict[int, dict[str, Any]] = {}  # launched, not yet consumed
        self.permits: dict[int, Any] = {}  # round -> its reservation on this process's ledger
        self.ready: dict[int, str] = {}  # round -> its spool file, done and not yet consumed
        self.counted: set[str] = set()  # spool files whose cost is in the ledger
        self.checkpointed: set[str] = set()  # counted at the last checkpoint: prunable at the next
        self.broadcast_version: int | None = None
        self.restarts, self.incarnation = 0.0, 0
        self.worker, self.resumed, self.wait_seconds, self.drained = None, False, 0.0, {}
        self.staleness = StalenessSplit()  # in flight and in the queue

    def worst_case(self) -> dict[str, float]:
        """While a round is launched ahead its permit is reserved: only a replay draw is new."""
        worst = super().worst_case()
        return {k: v for k, v in worst.items() if k == "replayed_tokens" or not self.requests}

    def update_bound(self, worst: dict[str, float]) -> tuple[float, float]:
        return super().update_bound(super().worst_case())  # a round's: not the rounds ahead

    def _reserve(self, r: int, time_estimate: bool = True):
        meter, worst = self.ctx.meter, super().worst_case()
        worst.pop("replayed_tokens", None)  # drawn at the step, reserved by its admission
        amounts = meter.limited(worst, ("rollouts",) if time_estimate else ())
        return meter.ledger.reserve(amounts, label=f"rollouts round {r}")

    def _exact(self, rec: dict[str, Any], name: str):
        """A reservation of a spooled round's known cost (work done before this process knew)."""
        meter = self.ctx.meter
        res = meter.ledger.reserve(meter.limited(rec["cost"]), label=f"spooled {name}")
        if res is None:
            raise TrainingError(f"{self.ctx.settings.name}: spooled {name} does not fit the budget")
        return res

    def _commit(self, rec: dict[str, Any], name: str, res) -> None:
        meter = self.ctx.meter
        meter.ledger.commit(res, {**rec["cost"], "device_seconds": float(rec["device_seconds"])})
        b = float(rec.get("broadcast_seconds", 0.0))
        meter.record("rollouts", float(rec["device_seconds"]) - b, float(rec["wall_seconds"]))
        if b:
            meter.record("broadcast", b, 0.0)
        self.counted.add(name)

    def _discard(self, name: str, res=None) -> None:
        """Count a spooled round that will never be trained on: launched, and discarded (under
        ``res``, its permit, or a reservation of its known cost)."""

        rec = self.spool.load(name)
        self._commit(rec, name, res if res is not None else self._exact(rec, name))
        b = rec["batch"]
        self.ctx.meter.discard("unconsumed", float(b.row_action_tokens().sum()), b.size)
        self.drained["async.drained_rounds"] = self.drained.get("async.drained_rounds", 0.0) + 1

    def broadcast(self) -> None:
        """Write the current weights for the collector (charged as ``broadcast``)."""
        v = self.ctx.engine.policy_version
        with self.ctx.meter.charge(f"broadcast version {v}"):
            path = self.spool.write_weights(self.ctx.model, v, self.broadcast_version)
        self.broadcast_version = v
        if self.worker is not None:
            self.worker.broadcast(v, str(path))

    def _start(self) -> None:
        v = self.broadcast_version
        if v is None or not self.spool.weights(v).exists():
            self.broadcast()
        v = self.broadcast_version
        try:
            cls = RayWorker if self.spec.backend == "ray" else ProcessWorker
            self.incarnation += 1  # spool file names unique to this collector, in any process
            name = f"w{uuid.uuid4().hex[:8]}x{self.incarnation}"
            init = collector_init(self.ctx, self.spool.path, name)
            self.worker = cls(init, (v, str(self.spool.weights(v))))
        except Exception as exc:  # pickling the task or the model, placing a Ray actor
            raise TrainingError(
                f"{self.ctx.settings.name}: data.concurrent: could not start the collector "
                f"({type(exc).__name__}: {exc})"
            ) from exc
        self.spool.record_pid(self.worker.pid)
        for r in sorted(self.requests):
            if r not in self.ready:
                self.worker.send(self.requests[r])

    def _restart(self, why: str) -> None:
        self.restarts += 1
        if self.restarts > self.spec.restarts:
            raise TrainingError(
                f"{self.ctx.settings.name}: the concurrent collector {why}, "
                f"{int(self.restarts)} times (data.concurrent.restarts: {self.spec.restarts})"
            )
        self.worker.stop(kill=True, restart=True)
        self._spooled_before_death()
        self._start()

    def _spooled_before_death(self) -> None:
        for r, names in self.spool.uncounted(self.counted).items():
            if r in self.requests and r not in self.ready:
                self.ready[r] = names[0]

    def _recover(self) -> None:
        """After a trainer's resume: wait for the old collector, then count or replay its spool."""

        self.spool.wait_for_old_collector()
        version = self.ctx.engine.policy_version
        for r, names in sorted(self.spool.uncounted(self.counted).items()):
            for name in names:
                rec = self.spool.load(name)
                if r in self.requests and r not in self.ready and rec["version"] <= version:
                    self.ready[r] = name  # replayed from disk, reserved at its known cost
                    self.permits[r] = self._exact(rec, name)
                    continue
                # made by weights the resumed run never had, or a second copy: counted, dropped;
                # a pending round made that way was launched (not again)
                self._discard(name)
                if r not in self.ready:
                    self.requests.pop(r, None)
        for r in sorted(set(self.requests) - set(self.permits)):  # launched again
            res = self._reserve(r, time_estimate=False)
            if res is None:
                raise TrainingError(f"{self.ctx.settings.name}: resumed round {r} does not fit")
            self.permits[r] = res

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
        """Launch rounds until ``queue`` are ahead or the budget has no room for one more."""

        ctx = self.ctx
        while len(self.requests) < self.spec.queue:
            r = self.next_round
            res = self._reserve(r)
            if res is None:
                return
            n = self.n_prompts
            req = {
                "round": r,
                "seeds": train_seeds(ctx.rng, n, ctx.task),
                "group_offset": self.group_counter,
                "gen_seed": ctx.settings.train_seed * 1_000_003 + r,
                "min_version": self.broadcast_version,  # no older weights: worker.process_main
            }
            self.group_counter += n
            self.requests[r], self.permits[r] = req, res
            self.next_round += 1
            self.worker.send(req)

    def _message(self, msg: tuple[str, int, str]) -> None:
        kind, got, detail = msg
        if kind == "error":
            where = f"round {got}" if got >= 0 else "start-up or loading weights"
            raise TrainingError(
                f"{self.ctx.settings.name}: the concurrent collector failed ({where}):\n{detail}"
            )
        if got in self.requests:
            self.ready[got] = detail
            self.staleness.done(got, self.ctx.engine.policy_version)

    def _wait(self, r: int) -> str | None:
        """Round ``r``'s spool file, once ready (None: it was aborted meanwhile)."""
        self._wait_until(lambda: r in self.ready or r not in self.requests)
        return self.ready.pop(r, None)

    def _wait_until(self, done) -> None:
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
        if not self.requests:
            return None  # nothing launched ahead and no room to launch: the budget is spent
        r = min(self.requests)  # in the order they were launched
        name = self._wait(r)
        rec = self.spool.load(name)
        self.staleness.consumed(r, int(rec["version"]), self.ctx.engine.policy_version)
        self._commit(rec, name, self.permits.pop(r))
        del self.requests[r]
        self.top_up()
        return rec["batch"], None

    def collect(self):
        self.begin()
        ready = float(len(self.ready))
        out = super().collect()
        out.metrics["async.rounds_ready"], out.metrics["async.restarts"] = ready, self.restarts
        out.metrics["async.wait_seconds"] = self.wait_seconds
        out.metrics.update(self.staleness.metrics())
        return out

    def close(self, drain: bool = True) -> dict[str, float]:
        """The end of the run: rounds still launched are finished and counted as launched and
        discarded (``drain``); the collector stops. Without ``drain`` (the run failed, Ctrl-C, a
        drain that raised) it is killed and its permits released: a resume recounts from the
        checkpoint. Returns the drain's ``async.drained_rounds`` and ``async.wait_seconds``."""

        self.wait_seconds, self.drained, drained = 0.0, {}, False
        if self.worker is None:
            return {}
        try:
            if drain and self.requests:
                with self.ctx.meter.charge("drain collector"):  # the wait, on the run's clock
                    for r in sorted(self.requests):
                        if (name := self._wait(r)) is not None:  # None: aborted meanwhile
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
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.next_round, self.restarts = state["next_round"], state["restarts"]
        self.requests = {int(r): q for r, q in state["requests"].items()}
        self.counted, self.broadcast_version = set(state["counted"]), state["broadcast_version"]
        self.resumed = True
