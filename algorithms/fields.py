"""Which spec fields apply to a filling of the blanks (what ``sixblanks explain`` shows).

A field applies when the code that runs the blanks reads it. Choice fields pick a variant from a
registry (``SWITCHES``), and each variant declares the fields it reads next to its function
(``reads`` and ``applies`` in :mod:`sixblanks.algorithms.registry`); a few on/off fields switch
others on (``WHEN_ON``). :func:`applicable_fields` follows these declarations from ``objective``.
A GRPO arm, say, gets no ``advantage.critic.*`` (only the ``gae`` estimator reads them), no
``weight.tau_*`` (only the ``sapo`` trust region) and no ``regularizer.dpo_*`` (only objective dpo).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .advantages import ESTIMATORS
from .blanks import Blanks, flatten
from .loss import OBJECTIVES
from .normalization import NORMALIZATIONS
from .registry import Registry
from .regularizers import KL_ESTIMATORS
from .weights import RATIOS, TRUST_REGIONS

SWITCHES: dict[str, Registry] = {
    "objective": OBJECTIVES,
    "weight.ratio": RATIOS,
    "weight.trust_region": TRUST_REGIONS,
    "advantage.estimator": ESTIMATORS,
    "normalization.mode": NORMALIZATIONS,
    "regularizer.reward_kl_estimator": KL_ESTIMATORS,
    "regularizer.loss_kl_estimator": KL_ESTIMATORS,
}
"""Choice field -> the registry of its variants."""

SOURCE_FIELDS: dict[str, tuple[str, ...]] = {
    "search": ("data.search",),
    "preference_pairs": ("data.pairs",),
}
"""Fields that apply only with a given data.source."""

WHEN_ON: dict[str, tuple[str, ...]] = {
    "data.dynamic_sampling": (
        "data.max_sampling_rounds",
        "data.on_round_cap",
        "data.accuracy_filter",
    ),
    # the shaping's L_max is the generation budget, which is normalization.l_max when set
    "data.overlong_shaping.enabled": (
        "data.overlong_shaping.cache",
        "data.overlong_shaping.factor",
        "normalization.l_max",
    ),
    "regularizer.reward_kl_coef": ("regularizer.reward_kl_estimator",),
    "weight.tis_cap": ("weight.tis_form", "weight.old_policy"),
    "data.prompt_pool": ("data.retire_pass_rate", "data.curriculum"),
}
"""Fields that apply only while another field is on (True, or a coefficient > 0)."""

_TREE = ("beam", "tree")
ONLY_WHEN: dict[str, tuple[str, object]] = {
    **{
        f"advantage.critic.{k}": ("advantage.critic.targets", "vtrace")
        for k in ("rho_bar", "c_bar", "rho_bar_pg")
    },
    "data.search.n": ("data.search.mode", "best_of_n"),
    "data.search.beam": ("data.search.mode", "beam"),
    "data.search.expand": ("data.search.mode", _TREE),
    "data.search.expansions": ("data.search.mode", "tree"),
    "data.search.guide": ("data.search.mode", _TREE),
    "data.search.tree_labels": ("data.search.mode", _TREE),
    "data.search.value_lr": ("data.search.guide", "value"),
    "data.search.value_steps": ("data.search.guide", "value"),
}
"""Fields that apply only when another field has a given value, or one of a tuple of values
(V-trace's clips; the search's per-mode fields)."""


def _holds(values: dict[str, object], key: str) -> bool:
    field, want = ONLY_WHEN[key]
    return values[field] in want if isinstance(want, tuple) else values[field] == want


def applicable_fields(blanks: Blanks) -> list[str]:
    """Dotted paths of the fields of ``blanks`` that its variants read, in :func:`flatten` order.

    A declared path that names a sub-spec (``advantage.critic``) covers all of its fields.
    """

    values = flatten(blanks)
    found: set[str] = set()
    todo = ["objective"]
    while todo:
        path = todo.pop()
        covered = [k for k in values if k == path or k.startswith(path + ".")]
        if not covered:
            raise ValueError(f"a variant declares '{path}', which is not a field of the blanks")
        for key in covered:
            if key not in found:
                found.add(key)
                todo.extend(_switched_on(key, values[key]))
    return [
        k
        for k in values
        if k in found
        and (k not in ONLY_WHEN or _holds(values, k))
        and (k != "weight.old_policy" or _bypass_possible(values))
    ]


def _bypass_possible(values: dict[str, object]) -> bool:
    """Whether ``weight.old_policy: rollout`` would be a valid choice: not with the ratio
    'behavior' (already against the rollout), nor with an importance weight on top of a ratio
    (truncated IS in a weighing form, a clamping or weighing gate: it would correct twice)."""

    if values["weight.ratio"] == "behavior":
        return False
    weighs = (
        values["weight.tis_cap"] is not None
        and not str(values["weight.tis_form"]).endswith("_mask")
    ) or values.get("weight.gate.mode") in ("clamp", "weight")
    return values["weight.ratio"] == "none" or not weighs


def _switched_on(path: str, value: object) -> tuple[str, ...]:
    """The fields that the value of the field ``path`` makes applicable."""

    if path in SWITCHES:
        return SWITCHES[path][value].fields
    if path == "data.source":
        return SOURCE_FIELDS.get(str(value), ())
    if path in WHEN_ON and value:
        return WHEN_ON[path]
    if path.startswith("weight.gate."):  # a gate (set) reads pi_old, or pi_theta in the bypass
        return ("weight.old_policy",)  # form: the choice applies wherever a gate does
    return ()


@dataclass
class SideBySide:
    """Several fillings of the blanks compared field by field (``sixblanks explain``).

    ``columns``: label -> {dotted field: value} over ``keys`` (every field of any column with
    ``all_fields``; else those that apply to at least one column); ``applies``: label -> the fields
    its blanks read; ``differing``: the keys whose values differ between columns; ``hidden``: how
    many fields apply to no column (left out without ``all_fields``)."""

    columns: dict[str, dict[str, object]]
    applies: dict[str, list[str]]
    keys: list[str]
    differing: set[str]
    hidden: int


def side_by_side(blanks: dict[str, Blanks], all_fields: bool = False) -> SideBySide:
    """``blanks`` (label -> a filling) as a :class:`SideBySide`."""

    flat = {label: flatten(b) for label, b in blanks.items()}
    every = list(dict.fromkeys(k for c in flat.values() for k in c))
    applies = {label: applicable_fields(b) for label, b in blanks.items()}
    union = {k for fields in applies.values() for k in fields}
    keys = every if all_fields else [k for k in every if k in union]
    columns = {label: {k: c.get(k) for k in keys} for label, c in flat.items()}
    differing = {
        k for k in keys if len({json.dumps(c[k], default=str) for c in columns.values()}) > 1
    }
    return SideBySide(columns, applies, keys, differing, len(every) - len(keys))
