"""The compute-curve fits of every arm on each budget axis, and the verdict for each pair of arms:
asymptote or efficiency (:mod:`.curvefit`), as the report's table of them.

Each arm's finished runs give its held-out score against each budget axis; the fit and its
intervals come from one procedure (the fit to every run, and refits to the runs resampled), and a
pair "differs in asymptote" or "in efficiency" where the interval of that difference excludes 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from . import curvefit
from .render import Block, Cell, Heading, Para, Table
from .tables import estimate_interval, fmt

if TYPE_CHECKING:
    from .data import Data

AXES = {
    "launched_tokens": "launched tokens",
    "verifier_calls": "verifier calls",
    "device_seconds": "device-seconds",
}


def arm_curves(d: Data, axis: str) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
    """``{arm: [(positions on the axis, scores)]}``, one pair per finished run."""

    ev = d.scored.filter(pl.col("status") == "finished")
    if axis not in ev.columns:
        return {}
    out: dict[str, list] = {}
    for (arm, _), g in ev.sort("step").group_by(["arm", "run_id"], maintain_order=True):
        c = g[axis].to_numpy().astype(float)
        if np.isfinite(c).all():
            out.setdefault(arm, []).append((c, g["nscore"].to_numpy().astype(float)))
    return out


def curve_rows(d: Data, resamples: int = 100) -> tuple[dict, list[dict[str, Any]]]:
    """Per axis and arm the sigmoid fit with intervals, and per axis and pair the verdict."""

    r0 = d.warm_start_score
    if r0 is None:
        return {}, []
    fits: dict[str, dict[str, curvefit.ArmFit]] = {}
    for axis in AXES:
        curves = arm_curves(d, axis)
        fits[axis] = {
            a: curvefit.fit_arm(curves[a], r0, resamples=resamples, arm=a)
            for a in d.arms
            if a in curves
        }
    # each pair with the arm whose runs ended higher first (as the paired table orders them), so
    # a difference that decides reads as what that arm has more of
    ends: dict[str, float] = {}
    for arm, runs in arm_curves(d, "launched_tokens").items():
        ends[arm] = float(np.mean([r[np.argmax(c)] for c, r in runs]))
    pairs = []
    for i, x in enumerate(d.arms):
        for y in d.arms[i + 1 :]:
            a, b = (y, x) if ends.get(y, -np.inf) > ends.get(x, -np.inf) else (x, y)
            row = {"a": a, "b": b}
            for axis, by_arm in fits.items():
                c = (
                    curvefit.compare_fits(by_arm[a], by_arm[b])
                    if a in by_arm and b in by_arm
                    else None
                )
                row[axis] = c
            pairs.append(row)
    return fits, pairs


def curve_blocks(d: Data, resamples: int = 100) -> list[Block]:
    fits, pairs = curve_rows(d, resamples)
    curves = {axis: arm_curves(d, axis) for axis in fits}
    if not any(fits.values()):
        return []
    heading = Heading("Compute curves: asymptote or efficiency")
    most = max(f.runs for by_arm in fits.values() for f in by_arm.values())
    if most < curvefit.MIN_RUNS:  # shown as such: one line, not a table of empty fits
        return [heading, _not_fitted(most)]
    fit_rows = [
        _fit_row(axis, arm, f, curves[axis][arm], d.warm_start_score)
        for axis, by_arm in fits.items()
        for arm, f in by_arm.items()
    ]
    verdict_rows = [
        [p["a"], p["b"]]
        + [_curve_cell(p[axis], fits[axis].get(p["a"]), fits[axis].get(p["b"])) for axis in AXES]
        for p in pairs
    ]
    return [
        heading,
        Para(
            "Each arm's held-out score against each budget axis, fitted with R(C) = R0 + (A − R0) "
            "/ (1 + (C_mid / C)^B): R0 the warm-start score, A the asymptote, B and C_mid the "
            "efficiency. The fit and its intervals come from one procedure: the fit to every run, "
            "and refits to the arm's runs resampled with replacement. A pair 'differs in "
            "asymptote' where the interval of A's difference excludes 0; else 'differs in "
            "efficiency' where B's or C_mid's does. With fewer than "
            f"{curvefit.MIN_RUNS} finished runs an arm's fit is not shown and a pair gets no "
            "verdict (a bootstrap over so few runs is too narrow). A fit whose refits exclude it, "
            "or whose B or C_mid sits at the edge of its search range, is 'not identified': the "
            "budget ends before the curve bends (or it bends before the first evaluation), and "
            "the data do not say where it levels off.",
            "caption",
        ),
        Table(
            [
                "axis",
                "arm",
                "A [95% CI]",
                "B [95% CI]",
                "C_mid [95% CI]",
                "RMSE",
                "fit on the first half: predicted / observed at the end",
            ],
            fit_rows,
        ),
        Table(
            ["arm A (ended higher)", "arm B"] + [f"A vs B on {v}" for v in AXES.values()],
            verdict_rows,
        ),
    ]


def _not_fitted(most: int) -> Para:
    """Why no arm's compute curve is fitted: at most ``most`` finished runs, below the minimum."""

    return Para(
        f"Not fitted: every arm has fewer than {curvefit.MIN_RUNS} finished runs (at most "
        f"{most}). A compute curve R(C) = R0 + (A − R0) / (1 + (C_mid / C)^B) fitted to so "
        "few runs has intervals too narrow to read and no verdict on asymptote or "
        "efficiency.",
        "caption",
    )


