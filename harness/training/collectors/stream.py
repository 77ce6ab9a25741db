"""Episode-level consumption (``data.concurrent.consume: episode``): asynchrony one group at a time.

Each launched unit is one prompt's group (one episode with ``group_size: 1``, as SAO samples),
reserved at its worst case before launch. The collector (:mod:`.stream_worker`) keeps every unit
in flight at once and reports each as it finishes; the trainer takes finished units in the order
they finished, whichever round launched them, and updates when ``prompts_per_step`` are in. Up to
``queue x prompts_per_step`` units are launched ahead.

Staleness is split per unit (:mod:`.staleness`) into the versions that passed while it was in
flight (from its oldest token's version to the trainer's version when it finished, read from the
time the collector wrote it down: a version counts from the start of the step after its update)
and while it waited to be consumed. Each part may be bounded (``data.concurrent.inflight`` /
``queued``): ``drop`` discards a unit past it when consumed (reasons ``stale_inflight``,
``stale_queue``); ``wait`` keeps it from passing: before an update the trainer waits for the units
in flight that the update would push past the in-flight bound, and no unit is launched while
(bound + 1) batches are launched and not consumed (so none waits in the queue longer); with that
bound, units are launched only at the start of a step, after the update and its broadcast (and to
replace an aborted one), never between taking a batch and the update: one launched then could finish
before the update and wait across it. Otherwise the queue is topped up as soon as a batch is taken,
so the collector works through the update. ``data.staleness`` bounds the total: admission by AReaL's
rule (:func:`~sixblanks.algorithms.offpolicy.staleness_capacity`), and a unit past it that finished
out of order is dropped (``staleness``). A unit the collector aborted (``partial: regenerate``) is
charged, discarded as ``aborted`` and launched again under a new reservation.
"""

from __future__ import annotations

import time
from typing import Any

from sixblanks.algorithms.offpolicy import staleness_capacity

from ...rollout.trajectory import TrajectoryBatch
from ...seeds import train_seeds
from ..base import Collected
from ..context import RunContext
from .concurrent import ConcurrentRounds


