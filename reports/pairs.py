"""Every pair of arms, compared as the design allows: paired on seeds and held-out instances, with
the minimum detectable effect beside each difference, and the compute-curve fit (asymptote or
efficiency) on each budget axis.

The final evaluation of each finished run gives one outcome per held-out instance; two arms pair
on the seeds both finished, and every arm of an experiment is evaluated on the same instances, so
the difference is taken per seed and instance (``paired.paired_difference``). Several pairs are
judged together: "separated" uses Holm's step-down over the pairs' t-test p-values, so the chance
of any false separation stays at 5%. Each pair's interval and smallest detectable difference are at
the level Holm held that pair to (``holm_levels``), so that what the table shows never contradicts
the verdict beside it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
from scipy import stats as sps

from . import curvefit, paired
from .render import Block, Cell, Heading, Para, Table
from .tables import estimate_interval, fmt

if TYPE_CHECKING:
    from .data import Data

AXES = {
    "launched_tokens": "launched tokens",
    "verifier_calls": "verifier calls",
    "device_seconds": "device-seconds",
}


def instance_scores(d: Data) -> dict[str, dict[int, np.ndarray]]:
    """``{arm: {seed: [instances]}}``: each finished run's last evaluation of the score split,
    every task's per-instance outcomes concatenated in the report's task order (normalized where the
    tasks are)."""

    if not d.scored.height or "detail" not in d.scored.columns:
        return {}
    ev = d.scored.filter(pl.col("status") == "finished").sort("run_id", "step")
    out: dict[str, dict[int, list[np.ndarray]]] = {}
    for (arm, seed), g in ev.group_by(["arm", "seed"], maintain_order=True):
        by_task: dict[str, np.ndarray] = {}
        for _, rows in g.group_by("run_id", maintain_order=True):
            last = rows.row(rows.height - 1, named=True)
            detail = json.loads(last["detail"] or "{}")
            for task, values in (detail or {}).items():
                if values:
                    v = np.asarray(values, dtype=float)
                    if d.ranges and task in d.ranges:
                        lo, hi = d.ranges[task]
                        v = np.zeros_like(v) if hi == lo else (v - lo) / (hi - lo)
                    by_task[task] = v
        if by_task:
            parts = [by_task[t] for t in d.tasks if t in by_task] or list(by_task.values())
            out.setdefault(arm, {})[int(seed)] = np.concatenate(parts)
    return out


def holm(pvalues: list[float], alpha: float = 0.05) -> list[bool]:
    """Holm's step-down: which hypotheses are rejected with family-wise error ``alpha``."""

    return [rejected for rejected, _ in holm_levels(pvalues, alpha)]


def holm_levels(pvalues: list[float], alpha: float = 0.05) -> list[tuple[bool, float]]:
    """Per hypothesis: whether Holm's step-down rejects it (as :func:`holm`) and the level it was
    held to. With the p-values in ascending order and k the rank (from 0) of the first one that
    fails its level alpha / (m - k): a rejected hypothesis of rank j < k was tested, and passed,
    at alpha / (m - j); every kept one is held to alpha / (m - k), the level at which the step-down
    stopped (one of rank j > k may be below its own alpha / (m - j), yet Holm keeps it, as it
    never got to test it).

    An interval at confidence 1 - level then agrees with the decision: a rejected p-value is at
    most its level, so the interval excludes 0 (an endpoint at 0 where equal); a kept one is at
    least the k-th, above alpha / (m - k), so the interval holds 0. The Bonferroni level alpha / m
    would give intervals that hold jointly, but a pair Holm rejects at a larger level would show
    one that holds 0; the unadjusted level alpha, one that excludes 0 on a pair Holm keeps."""

    m = len(pvalues)
    order = np.argsort(pvalues, kind="stable")
    stop = next((rank for rank, k in enumerate(order) if not pvalues[k] <= alpha / (m - rank)), m)
    out: list[tuple[bool, float]] = [(False, alpha)] * m
    for rank, k in enumerate(order):
        out[k] = (rank < stop, alpha / (m - min(rank, stop)))
    return out


