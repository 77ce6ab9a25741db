"""A claim's verdict under an earlier version of its criterion (before an amendment), replayed from
the same seeds: the comparisons that version implies, read from the per-seed values the runs
measured, judged alone at the version's alpha (Holm inside the claim where it implies several)
and combined by its form's rule. Where the runs did not measure what the version compares (its
metric, an arm, a budget axis), the verdict is "not computable" with the reason in words."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...config.finding_file import criterion_hash
from ...errors import ConfigError
from .forms import NotMeasured, implied_by, judge_inside
from .records import combine
from .verdicts import axis_criterion, design_of, seed_design


def under(
    criterion: dict[str, Any], now: dict[str, Any], ax: dict[str, Any], family: int
) -> dict[str, Any]:
    """The verdict of axis record ``ax`` (measured under criterion ``now``) under the earlier
    ``criterion``, with its rule; per comparison its verdict and interval where it implies
    several; or "not computable" and why."""

    h = criterion_hash(criterion)
    axes = ax.get("between") or [ax["axis"]]
    try:
        _same_measure(criterion, now)
        crit = axis_criterion(criterion, axes[0]) if len(axes) == 1 else criterion
        comps = implied_by(crit, axes, _measured(ax, axes))
        if criterion["seeds"].get("cap") is None:
            design = design_of(ax["design"])
        else:
            design = seed_design(criterion, criterion["alpha"] / family)
        for c in comps:
            c["d"] = c["d"][: design.cap]
        judged = judge_inside(comps, crit, design, criterion["alpha"])
    except NotMeasured as exc:
        return {"hash": h, "verdict": "not computable", "why": f"the earlier criterion: {exc}"}
    except (ValueError, ConfigError) as exc:  # a seed plan the seeds run cannot replay
        return {"hash": h, "verdict": "not computable", "why": str(exc)}
    out = {"hash": h, "expect": crit["expect"]}
    if len(judged) == 1 and comps[0]["expect"] == crit["expect"]:  # two arms: the one interval
        (j,) = judged
        return {
            **out,
            "verdict": j["verdict"],
            "rule": j["rule"],
            "low": j["interval"]["low"],
            "high": j["interval"]["high"],
        }
    verdict, rule = combine(crit["expect"], [j["verdict"] for j in judged])
    return {
        **out,
        "verdict": verdict,
        "rule": rule,
        "comparisons": [
            {
                "label": j["label"],
                "verdict": j["verdict"],
                "level": j["level"],
                "low": j["interval"]["low"],
                "high": j["interval"]["high"],
            }
            for j in judged
        ],
    }


def _same_measure(criterion: dict[str, Any], now: dict[str, Any]) -> None:
    """Refuse (NotMeasured) a version whose per-seed values are not the ones the runs give."""

    if criterion["metric"] != now["metric"]:
        raise NotMeasured(f"it measures {criterion['metric']}; the runs measured {now['metric']}")
    if now["metric"] != "final_score" and criterion["aggregate"] != now["aggregate"]:
        raise NotMeasured(
            f"it takes the {criterion['aggregate']} of {now['metric']} per run; the per-seed "
            f"values recorded are its {now['aggregate']}"
        )


def _measured(ax: dict[str, Any], axes: list[str]):
    """``diff(axis, a, b)`` from the record's per-seed values (``arm``, or ``arm (axis)`` for an
    interaction's record), NotMeasured naming what the runs lack."""

    per_seed = ax["per_seed"]
    one = len(axes) == 1

    def diff(axis: str, a: str, b: str) -> np.ndarray:
        if axis not in axes:
            raise NotMeasured(
                f"it compares at budget axis '{axis}'; these runs are of {', '.join(axes)}"
            )
        keys = [x if one else f"{x} ({axis})" for x in (a, b)]
        missing = [x for x, k in zip((a, b), keys) if k not in per_seed]
        if missing:
            ran = sorted({k.rsplit(" (", 1)[0] if not one else k for k in per_seed})
            raise NotMeasured(
                f"it compares {' and '.join(missing)}, which the runs did not measure (they "
                f"measured {', '.join(ran)})"
            )
        return np.subtract(per_seed[keys[0]], per_seed[keys[1]])

    return diff
