"""sixblanks.algorithms: the six blanks of the policy-gradient template, named presets, losses.

Pure torch, no I/O, no imports from the rest of the project. Public API::

    from sixblanks.algorithms import resolve, compute_advantages, loss_weights, policy_loss
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
from .logprobs import process_logits, token_logprobs
from .loss import compute_advantages, dpo_loss, policy_loss, sft_loss
from .normalization import aggregate, loss_weights
from .presets import PRESETS, Preset, UnknownNameError, diff, get_preset, preset_names, resolve
from .regularizers import kl_estimate

__all__ = [
    "ESTIMATORS",
    "PRESETS",
    "AdvantageSpec",
    "Blanks",
    "DataSpec",
    "DynamicSampler",
    "MaskSpec",
    "NormalizationSpec",
    "Preset",
    "RegularizerSpec",
    "SamplingCensus",
    "UnknownNameError",
    "WeightSpec",
    "aggregate",
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