class EpisodeStream(ConcurrentRounds):
    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        self.started: dict[int, int] = {}  # unit -> the version it started with
        self.order: list[int] = []  # units seen done, in that order
        self.relaunch: list[dict[str, Any]] = []  # aborted units, to launch again
        self.accepted = 0  # units consumed and kept (AReaL's admission counts them)
        self.version0: int | None = None  # the trainer's version when the stream started
        self.closing = False
        self.stats: dict[str, float] = {}
        self.spans: list[int] = []
        self.became: list[tuple[float, int]] = []  # (time, the trainer's version from then on)

    def worst_case(self) -> dict[str, float]:
        """Nothing in flight: one unit must fit for the step to start (not a whole round)."""

        worst = super().worst_case()
        if self.requests:
            return worst
        unit = self.ctx.worst_rollouts(self.ctx.group_size)
        return {**{k: v for k, v in worst.items() if k == "replayed_tokens"}, **unit}

    def _reserve(self, r: int, time_estimate: bool = True):
        meter = self.ctx.meter
        amounts = meter.limited(
            self.ctx.worst_rollouts(self.ctx.group_size), ("rollouts",) if time_estimate else ()
        )
        return meter.ledger.reserve(amounts, label=f"rollouts unit {r}")

    def _count(self, key: str, n: float = 1.0) -> None:
        self.stats[key] = self.stats.get(key, 0.0) + n

    def _admits(self) -> bool:
        """The admission rules: the queue bound's wait, and AReaL's on ``data.staleness``."""

        B, running = self.n_prompts, len(self.requests)
        q = self.spec.queued
        if q is not None and q.on_pass == "wait" and running >= (q.versions + 1) * B:
            return False
        eta = self.ctx.blanks.data.staleness
        i = self.ctx.engine.policy_version - (self.version0 or 0)
        return eta is None or staleness_capacity(eta, i, B, self.accepted, running) > 0

    def top_up(self) -> None:
        ctx = self.ctx
        if self.version0 is None:
            self.version0 = ctx.engine.policy_version
        while len(self.requests) < self.spec.queue * self.n_prompts:
            if not self._admits():
                self._count("async.admission_waits")
                return
            r = self.next_round
            # up to queue x B units run at once and their wall times overlap: one unit in B
            # carries the time estimate, as a round would
            res = self._reserve(r, time_estimate=r % self.n_prompts == 0)
            if res is None:
                return
            if self.relaunch:
                req = self.relaunch.pop(0)
            else:
                req = {
                    "seeds": train_seeds(ctx.rng, 1, ctx.task),
                    "group_offset": self.group_counter,
                }
                self.group_counter += 1
            req = {**req, "round": r, "min_version": self.broadcast_version, "gen_seed": 0}
            self.requests[r], self.permits[r] = req, res
            self.next_round += 1
            self.worker.send(req)

    def _message(self, msg: tuple[str, int, Any]) -> None:
        kind, got, detail = msg
        if kind == "started":
            if got in self.requests:
                self.started[got] = int(detail)
        elif kind == "aborted":
            if got in self.requests:
                self._aborted(got, detail, self.permits.pop(got))
        else:
            if kind == "done" and got in self.requests and got not in self.ready:
                self.order.append(got)
            super()._message(msg)

    def _aborted(self, r: int, name: str, res) -> None:
        """A unit the collector aborted on new weights: charged, discarded, launched again."""

        rec = self.spool.load(name)
        self._commit(rec, name, res if res is not None else self._exact(rec, name))
        b = rec["batch"]
        self.ctx.meter.discard("aborted", float(b.row_action_tokens().sum()), b.size)
        self._count("async.aborted_units")
        if self.closing:  # charged while the run drains: its last record must show it
            self.drained["async.aborted_units"] = self.drained.get("async.aborted_units", 0.0) + 1
        req = self.requests.pop(r, None)
        self.started.pop(r, None)
        if req is not None:
            self.relaunch.append({"seeds": req["seeds"], "group_offset": req["group_offset"]})
            if self.worker is not None and not self.closing and self._top_up_now():
                self.top_up()

    def _spooled_before_death(self) -> None:
        """A dead or stuck collector's spool: a finished unit it never reported is used, an aborted
        one charged and launched again (by the next top-up); the rest in flight is sent again."""

        worker, self.worker = self.worker, None  # stopped: nothing is sent until the new one runs
        try:
            for r, names in self.spool.uncounted(self.counted).items():
                if r in self.requests and r not in self.ready:
                    if self.spool.load(names[0]).get("aborted"):
                        self._aborted(r, names[0], self.permits.pop(r))
                    else:
                        self.ready[r] = names[0]
                        self.order.append(r)
            self.started.clear()
        finally:
            self.worker = worker

    def _recover(self) -> None:
        self.spool.wait_for_old_collector()
        for r, names in sorted(self.spool.uncounted(self.counted).items()):
            for name in names:
                if self.spool.load(name).get("aborted"):  # counted and launched again
                    self._aborted(r, name, None)
        super()._recover()
        self.order += sorted(r for r in self.ready if r not in self.order)

    def _top_up_now(self) -> bool:
        """Launch as soon as a batch is taken (the collector works through the update), unless a
        bound waits: under the queue bound's a unit launched before the update could finish before
        it and wait across it (launched at the next step's start instead); under the in-flight
        bound's the trainer would wait for it before this very update (launched after the wait)."""

        return all(b is None or b.on_pass != "wait" for b in (self.spec.inflight, self.spec.queued))

    def _passed(self, inflight: int, queued: int, total: int) -> str | None:
        """The reason a unit with this staleness is dropped, or None. A bound with ``wait`` is
        never passed by design; where it is (a restart, a resume) it drops as ``drop`` would."""

        for part, bound, reason in (
            (inflight, self.spec.inflight, "stale_inflight"),
            (queued, self.spec.queued, "stale_queue"),
        ):
            if bound is not None and part > bound.versions:
                return reason
        eta = self.ctx.blanks.data.staleness
        return "staleness" if eta is not None and total > eta else None

    def round(self) -> tuple[TrajectoryBatch, None] | None:
        """The first ``prompts_per_step`` units to finish (fewer at the end of the budget)."""

        B, kept = self.n_prompts, []
        while not kept:
            self._wait_until(
                lambda: len(self.ready) >= min(B, len(self.requests)) or not self.requests
            )
            if not self.requests:
                return None
            self.order += [r for r in sorted(self.ready) if r not in self.order]  # never lost
            take = [r for r in self.order if r in self.ready][:B]
            self.order = [r for r in self.order if r not in take]
            v = self.ctx.engine.policy_version
            for r in take:
                name = self.ready.pop(r)
                rec = self.spool.load(name)
                b, oldest = rec["batch"], int(rec["batch"].policy_version.min())
                seen = self.version_at(rec.get("finished_at"), v)
                self.staleness.seen.pop(r, None)
                self._commit(rec, name, self.permits.pop(r))
                del self.requests[r]
                self.started.pop(r, None)
                reason = self._passed(seen - oldest, v - seen, v - oldest)
                if reason is not None:  # the split describes what is trained on
                    self.ctx.meter.discard(reason, float(b.row_action_tokens().sum()), b.size)
                    self._count(f"lag.dropped_{reason}")
                    continue
                self.staleness.seen[r] = seen
                self.staleness.consumed(r, oldest, v)
                self.accepted += 1
                self.spans += b.version_span().tolist()
                kept.append(b)
            if self._top_up_now() or (not kept and not self.requests):
                self.top_up()  # keep the collector busy through the update
        return TrajectoryBatch.concat(kept, self.ctx.pad_id), None

    def version_at(self, t: float | None, now: int) -> int:
        """The trainer's version at time ``t`` (``now`` where unknown: found after a resume)."""

        if t is None:
            return now
        past = [v for when, v in self.became if when <= t]
        return past[-1] if past else min((v for _, v in self.became), default=now)

    def _hold(self) -> None:
        """The in-flight bound's wait: before this step's update, the units in flight that it
        would push past the bound finish (the trainer idles for them)."""

        bound = self.spec.inflight
        if bound is None or bound.on_pass != "wait":
            return
        edge = self.ctx.engine.policy_version - bound.versions

        def old() -> bool:
            for r, req in self.requests.items():
                start = self.started.get(r, req.get("min_version") or 0)
                if r not in self.ready and start <= edge:
                    return True
            return False

        w0 = self.wait_seconds
        self._wait_until(lambda: not old())
        self._count("async.hold_seconds", self.wait_seconds - w0)

    def collect(self):
        self.stats, self.spans = {}, []
        counters = self.ctx.meter.ledger.counters
        launched = counters["rollouts_launched"]
        v = self.ctx.engine.policy_version
        if not self.became or self.became[-1][1] != v:
            self.became = [*self.became[-63:], (time.time(), v)]
        out = super().collect()
        if out.nothing_fit and counters["rollouts_launched"] != launched:
            # groups were charged (dropped, aborted) before none was left: in a step's record
            out = Collected(None, {**out.metrics, "skipped": 1.0}, out.census)
        self._hold()
        q = self.spec.queued
        if not self._top_up_now() and (q is None or q.on_pass != "wait"):
            self.top_up()  # the in-flight bound waits: launched after the wait, before the update
        out.metrics.update(self.stats)
        out.metrics["async.wait_seconds"] = self.wait_seconds
        if self.spans:
            out.metrics["lag.version_span"] = sum(self.spans) / len(self.spans)
            out.metrics["lag.version_span_max"] = float(max(self.spans))
        return out

    def close(self, drain: bool = True) -> dict[str, float]:
        self.closing = True
        return super().close(drain)

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "relaunch": list(self.relaunch),
            "accepted": self.accepted,
            "version0": self.version0,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.relaunch = list(state["relaunch"])
        self.accepted, self.version0 = state["accepted"], state["version0"]
