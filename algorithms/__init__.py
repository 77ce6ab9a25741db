"""sixblanks.algorithms: the six blanks of the policy-gradient template, named presets, losses.

Pure torch, no I/O, no imports from the rest of the project. Public API::

    from sixblanks.algorithms import resolve, compute_advantages, loss_weights, policy_loss

Each blank's named variants sit in a registry (``ESTIMATORS``, ``RATIOS``, ``TRUST_REGIONS``,
``NORMALIZATIONS``, ``KL_ESTIMATORS``, ``OBJECTIVES``) that also records the spec fields each
variant reads; ``applicable_fields(blanks)`` lists the fields that apply to a filling.
"""

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

__all__ = [
    "ESTIMATORS",
    "KL_ESTIMATORS",
    "NORMALIZATIONS",
    "OBJECTIVES",
    "PRESETS",
    "RATIOS",
    "TRUST_REGIONS",
    "AdvantageSpec",
    "Blanks",
    "DataSpec",
    "DynamicSampler",
    "MaskSpec",
    "NormalizationSpec",
    "Preset",
    "Registry",
    "RegularizerSpec",
    "SamplingCensus",
    "UnknownNameError",
    "Variant",
    "WeightSpec",
    "aggregate",
    "applicable_fields",
    "compute_advantages",
    "diff",
    "dpo_loss",
    "flatten",
    "get_estimator",
    "get_preset",
    "group_stats",
    "kl_estimate",
    "loss_weights",
    "minibatches",
    "overlong_filter_mask",
    "overlong_penalty",
    "policy_loss",
    "preset_names",
    "process_logits",
    "resolve",
    "sft_loss",
    "token_logprobs",
    "whiten",
]
