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

All of that is :class:`EpisodeQueue`, a unit queue (:class:`~.units.UnitQueue`) that the
concurrent collector is built with (:class:`~.stream.EpisodeStream`).
"""

from __future__ import annotations

import time
from typing import Any

from sixblanks.algorithms.offpolicy import staleness_capacity

from ...rollout.trajectory import TrajectoryBatch
from ...seeds import train_seeds
from ..base import Collected
from .staleness import StalenessSplit, bound_passed
from .units import QueueHost


class EpisodeQueue:
    """Episode-level units (:class:`~.units.UnitQueue`) of ``collector``: one group each, taken
    as they finish, bounded by where their staleness passed."""

    noun = "unit"

    def __init__(self, collector: QueueHost):
        self.collector, self.ctx, self.spec = collector, collector.ctx, collector.spec
        self.B = collector.n_prompts  # units a batch
        self.started: dict[int, int] = {}  # unit -> the version it started with
        self.order: list[int] = []  # units seen done, in that order
        self.relaunch: list[dict[str, Any]] = []  # aborted units, to launch again
        self.accepted = 0  # units consumed and kept (AReaL's admission counts them)
        self.version0: int | None = None  # the trainer's version when the stream started
        self.stats: dict[str, float] = {}  # this step's counts (admission waits, drops, ...)
        self.spans: list[int] = []  # this step's kept rows' version spans
        self.became: list[tuple[float, int]] = []  # (time, the trainer's version from then on)
        self.staleness = StalenessSplit()  # cut where each unit finished (version_at)
        self.counters: dict[str, float] = {}  # the ledger's counters and their launched rollouts
        self.launched = 0.0  # at the step's start

    def count(self, key: str, n: float = 1.0) -> None:
        self.stats[key] = self.stats.get(key, 0.0) + n

    # the permits: which units may be launched now

    def unit_worst(self) -> dict[str, float]:
        return self.ctx.worst_rollouts(self.ctx.group_size)

    def start_worst(self, worst: dict[str, float]) -> dict[str, float]:
        """Nothing in flight: one unit must fit for the step to start (not a whole round)."""

        return {**{k: v for k, v in worst.items() if k == "replayed_tokens"}, **self.unit_worst()}

    def capacity(self) -> int:
        return self.spec.queue * self.B

    def admits(self) -> bool:
        """The admission rules: the queue bound's wait, and AReaL's on ``data.staleness``; a
        refusal is counted (``async.admission_waits``)."""

        B, running = self.B, len(self.collector.requests)
        q = self.spec.queued
        if q is not None and q.on_pass == "wait" and running >= (q.versions + 1) * B:
            ok = False
        else:
            eta = self.ctx.blanks.data.staleness
            i = self.ctx.engine.policy_version - (self.version0 or 0)
            ok = eta is None or staleness_capacity(eta, i, B, self.accepted, running) > 0
        if not ok:
            self.count("async.admission_waits")
        return ok

    def carries_time(self, r: int) -> bool:
        # up to queue x B units run at once and their wall times overlap: one unit in B carries
        # the time estimate, as a round would
        return r % self.B == 0

    def request(self, r: int) -> dict[str, Any]:
        """An aborted unit's prompts again, else one new prompt's."""

        c, ctx = self.collector, self.ctx
        if self.relaunch:
            req = self.relaunch.pop(0)
        else:
            req = {"seeds": train_seeds(ctx.rng, 1, ctx.task), "group_offset": c.group_counter}
            c.group_counter += 1
        return {**req, "round": r, "min_version": c.broadcast_version, "gen_seed": 0}

    def launch_now(self) -> bool:
        """Launch as soon as a batch is taken (the collector works through the update), unless a
        bound waits: under the queue bound's a unit launched before the update could finish before
        it and wait across it (launched at the next step's start instead); under the in-flight
        bound's the trainer would wait for it before this very update (launched after the wait)."""

        return all(b is None or b.on_pass != "wait" for b in (self.spec.inflight, self.spec.queued))

    # what the collector process reports, and what a restart or a resume finds in the spool

    def report(self, kind: str, r: int, detail: Any) -> None:
        c = self.collector
        if r not in c.requests:
            return
        if kind == "started":
            self.started[r] = int(detail)
        elif kind == "aborted":
            self.aborted(r, detail, c.permits.pop(r))
        else:  # done: its spool file
            if r not in c.ready:
                self.order.append(r)
            c.ready[r] = detail

    def aborted(self, r: int, name: str, res) -> None:
        """A unit the collector aborted on new weights: charged, discarded, launched again (under
        ``res``, its permit, or a reservation of its known cost)."""

        c = self.collector
        c.charge_spooled(name, "aborted", res)
        self.count("async.aborted_units")
        if c.closing:  # charged while the run drains: its last record must show it
            c.drained["async.aborted_units"] = c.drained.get("async.aborted_units", 0.0) + 1
        req = c.requests.pop(r, None)
        self.started.pop(r, None)
        if req is not None:
            self.relaunch.append({"seeds": req["seeds"], "group_offset": req["group_offset"]})
            if c.worker is not None and not c.closing and self.launch_now():
                c.top_up()

    def found(self, spooled: dict[int, str]) -> None:
        """A finished unit the dead collector never reported is used, an aborted one charged and
        launched again (by the next top-up); nothing has started on the new collector."""

        c = self.collector
        for r, name in spooled.items():
            if c.spool.load(name).get("aborted"):
                self.aborted(r, name, c.permits.pop(r))
            else:
                c.ready[r] = name
                self.order.append(r)
        self.started.clear()

    def recount_aborted(self) -> None:
        """The units the old collector aborted: counted and launched again."""

        c = self.collector
        for r, names in sorted(c.spool.uncounted(c.counted).items()):
            for name in names:
                if c.spool.load(name).get("aborted"):
                    self.aborted(r, name, None)

    def resumed(self) -> None:
        c = self.collector
        self.order += sorted(r for r in c.ready if r not in self.order)

    # the finished units, taken

    def take(self) -> tuple[TrajectoryBatch, None] | None:
        """The first ``prompts_per_step`` units to finish (fewer at the end of the budget)."""

        c, B, kept = self.collector, self.B, []
        while not kept:
            c.wait_until(lambda: len(c.ready) >= min(B, len(c.requests)) or not c.requests)
            if not c.requests:
                return None
            self.order += [r for r in sorted(c.ready) if r not in self.order]  # never lost
            take = [r for r in self.order if r in c.ready][:B]
            self.order = [r for r in self.order if r not in take]
            v = self.ctx.engine.policy_version
            for r in take:
                if (b := self.accept(r, v)) is not None:
                    kept.append(b)
            if self.launch_now() or (not kept and not c.requests):
                c.top_up()  # keep the collector busy through the update
        return TrajectoryBatch.concat(kept, self.ctx.pad_id), None

    def accept(self, r: int, v: int) -> TrajectoryBatch | None:
        """Finished unit ``r`` consumed at version ``v``: its rows, or None where a bound drops
        it (the split describes what is trained on)."""

        c = self.collector
        rec = c.consume(r, c.ready.pop(r))
        b, oldest = rec["batch"], int(rec["batch"].policy_version.min())
        seen = self.version_at(rec.get("finished_at"), v)
        self.started.pop(r, None)
        reason = bound_passed(
            self.spec, self.ctx.blanks.data.staleness, seen - oldest, v - seen, v - oldest
        )
        if reason is not None:
            self.ctx.meter.discard(reason, float(b.row_action_tokens().sum()), b.size)
            self.count(f"lag.dropped_{reason}")
            return None
        self.staleness.consumed(r, oldest, v, seen)
        self.accepted += 1
        self.spans += b.version_span().tolist()
        return b

    def version_at(self, t: float | None, now: int) -> int:
        """The trainer's version at time ``t`` (``now`` where unknown: found after a resume)."""

        if t is None:
            return now
        past = [v for when, v in self.became if when <= t]
        return past[-1] if past else min((v for _, v in self.became), default=now)

    def hold(self) -> None:
        """The in-flight bound's wait: before this step's update, the units in flight that it
        would push past the bound finish (the trainer idles for them)."""

        bound, c = self.spec.inflight, self.collector
        if bound is None or bound.on_pass != "wait":
            return
        edge = self.ctx.engine.policy_version - bound.versions

        def old() -> bool:
            for r, req in c.requests.items():
                start = self.started.get(r, req.get("min_version") or 0)
                if r not in c.ready and start <= edge:
                    return True
            return False

        w0 = c.wait_seconds
        c.wait_until(lambda: not old())
        self.count("async.hold_seconds", c.wait_seconds - w0)

    # a step

    def begin_step(self) -> None:
        """The trainer's version from now on (the split's cut), and the stream's first."""

        self.stats, self.spans = {}, []
        self.counters = self.ctx.meter.ledger.counters
        self.launched = self.counters["rollouts_launched"]
        v = self.ctx.engine.policy_version
        if not self.became or self.became[-1][1] != v:
            self.became = [*self.became[-63:], (time.time(), v)]
        if self.version0 is None:
            self.version0 = v

    def end_step(self, out: Collected) -> Collected:
        """The split, the in-flight bound's wait and the launches after it, this step's counts."""

        c = self.collector
        out.metrics.update(self.staleness.metrics())
        if out.nothing_fit and self.counters["rollouts_launched"] != self.launched:
            # groups were charged (dropped, aborted) before none was left: in a step's record
            out = Collected(None, {**out.metrics, "skipped": 1.0}, out.census)
        self.hold()
        q = self.spec.queued
        if not self.launch_now() and (q is None or q.on_pass != "wait"):
            c.top_up()  # the in-flight bound waits: launched after the wait, before the update
        out.metrics.update(self.stats)
        out.metrics["async.wait_seconds"] = c.wait_seconds
        if self.spans:
            out.metrics["lag.version_span"] = sum(self.spans) / len(self.spans)
            out.metrics["lag.version_span_max"] = float(max(self.spans))
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "relaunch": list(self.relaunch),
            "accepted": self.accepted,
            "version0": self.version0,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.relaunch = list(state["relaunch"])
        self.accepted, self.version0 = state["accepted"], state["version0"]