def _fit_row(
    axis: str, arm: str, f: curvefit.ArmFit, curve: list[tuple[np.ndarray, np.ndarray]], r0: float
) -> list[Cell | str]:
    """An arm's fit on one budget axis: A, B and C_mid with their intervals, the RMSE, and the
    half-budget fit's extrapolation to the end; or why the fit is not shown."""

    problem = f.problem()
    if problem:  # shown as such: no estimate without an interval that stands
        return [AXES[axis], arm, Cell(problem, "inert"), "", "", "", ""]
    a, b, m = f.estimate
    (alo, ahi), (blo, bhi), (mlo, mhi) = f.interval(0), f.interval(1), f.interval(2)
    return [
        AXES[axis],
        arm,
        estimate_interval(a, alo, ahi),
        estimate_interval(b, blo, bhi, 2),
        estimate_interval(np.exp(m), np.exp(mlo), np.exp(mhi), g=True),
        fmt(f.rmse),
        _extrapolated(curve, r0),
    ]


def _curve_cell(
    c: curvefit.CurveComparison | None,
    x: curvefit.ArmFit | None = None,
    y: curvefit.ArmFit | None = None,
) -> Cell | str:
    if c is None:
        return "no fit"
    if c.verdict == curvefit.TOO_FEW:  # no numbers: the intervals would be too narrow to read
        runs = f"{x.runs} and {y.runs} runs" if x is not None and y is not None else "few runs"
        return Cell(f"{c.verdict} ({runs}; {curvefit.MIN_RUNS} needed)", "inert")
    if c.verdict == curvefit.NOT_IDENTIFIED:
        why = next((f.problem() for f in (x, y) if f is not None and f.problem()), None)
        return Cell(c.verdict, "inert", why or "a difference's interval excludes its estimate")
    note = (
        f"ΔA {estimate_interval(*c.d_a)}, ΔB {estimate_interval(*c.d_b, 2)}, "
        f"Δlog C_mid {estimate_interval(*c.d_log_mid, 2)}"
    )
    flagged = c.verdict in (curvefit.DIFFERS_ASYMPTOTE, curvefit.DIFFERS_EFFICIENCY)
    return Cell(c.verdict, "flag" if flagged else "", note)


def _extrapolated(runs, r0: float) -> str:
    x = curvefit.extrapolation_check(runs, r0)
    if x is None:
        return "too few positions in the first half"
    return f"{fmt(x['predicted'])} / {fmt(x['observed'])} (error {x['error']:+.3f})"
