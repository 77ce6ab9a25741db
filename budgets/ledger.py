"""The budget ledger: counters, limits, reservations. Pure python: no torch, no I/O.

Reserve before launch: work declares its worst-case cost; if any limited counter
would exceed its limit, the work is not launched. The actual cost is committed
afterwards and may not exceed what was reserved on a limited counter, so no
limit is ever exceeded. Every change is an append-only event, numbered (``seq``)
and handed to ``sink`` (the runner appends it to the run's ``ledger.jsonl``);
a snapshot per step records every counter.

Units are exact. Every counter but time counts whole units (tokens, rollouts, calls, steps) and is
held as an int: an amount or a limit with a fractional part is refused, so sums, remainders and
comparisons never carry floating-point residue (a budget of 50 less 0.9999999999999999 of it
spent would otherwise leave 7e-15 tokens "remaining" and open work that can do nothing). Time
counters (device and wall seconds) are measured floats, compared with a tolerance of
``TIME_TOLERANCE`` seconds: time left below it counts as none.

The invariants are checked after every event, not only in tests: no counter
decreases and no limited counter (time aside: it is bounded by estimates, see
harness/training/meter.py) passes its limit. A violation raises
:class:`LedgerViolation` naming the event that broke it. launched = accepted +
discarded, which holds only once nothing is in flight, is checked at the end of
a run (:meth:`Ledger.check_invariants`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .counters import COUNTERS, DISCARD_REASONS

TIME_COUNTERS = frozenset({"device_seconds", "wall_seconds", "tool_seconds"})
"""Measured seconds (floats); every other counter counts whole units (ints)."""

TIME_TOLERANCE = 1e-6
"""Seconds: time comparisons allow this much (a microsecond, below the timers' resolution); time
left below it counts as none."""


class BudgetError(ValueError):
    """Bad use of the ledger (unknown counter, negative amount, commit above reservation)."""


class LedgerViolation(BudgetError):
    """An event left the ledger breaking an invariant (a counter decreased, a limit passed)."""

    def __init__(self, event: dict[str, Any], problems: list[str]):
        self.event, self.problems = event, problems
        super().__init__(f"ledger invariant broken by event {event}: {'; '.join(problems)}")


@dataclass
class Budget:
    """Limits on any ledger counters (all > 0)."""

    limits: dict[str, float]
    """counter -> limit: a whole number > 0 (an int) on unit counters, seconds > 0 on time."""

    def __post_init__(self) -> None:
        for k, v in self.limits.items():
            if k not in COUNTERS:
                raise BudgetError(f"budget on unknown counter '{k}' (valid: {', '.join(COUNTERS)})")
            if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise BudgetError(f"budget.{k}: must be a finite number > 0 (got {v!r})")
        self.limits = whole_units(self.limits, "budget.")


def whole_units(amounts: dict[str, float], where: str = "counter ") -> dict[str, float]:
    """``amounts`` with every unit counter (all but time) as an int; a fractional amount on a unit
    counter raises :class:`BudgetError` (``where``: how the message names the counter). Integral
    floats (``40.0``, as a JSON round trip or a torch ``.item()`` gives them) are accepted."""

    return {
        k: v if k in TIME_COUNTERS or k not in COUNTERS else whole(v, f"{where}{k}")
        for k, v in amounts.items()
    }


def whole(v: float, name: str) -> int:
    """``v`` as an int if it is a whole number (``40`` or ``40.0``); else :class:`BudgetError`."""

    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    raise BudgetError(f"{name}: counts whole units (got {v!r})")


def divide_budget(limits: dict[str, float], n: int) -> dict[str, float]:
    """A budget ``n`` times smaller (a ladder rung's, a sweep trial's): whole units rounded down
    (at least 1), seconds divided exactly."""

    return {k: v / n if k in TIME_COUNTERS else max(1, int(v) // n) for k, v in limits.items()}


def _zeros() -> dict[str, float]:
    return {k: 0.0 if k in TIME_COUNTERS else 0 for k in COUNTERS}


@dataclass
class Reservation:
    id: int
    amounts: dict[str, float]
    label: str = ""
    open: bool = True


@dataclass
class Ledger:
    budget: Budget = field(default_factory=lambda: Budget({}))
    counters: dict[str, float] = field(default_factory=_zeros)
    discarded_by_reason: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(DISCARD_REASONS, 0)
    )
    discarded_rollouts_by_reason: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(DISCARD_REASONS, 0)
    )
    reserved: dict[str, float] = field(default_factory=_zeros)
    events: list[dict[str, Any]] = field(default_factory=list)
    snapshots: list[dict[str, Any]] = field(default_factory=list)
    _next_id: int = 0
    seq: int = 0
    """Events recorded over the run's whole life (a resumed ledger continues the count)."""
    sink: Callable[[dict[str, Any]], None] | None = field(default=None, repr=False, compare=False)
    """Called with every event after it is recorded and checked (the runner: append to disk)."""

    def __post_init__(self) -> None:
        self._seen = dict(self.counters)  # each counter's value after the last event

    # ---- queries --------------------------------------------------------------------

    def remaining(self, counter: str) -> float:
        limit = self.budget.limits.get(counter)
        if limit is None:
            return math.inf
        return limit - self.counters[counter] - self.reserved[counter]

    def has_left(self, counter: str) -> bool:
        """Whether any of ``counter``'s limit is left after spending and reservations: a whole unit
        at least, or more than TIME_TOLERANCE seconds of time."""

        return self.remaining(counter) > (TIME_TOLERANCE if counter in TIME_COUNTERS else 0)

    def fits(self, amounts: dict[str, float]) -> bool:
        """Whether work of this worst-case cost can be launched without exceeding any limit.

        Only the counters in ``amounts`` are checked: work that declares no cost on a counter does
        not spend it. (A measured time counter may already stand past its limit; work admitted
        before that, such as the rest of a training step, is not refused for it.)
        """

        amounts = self._check(amounts)
        return all(
            v <= self.remaining(k) + (TIME_TOLERANCE if k in TIME_COUNTERS else 0)
            for k, v in amounts.items()
            if k in self.budget.limits
        )

    def exhausted(self) -> bool:
        return not all(self.has_left(k) for k in self.budget.limits)

    def fraction_used(self) -> dict[str, float]:
        return {k: self.counters[k] / v for k, v in self.budget.limits.items()}

    # ---- changes --------------------------------------------------------------------

    def _check(self, amounts: dict[str, float]) -> dict[str, float]:
        """``amounts`` checked (known counters, finite, >= 0, whole units) and with ints on unit
        counters."""

        for k, v in amounts.items():
            if k not in COUNTERS:
                raise BudgetError(f"unknown counter '{k}' (valid: {', '.join(COUNTERS)})")
            if not (v >= 0 and math.isfinite(v)):
                raise BudgetError(f"counter '{k}': amounts must be finite and >= 0 (got {v!r})")
        return whole_units(amounts)

    def reserve(self, amounts: dict[str, float], label: str = "") -> Reservation | None:
        """Hold the worst-case cost of work about to launch; None if it would not fit (then do not
        launch it)."""

        amounts = self._check(amounts)
        if not self.fits(amounts):
            self._record({"type": "refused", "label": label, "amounts": dict(amounts)})
            return None
        res = Reservation(self._next_id, dict(amounts), label)
        self._next_id += 1
        for k, v in amounts.items():
            self.reserved[k] += v
        self._record({"type": "reserve", "id": res.id, "label": label, "amounts": dict(amounts)})
        return res

    def commit(self, reservation: Reservation, actual: dict[str, float]) -> None:
        """Record the actual cost of reserved work and release the reservation.

        A limited counter may not exceed its reservation (the budget could otherwise be overrun);
        unlimited counters and time counters are recorded as measured.
        """

        if not reservation.open:
            raise BudgetError(f"reservation {reservation.id} was already committed or released")
        actual = self._check(actual)
        for k, v in actual.items():
            if (
                k in self.budget.limits
                and k not in TIME_COUNTERS
                and v > reservation.amounts.get(k, 0)
            ):
                raise BudgetError(
                    f"commit of {v:g} {k} exceeds the reservation of "
                    f"{reservation.amounts.get(k, 0):g}"
                )
        for k, v in reservation.amounts.items():
            self.reserved[k] -= v
        reservation.open = False
        self._add(actual, {"type": "commit", "id": reservation.id, "label": reservation.label})

    def release(self, reservation: Reservation) -> None:
        if reservation.open:
            for k, v in reservation.amounts.items():
                self.reserved[k] -= v
            reservation.open = False
            self._record({"type": "release", "id": reservation.id})

    def add(self, amounts: dict[str, float], label: str = "") -> None:
        """Record cost that needs no reservation (counters without a limit, or measured time)."""

        amounts = self._check(amounts)
        for k, v in amounts.items():
            if k in self.budget.limits and k not in TIME_COUNTERS and v > self.remaining(k):
                raise BudgetError(f"adding {v:g} {k} would exceed its limit; reserve it first")
        self._add(amounts, {"type": "add", "label": label})

    def _add(self, amounts: dict[str, float], event: dict[str, Any]) -> None:
        for k, v in amounts.items():
            self.counters[k] += v
        event["amounts"] = dict(amounts)
        self._record(event)

    def discard(self, reason: str, tokens: float, rollouts: float = 0) -> None:
        """Launched tokens (and the rollouts they were) that will not enter a gradient, by reason:
        whole numbers >= 0."""

        if reason not in self.discarded_by_reason:
            raise BudgetError(
                f"unknown discard reason '{reason}' (valid: {', '.join(DISCARD_REASONS)})"
            )
        if tokens < 0 or rollouts < 0:
            raise BudgetError("discards must be >= 0")
        tokens = whole(tokens, f"discard '{reason}': tokens")
        rollouts = whole(rollouts, f"discard '{reason}': rollouts")
        self.discarded_by_reason[reason] += tokens
        self.discarded_rollouts_by_reason[reason] += rollouts
        self.counters["discarded_tokens"] += tokens
        self._record({"type": "discard", "reason": reason, "tokens": tokens, "rollouts": rollouts})

    def record(self, amounts: dict[str, float], label: str) -> None:
        """Record cost measured elsewhere, as it was (it was spent within the limits of its time;
        a limit it passes still breaks the invariant check)."""

        self._add(self._check(amounts), {"type": "add", "label": label})

    def charge_lost(self, lost: dict[str, float], rollouts: float) -> None:
        """Charge the work of an earlier attempt that a restart from scratch threw away (``lost``:
        its counters; ``rollouts``: the episodes it launched). Every counter it spent is charged
        again, as measured, limits notwithstanding (it was spent within them); what it launched is
        discarded for "restart", since none of it is in the weights."""

        lost = self._check(lost)
        outcomes = ("accepted_tokens", "rollouts_accepted", "discarded_tokens", "replayed_tokens")
        spent = {k: v for k, v in lost.items() if v and k not in outcomes}
        self._add(spent, {"type": "add", "label": "restart: the work of the attempt before"})
        self.discard("restart", spent.get("launched_tokens", 0), rollouts)

    def _record(self, event: dict[str, Any]) -> None:
        """Number the event, keep it, check the invariants it may break, hand it to the sink (the
        breaking event too, so the record on disk shows it), then raise on a violation."""

        event["seq"] = self.seq
        self.seq += 1
        self.events.append(event)
        problems = self.event_problems()
        if self.sink is not None:
            self.sink(event if not problems else {**event, "violation": problems})
        self._seen = dict(self.counters)
        if problems:
            raise LedgerViolation(event, problems)

    def event_problems(self) -> list[str]:
        """What the last event broke: a counter below its value before, a limit passed."""

        out = []
        for k, v in self.counters.items():
            slack = TIME_TOLERANCE if k in TIME_COUNTERS else 0
            if v < self._seen.get(k, 0) - slack:
                out.append(f"{k} decreased from {self._seen[k]:g} to {v:g}")
        for k, limit in self.budget.limits.items():
            if k not in TIME_COUNTERS and self.counters[k] > limit:
                out.append(f"{k} = {self.counters[k]:g} exceeds its limit {limit:g}")
        return out

    def snapshot(self, step: int) -> dict[str, Any]:
        snap = {
            "step": step,
            **self.counters,
            **{f"discarded_tokens.{r}": v for r, v in self.discarded_by_reason.items()},
            **{f"discarded_rollouts.{r}": v for r, v in self.discarded_rollouts_by_reason.items()},
        }
        self.snapshots.append(snap)
        return snap

    # ---- invariants and persistence ---------------------------------------------------------

    def check_invariants(self) -> list[str]:
        problems = []
        c = self.counters
        if c["accepted_tokens"] > c["launched_tokens"]:
            problems.append("accepted_tokens > launched_tokens")
        if c["rollouts_accepted"] > c["rollouts_launched"]:
            problems.append("rollouts_accepted > rollouts_launched")
        if sum(self.discarded_by_reason.values()) != c["discarded_tokens"]:
            problems.append("discards by reason do not add up to discarded_tokens")
        if c["accepted_tokens"] + c["discarded_tokens"] != c["launched_tokens"]:
            problems.append(
                f"launched_tokens {c['launched_tokens']:g} != accepted {c['accepted_tokens']:g} "
                f"+ discarded {c['discarded_tokens']:g}: a launched token went uncounted"
            )
        for k, limit in self.budget.limits.items():
            if k not in TIME_COUNTERS and c[k] > limit:
                problems.append(f"{k} = {c[k]:g} exceeds its limit {limit:g}")
        return problems

    def state_dict(self) -> dict[str, Any]:
        return {
            "limits": dict(self.budget.limits),
            "counters": dict(self.counters),
            "discarded_by_reason": dict(self.discarded_by_reason),
            "discarded_rollouts_by_reason": dict(self.discarded_rollouts_by_reason),
            "n_events": self.seq,
            "snapshots": copy.deepcopy(self.snapshots),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Ledger:
        led = cls(Budget(dict(state["limits"])))
        # states written before counts were ints hold integral floats: back to exact ints
        led.counters.update(whole_units(dict(state["counters"])))
        for mine, key in (
            (led.discarded_by_reason, "discarded_by_reason"),
            (led.discarded_rollouts_by_reason, "discarded_rollouts_by_reason"),
        ):
            mine.update({r: whole(v, f"{key}.{r}") for r, v in state.get(key, {}).items()})
        led.snapshots = copy.deepcopy(state.get("snapshots", []))
        led.seq = int(state.get("n_events", 0))
        led._seen = dict(led.counters)
        return led
