"""Advantage estimators (the A blank). Pure torch; statistics in float64.

Shapes: ``B`` samples, ``T`` tokens, ``K`` turns. Outcome rewards are ``[B]``,
masks ``[B, T]`` (1 on trained action tokens). Every estimator returns
token-level advantages ``[B, T]`` (zero where the mask is zero), detached.

``ESTIMATORS`` registers each estimator with the tensors it takes (``inputs``, named as in
:data:`INPUTS`) and the ``advantage.*`` fields it reads;
:func:`sixblanks.algorithms.loss.compute_advantages` passes exactly those, so an estimator cannot
silently ignore a field (none takes ``**kwargs``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .advantage_registry import (
    ESTIMATORS,
    INPUTS,
    INPUTS_R,
    INPUTS_RG,
    broadcast,
    group_stats,
)
from .critic import gae
from .registry import Variant

__all__ = [
    "ESTIMATORS",
    "INPUTS",
    "TOKEN_LEVEL",
    "broadcast",
    "get_estimator",
    "group_stats",
    "anchor_groups",
    "gigpo",
    "hierarchical",
    "prime",
    "prm",
    "to_tokens",
    "turn_return",
    "turn_returns",
    "whiten",
]


@ESTIMATORS.register("return", inputs=INPUTS_R)
def outcome_return(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A_i = R_i (no baseline)."""

    return broadcast(rewards, mask)