def pair_rows(d: Data, confidence: float = 0.95) -> list[dict[str, Any]]:
    """One row per pair of arms with shared seeds: the paired difference (arm ``a`` minus arm
    ``b``, ``a`` the one that scored higher, so a difference reads without its sign), its interval,
    standard errors paired and unpaired, the correlation of the arms' outcomes, the minimum
    detectable effect at 80% power, the t-test p-value (unadjusted) and the Holm verdict over the
    pairs at family-wise level 1 - ``confidence``. ``low``, ``high`` and ``mde`` are at the level
    Holm held the pair to (``level``, :func:`holm_levels`; with one pair: 1 - ``confidence``)."""

    scores = instance_scores(d)
    arms = [a for a in d.arms if a in scores]
    rows, tables = [], []
    for i, a in enumerate(arms):
        for b in arms[i + 1 :]:
            seeds = sorted(
                s for s in set(scores[a]) & set(scores[b]) if len(scores[a][s]) == len(scores[b][s])
            )
            if not seeds or len({len(scores[a][s]) for s in seeds}) != 1:
                continue
            ya = np.stack([scores[a][s] for s in seeds])
            yb = np.stack([scores[b][s] for s in seeds])
            hi, lo = a, b
            pd_ = paired.paired_difference(ya, yb, confidence)
            if pd_.diff < 0:  # the higher-scoring arm first: the difference is what it wins by
                hi, lo = b, a
                pd_ = paired.paired_difference(yb, ya, confidence)
            p = (
                float(2 * sps.t.sf(abs(pd_.diff) / pd_.se, pd_.df))
                if pd_.se > 0 and np.isfinite(pd_.df)
                else (1.0 if pd_.se == 0 and pd_.diff == 0 else float("nan"))
            )
            rows.append({"a": hi, "b": lo, "p": p, **pd_.as_dict()})
            tables.append((ya, yb) if hi == a else (yb, ya))
    levels = holm_levels([r["p"] if np.isfinite(r["p"]) else 1.0 for r in rows], 1 - confidence)
    for r, (y_hi, y_lo), (sep, level) in zip(rows, tables, levels):
        # the interval and the detectable difference at the level Holm held the pair to
        r.update(paired.paired_difference(y_hi, y_lo, 1 - level).as_dict())
        r["level"] = level
        both = np.concatenate([y_hi.ravel(), y_lo.ravel()])
        r["range"] = (float(both.min()), float(both.max()))  # the outcomes' span: differences
        # of the arms' means cannot exceed its width
        # one seed: the interval holds the evaluation's noise only, not the seeds' spread
        r["separated"] = sep and r["seeds"] >= 2
    return rows


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


def pair_sentence(r: dict[str, Any], pairs: int) -> str:
    """One plain sentence for a ``pair_rows`` row, its direction in words: "dapo > grpo: paired
    difference 0.086 [0.028, 0.144] (2 seeds × 64 instances), separated (Holm over 3 pairs)." or
    the same without the ">" and with "no separation". The interval and the detectable difference
    are the row's, at the level Holm held the pair to (with one pair, 95%). An interval that holds
    every difference the scores allow (few seeds, many pairs) is said to be that, not quoted as an
    estimate, and a detectable difference beyond the scores' range as "even the largest"."""

    a, b = r["a"], r["b"]
    diff = estimate_interval(r["diff"], r["low"], r["high"])
    seeds = f"{r['seeds']} seed{'s' if r['seeds'] != 1 else ''}"
    design = f"({seeds} × {r['instances']} instances)"
    holm_over = f" (Holm over {pairs} pairs)" if pairs > 1 else ""
    if r["separated"]:
        return f"{a} > {b}: paired difference {diff} {design}, separated{holm_over}."
    lead = (
        f"{a} and {b} scored the same"
        if r["diff"] == 0
        else f"{a} scored {fmt(r['diff'])} higher than {b}"
    )
    if r["seeds"] < 2:
        return (
            f"{a} vs {b}: no verdict with one seed (its spread over seeds is unknown); {lead}, "
            f"paired difference {diff} {design}."
        )
    lo, hi = r.get("range", (0.0, 0.0))
    width, seen = hi - lo, f"the scores seen range over [{fmt(lo)}, {fmt(hi)}]"
    if width > 0 and r["low"] <= -width and r["high"] >= width:
        # wider than any difference of the arms' means: no number in it says anything
        return (
            f"{a} vs {b}: no separation{holm_over}; {lead} {design}, but the interval at this "
            f"level, [{fmt(r['low'])}, {fmt(r['high'])}], holds every difference two arms could "
            f"show ({seen}): with {seeds} no difference can be told apart."
        )
    unseen = ""
    if width > 0 and r["mde"] >= width:
        unseen = f"; even the largest possible difference would often go unseen ({seen})"
    elif np.isfinite(r["mde"]):
        unseen = f"; a true difference below {fmt(r['mde'])} would often go unseen"
    return (
        f"{a} vs {b}: no separation{holm_over}; {lead}, paired difference {diff} {design}{unseen}."
    )


