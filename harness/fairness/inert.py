"""Inert differences: blanks in which the arms differ but that never acted in an arm's runs (a trust
region whose ratios were all 1, a clip with clip fraction 0, a clip bound under a soft gate, a KL
estimator under a zero coefficient, dynamic sampling that dropped no group, potential shaping whose
terms summed to 0 for every sample, overlong shaping that
never penalized, a target-KL stop that never fired), found from what the runs recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sixblanks.algorithms.blanks import Blanks, flatten

from ..layout import RunDir
from ..runspec import RunSpec

RATIO_ONE = 1e-6
"""An importance ratio within this of 1 counts as 1 (on-policy recomputation is exact up to
this)."""

CLIP_FIELDS = ("weight.eps_low", "weight.eps_high", "weight.dual_clip_c")
TRUST_REGION_FIELDS = (
    "weight.trust_region",
    *CLIP_FIELDS,
    "weight.tau_pos",
    "weight.tau_neg",
    "weight.log_ratio_clamp",
)
"""Fields that act only through a ratio away from 1 (at r = 1 every trust region's gradient weight
is 1). The ratio's kind (token or sequence) changes the gradient even at r = 1, so it is not
here."""


def _activity(runs_dir: Path, run_ids: list[str]) -> dict[str, float]:
    """What acted in an arm's runs, from their step metrics, census and discards."""

    act = {
        "steps": 0.0,
        "updates": 0.0,
        "ratio_max": 1.0,
        "ratio_min": 1.0,
        "clip_frac": 0.0,
        "early_stops": 0.0,
        "groups_dropped": 0.0,
        "overlong_penalized": 0.0,
        "overlong_filtered": 0.0,
        "shaping_logged": 0.0,
        "shaping_moved": 0.0,
    }
    for rid in run_ids:
        rd = RunDir(runs_dir / rid)
        if not rd.events.exists():
            continue
        for e in rd.read_events():
            if e.get("type") == "census":
                act["groups_dropped"] += sum(
                    v for k, v in (e.get("groups_dropped") or {}).items() if k != "surplus"
                )
            if e.get("type") != "step":
                continue
            act["steps"] += 1
            if "ratio_max" in e:
                act["updates"] += 1
                act["ratio_max"] = max(act["ratio_max"], e["ratio_max"])
                act["ratio_min"] = min(act["ratio_min"], e.get("ratio_min", 1.0))
                act["clip_frac"] = max(act["clip_frac"], e.get("clip_frac", 0.0))
            act["early_stops"] += float(e.get("early_stop_epoch", -1.0) >= 0)
            act["overlong_penalized"] += e.get("overlong_penalty_frac", 0.0)
            if "potential_shaping_absmax" in e:
                act["shaping_logged"] += 1
                act["shaping_moved"] = max(act["shaping_moved"], e["potential_shaping_absmax"])
        res = rd.read_result()
        act["overlong_filtered"] += (res.get("discarded_by_reason") or {}).get(
            "overlong_filter", 0.0
        )
    return act


def inert_note(field: str, blanks: dict[str, Any], act: dict[str, float]) -> str | None:
    """Why ``field`` never acted in runs with ``act`` (None: it did, or it cannot be told)."""

    if not act.get("steps"):
        return None  # no step recorded: nothing can be told
    every_ratio_one = act["updates"] > 0 and (
        act["ratio_max"] <= 1 + RATIO_ONE and act["ratio_min"] >= 1 - RATIO_ONE
    )
    if field.startswith("weight.") and blanks["weight.ratio"] != "none":
        if field == "weight.target_kl":
            if blanks[field] is not None and act["updates"] and not act["early_stops"]:
                return "never acted: the target-KL stop never fired"
            return None
        if every_ratio_one and field in TRUST_REGION_FIELDS:
            return (
                "never acted: every importance ratio was 1 and the clip fraction 0 "
                "(one on-policy update per batch)"
            )
        uses_eps = ("clip", "dis") if field != "weight.dual_clip_c" else ("clip",)
        if field in CLIP_FIELDS and blanks["weight.trust_region"] not in uses_eps:
            return f"not used: trust region '{blanks['weight.trust_region']}' has no clip"
        if (
            field in ("weight.tau_pos", "weight.tau_neg")
            and blanks["weight.trust_region"] != "sapo"
        ):
            return f"not used: trust region '{blanks['weight.trust_region']}' has no soft gate"
        if field in CLIP_FIELDS and act["updates"] and act["clip_frac"] == 0:
            return "never acted: clip fraction 0 in every update"
    for kind in ("loss_kl", "reward_kl"):
        if field.startswith(f"regularizer.{kind}_") and field != f"regularizer.{kind}_coef":
            if not blanks[f"regularizer.{kind}_coef"]:
                return f"never acted: the KL term ({kind.replace('_', ' ')}) has coefficient 0"
    if field.startswith("data.") and field.split(".")[1] in (
        "dynamic_sampling",
        "max_sampling_rounds",
        "on_round_cap",
    ):
        if blanks["data.dynamic_sampling"] and not act["groups_dropped"]:
            return "never acted: dynamic sampling dropped no group"
    if field.startswith("data.overlong_shaping.") and blanks["data.overlong_shaping.enabled"]:
        if not act["overlong_penalized"]:
            return "never acted: no response reached the overlong zone (penalty 0 throughout)"
    if (
        field.startswith("data.potential_shaping.")
        and blanks["data.potential_shaping.enabled"]
        and act["shaping_logged"]
        and not act["shaping_moved"]
        and not _per_turn_credit(blanks["advantage.estimator"])
    ):
        return (
            "never acted: every sample's shaping terms summed to 0 (they telescope to "
            "gamma^T potential(end) - potential(start); with one outcome advantage per response "
            "nothing changes: use per-turn credit)"
        )
    if field == "mask.overlong_filter" and blanks[field] and not act["overlong_filtered"]:
        return "never acted: no response was truncated"
    return None


def _per_turn_credit(estimator: str) -> bool:
    """Whether the advantage estimator reads rewards turn by turn (turn or token rewards), where
    potential shaping acts even when an episode's terms sum to 0."""

    from sixblanks.algorithms.advantages import ESTIMATORS

    inputs = ESTIMATORS[estimator].inputs or ()
    return "turn_rewards" in inputs or "token_rewards" in inputs


def inert_differences(specs: list[RunSpec], runs_dir: Path) -> list[dict[str, str]]:
    """For each blank field in which the arms differ, the arms in whose runs it never acted:
    ``[{"arm", "blank", "note"}]``."""

    flat: dict[str, dict[str, Any]] = {}
    runs: dict[str, list[str]] = {}
    for s in specs:
        flat.setdefault(s.arm, flatten(Blanks.model_validate(s.blanks)))
        runs.setdefault(s.arm, []).append(s.run_id)
    if len(flat) < 2:
        return []
    fields = sorted(
        k
        for k in next(iter(flat.values()))
        if len({json.dumps(f.get(k), default=str) for f in flat.values()}) > 1
    )
    out = []
    for arm, blanks in flat.items():
        act = _activity(runs_dir, runs[arm])
        for field in fields:
            note = inert_note(field, blanks, act)
            if note:
                out.append({"arm": arm, "blank": field, "note": note})
    return out
