"""The registered preset closest to what a configuration determines (:func:`choose`), and the
blank overrides that turn it into exactly that: fewest overrides, a field that names the
algorithm's kind counting ten.
"""

from __future__ import annotations

import math
from typing import Any

from sixblanks.algorithms.blanks import Blanks, flatten
from sixblanks.algorithms.presets import PRESETS

ORDER = list(flatten(Blanks()))
"""Every blank field in the order of the template (objective, mask, weight, ...)."""

KIND = (
    "objective",
    "weight.ratio",
    "weight.trust_region",
    "weight.old_policy",
    "weight.gate",
    "advantage.estimator",
)
"""Fields that name an algorithm's kind (the gate: whether there is one): a preset that differs in
one of them is a worse match than one that differs in several numbers."""

GROUP_MEAN = frozenset({"group_norm", "group_mean", "group_mean_batch_std"})
"""The group-mean estimators: the group's baseline, scaled by the group's std, by nothing or by the
batch's std. For the family a framework's loss names (its preferred presets) a change between them
is a scale, as a denominator is, and costs one field: TRL's loss_type and scale_rewards are separate
settings, and loss_type 'dr_grpo' with a std kept is Dr. GRPO with one of its two changes undone
(the dr_grpo_half trap), not Lite PPO or GRPO under another name. For any other preset the
estimator stays a kind field (a group-std recipe under a token-mean is GRPO's, not Lite PPO's)."""

CANDIDATES = (
    "grpo",
    "dr_grpo",
    "dapo",
    "lite_ppo",
    # frameworks state absolute clip bounds: the GSPO presets that keep them absolute
    "gspo_paper",
    "gspo_token_paper",
    "sapo",
    "cispo",
    "dppo",
    "icepop",
    "scalerl",
    "rloo",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "remax",
    "ppo",
    "reinforce",
    "reinforce_baseline",
    "reinforce_loo",
)
"""Presets a translation may start from (those registered), in order of preference on a tie."""


def get(tree: Any, dotted: str) -> Any:
    """The value at a dotted path of nested dicts, None where the path is absent."""

    for part in dotted.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return None
        tree = tree[part]
    return tree


def same(a: Any, b: Any) -> bool:
    """Equal as settings: nested alike, numbers within rounding, a bool equal only to a bool."""

    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
    return a == b


def overrides_for(dump: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    """{dotted path: value} of the target values that differ from the preset's ``dump``; a
    sub-spec (the gate) the preset also has differs field by field."""

    out: dict[str, Any] = {}
    for path, value in target.items():
        have = get(dump, path)
        if isinstance(value, dict) and isinstance(have, dict):
            for k, v in value.items():
                if not same(have.get(k), v):
                    out[f"{path}.{k}"] = v
        elif not same(have, value):
            out[path] = value
    return out


def _cost(path: str, have: Any, value: Any, preferred: bool) -> int:
    """What overriding ``path`` from ``have`` to ``value`` costs a preset's match: ten for a field
    of the algorithm's kind, one for a number; a preferred preset's estimator within GROUP_MEAN is
    a scale, one."""

    if path == "advantage.estimator" and preferred and {have, value} <= GROUP_MEAN:
        return 1
    return 10 if path in KIND else 1


def _same_kind(dump: dict[str, Any], target: dict[str, Any]) -> bool:
    """Whether a preset (its blanks' ``dump``) may compete for ``target``: the same trust region;
    a gate, if the preset has one, of the same level, metric and mode; the same estimator where
    the preset's needs a second model or rollout (gae, remax)."""

    if get(dump, "weight.trust_region") != target.get("weight.trust_region"):
        return False
    gate, have = target.get("weight.gate"), get(dump, "weight.gate")
    if have is not None and not (
        isinstance(gate, dict) and all(have[k] == gate[k] for k in ("level", "metric", "mode"))
    ):
        return False
    estimator = get(dump, "advantage.estimator")
    return estimator not in ("gae", "remax") or estimator == target.get("advantage.estimator")


def choose(target: dict[str, Any], prefer: list[str]) -> tuple[str, dict[str, Any]]:
    """The registered preset closest to ``target`` (fewest overrides, a kind field counting ten)
    and its overrides, ``prefer`` first on a tie. Only presets of the target's kind compete."""

    order = list(dict.fromkeys([*prefer, *CANDIDATES]))
    best: tuple[int, int, str, dict[str, Any]] | None = None
    for i, name in enumerate(order):
        if name not in PRESETS:
            continue
        dump = PRESETS[name].blanks.model_dump()
        if not _same_kind(dump, target):
            continue
        over = overrides_for(dump, target)
        score = sum(_cost(p, get(dump, p), v, name in prefer) for p, v in over.items())
        if best is None or (score, i) < best[:2]:
            best = (score, i, name, over)
    if best is None:  # none of this trust region (dppo_kl): the preferred family's, else grpo
        name = next((p for p in prefer if p in PRESETS), "grpo")
        return name, overrides_for(PRESETS[name].blanks.model_dump(), target)
    return best[2], best[3]