def paired_blocks(d: Data, rows: list[dict[str, Any]] | None = None) -> list[Block]:
    rows = pair_rows(d) if rows is None else rows
    if not rows:
        return []
    table = Table(
        [
            "arm A (scored higher)",
            "arm B",
            f"A − B, paired, mean [Holm-adjusted CI] ({d.score_label})",
            "CI level (Holm)",
            "seeds × instances",
            "SE paired / unpaired",
            "outcome correlation",
            "smallest detectable difference (80% power, at the Holm level)",
            "p (t-test, unadjusted)",
            f"separated (Holm over {len(rows)} pairs)",
        ],
        [
            [
                r["a"],
                r["b"],
                estimate_interval(r["diff"], r["low"], r["high"]),
                _ci_level(r),
                f"{r['seeds']} × {r['instances']}",
                f"{fmt(r['se'])} / {fmt(r['se_unpaired'])}" + _shrink(r),
                fmt(r["correlation"], 2),
                fmt(r["mde"]),
                fmt(r["p"]),
                "yes" if r["separated"] else "no: " + _no_verdict(r),
            ]
            for r in rows
        ],
    )
    return [
        Heading("Paired differences"),
        Para(
            "Each pair of arms compared on the seeds both finished and the held-out instances "
            "every arm is evaluated on, the arm that scored higher first: the difference is taken "
            "per seed and instance, so the noise the two arms share cancels. The interval counts "
            "the seeds' spread and the evaluation's own sampling noise together (two-way random "
            "effects: seeds and instances, Student t with Satterthwaite's degrees of freedom); "
            "with 3 seeds or fewer it is somewhat too narrow (a 95% interval covers about 93% at 3 "
            "seeds, 88% at 2, in simulation), and one seed gives no verdict. Pairs are separated "
            "by Holm's step-down over the pairs' p-values, and each interval is at the level Holm "
            "held its pair to (its CI level): a separated pair's at the level it passed, a pair "
            "not separated at the level where the step-down stopped, so an interval excludes 0 "
            "exactly where its pair is separated (one pair: 95%). 'Smallest detectable difference' "
            "is the true difference this many seeds and instances would detect 80% of the time "
            "(two-sided, at the same level): a pair that is not separated and whose difference "
            "would matter only below it is inconclusive, not equal. The Summary says each row in a "
            "sentence.",
            "caption",
        ),
        table,
    ]


def _ci_level(r: dict[str, Any]) -> str:
    level = r.get("level")
    return "—" if level is None else f"{100 * (1 - level):.3g}%"


def _shrink(r: dict[str, Any]) -> str:
    if not (r["se_unpaired"] > 0 and np.isfinite(r["se"])):
        return ""
    change = 100 * (1 - r["se"] / r["se_unpaired"])
    return f" ({change:.0f}% smaller)" if change >= 0 else f" ({-change:.0f}% larger)"


def _no_verdict(r: dict[str, Any]) -> str:
    if r["seeds"] < 2:
        return "one seed: the seeds' spread is unknown, no verdict"
    if not np.isfinite(r["mde"]):
        return "one seed and one instance: no interval"
    return f"inconclusive below {fmt(r['mde'])}"


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
