"""The regularizer blank: KL to a frozen reference (k1/k2/k3) and entropy. Pure torch, ``[B, T]``."""

from __future__ import annotations

import torch


def kl_estimate(
    logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str, clamp: float = 20.0
) -> torch.Tensor:
    """Per-token KL estimate with d = log pi - log pi_ref (samples from pi). ``[B, T]``.

    k1 = d (unbiased, can be negative); k2 = d^2/2 (gradient: reverse KL);
    k3 = exp(-d) - 1 + d (unbiased, >= 0; gradient: forward KL), clamped to 10 as in verl.
    """

    d = (logp - ref_logp).clamp(-clamp, clamp)
    if estimator == "k1":
        return d
    if estimator == "k2":
        return 0.5 * d * d
    if estimator == "k3":
        return (torch.exp(-d) - 1.0 + d).clamp(max=10.0)
    from .presets import UnknownNameError

    raise UnknownNameError("KL estimator", estimator, ["k1", "k2", "k3"])
