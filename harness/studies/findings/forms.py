"""The comparisons a claim implies, read from its criterion alone (so that an earlier version of
the criterion, after an amendment, implies its own): two arms, one comparison per axis; a claim
over k arms, best against each other arm or each adjacent pair of an ordering, toward the side
its ``better`` names; an interaction between two budgets, the change of the difference (grows) or
its side at each budget (changes_sign). Each comparison judged alone at the level Holm's
step-down inside the claim holds it to."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...config.finding_file import INTERACTION, MANY_ARMS
from .verdicts import comparison_p, detectable, holm_levels, judge

Diff = Callable[[str, str, str], np.ndarray]
"""``diff(axis, a, b)``: the per-seed differences a − b on budget axis ``axis``."""


def form_of(expect: Any) -> str:
    """``two`` (two arms, one expectation or one per axis), ``many`` or ``interaction``."""

    if isinstance(expect, str) and expect in MANY_ARMS:
        return "many"
    return "interaction" if isinstance(expect, str) and expect in INTERACTION else "two"


def _at(v: Any, axis: str) -> Any:
    return v[axis] if isinstance(v, dict) else v


def toward(criterion: dict[str, Any]) -> str:
    """The expectation of each pair a claim over k arms implies, the better arm first: ``larger``,
    or ``smaller`` where the claim says a lower metric is better (a length, a loss)."""

    return "smaller" if criterion.get("better") == "lower" else "larger"


def implied_by(criterion: dict[str, Any], axes: list[str], diff: Diff) -> list[dict[str, Any]]:
    """The comparisons ``criterion`` implies on budget ``axes`` (one axis; an interaction's two),
    each ``{label, arm, than, expect, smallest_effect, d}``, ``d`` from ``diff``."""

    expect, delta = criterion["expect"], criterion["smallest_effect"]
    arm, than = criterion.get("arm"), criterion.get("than")

    def one(label: str, a: str, b: str, e: str, d: np.ndarray, effect: float) -> dict[str, Any]:
        return {
            "label": label,
            "arm": a,
            "than": b,
            "expect": e,
            "smallest_effect": float(effect),
            "d": d,
        }

    form = form_of(expect)
    if form == "interaction":
        b1, b2 = criterion["between"]
        first, second = diff(b1, arm, than), diff(b2, arm, than)
        effect = _at(delta, b1)
        if expect == "grows":
            name = f"({arm} − {than} at {b2}) − (at {b1})"
            return [one(name, arm, than, "larger", second - first, effect)]
        return [
            one(f"{arm} − {than} at {b}", arm, than, "separated", d, effect)
            for b, d in ((b1, first), (b2, second))
        ]
    if len(axes) != 1:
        raise NotMeasured(
            f"it judges each budget axis on its own, and this record holds the interaction over "
            f"{' → '.join(axes)} in one verdict"
        )
    (axis,) = axes
    if form == "two":
        pairs = [(arm, than, _at(expect, axis))]
    elif expect == "best":
        pairs = [(arm, x, toward(criterion)) for x in criterion["arms"] if x != arm]
    else:
        arms = criterion["arms"]
        pairs = [(a, b, toward(criterion)) for a, b in zip(arms, arms[1:])]
    return [one(f"{a} − {b}", a, b, e, diff(axis, a, b), _at(delta, axis)) for a, b, e in pairs]


class NotMeasured(ValueError):
    """A comparison needs values the runs did not measure (an arm, a budget axis); its message
    says which, in words."""


def comparison_criterion(criterion: dict[str, Any], c: dict[str, Any]) -> dict[str, Any]:
    """The claim's criterion with one implied comparison's expectation and smallest effect."""

    return {**criterion, "expect": c["expect"], "smallest_effect": c["smallest_effect"]}


def judge_inside(
    comps: list[dict[str, Any]], crit: dict[str, Any], design, alpha: float
) -> list[dict[str, Any]]:
    """Each comparison of ``comps`` judged alone at the level Holm's step-down at ``alpha`` holds
    it to inside the claim (alpha itself for a claim of one comparison), with its interval there:
    ``{p, level, verdict, rule, interval, sequential_mde}`` beside the comparison's fields."""

    crits = [comparison_criterion(crit, c) for c in comps]
    p = [comparison_p(c["d"], ci, design) for c, ci in zip(comps, crits)]
    out = []
    for c, ci, pi, lv in zip(comps, crits, p, holm_levels(p, alpha)):
        decided = judge(c["d"], ci, design, lv)
        sd = float(np.std(c["d"], ddof=1)) if len(c["d"]) > 1 else float("nan")
        out.append(
            {
                **{k: c[k] for k in ("label", "arm", "than", "expect", "smallest_effect")},
                "d": [float(x) for x in c["d"]],
                "p": pi,
                "level": lv,
                "verdict": decided["verdict"],
                "rule": decided["rule"],
                "interval": {
                    k: decided[k] for k in ("estimate", "mean", "low", "high", "p", "seeds")
                },
                "sequential_mde": detectable(ci["expect"], design, sd, ci["smallest_effect"]),
            }
        )
    return out
