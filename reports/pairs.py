"""Every pair of arms, compared as the design allows: paired on seeds and held-out instances, with
the minimum detectable effect beside each difference (the compute-curve fits on each budget axis
are in :mod:`.curve_fits`).

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

from . import paired
from .render import Block, Heading, Para, Table
from .tables import estimate_interval, fmt

if TYPE_CHECKING:
    from .data import Data


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
    lo, hi = r["range"]
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
