"""A study's trials, up to ``sweep.parallel`` at once, under the arm's fixed search budget.

Each trial reserves its worst case (its own budget, clamped to what the search has left after the
spending and the reservations of the trials before it) on the arm's search ledger
(:class:`SearchLedger`, a :class:`~sixblanks.budgets.ledger.Ledger` whose limits are
``sweep.total_budget``) before it is launched; when it completes, is pruned or fails, what it spent
is committed and the rest of its reservation released. The total is therefore never exceeded,
whatever the order in which parallel trials end, and with ``parallel: 1`` every trial gets exactly
the budget the sequential search gave it. The number of trials per arm is ``sweep.n_trials``
whatever ``parallel`` is (fewer only when the search budget runs out).

Ctrl-C (under :func:`~sixblanks.harness.orchestration.interrupts.deferred_interrupts`) is acted on
between launches and while the sweep waits: the trials in flight stop at their next step, each a
failed trial charged what it spent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sixblanks.budgets.counters import COUNTERS
from sixblanks.budgets.ledger import Budget, Ledger, Reservation, whole_units

from ..orchestration.interrupts import SIGINT_SEEN, Interrupted
from ..orchestration.progress import plain_budget


class SearchLedger:
    """The arm's search budget: ``total`` (limits on counters), ``trial`` (one trial's own
    budget)."""

    def __init__(self, total: dict[str, float], trial: dict[str, float]):
        self.ledger = Ledger(Budget(dict(total)))
        self.total, self.trial = self.ledger.budget.limits, whole_units(trial, "trial budget.")

    def spent_before(self, counters: dict[str, float]) -> None:
        """What trials recorded in the study before this sweep process started (a resume)."""

        known = {k: v for k, v in counters.items() if k in COUNTERS and v}
        if known:
            self.ledger.record(known, "trials before this sweep process")

    def open(self, label: str) -> tuple[dict[str, float], Reservation] | None:
        """The next trial's budget and its reservation; None when the search has nothing left on a
        counter of the total (not one whole unit, or no time beyond the ledger's tolerance: the
        trial is not launched). A counter of the total that the trial budget does not limit
        reserves all that is left of it."""

        if not all(self.ledger.has_left(k) for k in self.total):
            return None
        left = {k: self.ledger.remaining(k) for k in self.total}
        budget = {k: min(v, left.get(k, float("inf"))) for k, v in self.trial.items()}
        worst = {k: budget.get(k, left[k]) for k in self.total}
        res = self.ledger.reserve(worst, label)
        return (budget, res) if res is not None else None

    def close(self, res: Reservation, spent: dict[str, float] | None) -> None:
        """Commit what the trial spent (its counters; none known: nothing) and release the rest.
        A count past the trial's reservation cannot happen (its own ledger stops it): the commit
        would raise. Time is committed as measured (bounded by estimates, not reservations)."""

        self.ledger.commit(res, {k: v for k, v in (spent or {}).items() if k in COUNTERS})

    @property
    def counters(self) -> dict[str, float]:
        return self.ledger.counters


def run_trials(
    sweep,
    arm: str,
    study,
    search: SearchLedger,
    session,
    make_job: Callable[[Any, dict[str, float]], tuple[str, dict[str, Any]]],
    run_trial: Callable[[dict[str, Any]], dict[str, Any]],
    parallel: int,
    log: Callable[[str], None],
) -> str | None:
    """Launch and collect the study's trials, ``parallel`` at a time, until it has ``n_trials`` or
    the search budget is spent. ``make_job(trial, budget)``: the trial's name and its worker job.
    Returns why it stopped early (or None)."""

    n_trials = sweep.cfg.sweep.n_trials
    # each trial in flight: (its Optuna trial, its reservation, its name, its budget)
    inflight: dict[Any, tuple[Any, Reservation, str, dict[str, float]]] = {}
    stopped = None
    while True:
        while (
            len(inflight) < parallel and len(study.trials) < n_trials and not SIGINT_SEEN.is_set()
        ):
            opened = search.open(f"trial {len(study.trials)}")
            if opened is None:
                if not inflight:  # what is in flight may leave some unspent
                    stopped = f"search budget exhausted after {len(study.trials)} trials"
                break
            budget, res = opened
            trial = study.ask()
            name, job = make_job(trial, budget)
            inflight[session.submit(run_trial, job)] = (trial, res, name, budget)
        if SIGINT_SEEN.is_set():
            _interrupted(arm, study, search, session, inflight, log)
        if not inflight:
            return stopped
        stopped = None
        for handle in session.wait(list(inflight)):
            trial, res, name, budget = inflight.pop(handle)
            try:
                out = session.result(handle)
            except Exception as exc:  # noqa: BLE001 - a worker killed by the OS, a lost Ray node
                out = {
                    "state": "FAIL",
                    "error": f"worker died: {type(exc).__name__}: {exc}",
                    # what it spent up to its last step, as the worker recorded it in the storage
                    "counters": stored_attrs(study, trial.number).get("counters"),
                }
            _tell(study, trial, out, search, res, name, budget, log)


def _tell(study, trial, out, search: SearchLedger, res, name: str, budget, log) -> None:
    """Tell the study how the trial ended (``budget``: the trial's, where it ended is said in)."""

    from optuna.trial import TrialState

    if out.get("error"):
        trial.set_user_attr("error", out["error"])
    what = out.get("error") or (f"score {out['value']:.3f}" if "value" in out else "")
    where = plain_budget(out.get("counters") or {}, budget)  # where it ended
    log(f"{name}: {out['state']}{what and ': ' + what} ({where})")
    if out.get("counters"):
        trial.set_user_attr("counters", out["counters"])
    state = getattr(TrialState, out["state"])
    study.tell(trial, out.get("value") if state == TrialState.COMPLETE else None, state=state)
    search.close(res, out.get("counters"))


def _interrupted(arm, study, search, session, inflight, log) -> None:
    """Ctrl-C: every trial in flight stops at its next step and is told as a failure, charged what
    it spent; then :class:`Interrupted` (exit 130)."""

    partial = session.interrupt(list(inflight)) if inflight else {}
    names = []
    for handle, (trial, res, name, budget) in inflight.items():
        out = partial.get(handle) or {}
        counters = out.get("counters") or stored_attrs(study, trial.number).get("counters")
        out = {"state": "FAIL", "error": "interrupted (Ctrl-C)", "counters": counters}
        _tell(study, trial, out, search, res, name, budget, log)
        names.append(name)
    where = f"in {', '.join(names)}" if names else f"between trials of {arm}"
    raise Interrupted(
        f"interrupted {where}: "
        + (
            "each counts as failed, what it spent is charged to the search budget; "
            if names
            else ""
        )
        + f"the {len(study.trials)} trial(s) so far are kept in the study; the same command "
        "resumes the search",
        names,
        [],
    )


def stored_attrs(study, number: int) -> dict[str, Any]:
    """The user attributes the storage holds for trial ``number`` (written by its worker)."""

    for t in study.get_trials(deepcopy=False):
        if t.number == number:
            return dict(t.user_attrs)
    return {}
