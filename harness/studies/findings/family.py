"""The family: every comparison of the claims one findings command runs (a two-arm claim's axis,
or each comparison a claim over k arms or an interaction implies), its sequential p-value
adjusted across all of them, each judged again at the level of its adjusted decision; a claim of
several comparisons combined again from theirs."""

from __future__ import annotations

from typing import Any

import numpy as np

from .forms import comparison_criterion
from .records import combine
from .verdicts import adjusted_p, axis_criterion, comparison_p, design_of, judge


def members(records: list[dict[str, Any]]) -> list[tuple[dict, dict, np.ndarray, dict]]:
    """(the claim, where its family block goes, its per-seed differences, its criterion) of
    every comparison of the family, in order."""

    out = []
    for r in records:
        for ax in r["axes"]:
            crit = r["criterion"]
            if ax.get("kind") != "interaction":  # an interaction's two axes share one criterion
                crit = axis_criterion(crit, ax["axis"])
            if "comparisons" not in ax:
                d = np.subtract(ax["per_seed"][r["arm"]], ax["per_seed"][r["than"]])
                out.append((r, ax, d, crit))
                continue
            for c in ax["comparisons"]:
                out.append((r, c, np.asarray(c["d"]), comparison_criterion(crit, c)))
    return out


def adjust(records: list[dict[str, Any]], method: str = "holm") -> list[dict[str, Any]]:
    """The family's verdicts: every comparison's sequential p-value adjusted across all of them
    (``method``), and each judged again at the level its adjusted decision was made at (alpha x p
    / adjusted p: there the replayed interval excludes 0 exactly when the adjusted p is at most
    alpha), so the adjusted verdict and its interval come from one procedure; a claim of several
    comparisons then combines their adjusted verdicts by its rule. Writes each axis's (and each
    comparison's) ``family`` block in place and returns ``records``."""

    found = members(records)
    p = []
    for r, target, d, crit in found:
        p.append(comparison_p(d, crit, design_of(_axis_of(r, target)["design"])))
    adj = adjusted_p(p, method)
    for (r, target, d, crit), pi, ai in zip(found, p, adj):
        # where the adjusted p is at most alpha, the level is at least p: the replay separates
        # (or settles the margin); where it is above, the level is below p: it does not
        level = min(r["alpha"], r["alpha"] * pi / ai) if ai > 0 else r["alpha"]
        decided = judge(d, crit, design_of(_axis_of(r, target)["design"]), level)
        target["family"] = {
            "method": method,
            "size": len(found),
            "p": pi,
            "adjusted_p": ai,
            "level": level,
            **{k: decided[k] for k in ("verdict", "rule", "low", "high", "estimate")},
        }
    for r in records:
        for ax in (a for a in r["axes"] if "comparisons" in a):
            fams = [c["family"] for c in ax["comparisons"]]
            verdict, rule = combine(r["expect"], [x["verdict"] for x in fams])
            ax["family"] = {
                "method": method,
                "size": len(found),
                # the claim holds only where each of its comparisons does: its largest
                "adjusted_p": max(x["adjusted_p"] for x in fams),
                "verdict": verdict,
                "rule": rule,
            }
    return records


def _axis_of(r: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    """The axis a family member belongs to (itself, for a two-arm claim's axis)."""

    if "design" in target:
        return target
    return next(ax for ax in r["axes"] if target in ax.get("comparisons", []))
