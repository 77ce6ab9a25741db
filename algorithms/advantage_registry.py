"""The advantage estimators' registry and what every estimator shares: the tensors they can be
given (:data:`INPUTS`), group statistics and the broadcast of per-sample values onto tokens.
Shapes: ``B`` samples, ``T`` tokens. Pure torch; statistics in float64."""

from __future__ import annotations

import torch

from .registry import Registry

ESTIMATORS = Registry("advantage estimator")
"""Name -> :class:`~sixblanks.algorithms.registry.Variant`: the A blank's estimators."""

INPUTS: dict[str, str] = {
    "rewards": "[B] outcome rewards (after shaping and sequence-level KL in the reward)",
    "mask": "[B, T] action mask after the data filters",
    "group_ids": "[B] prompt group of each sample (one group per sample when not given)",
    "token_penalty": (
        "[B, T] KL-in-reward penalty per token, times beta (None: no KL in the reward)"
    ),
    "baseline_rewards": "[B] rewards of the greedy rollouts (remax)",
    "turn_rewards": "[B, K] per-turn rewards",
    "turn_ids": "[B, T] environment turn of each action token, -1 elsewhere",
    "state_keys": "[B, K] the environment's state key before each turn (anchor states, GiGPO)",
    "levels": (
        "[B, K] the level of each turn from the environment: 0 high (plan), 1 low (execute), "
        "-1 none"
    ),
    "step_labels": (
        "[B, K] the environment's label of each step (1 right / subgoal done, 0 not, NaN none)"
    ),
    "step_scores": (
        "[B, K] a process reward model's score of each step (NaN past the episode's turns)"
    ),
    "process_rewards": "[B, T] token-level process rewards (PRIME: beta log(pi_phi / pi_ref))",
}
"""The tensors ``compute_advantages`` can give an estimator, by name."""

INPUTS_R = ("rewards", "mask")
INPUTS_RG = ("rewards", "mask", "group_ids")


def group_index(group_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense group index ``[B]`` in 0..G-1 and the number of groups."""

    uniq, inv = torch.unique(group_ids, return_inverse=True)
    return inv, int(uniq.numel())


def group_stats(values: torch.Tensor, group_ids: torch.Tensor, ddof: int = 1):
    """Per-sample group mean, std (with ``ddof``), count and an all-equal flag, all ``[B]`` float64.

    A group of one has std 0 (or NaN-free 0 when ddof would divide by zero).
    """

    v = values.double()
    inv, n_groups = group_index(group_ids)
    count = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, inv, torch.ones_like(v))
    total = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, inv, v)
    mean = total / count
    dev2 = (v - mean[inv]) ** 2
    ss = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, inv, dev2)
    denom = (count - ddof).clamp(min=1.0)
    std = torch.where(count > ddof, (ss / denom).sqrt(), torch.zeros_like(ss))
    vmax = torch.full((n_groups,), -torch.inf, dtype=torch.float64).scatter_reduce(
        0, inv, v, "amax"
    )
    vmin = torch.full((n_groups,), torch.inf, dtype=torch.float64).scatter_reduce(0, inv, v, "amin")
    equal = vmax == vmin
    return mean[inv], std[inv], count[inv], equal[inv]


def broadcast(per_sample: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B]`` -> ``[B, T]`` on the mask, float32."""

    return (per_sample.double()[:, None] * mask.double()).float()
