"""The collector side of episode-level consumption (``data.concurrent.consume: episode``).

Where the round collector (:mod:`.worker`) samples a whole round and reports it when its longest
episode ends, this one keeps every launched group in flight at once, one generation call per turn
over all of their unfinished episodes (continuous batching), and spools and reports each group the
moment its last episode ends: a long episode no longer holds back the short ones launched with it.

A weight update reaches the groups in flight at their next turn boundary (each action is one
generation call, so a single-turn episode has no boundary inside it), by
``data.concurrent.partial``:

- ``continue``: groups in flight finish on the weights they started with; no group starts until
  they have, then the new weights load (a weight sync that waits for in-flight requests);
- ``resume``: the new weights load at once and the groups in flight go on with them, keeping their
  tokens and rollout log-probs; each token keeps the version that sampled it, so a group spans
  several versions;
- ``regenerate``: the new weights load at once; each group in flight with any action is aborted, its
  partial episodes spooled (launched and discarded as ``aborted``), and the trainer launches it
  again under a new reservation.

Messages to the trainer: ``("started", unit, version)``, ``("done", unit, file)``,
``("aborted", unit, file)``, ``("error", unit, traceback)``. Each unit's cost is its own: its
tokens and environment steps, its verifier and judge calls (counted around each call it makes) and
its share of the device time of every turn it was in (split evenly over the episodes of the turn);
the time spent loading weights goes with the next unit spooled.
"""

from __future__ import annotations

import queue
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch

from ...checkpoint import save_record
from ...rollout.agent import Episode, episodes_to_batch, play_round, start_episode, task_params
from ..context import rollout_cost
from .worker import CollectorCore, round_file, trainer_alive


class UnitGate:
    """The run's verifier gate, counting the calls one unit makes (its own ``counts()``)."""

    def __init__(self, gate):
        self.gate, self.calls = gate, [0, 0]

    def __call__(self, *args, **kw):
        with self.gate.lock:  # no other unit's call in between (concurrent environment steps)
            v0, j0 = self.gate.counts()
            try:
                return self.gate(*args, **kw)
            finally:
                v1, j1 = self.gate.counts()
                self.calls[0] += v1 - v0
                self.calls[1] += j1 - j0

    def counts(self) -> tuple[int, int]:
        return self.calls[0], self.calls[1]

    def __getattr__(self, name: str):
        return getattr(self.gate, name)


@dataclass
class Unit:
    req: dict[str, Any]
    episodes: list[Episode]
    gate: UnitGate
    version: int  # the weights it started with
    device_seconds: float = 0.0
    t0: float = field(default_factory=time.perf_counter)

    @property
    def done(self) -> bool:
        return all(ep.done for ep in self.episodes)

    @property
    def acted(self) -> bool:
        return any(ep.actions for ep in self.episodes)


