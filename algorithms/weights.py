"""The weight blank: importance ratio, its level, and its trust region. Pure torch.

Shapes: ``[B, T]`` per-token log-probs and masks, ``[B, T]`` advantages.
Every surrogate here returns the per-token loss ``[B, T]`` (to be minimized);
aggregation (the Z blank) is applied afterwards with :mod:`sixblanks.algorithms.normalization`.

Two registries dispatch ``weight.ratio`` and ``weight.trust_region`` (see
:mod:`sixblanks.algorithms.registry`):

- ``RATIOS[name](logp, old_logp, adv, mask, **fields) -> (ratio [B, T], adv [B, T])``: the ratio
  and the advantage it multiplies (the sequence form needs one advantage per sequence).
- ``TRUST_REGIONS[name](ratio, adv, **fields) -> (loss [B, T], clipped [B, T])``: the per-token
  surrogate loss and the indicator that the clipped branch is active (0 without a clip).
"""

from __future__ import annotations

import torch

from .registry import Registry

RATIOS = Registry("ratio", inputs=("logp", "old_logp", "adv", "mask"))
"""weight.ratio -> the importance ratio, at its level."""

TRUST_REGIONS = Registry("trust region", inputs=("ratio", "adv"))
"""weight.trust_region -> the surrogate that bounds the update."""


def log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, clamp: float = 20.0) -> torch.Tensor:
    """log r = log pi - log pi_old, clamped to ±clamp before any exp. ``[B, T]``."""

    return (logp - old_logp.detach()).clamp(-clamp, clamp)


def token_ratio(logp, old_logp, mask=None, clamp: float = 20.0) -> torch.Tensor:
    """r_t = pi(x_t)/pi_old(x_t). ``[B, T]``."""

    return torch.exp(log_ratio(logp, old_logp, clamp))


def self_ratio(logp: torch.Tensor) -> torch.Tensor:
    """exp(log pi - sg[log pi]): value 1, gradient ∇log pi (w = 1, on-policy REINFORCE). ``[B, T]``."""

    return torch.exp(logp - logp.detach())


def sequence_log_ratio(logp, old_logp, mask, clamp: float = 20.0) -> torch.Tensor:
    """GSPO: log s_i = mean_t log r_{i,t} over the sequence's trained tokens. Returns ``[B]``."""

    m = mask.to(logp.dtype)
    lr = (logp - old_logp.detach()) * m
    return (lr.sum(1) / m.sum(1).clamp(min=1.0)).clamp(-clamp, clamp)


def sequence_ratio(logp, old_logp, mask, clamp: float = 10.0) -> torch.Tensor:
    """GSPO s_i broadcast to tokens: ``[B, T]`` (same value on every token of row i)."""

    s = torch.exp(sequence_log_ratio(logp, old_logp, mask, clamp))
    return s[:, None].expand_as(logp)


def gspo_token_ratio(logp, old_logp, mask, clamp: float = 10.0) -> torch.Tensor:
    """GSPO-token: s_{i,t} = sg[s_i] · pi(x_t)/sg[pi(x_t)]: value s_i, gradient s_i ∇log pi(x_t). ``[B, T]``."""

    log_s = sequence_log_ratio(logp, old_logp, mask, clamp).detach()
    return torch.exp(log_s[:, None] + logp - logp.detach())


KL_STOP = ("weight.target_kl",)
"""With a ratio to pi_old, the training loop's minibatch routine stops the epochs at a target KL."""


@RATIOS.register("none")
def _no_ratio(logp, old_logp, adv, mask):
    """w = 1: on-policy REINFORCE, no ratio to pi_old."""

    return self_ratio(logp), adv


@RATIOS.register("token", reads=("weight.log_ratio_clamp",), applies=KL_STOP)
def _token_ratio(logp, old_logp, adv, mask, log_ratio_clamp):
    """r_t per token."""

    return token_ratio(logp, old_logp, clamp=log_ratio_clamp), adv


@RATIOS.register("sequence", reads=("weight.log_ratio_clamp",), applies=KL_STOP)
def _sequence_ratio(logp, old_logp, adv, mask, log_ratio_clamp):
    """GSPO s_i on every token, with one advantage per sequence: the mean over its trained tokens."""

    m = mask.to(logp.dtype)
    ratio = sequence_ratio(logp, old_logp, mask, clamp=log_ratio_clamp)
    return ratio, ((adv * m).sum(1) / m.sum(1).clamp(min=1.0))[:, None].expand_as(adv)


@RATIOS.register("gspo_token", reads=("weight.log_ratio_clamp",), applies=KL_STOP)
def _gspo_token_ratio(logp, old_logp, adv, mask, log_ratio_clamp):
    """GSPO-token s_{i,t}, with the token-level advantage."""

    return gspo_token_ratio(logp, old_logp, mask, clamp=log_ratio_clamp), adv


@RATIOS.register(
    "behavior",
    inputs=("logp", "behavior_logp", "adv", "mask"),
    reads=("weight.log_ratio_clamp",),
)
def _behavior_ratio(logp, behavior_logp, adv, mask, log_ratio_clamp):
    """rho_t = pi_theta / pi_rollout per token, against the rollout engine's log-probs (no pi_old):
    SAO's DIS ratio."""

    return token_ratio(logp, behavior_logp, clamp=log_ratio_clamp), adv


@TRUST_REGIONS.register("none")
def _no_trust_region(ratio, adv):
    """l = -A r."""

    return -adv * ratio, torch.zeros_like(ratio)


