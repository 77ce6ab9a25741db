# ruff: noqa: F401
"""sixblanks.algorithms: the six blanks of the policy-gradient template, named presets, losses.

Pure torch, no I/O, no imports from the rest of the project. Public API::

    from sixblanks.algorithms import resolve, compute_advantages, loss_weights, policy_loss

Each blank's named variants sit in a registry (``ESTIMATORS``, ``RATIOS``, ``TRUST_REGIONS``,
``NORMALIZATIONS``, ``KL_ESTIMATORS``, ``OBJECTIVES``) that also records the spec fields each
variant reads; ``applicable_fields(blanks)`` lists the fields that apply to a filling.
"""

from typing import TYPE_CHECKING

# the names for type checkers and readers; at run time, __getattr__ below (public through
# ``__all__``, made from the map, which the linter cannot read: the file-level noqa F401 at the top)
if TYPE_CHECKING:
    from .advantages import ESTIMATORS, get_estimator, group_stats, whiten
    from .blanks import (
        AdvantageSpec,
        Blanks,
        DataSpec,
        MaskSpec,
        NormalizationSpec,
        RegularizerSpec,
        WeightSpec,
        flatten,
    )
    from .data import (
        DynamicSampler,
        SamplingCensus,
        minibatches,
        overlong_filter_mask,
        overlong_penalty,
    )
    from .errors import UnknownNameError
    from .fields import applicable_fields
    from .logprobs import process_logits, token_logprobs
    from .loss import OBJECTIVES, compute_advantages, dpo_loss, policy_loss, sft_loss
    from .normalization import NORMALIZATIONS, aggregate, loss_weights
    from .presets import PRESETS, Preset, diff, get_preset, preset_names, resolve
    from .registry import Registry, Variant
    from .regularizers import KL_ESTIMATORS, kl_estimate
    from .weights import RATIOS, TRUST_REGIONS

# The names are imported where first used (PEP 562): the configuration's blanks and presets need
# no torch, so a command that only reads an experiment file does not pay torch's import (about
# 1.5 s in a fresh interpreter) before its workers start.
_WHERE = {
    "AdvantageSpec": "blanks",
    "Blanks": "blanks",
    "DataSpec": "blanks",
    "DynamicSampler": "data",
    "ESTIMATORS": "advantages",
    "KL_ESTIMATORS": "regularizers",
    "MaskSpec": "blanks",
    "NORMALIZATIONS": "normalization",
    "NormalizationSpec": "blanks",
    "OBJECTIVES": "loss",
    "PRESETS": "presets",
    "Preset": "presets",
    "RATIOS": "weights",
    "Registry": "registry",
    "RegularizerSpec": "blanks",
    "SamplingCensus": "data",
    "TRUST_REGIONS": "weights",
    "UnknownNameError": "errors",
    "Variant": "registry",
    "WeightSpec": "blanks",
    "aggregate": "normalization",
    "applicable_fields": "fields",
    "compute_advantages": "loss",
    "diff": "presets",
    "dpo_loss": "loss",
    "flatten": "blanks",
    "get_estimator": "advantages",
    "get_preset": "presets",
    "group_stats": "advantages",
    "kl_estimate": "regularizers",
    "loss_weights": "normalization",
    "minibatches": "data",
    "overlong_filter_mask": "data",
    "overlong_penalty": "data",
    "policy_loss": "loss",
    "preset_names": "presets",
    "process_logits": "logprobs",
    "resolve": "presets",
    "sft_loss": "loss",
    "token_logprobs": "logprobs",
    "whiten": "advantages",
}


def __getattr__(name: str):
    if name in _WHERE:
        from importlib import import_module

        value = getattr(import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_WHERE)  # the public names: those the map resolves
