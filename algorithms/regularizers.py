"""The regularizer blank: KL to a frozen reference (k1/k2/k3) and entropy. Pure torch, ``[B, T]``.

``KL_ESTIMATORS[name](d)`` maps the per-token log-ratio d = log pi - log pi_ref ``[B, T]`` to the
per-token estimate ``[B, T]``; it dispatches ``regularizer.reward_kl_estimator`` and
``regularizer.loss_kl_estimator``.
"""

from __future__ import annotations

import torch

from .registry import Registry

KL_ESTIMATORS = Registry("KL estimator", inputs=("d",))
"""k1 / k2 / k3 -> the per-token KL estimate from d = log pi - log pi_ref."""


@KL_ESTIMATORS.register("k1")
def k1(d: torch.Tensor) -> torch.Tensor:
    """k1 = d: unbiased, can be negative; in the loss its expected gradient is 0."""

    return d


@KL_ESTIMATORS.register("k2")
def k2(d: torch.Tensor) -> torch.Tensor:
    """k2 = d^2/2: biased, >= 0; in the loss its gradient is the reverse KL's."""

    return 0.5 * d * d


LOG_RATIO_CLAMP = 20.0
"""|d| beyond which k3's exponential is not evaluated (as verl's low_var_kl)."""


@KL_ESTIMATORS.register("k3")
def k3(d: torch.Tensor) -> torch.Tensor:
    """k3 = exp(-d) - 1 + d with d clamped to +-20 (exp(20) is already far past the cap) and the
    value to 10, as in verl: unbiased, >= 0; in the loss its gradient is the forward KL's."""

    d = d.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return (torch.exp(-d) - 1.0 + d).clamp(max=10.0)


@KL_ESTIMATORS.register("k3+")
def k3_straight_through(d: torch.Tensor) -> torch.Tensor:
    """Straight-through k3 (verl's ``low_var_kl+``/``k3+``): k2 - sg(k2) + sg(k3), whose value is
    k3's (unbiased, low variance, >= 0) and whose gradient is k2's, d = log pi - log pi_ref per
    token: the unbiased gradient of the reverse KL(pi || pi_ref), where plain k3's gradient
    (1 - e^{-d}) is the forward KL's. ``d``: the unclamped log-ratio ``[B, T]``; only the value
    part (k3) clamps it, the gradient part keeps it whole, so the gradient is d itself however far
    the policy has moved (a clamped d would give 0 exactly where the penalty matters most).
    ``[B, T]``."""

    two = k2(d)
    return two - two.detach() + k3(d).detach()


def kl_estimate(
    logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str, clamp: float = LOG_RATIO_CLAMP
) -> torch.Tensor:
    """Per-token KL estimate with d = log pi - log pi_ref (samples from pi). ``[B, T]``.

    k1 = d (unbiased, can be negative); k2 = d^2/2 (gradient: reverse KL);
    k3 = exp(-d) - 1 + d (unbiased, >= 0; gradient: forward KL), clamped to 10 as in verl;
    k3+ = k3's value with k2's gradient (straight-through).
    d is clamped to +-``clamp`` before the estimate, except in k3+'s gradient part (k2's gradient
    is d itself, unbounded as in verl). An unknown ``estimator`` raises
    :class:`~sixblanks.algorithms.errors.UnknownNameError`.
    """

    d = logp - ref_logp
    if estimator == "k3+":  # its value clamps as k3's; its gradient (k2's) is d unclamped
        return k3_straight_through(d)
    return KL_ESTIMATORS[estimator](d.clamp(-clamp, clamp))
