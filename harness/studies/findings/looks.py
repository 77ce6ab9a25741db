"""A claim's looks: seeds added in batches to the claim's experiments (one per budget axis it
needs), each batch's worst case reserved on the axis's ledger, runs another claim finished already
copied in, and after each batch the comparisons the claim implies tested, until every one is
decided or the seed cap is reached."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from sixblanks.budgets.ledger import Budget, Ledger

from ...config.finding_file import Finding
from ...errors import SixblanksError
from ...orchestration.command import as_config, report_experiment, run_experiment
from .forms import comparison_criterion, implied_by
from .runs import consumed, differences, experiment_mapping, per_seed_values
from .shared import adopt_shared, shared_in, taken_from
from .verdicts import axis_criterion, judge, seed_design

Log = Callable[[str], None]


def implied(f: Finding, values: dict[str, dict], label: str, n: int) -> list[dict[str, Any]]:
    """The comparisons the claim implies at ``n`` seeds (:func:`forms.implied_by` of its
    criterion), each ``d`` ``[n]`` from the finished runs' ``values`` per axis and arm: arm − than
    (two arms, on the one axis of ``values``); best − each other arm, or each adjacent pair of an
    ordering (k arms); (arm − than at B2) − (arm − than at B1) for ``grows``, arm − than at each of
    B1 and B2 for ``changes_sign`` (the same seeds at both budgets)."""

    def diff(axis: str, a: str, b: str) -> np.ndarray:
        return differences(f, axis, values[axis], label, n, a, b)

    return implied_by(f.finding.criterion(), list(values), diff)


def run_looks(
    f: Finding, budgets: dict[str, dict], claim_dir: Path, log: Log, level: float
) -> dict[str, Any]:
    """Seeds added to every axis of ``budgets`` (``OUT/<claim>/<axis>``) until each comparison
    the claim implies is decided at ``level`` (its alpha shared over the family of comparisons
    run together, so that a separation survives the family's adjustment) or the seed cap is
    reached: the design, the per-seed values per axis, the looks, the ledgers, the comparisons at
    the last look."""

    m = f.finding
    design = seed_design(m.criterion(), level)
    arms = len(f.experiment["arms"])
    ledgers = {
        axis: Ledger(Budget({k: v * arms * design.cap for k, v in b.items()}))
        for axis, b in budgets.items()
    }
    started, done, looks, values, ran = time.time(), 0, [], {}, {}
    for n in design.interims:
        for axis, budget in budgets.items():
            (values[axis], label), ran[axis] = _look(
                f, axis, budget, claim_dir / axis, ledgers[axis], done, n, log
            )
        axis_of = next(iter(budgets)) if m.form != "interaction" else None
        comps = implied(f, values, label, n)
        crit = axis_criterion(m.criterion(), axis_of) if axis_of else m.criterion()
        decided = [
            judge(c["d"], comparison_criterion(crit, c), design, level, median=False) for c in comps
        ]
        verdicts = [x["verdict"] for x in decided]
        looks.append(
            {
                "seeds": n,
                "verdict": verdicts[0] if len(comps) == 1 else verdicts,
                "decision": [x["decision"] for x in decided]
                if len(comps) > 1
                else decided[0]["decision"],
            }
        )
        log(f"{f.name} ({', '.join(budgets)}): {n} seeds per arm, {label}: {', '.join(verdicts)}")
        done = n
        if all(x["final"] for x in decided):
            break
    # each experiment's report once, of its last look (an earlier look's would be replaced)
    for axis, (cfg, result) in ran.items():
        report_experiment(cfg, claim_dir / axis, result, warn=_quiet_add(log))
    return {
        "design": design,
        "values": values,
        "looks": looks,
        "ledgers": ledgers,
        "seconds": time.time() - started,
        "label": label,
        "comparisons": comps,
        "seeds": done,
    }


def _quiet_add(log: Log) -> Log:
    # each look adds seeds to the same experiment: the --add notice is expected, not news
    return lambda msg: None if msg.startswith("--add") else log(msg)


def _look(f: Finding, axis: str, budget: dict, out: Path, ledger: Ledger, done: int, n: int, log):
    """Seeds ``done`` .. ``n - 1`` of one axis: reserved, copied from another claim where it ran
    them already, else trained (no report: :func:`run_looks` builds it after the last look); the
    ledger charged with what this claim trained. Returns the per-seed values and their label, and
    the experiment as run (its config and :func:`run_experiment`'s result)."""

    res = ledger.reserve(
        {k: v * len(f.experiment["arms"]) * (n - done) for k, v in budget.items()},
        f"seeds {done}-{n}",
    )
    if res is None:
        raise SixblanksError(f"{f.name} ({axis}): the ledger refused seeds {done}..{n - 1}")
    cfg = as_config(experiment_mapping(f, axis, budget, n))
    adopt_shared(cfg, out, out.parent.parent, log)
    result, _ = run_experiment(cfg, out, add=True, warn=_quiet_add(log), report=False)
    if result.get("failures"):
        report_experiment(cfg, out, result, warn=_quiet_add(log))  # what failed, to look at
        raise SixblanksError(
            f"{f.name} ({axis}): {len(result['failures'])} run(s) failed; see {out}"
        )
    # a run copied from another claim is in that claim's ledger: counted once, where it trained
    ledger.commit(res, consumed(out, budget, range(done, n), exclude=list(shared_in(out))))
    return per_seed_values(out, f), (cfg, result)


def shared_block(out: Path, budget: dict, seeds: int) -> dict[str, Any]:
    """The runs of experiment ``out`` taken over from other claims: how many from each claim and
    axis, and what they consumed (in the ledger of the claim that trained them)."""

    copied = shared_in(out)
    if not copied:
        return {"runs": 0, "from": {}, "consumed": {}}
    every = consumed(out, budget, range(seeds))
    own = consumed(out, budget, range(seeds), exclude=list(copied))
    return {
        "runs": len(copied),
        "from": taken_from(copied),
        "consumed": {k: every[k] - own.get(k, 0.0) for k in every},
    }
