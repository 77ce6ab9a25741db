"""The collector process of a concurrent collector (:class:`~.concurrent.ConcurrentRounds`):
started with the weights last broadcast and sent the units in flight, restarted when it dies or
sticks (the units it spooled and never reported go to the queue, the others are sent again), and,
after a trainer's resume, waited for and its spool counted or replayed.

A part of :class:`~.concurrent.ConcurrentRounds` (mixed in), kept apart as its own job: it reads
and sets the collector's ``worker``, ``spool``, ``requests``, ``ready``, ``permits``, ``counted``,
``restarts``, ``incarnation`` and ``units``, and calls its ``broadcast``, ``_reserve``, ``_exact``
and ``_discard``.
"""

from __future__ import annotations

import uuid

from ..base import TrainingError
from .transport import ProcessWorker, RayWorker
from .worker import collector_init


class CollectorProcess:
    """Start, restart and recover the collector process."""

    def _start(self) -> None:
        v = self.broadcast_version
        if v is None or not self.spool.weights(v).exists():
            self.broadcast()
        v = self.broadcast_version
        try:
            self.incarnation += 1  # spool file names unique to this collector, in any process
            name = f"w{uuid.uuid4().hex[:8]}x{self.incarnation}"
            init = collector_init(self.ctx, self.spool.path, name)
            weights = (v, str(self.spool.weights(v)))
            if self.spec.backend == "ray":
                self.worker = RayWorker(init, weights)
            else:
                self.worker = ProcessWorker(init, weights, self.ctx.settings.process_context)
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
        """A dead or stuck collector's spool: the units it finished and never reported go to the
        queue (the rest in flight are sent again when the new collector starts)."""

        worker, self.worker = self.worker, None  # stopped: nothing is sent until the new one runs
        try:
            uncounted = self.spool.uncounted(self.counted).items()
            self.units.found(
                {
                    r: names[0]
                    for r, names in uncounted
                    if r in self.requests and r not in self.ready
                }
            )
        finally:
            self.worker = worker

    def _recover(self) -> None:
        """After a trainer's resume: wait for the old collector, then count or replay its spool."""

        self.spool.wait_for_old_collector()
        self.units.recount_aborted()
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
        self.units.resumed()
