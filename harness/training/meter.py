"""One way to charge the budget: reserve the worst case before launch, then commit the actual cost
or release the reservation. Every kind of work goes through it: rollout rounds, the greedy baseline,
demonstrations, preference pairs, updates, critic passes, the whole step, and evaluation (on a
ledger of its own, apart from the training budget).

    charge = meter.reserve(worst, "rollouts step 3")   # None: it would not fit, do not launch
    with charge:                                       # times the block
        ... launch ...
        charge.actual = {"launched_tokens": ...}       # committed on exit; an exception releases it

Charges nest: each commits its own device and wall seconds (its time minus that of the charges
inside it), so the ledger's time is the sum of the work's, counted once, labelled by kind.

Time limits. Time cannot be known before the work runs, so a limited time counter is guarded by
estimates: a charge made with ``time_of=(kinds...)`` also reserves TIME_ESTIMATE_FACTOR x the
longest unit of each of those kinds measured so far. A step is admitted, and each rollout round
launched, only when the round, the update, the weight sync and a checkpoint after it fit
(UNIT_KINDS). The exact worst case, stated in the guide (docs/guide/fair-comparison.md) and
``status``: a run exceeds a time limit by at most the time of the rest of its last step after its
last check, plus a checkpoint: never more than one training step and its checkpoint
(``Meter.overshoot_bound``, the longest seen). The first step, before anything was measured,
reserves :func:`first_step_prior`: the start evaluation's time per generated token times the step's
worst-case launched tokens times FIRST_STEP_FACTOR. The nesting is one stack: charges of one thread,
strictly nested. A concurrent collector measures its rounds in its own process and the trainer
commits them (``record``): its device time adds to the trainer's; its wall time overlaps the
trainer's and is not added again.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from sixblanks.budgets.ledger import Ledger, Reservation

MEASURED = ("device_seconds", "wall_seconds")
"""The time counters a charge measures, and estimates ahead (the ledger's ``tool_seconds``, a time
counter too, is reserved at its exact worst case: each program's timeout)."""

TIME_ESTIMATE_FACTOR = 1.2
"""A gated unit reserves this multiple of the longest unit of its kinds measured so far."""


UNIT_KINDS = (
    "rollouts",
    "demonstrations",
    "pairs",
    "prm",  # a process reward model's pass (objectives/process.py)
    "prime",
    "critic",  # an actor-critic's value pass before the update (objectives/actor_critic.py)
    "world_model",  # a learned world model's fit on the step's real episodes
    "imagined",  # its imagined rounds
    "update",
    "sync",
    "broadcast",  # a concurrent collector's weight file
    "checkpoint",
)
"""The kinds of work whose time a step's admission and each rollout round reserve (one unit each):
whatever a step may still do after the check. Every charge a training step makes is of one of
these kinds (or the step itself); a test holds the list to that."""


def add_costs(*costs: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for cost in costs:
        for k, v in cost.items():
            out[k] = out.get(k, 0.0) + v
    return out


class DeviceTimer:
    """Device-seconds (``now``): process CPU time on CPU; synchronized elapsed time on CUDA (per
    device). Wall-seconds (``wall``): elapsed time."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            return time.perf_counter()
        return time.process_time()

    def wall(self) -> float:
        return time.perf_counter()


class Charge:
    """Reserved work. ``with charge:`` measures it; ``actual`` is committed on a clean exit. On an
    exception or :meth:`cancel` the reservation is released and only the time spent is recorded."""

    def __init__(self, meter: Meter, reservation: Reservation, label: str, kind: str):
        self.meter, self.reservation, self.label, self.kind = meter, reservation, label, kind
        self.actual: dict[str, float] = {}
        self.inner_time = (0.0, 0.0)
        self.elapsed = (0.0, 0.0)
        self.cancelled = False

    def __enter__(self) -> Charge:
        self.t0 = (self.meter.timer.now(), self.meter.timer.wall())
        self.meter.open.append(self)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        m = self.meter
        m.open.remove(self)
        self.elapsed = (m.timer.now() - self.t0[0], m.timer.wall() - self.t0[1])
        if m.dp is not None and exc_type is None:  # every rank's time: device summed, wall max
            self.elapsed = m.dp.time(*self.elapsed)
        if m.open:  # the enclosing charge does not count this block's time again
            outer = m.open[-1]
            outer.inner_time = tuple(a + b for a, b in zip(outer.inner_time, self.elapsed))
        own = [max(0.0, e - i) for e, i in zip(self.elapsed, self.inner_time)]
        spent = {"device_seconds": own[0], "wall_seconds": own[1]}  # time is spent either way
        done = exc_type is None and not self.cancelled
        m.ledger.commit(self.reservation, {**self.actual, **spent} if done else spent)
        m.measured(self, own)
        return False

    def cancel(self) -> None:
        """Nothing was launched after all: the reservation is released (the time is recorded)."""

        self.cancelled = True


class Meter:
    """Charges work to one ledger, timing it with ``timer``."""

    def __init__(self, ledger: Ledger, timer: DeviceTimer, dp=None):
        self.ledger, self.timer = ledger, timer
        self.dp = dp
        """A data-parallel run's group (:mod:`.parallel`): each charge's time is the ranks'."""
        self.open: list[Charge] = []
        self.unit_time: dict[str, dict[str, float]] = {}
        """kind -> the longest single unit of that kind so far (its elapsed device/wall seconds)"""
        self.time_by_kind: dict[str, dict[str, float]] = {}
        """kind -> own device/wall seconds committed by charges of that kind (the time's labels)"""
        self.prior: dict[str, float] = {}
        """The time the first step reserves, before any unit of work was measured."""
        self.overshoot_bound: dict[str, float] = {k: 0.0 for k in MEASURED}
        """The longest step (with its checkpoint) so far: what a time limit can be exceeded by."""
        self.last_step: dict[str, float] = {k: 0.0 for k in MEASURED}

    def estimate(self, kinds: tuple[str, ...]) -> dict[str, float]:
        """TIME_ESTIMATE_FACTOR x the sum over ``kinds`` of the longest unit of each kind; before
        any of them was measured, the ``prior`` (the first step's estimate, see
        :func:`first_step_prior`), if one was set."""

        measured = any(kind in self.unit_time for kind in kinds if kind != "checkpoint")
        return {
            k: TIME_ESTIMATE_FACTOR
            * sum(self.unit_time.get(kind, {}).get(k, 0.0) for kind in kinds)
            if measured or not self.prior
            else self.prior.get(k, 0.0)
            for k in MEASURED
        }

    def first_step(self, evals: list[dict[str, Any]], collector, epochs: int) -> None:
        """Before the first step of a time-limited run (nothing measured yet), set the ``prior``
        from the start evaluation (``evals[0]["cost"]``, or what it cost where it was computed
        when it was reused: ``evals[0]["reused"]``) and the ``collector``'s worst case."""

        measured = any(k in self.unit_time for k in UNIT_KINDS if k != "checkpoint")
        if measured or not evals or not (set(MEASURED) & set(self.ledger.budget.limits)):
            return
        launched = collector.worst_case().get("launched_tokens", 0.0)
        cost = evals[0].get("reused") or evals[0].get("cost") or {}
        self.prior = first_step_prior(cost, launched, epochs)

    def limited(self, amounts: dict[str, float], time_of: tuple[str, ...] = ()) -> dict[str, float]:
        """The limited counters of ``amounts``; with ``time_of``, limited time counters get the
        estimate of one unit of each of those kinds."""

        out = dict(amounts)
        if time_of:
            out.update(self.estimate(time_of))
        return {k: float(v) for k, v in out.items() if k in self.ledger.budget.limits}

    def fits(self, amounts: dict[str, float], time_of: tuple[str, ...] = ()) -> bool:
        return self.ledger.fits(self.limited(amounts, time_of))

    def reserve(
        self,
        amounts: dict[str, float],
        label: str,
        time_of: tuple[str, ...] = (),
        kind: str | None = None,
    ) -> Charge | None:
        """Reserve ``amounts`` (and, with ``time_of``, the time estimate of those kinds of work).
        ``kind`` (default: the label's first word) labels the charge's time and its unit length."""

        res = self.ledger.reserve(self.limited(amounts, time_of), label=label)
        if res is None:
            return None
        return Charge(self, res, label, kind or label.split()[0])

    def measured(self, charge: Charge, own: list[float]) -> None:
        """Record a finished charge's unit length and its own time under its kind."""

        elapsed = dict(zip(("device_seconds", "wall_seconds"), charge.elapsed))
        unit = self.unit_time.setdefault(charge.kind, {k: 0.0 for k in MEASURED})
        tot = self.time_by_kind.setdefault(charge.kind, {k: 0.0 for k in MEASURED})
        for (k, e), o in zip(elapsed.items(), own):
            unit[k] = max(unit[k], e)
            tot[k] += o
            if charge.kind == "step":
                self.last_step[k] = e
                self.overshoot_bound[k] = max(self.overshoot_bound[k], e)
            elif charge.kind == "checkpoint":  # a checkpoint follows its step unchecked
                self.overshoot_bound[k] = max(self.overshoot_bound[k], self.last_step[k] + e)

    def record(self, kind: str, device: float, wall: float) -> None:
        """Time measured elsewhere (a concurrent collector's process) and committed with its work:
        its unit length and its label, as a charge of ``kind`` would record them."""

        unit = self.unit_time.setdefault(kind, {c: 0.0 for c in MEASURED})
        unit["device_seconds"] = max(unit["device_seconds"], device)
        unit["wall_seconds"] = max(unit["wall_seconds"], wall)
        tot = self.time_by_kind.setdefault(kind, {c: 0.0 for c in MEASURED})
        tot["device_seconds"] += device  # its wall time overlaps the trainer's: not committed

    def charge(self, label: str) -> Charge:
        """A charge of time only (weight sync, checkpoint, critic pass): labelled, never refused."""

        return self.must_reserve({}, label)

    def must_reserve(self, amounts: dict[str, float], label: str) -> Charge:
        """A reservation whose worst case was checked before the step began."""

        charge = self.reserve(amounts, label)
        if charge is None:
            from .base import TrainingError

            raise TrainingError(f"{label}: no longer fits the budget after the step was admitted")
        return charge

    def discard(self, reason: str, tokens: float, rollouts: float = 0.0) -> None:
        if tokens or rollouts:
            self.ledger.discard(reason, float(tokens), float(rollouts))

    def state_dict(self) -> dict[str, Any]:
        return {
            "ledger": self.ledger.state_dict(),
            "unit_time": self.unit_time,
            "time_by_kind": self.time_by_kind,
            "overshoot_bound": self.overshoot_bound,
            "last_step": self.last_step,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ledger = Ledger.from_state(state["ledger"])
        self.unit_time = {k: dict(v) for k, v in state.get("unit_time", {}).items()}
        self.time_by_kind = {k: dict(v) for k, v in state.get("time_by_kind", {}).items()}
        self.overshoot_bound.update(state.get("overshoot_bound", {}))
        self.last_step.update(state.get("last_step", {}))


FIRST_STEP_FACTOR = 4.0
"""The first step's time, in units of its rollouts' generation time as the start evaluation measured
it per token: the generation itself, and the update (its forward and backward passes over the whole
batch, the old and reference log-probs: each a single pass over tokens that decoding produced one
position at a time), times the epochs."""


def first_step_prior(
    eval_cost: dict[str, float], launched_tokens: float, epochs: int
) -> dict[str, float]:
    """The first step's time estimate from the start evaluation's measured ``eval_cost``
    (``generated_tokens``, ``device_seconds``, ``wall_seconds``): per generated token, times the
    step's worst-case ``launched_tokens``, times 1 + (FIRST_STEP_FACTOR - 1) x ``epochs``. Empty
    when the evaluation generated nothing."""

    n = float(eval_cost.get("generated_tokens") or 0.0)
    if n <= 0 or launched_tokens <= 0:
        return {}
    scale = launched_tokens / n * (1.0 + (FIRST_STEP_FACTOR - 1.0) * max(1, epochs))
    return {k: float(eval_cost.get(k, 0.0)) * scale for k in MEASURED}