class StreamCore(CollectorCore):
    """The groups in flight, advanced one turn at a time; ``init`` as :class:`CollectorCore`'s plus
    ``partial`` (continue, resume, regenerate)."""

    def __init__(self, init: dict[str, Any]):
        super().__init__(init)
        self.partial = init["partial"]
        self.params = task_params(self.params, init["task"])
        self.units: dict[int, Unit] = {}  # in flight
        self.waiting: list[dict[str, Any]] = []  # received, not started
        self.pending: tuple[int, str] | None = None  # newest weights announced, not loaded
        self.generator = torch.Generator().manual_seed(int(init["seed"]) * 1_000_003 + 7)

    def announce(self, version: int, path: str) -> None:
        if self.pending is None or version > self.pending[0]:
            self.pending = (int(version), path)

    def take_weights(self) -> list[tuple[str, int, str]]:
        """Load the newest weights announced, when the mode allows it now; aborted units'
        reports."""

        if self.pending is None or (self.version is not None and self.pending[0] <= self.version):
            self.pending = None
            return []
        if self.partial == "continue" and self.units:
            return []  # the groups in flight finish on the weights they started with
        if not self.load(*self.pending):
            return []  # superseded: its file is gone, the newer one is announced next
        self.pending, out = None, []
        if self.partial == "regenerate":
            for r in [r for r, u in self.units.items() if u.acted]:
                out.append(("aborted", r, self.spool_unit(self.units.pop(r), aborted=True)))
        return out

    def start(self) -> list[tuple[str, int, int]]:
        """Start the waiting requests whose weights are here (none while ``continue`` drains)."""

        if self.partial == "continue" and self.pending is not None and self.units:
            return []
        out, init, task = [], self.init, self.init["task"]
        for req in list(self.waiting):
            want = req.get("min_version")
            if self.version is None or (want is not None and self.version < want):
                continue  # its weights travel on another queue and are not here yet
            self.waiting.remove(req)
            gate = UnitGate(self.gate)
            eps = [
                start_episode(task, inst, gate, init["tokenizer"], int(req["group_offset"]) + gi)
                for gi, inst in enumerate(task.instances(list(req["seeds"])))
                for _ in range(int(init["group_size"]))
            ]
            self.units[int(req["round"])] = Unit(req, eps, gate, self.version)
            out.append(("started", int(req["round"]), self.version))
        return out

    def turn(self) -> list[tuple[str, int, str]]:
        """One action of every unfinished episode in flight; the units that ended, spooled."""

        active = [ep for u in self.units.values() for ep in u.episodes if not ep.done]
        if active:
            t0 = self.timer.now()
            init = self.init
            play_round(
                self.engine,
                init["tokenizer"],
                init["task"],
                active,
                self.params,
                int(init["max_context_tokens"]),
                self.generator,
            )
            share = (self.timer.now() - t0) / len(active)
            ids = {id(ep) for ep in active}
            for u in self.units.values():
                u.device_seconds += share * sum(id(ep) in ids for ep in u.episodes)
        finished = [r for r, u in self.units.items() if u.done]
        return [("done", r, self.spool_unit(self.units.pop(r))) for r in finished]

    def spool_unit(self, unit: Unit, aborted: bool = False) -> str:
        init = self.init
        batch = episodes_to_batch(unit.episodes, init["tokenizer"], unit.version, init["task"].name)
        r = int(unit.req["round"])
        name = round_file(r, init["worker"])
        record = {
            "round": r,
            "worker": init["worker"],
            "version": int(batch.token_versions.max().clamp(min=unit.version)),  # its newest
            "batch": batch,
            "cost": rollout_cost([batch], unit.gate, (0, 0)),
            "device_seconds": unit.device_seconds + self.broadcast_seconds,
            "wall_seconds": time.perf_counter() - unit.t0,
            "broadcast_seconds": self.broadcast_seconds,
            "aborted": aborted,
            "finished_at": time.time(),  # the trainer reads its version at that moment
        }
        save_record(record, self.spool / name)
        self.broadcast_seconds = 0.0
        return name


def stream_main(init, rounds_q, weights_q, done_q, parent_pid: int) -> None:
    """The streaming collector process: requests in, weights in, one turn, reports out; it exits
    when asked (a None request) or when the trainer that started it is gone: then each group in
    flight that has acted is spooled as aborted (its work is charged when a resumed trainer reads
    the spool, and launched again)."""

    try:
        core = StreamCore(init)
    except BaseException:  # noqa: BLE001 - reported to the trainer
        done_q.put(("error", -1, traceback.format_exc(limit=8)))
        return
    try:
        while trainer_alive(parent_pid):
            idle = not core.units
            try:  # block briefly only when there is nothing to advance
                req = (
                    rounds_q.get(timeout=0.2)
                    if idle and not core.waiting
                    else rounds_q.get_nowait()
                )
                while True:
                    if req is None:
                        return
                    core.waiting.append(req)
                    req = rounds_q.get_nowait()
            except queue.Empty:
                pass
            while True:
                try:
                    core.announce(*weights_q.get_nowait())
                except queue.Empty:
                    break
            if core.waiting and not core.units and core.pending is None:
                newest = core.version if core.version is not None else -1
                wants = [q.get("min_version") for q in core.waiting]
                if any(w is not None and w > newest for w in wants):
                    core.announce(*weights_q.get(timeout=60))  # a request ahead of its weights
            for msg in core.take_weights() + core.start() + core.turn():
                done_q.put(msg)
        for r in [r for r, u in core.units.items() if u.acted]:  # the trainer is gone
            core.spool_unit(core.units.pop(r), aborted=True)
    except BaseException:  # noqa: BLE001 - reported to the trainer
        done_q.put(("error", min(core.units, default=-1), traceback.format_exc(limit=8)))