@TRUST_REGIONS.register("clip", reads=("weight.eps_low", "weight.eps_high", "weight.dual_clip_c"))
def clip_surrogate(
    ratio: torch.Tensor,
    adv: torch.Tensor,
    eps_low: float,
    eps_high: float,
    dual_clip_c: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO clip: l = max(-A r, -A clip(r, 1-eps_low, 1+eps_high)); dual clip caps l at -c·A for A < 0.

    Returns (per-token loss ``[B, T]``, clipped indicator ``[B, T]`` (the clipped branch is active,
    so the token passes no gradient)).
    """

    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    loss = torch.maximum(unclipped, clipped)
    is_clipped = (clipped > unclipped).float()
    if dual_clip_c is not None:
        cap = -adv * dual_clip_c
        dual = (adv < 0) & (loss > cap)
        loss = torch.where(dual, cap, loss)
        is_clipped = torch.where(dual, torch.ones_like(is_clipped), is_clipped)
    return loss, is_clipped


def sapo_surrogate(
    ratio: torch.Tensor, adv: torch.Tensor, tau_pos: float, tau_neg: float
) -> torch.Tensor:
    """SAPO soft gate: l = -f(r)·A, f(r) = (4/tau) sigmoid(tau (r - 1)); tau = tau_pos if A > 0 else tau_neg.

    The gradient weight ∂f/∂log r = 4 p (1 - p) r with p = sigmoid(tau (r - 1)) equals 1 at r = 1.
    """

    tau = torch.where(adv > 0, torch.full_like(adv, tau_pos), torch.full_like(adv, tau_neg))
    f = (4.0 / tau) * torch.sigmoid(tau * (ratio - 1.0))
    return -f * adv


SAPO_GATED_BELOW = 0.5
"""SAPO's clip fraction: the share of tokens whose soft gate passes less than this share of the
gradient (weight 4 p (1 - p) r < 0.5), its counterpart of a hard clip's zero gradient."""


def sapo_gate_weight(ratio: torch.Tensor, adv: torch.Tensor, tau_pos: float, tau_neg: float):
    """The gradient weight of SAPO's gate per token, ``4 p (1 - p) r``; 1 at r = 1. ``[B, T]``."""

    tau = torch.where(adv > 0, torch.full_like(adv, tau_pos), torch.full_like(adv, tau_neg))
    p = torch.sigmoid(tau * (ratio - 1.0))
    return 4.0 * p * (1.0 - p) * ratio


@TRUST_REGIONS.register("sapo", reads=("weight.tau_pos", "weight.tau_neg"))
def _sapo(ratio, adv, tau_pos, tau_neg):
    """SAPO soft gate; nothing is clipped hard: the indicator marks the tokens whose gate passes
    less than half the gradient (:data:`SAPO_GATED_BELOW`)."""

    with torch.no_grad():
        gated = sapo_gate_weight(ratio.detach(), adv, tau_pos, tau_neg) < SAPO_GATED_BELOW
    return sapo_surrogate(ratio, adv, tau_pos, tau_neg), gated.to(ratio.dtype)


@TRUST_REGIONS.register("dis", reads=("weight.eps_low", "weight.eps_high"))
def dis_surrogate(ratio, adv, eps_low, eps_high):
    """SAO's DIS: a token passes only when 1 - eps_low < rho < 1 + eps_high (strict),
    both tails masked for either advantage sign. l = -1[band] rho A, whose gradient is
    1[band] rho A grad log pi = sg[f(rho)] A grad log pi. ``clipped``: the tokens outside the band
    (counted, and discarded as reason ``dis`` by the trainer)."""

    r = ratio.detach()
    keep = (r > 1.0 - eps_low) & (r < 1.0 + eps_high)
    return -adv * ratio * keep.to(ratio.dtype), (~keep).to(ratio.dtype)


def truncated_is_weight(
    old_logp: torch.Tensor, behavior_logp: torch.Tensor, cap: float
) -> torch.Tensor:
    """TIS: min(pi_old / pi_behavior, C), detached. ``[B, T]``."""

    return torch.exp((old_logp - behavior_logp).detach().clamp(max=20.0)).clamp(max=cap)


MISMATCH_RATIO_BAND = (0.5, 2.0)


def mismatch_stats(
    train_logp: torch.Tensor, engine_logp: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """Trainer-recomputed vs rollout-engine log-probs on the sampled tokens.

    Args:
        train_logp: ``[B, T]`` log pi_train(a_t) recomputed by the trainer with the rollout weights.
        engine_logp: ``[B, T]`` log pi_roll(a_t) reported by the engine that sampled a_t.
        mask: ``[B, T]`` 1 on sampled (action) tokens.

    Returns (empty when no token is masked in) with d_t = log pi_train - log pi_roll:
        ``mismatch.logp_abs_mean`` / ``mismatch.logp_abs_max``: mean / max |d_t|;
        ``mismatch.kl``: k3 estimate of KL(pi_roll || pi_train), mean of e^d - 1 - d (tokens are
        samples of pi_roll, so it is unbiased and >= 0);
        ``mismatch.ratio_out_frac``: share of tokens whose ratio e^d leaves [0.5, 2].
    """

    m = mask > 0
    if not bool(m.any()):
        return {}
    d = (train_logp.double() - engine_logp.double())[m]
    ratio = d.exp()
    lo, hi = MISMATCH_RATIO_BAND
    return {
        "mismatch.logp_abs_mean": float(d.abs().mean()),
        "mismatch.logp_abs_max": float(d.abs().max()),
        "mismatch.kl": float((ratio - 1.0 - d).mean()),
        "mismatch.ratio_out_frac": float(((ratio < lo) | (ratio > hi)).double().mean()),
    }
