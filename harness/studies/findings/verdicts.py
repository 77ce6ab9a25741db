"""A claim's verdict: the five directional verdicts against the smallest effect, the margin rules
of equal and no-worse claims, the sequential test replayed over a claim's looks (``judge``), a
verdict combined from the pairwise comparisons a claim over several arms implies, and the
family's adjusted p-values."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from sixblanks.reports import sequential

from ...errors import ConfigError

DIRECTIONAL = (sequential.LARGER, sequential.SMALLER)

RULES = {
    "reproduced": "the interval excludes 0 on the claimed side and does not exclude the smallest "
    "effect",
    "present but smaller than claimed": "the interval lies on the claimed side of 0 but short of "
    "the smallest effect",
    "not reproduced at delta": "the interval excludes the smallest effect but not 0",
    "contradicted": "the interval lies wholly on the other side of 0",
    "inconclusive": "the interval contains both 0 and the smallest effect",
}
"""A directional claim's five verdicts, each with its rule in words (``delta`` the smallest
effect that matters, the interval that of the test that decides)."""

MARGIN_RULES = {
    "equal": {
        "reproduced": "the interval lies within ± the smallest effect",
        "contradicted": "the interval lies wholly beyond the smallest effect on one side",
        "inconclusive": "the interval reaches beyond the smallest effect but not wholly",
    },
    "not_smaller": {
        "reproduced": "the interval lies above minus the smallest effect",
        "contradicted": "the interval lies wholly below minus the smallest effect",
        "inconclusive": "the interval contains minus the smallest effect",
    },
    "no_difference": {
        "reproduced": "the sequential test did not separate the arms (the interval contains 0)",
        "contradicted": "the sequential test separated the arms (the interval excludes 0)",
    },
    # one side of a sign-change claim: which side of 0 the difference is separated on, if any
    "separated": {
        "separated above 0": "the interval lies wholly above 0",
        "separated below 0": "the interval lies wholly below 0",
        "not separated": "the interval contains 0",
    },
}


def claim_verdict(expect: str, low: float, high: float, delta: float) -> tuple[str, str]:
    """(verdict, its rule in words) from the interval [low, high] of arm minus other given by the
    test that decides, and ``delta`` > 0, the smallest effect that matters.

    larger (smaller: mirrored, the interval negated): *reproduced* where low > 0 and high >= delta;
    *present but smaller than claimed* where 0 < low and high < delta; *not reproduced at delta*
    where high < delta and low <= 0 <= high; *contradicted* where high < 0; *inconclusive* where
    low <= 0 and high >= delta. equal: reproduced inside ±delta, contradicted wholly beyond it on
    one side, else inconclusive. not_smaller ("no worse"): reproduced above -delta, contradicted
    wholly below it, else inconclusive. no_difference (a calibration check): reproduced where the
    interval contains 0 (the arms did not separate), else contradicted."""

    if expect in DIRECTIONAL:
        lo, hi = (low, high) if expect == sequential.LARGER else (-high, -low)
        if hi < 0:
            v = "contradicted"
        elif lo > 0:
            v = "reproduced" if hi >= delta else "present but smaller than claimed"
        else:
            v = "not reproduced at delta" if hi < delta else "inconclusive"
        return v, RULES[v]
    if expect == "equal":
        if low >= -delta and high <= delta:
            v = "reproduced"
        else:
            v = "contradicted" if low > delta or high < -delta else "inconclusive"
    elif expect == "not_smaller":
        v = "reproduced" if low > -delta else "contradicted" if high < -delta else "inconclusive"
    elif expect == "separated":
        v = "separated above 0" if low > 0 else "separated below 0" if high < 0 else "not separated"
    else:
        v = "reproduced" if low <= 0 <= high else "contradicted"
    return v, MARGIN_RULES[expect][v]


def seed_design(criterion: dict[str, Any], level: float) -> sequential.Design:
    """The sequential design a claim runs with when it is decided at ``level``: its seed plan's
    looks, or where it gives none, the design whose every look can stop at ``level``; its error
    allocated over the looks so that each can stop (refused, naming the looks, where one can't)."""

    s = criterion["seeds"]
    skew = 1.0 if criterion.get("symmetric") else sequential.SKEW
    if s.get("cap") is None:
        return sequential.Design.for_level(level, cap=MOST_SEEDS_AUTO, skew=skew)
    design = sequential.Design(
        alpha=level, pilot=s["pilot"], batch=s["batch"], cap=s["cap"], skew=skew
    )
    problems = design.problems()
    if problems:
        raise ConfigError(
            f"finding.seeds {s}: at the level the claim is decided at ({level:.3g}) "
            + "; ".join(problems)
            + "; leave finding.seeds out for the design that can stop at every look"
        )
    return design


MOST_SEEDS_AUTO = 14
"""The seed cap of the design made for a family's level when a claim gives no seed plan."""


def at_level(design: sequential.Design, level: float) -> sequential.Design:
    """``design`` with the same looks and the same shares of its error, at overall ``level``."""

    if level == design.alpha:
        return design
    spend = tuple(s * level / design.alpha for s in design.spend)
    return replace(design, alpha=level, spend=spend)


DECIDED = ("reproduced", "contradicted")
MARGIN = ("equal", "not_smaller")


def judge(
    d: np.ndarray,
    criterion: dict[str, Any],
    design: sequential.Design,
    level: float | None = None,
    median: bool = True,
) -> dict[str, Any]:
    """The claim decided from ``d`` ``[n]`` (per-seed differences arm − other, in seed order) by
    the sequential test of ``design`` with its error scaled to ``level`` (default its alpha),
    replayed over the looks the seeds reach: the decision and the repeated confidence interval of
    the look it stops at (valid however the looks went; a separation is an interval that excludes
    0), the verdict with its rule, the sequential p-value (the smallest level at which the looks
    seen would have separated the arms) and whether the claim is decided (``final``: a separation,
    a margin claim whose interval settles it, or the last look). ``estimate``: the median-unbiased
    estimate at the stopping look (``median=False``: the naive mean, for callers that only need
    the decision); ``mean``: the naive mean of the seeds used."""

    design = at_level(design, design.alpha if level is None else level)
    test = sequential.SequentialTest(["arm", "other"], design)
    d = np.asarray(d, dtype=float)
    zeros = np.zeros_like(d)
    looked = 0
    expect, delta = criterion["expect"], criterion["smallest_effect"]
    while not test.finished and test.next_seeds <= len(d):
        n = test.next_seeds
        test.update({"arm": d[:n], "other": zeros[:n]})
        looked = n
        low, high = test.interval()
        if expect in MARGIN and claim_verdict(expect, low, high, delta)[0] in DECIDED:
            break
    if not looked:
        raise ValueError(f"{len(d)} seeds: the first look needs {design.interims[0]}")
    low, high = test.interval()
    verdict, rule = claim_verdict(expect, low, high, delta)
    return {
        "decision": test.decisions[("arm", "other")],
        "seeds": looked,
        "low": float(low),
        "high": float(high),
        # the mean of the seeds used is biased away from 0 where the test stopped early; the
        # median-unbiased estimate under the stage-wise ordering of the looks is not
        "estimate": float(test.estimate()) if median else float(test.mean()),
        "mean": float(test.mean()),
        "p": float(test.p_value()),
        "level": design.alpha,
        "verdict": verdict,
        "rule": rule,
        "final": test.finished or looked == design.cap or (verdict in DECIDED and expect in MARGIN),
    }


def design_record(design: sequential.Design) -> dict[str, Any]:
    """What re-makes a design: its looks, its error and how it is shared over them."""

    return {
        "alpha": design.alpha,
        "pilot": design.pilot,
        "batch": design.batch,
        "cap": design.cap,
        "spend": list(design.spend),
        "skew": design.skew,
        "looks": design.interims,
    }


def design_of(record: dict[str, Any]) -> sequential.Design:
    r = {k: v for k, v in record.items() if k != "looks"}
    return sequential.Design(**{**r, "spend": tuple(r["spend"])})


def detectable(expect: str, design, sd: float, delta: float) -> dict[str, Any]:
    """What the procedure that decides could see, for the fixed evaluation set: for a
    directional claim, the effect it declares with 80% power under its looks (simulated) at the
    measured per-seed sd; for an equal / no-worse claim, the power of its margin rule at a true
    difference of 0."""

    if not np.isfinite(sd):
        return {"kind": "none"}
    if expect in MARGIN:
        margin = min(delta / sd, 1e6) if sd > 0 else 1e6
        kind = "equivalence" if expect == "equal" else "not smaller"
        return {
            "kind": "margin power at 0",
            "value": sequential.margin_power(design, margin, kind=kind),
        }
    return {"kind": "effect at 80% power", "value": sequential.sequential_mde(design) * sd}


ADJUSTMENTS = ("holm", "bh")


def adjusted_p(p: list[float], method: str = "holm") -> list[float]:
    """Family-adjusted p-values of ``p`` (the same order): Holm's step-down (family-wise error)
    or Benjamini-Hochberg's step-up (false discovery rate), each capped at 1."""

    if method not in ADJUSTMENTS:
        raise ValueError(f"unknown adjustment '{method}' (valid: {', '.join(ADJUSTMENTS)})")
    p_ = np.asarray(p, dtype=float)
    m = len(p_)
    order = np.argsort(p_, kind="stable")
    out = np.empty(m)
    if method == "holm":
        running = 0.0
        for rank, i in enumerate(order):
            running = max(running, (m - rank) * p_[i])
            out[i] = min(1.0, running)
    else:
        running = 1.0
        for rank in range(m - 1, -1, -1):
            i = order[rank]
            running = min(running, m * p_[i] / (rank + 1))
            out[i] = min(1.0, running)
    return out.tolist()


STRENGTH = (
    "reproduced",
    "present but smaller than claimed",
    "inconclusive",
    "not reproduced at delta",
    "contradicted",
)
"""Pairwise verdicts from the most to the least support for a claim: a combined verdict is the
weakest of its pairs'."""

COMBINED_RULE = (
    "reproduced only if every implied pair is reproduced; contradicted if any pair is "
    "contradicted; otherwise the weakest pair's verdict (present but smaller, inconclusive, not "
    "reproduced at delta, in that order)"
)


def combined_verdict(verdicts: list[str]) -> str:
    """The verdict of a claim over several arms from its implied pairs' verdicts: the weakest, in
    the order of ``STRENGTH`` (so reproduced only if all are, contradicted if any is)."""

    return max(verdicts, key=STRENGTH.index)


def holm_levels(p: list[float], alpha: float) -> list[float]:
    """Per comparison the level at which Holm's step-down at ``alpha`` decides it: alpha x p /
    Holm-adjusted p (a comparison separates at its level exactly when its adjusted p is at most
    alpha), capped at alpha."""

    adj = adjusted_p(p, "holm")
    return [min(alpha, alpha * pi / ai) if ai > 0 else alpha for pi, ai in zip(p, adj)]


SIGN_CHANGE_RULE = (
    "reproduced where arm − than is separated from 0 on one side at the first budget and on the "
    "other side at the second, each at its adjusted level; contradicted where both are separated "
    "on the same side; otherwise inconclusive"
)


def sign_change_verdict(first: str, second: str) -> str:
    """A sign-change claim's verdict from its two sides' (``separated above 0`` / ``separated
    below 0`` / ``not separated``)."""

    if "not separated" in (first, second):
        return "inconclusive"
    return "contradicted" if first == second else "reproduced"


def axis_criterion(criterion: dict[str, Any], axis: str) -> dict[str, Any]:
    """``criterion`` with its expectation and smallest effect those of budget axis ``axis``
    (either may be given per axis)."""

    e, d = criterion["expect"], criterion["smallest_effect"]
    return {
        **criterion,
        "expect": e[axis] if isinstance(e, dict) else e,
        "smallest_effect": d[axis] if isinstance(d, dict) else d,
    }


def comparison_p(d: np.ndarray, c: dict[str, Any], design: sequential.Design) -> float:
    """The p-value a comparison enters a family (or a claim's Holm) with: of separating the arms
    (directional, calibration and sign claims), or of the margin rule (the smallest level whose
    interval settles an equal / no-worse claim as reproduced), each from the replayed test."""

    if c["expect"] not in MARGIN:
        return judge(d, c, design, median=False)["p"]
    lo, hi = 1e-6, 0.999
    if judge(d, c, design, hi, median=False)["verdict"] != "reproduced":
        return 1.0
    for _ in range(30):  # bisection on the level: a wider interval settles less
        mid = (lo * hi) ** 0.5
        settled = judge(d, c, design, mid, median=False)["verdict"] == "reproduced"
        lo, hi = (lo, mid) if settled else (mid, hi)
    return hi
