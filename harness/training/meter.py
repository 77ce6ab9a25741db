"""One way to charge the budget: reserve the worst case before launch, then commit the actual cost or
release the reservation. Every kind of work goes through it: rollout rounds, the greedy baseline,
demonstrations, preference pairs, updates, critic passes, the whole step, and evaluation (on a
ledger of its own, apart from the training budget).

    charge = meter.reserve(worst, "rollouts step 3")   # None: it would not fit, do not launch
    with charge:                                       # times the block
        ... launch ...
        charge.actual = {"launched_tokens": ...}       # committed on exit (released on an exception)

Charges nest: each commits its own device and wall seconds (its time minus that of the charges
inside it), so the ledger's time is the sum of the work's, counted once, labelled by kind. Time is
checked when a step is admitted (its charge reserves an estimate of the step's time); the charges
inside the step reserve counts only, so measured time never refuses work already admitted. The
nesting is one stack: charges of one thread, strictly nested (a concurrent collector needs a meter
of its own, or a lock and per-thread stacks).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from sixblanks.budgets.ledger import TIME_COUNTERS, Ledger, Reservation

TIME_ESTIMATE_FACTOR = 1.2
"""A limited time counter reserves this multiple of the previous step's measured time."""


def add_costs(*costs: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for cost in costs:
        for k, v in cost.items():
            out[k] = out.get(k, 0.0) + v
    return out


class DeviceTimer:
    """Device-seconds: process CPU time on CPU; synchronized elapsed time on CUDA (per device)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            return time.perf_counter()
        return time.process_time()


class Charge:
    """Reserved work. ``with charge:`` measures it; ``actual`` is committed on a clean exit. On an
    exception or :meth:`cancel` the reservation is released and only the time spent is recorded."""

    def __init__(self, meter: Meter, reservation: Reservation, label: str):
        self.meter, self.reservation, self.label = meter, reservation, label
        self.actual: dict[str, float] = {}
        self.inner_time = (0.0, 0.0)
        self.elapsed = (0.0, 0.0)
        self.cancelled = False

    def __enter__(self) -> Charge:
        self.t0 = (self.meter.timer.now(), time.perf_counter())
        self.meter.open.append(self)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        m = self.meter
        m.open.remove(self)
        self.elapsed = (m.timer.now() - self.t0[0], time.perf_counter() - self.t0[1])
        if m.open:  # the enclosing charge does not count this block's time again
            outer = m.open[-1]
            outer.inner_time = tuple(a + b for a, b in zip(outer.inner_time, self.elapsed))
        own = [max(0.0, e - i) for e, i in zip(self.elapsed, self.inner_time)]
        spent = {"device_seconds": own[0], "wall_seconds": own[1]}  # time is spent either way
        done = exc_type is None and not self.cancelled
        m.ledger.commit(self.reservation, {**self.actual, **spent} if done else spent)
        return False

    def cancel(self) -> None:
        """Nothing was launched after all: the reservation is released (the time is recorded)."""

        self.cancelled = True


class Meter:
    """Charges work to one ledger, timing it with ``timer``."""

    def __init__(self, ledger: Ledger, timer: DeviceTimer):
        self.ledger, self.timer = ledger, timer
        self.open: list[Charge] = []
        self.last_step_time: dict[str, float] = {}

    def limited(self, amounts: dict[str, float], estimate_time: bool = False) -> dict[str, float]:
        """The limited counters of ``amounts``; with ``estimate_time``, limited time counters get
        :data:`TIME_ESTIMATE_FACTOR` times the previous step's time (0 before the first step)."""

        out = dict(amounts)
        if estimate_time:
            for k in TIME_COUNTERS:
                out[k] = self.last_step_time.get(k, 0.0) * TIME_ESTIMATE_FACTOR
        return {k: float(v) for k, v in out.items() if k in self.ledger.budget.limits}

    def fits(self, amounts: dict[str, float], estimate_time: bool = True) -> bool:
        return self.ledger.fits(self.limited(amounts, estimate_time))

    def reserve(
        self, amounts: dict[str, float], label: str, estimate_time: bool = False
    ) -> Charge | None:
        res = self.ledger.reserve(self.limited(amounts, estimate_time), label=label)
        return None if res is None else Charge(self, res, label)

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
        return {"ledger": self.ledger.state_dict(), "last_step_time": dict(self.last_step_time)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ledger = Ledger.from_state(state["ledger"])
        self.last_step_time = dict(state["last_step_time"])
