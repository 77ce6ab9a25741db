"""What a claim's looks come to, per axis: the verdict alone (the claim's whole alpha), its
interval and rule, the per-seed values, the budget spent and the runs shared with other claims.
A two-arm claim gets one comparison per axis; a claim over k arms, and an interaction between two
budgets, get the comparisons they imply, Holm-adjusted inside the claim, and a combined verdict
with its rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sixblanks.reports import paired

from ...config.finding_file import Finding
from .forms import judge_inside
from .looks import shared_block
from .runs import audit_flags, start_scores
from .verdicts import (
    COMBINED_RULE,
    SIGN_CHANGE_RULE,
    axis_criterion,
    combined_verdict,
    design_record,
    detectable,
    judge,
    sign_change_verdict,
)


def two_arm_record(f: Finding, axis: str, budget: dict, run: dict, out: Path) -> dict[str, Any]:
    m = f.finding
    values, looks, design = run["values"][axis], run["looks"], run["design"]
    seeds, ledger = run["seeds"], run["ledgers"][axis]
    ya = np.stack([values[m.arm][s] for s in range(seeds)])
    yb = np.stack([values[m.than][s] for s in range(seeds)])
    d = ya.mean(1) - yb.mean(1)
    # the population of instances as well as seeds: the two-way paired interval, beside the
    # decision's (which holds the evaluation set fixed)
    pd_ = paired.paired_difference(ya, yb, confidence=1 - m.alpha)
    sd = float(np.std(d, ddof=1)) if seeds > 1 else float("nan")
    crit = axis_criterion(m.criterion(), axis)
    # alone: the same looks with the claim's whole alpha
    decided = judge(d, crit, design, m.alpha)
    record = {
        "axis": axis,
        "budget": budget,
        "design": design_record(design),
        "level": m.alpha,
        "verdict": decided["verdict"],
        "rule": decided["rule"],
        "decision": decided["decision"],
        "interval": {k: decided[k] for k in ("estimate", "mean", "low", "high", "p", "seeds")},
        "effect": pd_.as_dict(),
        "instances": int(ya.shape[1]),
        "sequential_mde": detectable(crit["expect"], design, sd, crit["smallest_effect"]),
        "seeds": seeds,
        "looks": looks,
        "spent": {k: ledger.counters.get(k, 0.0) for k in budget},
        "limit": dict(ledger.budget.limits),
        "per_seed": {
            a: [float(values[a][s].mean()) for s in range(seeds)] for a in (m.arm, m.than)
        },
        "seconds": run["seconds"],
    }
    if isinstance(m.expect, dict):  # the axis's own expectation, beside the claim's mapping
        record.update(expect=crit["expect"], smallest_effect=crit["smallest_effect"])
    return {**record, **_beside(f, out, budget, seeds, m.claim_arms())}


def _beside(f: Finding, out: Path, budget: dict, seeds: int, arms: list[str]) -> dict[str, Any]:
    """The audit's flags, the warm start's scores, the runs shared with other claims."""

    start = start_scores(out, f, seeds)
    return {
        "audit": audit_flags(out, *arms),
        "start": start,
        "flags": start.pop("flags"),
        "shared": shared_block(out, budget, seeds),
    }


def judged_comparisons(f: Finding, run: dict, crit: dict[str, Any]) -> list[dict[str, Any]]:
    """The implied comparisons at the last look, each judged alone at the level Holm's step-down
    at the claim's alpha holds it to (inside the claim), with its interval there."""

    return judge_inside(run["comparisons"], crit, run["design"], f.finding.alpha)


def combine(expect: str, verdicts: list[str]) -> tuple[str, str]:
    """(the claim's verdict, its rule in words) from its implied comparisons' verdicts."""

    if expect == "changes_sign":
        return sign_change_verdict(*verdicts), SIGN_CHANGE_RULE
    if expect == "grows":
        return verdicts[0], "the verdict of the interaction, (arm − than at the second budget) − "
        "(at the first), against the smallest effect"
    return combined_verdict(verdicts), COMBINED_RULE


def many_record(f: Finding, budgets: dict[str, dict], run: dict, claim_dir: Path) -> dict:
    """One axis of a claim over k arms, or the one entry of an interaction between two budgets."""

    m = f.finding
    axes = list(budgets)
    crit = axis_criterion(m.criterion(), axes[0]) if len(axes) == 1 else m.criterion()
    comps = judged_comparisons(f, run, crit)
    verdict, rule = combine(m.expect, [c["verdict"] for c in comps])
    seeds = run["seeds"]

    def flat(per_axis: dict[str, dict]) -> dict[str, float]:
        # one axis: its counters as they are; two: each counter named with its axis
        if len(axes) == 1:
            return dict(per_axis[axes[0]])
        return {f"{a} {k}": v for a in axes for k, v in per_axis[a].items()}

    ledgers = run["ledgers"]
    per_seed = {
        (arm if len(axes) == 1 else f"{arm} ({a})"): [
            float(run["values"][a][arm][s].mean()) for s in range(seeds)
        ]
        for a in axes
        for arm in m.claim_arms()
    }
    beside = [_beside(f, claim_dir / a, budgets[a], seeds, m.claim_arms()) for a in axes]
    return {
        "axis": axes[0] if len(axes) == 1 else " → ".join(axes),
        # an interaction's two budgets, in order (its per-seed values are "arm (budget)")
        **({"between": axes} if len(axes) > 1 else {}),
        "kind": m.form,
        "budget": flat(budgets),
        "design": design_record(run["design"]),
        "level": m.alpha,
        "verdict": verdict,
        "rule": rule,
        "comparisons": comps,
        "seeds": seeds,
        "looks": run["looks"],
        "spent": flat({a: {k: ledgers[a].counters.get(k, 0.0) for k in budgets[a]} for a in axes}),
        "limit": flat({a: dict(ledgers[a].budget.limits) for a in axes}),
        "per_seed": per_seed,
        "seconds": run["seconds"],
        "audit": sorted({x for b in beside for x in b["audit"]}),
        "start": beside[0]["start"],
        "flags": sorted({x for b in beside for x in b["flags"]}),
        "shared": _merge_shared(axes, [b["shared"] for b in beside]),
    }


def _merge_shared(axes: list[str], blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """The runs taken over on each axis together; what they consumed named as the budget spent
    is (each counter with its axis where there are two), so the two can be read side by side."""

    out: dict[str, Any] = {"runs": 0, "from": {}, "consumed": {}}
    for a, b in zip(axes, blocks):
        out["runs"] += b["runs"]
        for k, v in b["from"].items():
            out["from"][k] = out["from"].get(k, 0) + v
        for k, v in b["consumed"].items():
            out["consumed"][k if len(axes) == 1 else f"{a} {k}"] = v
    return out