@ESTIMATORS.register("unit", inputs=INPUTS_R)
def unit(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A = 1 on every trained token (SFT in template form)."""

    return mask.float().clone()


@ESTIMATORS.register("batch_mean", inputs=INPUTS_RG)
def batch_mean(
    rewards: torch.Tensor, mask: torch.Tensor, group_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """A_i = R_i - mean R, the mean taken over the sample's group when groups exist, else the batch.

    The mean includes the sample itself (shrinks the gradient by (N-1)/N; see ``leave_one_out``).
    """

    if group_ids is None or torch.unique(group_ids).numel() == group_ids.numel():
        return broadcast(rewards.double() - rewards.double().mean(), mask)
    mean, _, _, _ = group_stats(rewards, group_ids)
    return broadcast(rewards.double() - mean, mask)


@ESTIMATORS.register("loo", inputs=INPUTS_RG, reads=("advantage.singleton",))
def leave_one_out(
    rewards: torch.Tensor, mask: torch.Tensor, group_ids: torch.Tensor, singleton: str = "zero"
) -> torch.Tensor:
    """RLOO: A_i = R_i - (1/(N-1)) sum_{j != i} R_j within the group.

    ``singleton``: rule for a group of one: "zero" (A = 0) or "raw" (A = R).
    """

    r = rewards.double()
    mean, _, count, _ = group_stats(r, group_ids)
    total = mean * count
    loo = torch.where(count > 1, (total - r) / (count - 1).clamp(min=1), torch.zeros_like(r))
    adv = r - loo
    adv = torch.where(count > 1, adv, r if singleton == "raw" else torch.zeros_like(r))
    return broadcast(adv, mask)


@ESTIMATORS.register(
    "group_norm",
    inputs=INPUTS_RG,
    reads=("advantage.std_ddof", "advantage.std_eps", "advantage.singleton"),
)
def group_norm(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor,
    std_ddof: int = 1,
    std_eps: float = 1e-6,
    singleton: str = "zero",
) -> torch.Tensor:
    """GRPO: A_i = (R_i - mean_g) / (std_g + eps), in float64.

    A group whose rewards are all equal gets exactly A = 0 (no float32 one-ulp noise).
    ``singleton``: "zero" (A = 0) or "raw" (A = R, verl's mean 0 / std 1 rule).
    """

    r = rewards.double()
    mean, std, count, equal = group_stats(r, group_ids, std_ddof)
    adv = (r - mean) / (std + std_eps)
    adv = torch.where(equal, torch.zeros_like(adv), adv)
    if singleton == "raw":
        adv = torch.where(count == 1, r, adv)
    return broadcast(adv, mask)


@ESTIMATORS.register("group_mean", inputs=INPUTS_RG, reads=("advantage.singleton",))
def group_mean(
    rewards: torch.Tensor, mask: torch.Tensor, group_ids: torch.Tensor, singleton: str = "zero"
):
    """Dr. GRPO: A_i = R_i - mean_g (no std)."""

    r = rewards.double()
    mean, _, count, equal = group_stats(r, group_ids)
    adv = torch.where(equal, torch.zeros_like(r), r - mean)
    if singleton == "raw":
        adv = torch.where(count == 1, r, adv)
    return broadcast(adv, mask)


@ESTIMATORS.register(
    "group_mean_batch_std",
    inputs=INPUTS_RG,
    reads=("advantage.batch_std", "advantage.std_ddof", "advantage.std_eps", "advantage.singleton"),
)
def group_mean_batch_std(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor,
    batch_std: str = "rewards",
    std_ddof: int = 1,
    std_eps: float = 1e-6,
    singleton: str = "zero",
) -> torch.Tensor:
    """Lite PPO: A_i = (R_i - mean_g) / (std_batch + eps), a group baseline with one batch-level
    scale (small groups' stds no longer blow up their advantages).

    ``batch_std``: ``rewards``: the std of the raw rewards about the batch mean (ROLL, the Lite PPO
    authors' code; TRL ``scale_rewards="batch"``); ``centered``: the std of the group-centred values
    R_i - mean_g (AReaL's group/batch norm; ScaleRL's Â/std(Â)). Both with ``std_ddof``. A group
    whose rewards are all equal gets A = 0; ``singleton`` as in ``group_norm``.
    ``[B]`` -> ``[B, T]``.
    """

    r = rewards.double()
    mean, _, count, equal = group_stats(r, group_ids)
    centred = torch.where(equal, torch.zeros_like(r), r - mean)
    x = r if batch_std == "rewards" else centred
    n = x.numel()
    std = x.std(correction=std_ddof) if n > std_ddof else torch.zeros((), dtype=torch.float64)
    adv = centred / (std + std_eps)
    if singleton == "raw":
        adv = torch.where(count == 1, r, adv)
    return broadcast(adv, mask)


def whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mu) / sqrt(var + eps) over the valid tokens, ddof 0 (OpenRLHF); zero off the mask."""

    m = mask.double()
    x = values.double()
    n = m.sum().clamp(min=1.0)
    mu = (x * m).sum() / n
    var = (((x - mu) ** 2) * m).sum() / n
    return (((x - mu) * torch.rsqrt(var + eps)) * m).float()


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    """Index ``[B]`` of the last trained token of each row (0 for an empty row)."""

    T = mask.shape[1]
    pos = torch.arange(T, device=mask.device).expand_as(mask)
    return torch.where(mask > 0, pos, torch.zeros_like(pos)).max(dim=1).values


def token_returns(
    token_rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0
) -> torch.Tensor:
    """G_t = sum_{s >= t} gamma^(s-t) r_s over action tokens (gamma counts action tokens).

    Args:
        token_rewards: ``[B, T]``; mask: ``[B, T]``. Returns ``[B, T]`` (0 off the mask).
    """

    r = token_rewards.double() * mask.double()
    out = torch.zeros_like(r)
    running = torch.zeros(r.shape[0], dtype=torch.float64, device=r.device)
    for t in range(r.shape[1] - 1, -1, -1):
        m = mask[:, t] > 0
        running = torch.where(m, r[:, t] + gamma * running, running)
        out[:, t] = torch.where(m, running, torch.zeros_like(running))
    return out


@ESTIMATORS.register(
    "reinforce_pp",
    inputs=("rewards", "mask", "token_penalty"),
    reads=("advantage.gamma", "advantage.whiten_eps"),
)
def reinforce_pp(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    token_penalty: torch.Tensor | None = None,
    gamma: float = 1.0,
    whiten_eps: float = 1e-8,
) -> torch.Tensor:
    """REINFORCE++: r~_t = 1[t = last]·R - penalty_t; G_t = reward-to-go; whitened over all valid
    tokens.

    Args:
        token_penalty: ``[B, T]`` per-token KL penalty, already times beta (KL in the reward).
    """

    r = torch.zeros_like(mask, dtype=torch.float64)
    last = last_token_index(mask)
    has = mask.sum(1) > 0
    r[torch.arange(r.shape[0])[has], last[has]] = rewards.double()[has]
    if token_penalty is not None:
        r = r - token_penalty.double()
    return whiten(token_returns(r, mask, gamma), mask, whiten_eps)


@ESTIMATORS.register(
    "reinforce_pp_baseline",
    inputs=INPUTS_RG,
    reads=("advantage.whiten_eps", "advantage.singleton"),
)
def reinforce_pp_baseline(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor,
    whiten_eps: float = 1e-8,
    singleton: str = "zero",
) -> torch.Tensor:
    """REINFORCE++-baseline: A' = R - mean_group R (no std), broadcast, then whitened over valid
    tokens.

    ``singleton``: rule for a group of one, applied to A' before whitening: "zero" (A' = 0) or
    "raw" (A' = R).
    """

    mean, _, count, equal = group_stats(rewards, group_ids)
    a = torch.where(equal, torch.zeros_like(mean), rewards.double() - mean)
    if singleton == "raw":
        a = torch.where(count == 1, rewards.double(), a)
    return whiten(broadcast(a, mask), mask, whiten_eps)


@ESTIMATORS.register("remax", inputs=("rewards", "mask", "baseline_rewards"))
def remax(
    rewards: torch.Tensor, mask: torch.Tensor, baseline_rewards: torch.Tensor
) -> torch.Tensor:
    """ReMax: A_i = R_i - R(greedy_i), greedy_i the greedy decode of the same instance and seed."""

    return broadcast(rewards.double() - baseline_rewards.double(), mask)


# the turn- and step-level estimators register after the outcome ones (the registry lists names in
# the order they were registered)
from .step_advantages import (  # noqa: E402
    anchor_groups,
    gigpo,
    hierarchical,
    prime,
    prm,
    to_tokens,
    turn_return,
    turn_returns,
)

ESTIMATORS.add(
    Variant(
        "gae",
        gae,
        inputs=("token_rewards", "values", "mask", "bootstrap"),
        reads=("advantage.gamma", "advantage.lam"),
        # the actor-critic objective runs GAE: it reads the value model's spec
        applies=("advantage.critic",),
    )
)
"""gae (:func:`sixblanks.algorithms.critic.gae`) needs a value model and returns (advantages,
returns); the harness's critic trainer runs it, :func:`compute_advantages` refuses it."""

TOKEN_LEVEL = frozenset(
    name
    for name, est in ESTIMATORS.items()
    if {"token_penalty", "token_rewards"} & set(est.inputs or ())
)
"""Estimators that take KL-in-reward per token; the others subtract it from the sequence reward."""


def get_estimator(name: str) -> Callable[..., torch.Tensor]:
    """Estimator ``name``'s function; raises :class:`UnknownNameError` listing the valid names."""

    return ESTIMATORS[name].fn
