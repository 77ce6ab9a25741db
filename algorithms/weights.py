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

import math

import torch

from .offpolicy import quantiles
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
    """exp(log pi - sg[log pi]): value 1, gradient ∇log pi (w = 1, REINFORCE). ``[B, T]``."""

    return torch.exp(logp - logp.detach())


def sequence_log_ratio(logp, old_logp, mask, clamp: float = 20.0) -> torch.Tensor:
    """GSPO: log s_i = mean_t log r_{i,t} over the sequence's trained tokens. Returns ``[B]``."""

    m = mask.to(logp.dtype)
    lr = (logp - old_logp.detach()) * m
    return (lr.sum(1) / m.sum(1).clamp(min=1.0)).clamp(-clamp, clamp)


def segment_mean(x: torch.Tensor, mask: torch.Tensor, turn_ids: torch.Tensor) -> torch.Tensor:
    """The mean of ``x`` over each (row, turn) segment's masked tokens, on every token of the
    segment: ``[B, T]`` (0 on a segment without masked tokens). ``turn_ids [B, T]``: the turn of
    each token (-1 outside any turn)."""

    B, T = x.shape
    span = int(turn_ids.max()) + 2 if turn_ids.numel() else 1
    key = (torch.arange(B, device=x.device)[:, None] * span + turn_ids.long() + 1).flatten()
    m = mask.to(x.dtype).flatten()
    n_keys = B * span
    sums = torch.zeros(n_keys, dtype=x.dtype, device=x.device).index_add(0, key, x.flatten() * m)
    counts = torch.zeros(n_keys, dtype=x.dtype, device=x.device).index_add(0, key, m)
    return (sums / counts.clamp(min=1.0))[key].view(B, T)


def turn_log_ratio(logp, old_logp, mask, turn_ids, clamp: float = 20.0) -> torch.Tensor:
    """A per-turn GSPO log-ratio: the mean of log r over the tokens of each token's own turn,
    ``[B, T]`` (a multi-turn episode's turns as separate sequences)."""

    d = logp - old_logp.detach()
    return segment_mean(d, mask, turn_ids).clamp(-clamp, clamp)


def sequence_ratio(logp, old_logp, mask, clamp: float = 10.0, turn_ids=None) -> torch.Tensor:
    """GSPO s_i broadcast to tokens: ``[B, T]`` (same value on every token of row i; with
    ``turn_ids [B, T]``, on every token of each turn)."""

    if turn_ids is not None:
        return torch.exp(turn_log_ratio(logp, old_logp, mask, turn_ids, clamp))
    s = torch.exp(sequence_log_ratio(logp, old_logp, mask, clamp))
    return s[:, None].expand_as(logp)


def gspo_token_ratio(logp, old_logp, mask, clamp: float = 10.0, turn_ids=None) -> torch.Tensor:
    """GSPO-token: s_{i,t} = sg[s_i] · pi(x_t)/sg[pi(x_t)]: value s_i, gradient s_i ∇log pi(x_t).
    ``[B, T]``; with ``turn_ids [B, T]``, s is each turn's own."""

    if turn_ids is not None:
        log_s = turn_log_ratio(logp, old_logp, mask, turn_ids, clamp).detach()
        return torch.exp(log_s + logp - logp.detach())
    log_s = sequence_log_ratio(logp, old_logp, mask, clamp).detach()
    return torch.exp(log_s[:, None] + logp - logp.detach())


def _turns(sequence: str, turn_ids):
    """The per-token turn ids when a sequence ratio is per turn, else None (per trajectory)."""

    if sequence == "trajectory":
        return None
    if turn_ids is None:
        raise ValueError("weight.sequence 'turn' needs the turn of each token (turn_ids)")
    return turn_ids


KL_STOP = ("weight.target_kl",)
"""With a ratio to pi_old, the training loop's minibatch routine stops the epochs at a target KL."""

TO_OLD = (*KL_STOP, "weight.tis_cap", "weight.old_policy")
"""A ratio to pi_old also takes truncated IS against the rollout, and pi_old may be the rollout's
(the bypass form); the ratio 'behavior' is already against the rollout and takes neither."""


@RATIOS.register("none", applies=("weight.tis_cap",))
def _no_ratio(logp, old_logp, adv, mask):
    """w = 1: on-policy REINFORCE, no ratio to pi_old."""

    return self_ratio(logp), adv


@RATIOS.register("token", reads=("weight.log_ratio_clamp",), applies=TO_OLD)
def _token_ratio(logp, old_logp, adv, mask, log_ratio_clamp):
    """r_t per token."""

    return token_ratio(logp, old_logp, clamp=log_ratio_clamp), adv


SEQUENCE_VARIANT = {
    "inputs": ("logp", "old_logp", "adv", "mask", "turn_ids"),
    "reads": ("weight.log_ratio_clamp", "weight.sequence"),
    "applies": (*TO_OLD, "weight.clip_scale"),
}
"""What the sequence ratios take: the turn of each token (a per-turn sequence), and the fields."""


@RATIOS.register("sequence", **SEQUENCE_VARIANT)
def _sequence_ratio(logp, old_logp, adv, mask, turn_ids, log_ratio_clamp, sequence):
    """GSPO s_i on every token, with one advantage per sequence: the mean over its trained tokens
    (per turn with ``weight.sequence: turn``)."""

    turns = _turns(sequence, turn_ids)
    ratio = sequence_ratio(logp, old_logp, mask, clamp=log_ratio_clamp, turn_ids=turns)
    if turns is not None:
        return ratio, segment_mean(adv, mask, turns)
    m = mask.to(logp.dtype)
    return ratio, ((adv * m).sum(1) / m.sum(1).clamp(min=1.0))[:, None].expand_as(adv)


@RATIOS.register("gspo_token", **SEQUENCE_VARIANT)
def _gspo_token_ratio(logp, old_logp, adv, mask, turn_ids, log_ratio_clamp, sequence):
    """GSPO-token s_{i,t}, with the token-level advantage (s per turn with ``weight.sequence:
    turn``)."""

    turns = _turns(sequence, turn_ids)
    return gspo_token_ratio(logp, old_logp, mask, clamp=log_ratio_clamp, turn_ids=turns), adv


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
    """PPO clip: l = max(-A r, -A clip(r, 1-eps_low, 1+eps_high)); dual clip caps l at -c·A where
    A < 0.

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
    """SAPO soft gate: l = -f(r)·A, f(r) = (4/tau) sigmoid(tau (r - 1)); tau is tau_pos where A > 0,
    else tau_neg.

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


TR_INPUTS = ("ratio", "adv", "logp", "anchor_logp")
"""The trust regions that weigh log pi directly (CISPO, DPPO) take it, and the log-probs of the
ratio's denominator (the anchor: pi_old, or pi_rollout for ratio 'behavior')."""


@TRUST_REGIONS.register(
    "cispo", inputs=("ratio", "adv", "logp"), reads=("weight.eps_low", "weight.eps_high")
)
def cispo_surrogate(ratio, adv, logp, eps_low, eps_high):
    """CISPO (MiniMax-M1): l = -sg(clip(r, 1 - eps_low, 1 + eps_high)) A log pi. The weight is
    clipped under a stop-gradient instead of the token being dropped, so every token keeps a
    gradient, -clip(r) A grad log pi. The band's lower edge 1 - eps_low <= 0 (eps_low >= 1) leaves
    only the upper cap (the [0, 5] of SkyRL, AReaL, ART and ScaleRL is eps_low 1, eps_high 4).
    ``ratio``, ``adv``, ``logp``: ``[B, T]``. ``clipped``: the tokens whose weight was clipped."""

    r = ratio.detach()
    w = r.clamp(min=max(1.0 - eps_low, 0.0), max=1.0 + eps_high)
    return -w * adv * logp, (w != r).to(ratio.dtype)


def dppo_keep(logp, anchor_logp, adv, delta_low, delta_high, metric: str) -> torch.Tensor:
    """DPPO's binary trust-region mask ``[B, T]`` (bool, detached) from ``logp``, ``anchor_logp``,
    ``adv`` ``[B, T]``, keyed to the advantage's sign,
    with p = pi(token) and mu = the anchor's probability of it:

    - ``tv``: for A > 0 drop the token when p - mu > delta_high; for A < 0 when p - mu < -delta_low;
    - ``kl``: with KL_B = mu log(mu/p) + (1 - mu) log((1 - mu)/(1 - p)) (1e-8 inside the second log,
      as verl), for A > 0 drop when KL_B > delta_high and p > mu; for A < 0 when KL_B > delta_low
      and p < mu.

    A token moving against its advantage's direction is never dropped (its update is corrective).
    """

    p, mu = torch.exp(logp.detach().double()), torch.exp(anchor_logp.detach().double())
    pos, neg = adv > 0, adv < 0
    if metric == "tv":
        out = (pos & (p - mu > delta_high)) | (neg & (p - mu < -delta_low))
    else:
        kl = mu * torch.log(mu / p) + (1 - mu) * torch.log((1 - mu + 1e-8) / (1 - p + 1e-8))
        out = (pos & (kl > delta_high) & (p > mu)) | (neg & (kl > delta_low) & (p < mu))
    return ~out


def _dppo(metric: str):
    def surrogate(ratio, adv, logp, anchor_logp, eps_low, eps_high, ratio_cap):
        keep = dppo_keep(logp, anchor_logp, adv, eps_low, eps_high, metric)
        w = ratio.detach() if ratio_cap is None else ratio.detach().clamp(max=ratio_cap)
        w = w * keep.to(ratio.dtype)
        return -w * adv * logp, (~keep).to(ratio.dtype)

    surrogate.__name__ = f"dppo_{metric}_surrogate"
    surrogate.__doc__ = (
        f"DPPO binary {metric.upper()} (Rethinking the Trust Region in LLM RL): "
        "l = -A sg(min(r, C)) M log pi, M the binary mask of :func:`dppo_keep` with thresholds "
        "delta_low = eps_low, delta_high = eps_high, anchored on the ratio's denominator (pi_old "
        "for ratio 'token', as verl; pi_rollout for ratio 'behavior', as the authors' Stable-RL, "
        "SkyRL and prime-rl), C = weight.ratio_cap (None: no truncation). ``ratio``, ``adv``, "
        "``logp``, ``anchor_logp``: ``[B, T]``. Returns (per-token loss ``[B, T]``, ``clipped`` "
        "``[B, T]``: the masked tokens)."
    )
    return surrogate


for _metric in ("tv", "kl"):
    TRUST_REGIONS.register(
        f"dppo_{_metric}",
        inputs=TR_INPUTS,
        reads=("weight.eps_low", "weight.eps_high", "weight.ratio_cap"),
    )(_dppo(_metric))


def truncated_is_weight(
    old_logp: torch.Tensor, behavior_logp: torch.Tensor, cap: float
) -> torch.Tensor:
    """TIS: min(pi_old / pi_behavior, C), detached. ``[B, T]``."""

    return torch.exp((old_logp - behavior_logp).detach().clamp(max=20.0)).clamp(max=cap)


def sequence_ratio_counts(
    logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, eps_low: float, eps_high: float
) -> dict[str, float]:
    """How token log-ratios spread within each sequence, as counts that add up over micro-batches.

    With d_t = log pi - log pi_old on a row's n action tokens and its mean d_bar (the log of GSPO's
    sequence ratio):

    - ``seq_count``: rows with an action token;
    - ``seq_logratio_std_sum``: the sum over rows of the std of d_t (ddof 0): SAPO's within-sequence
      dispersion, which a sequence ratio averages away;
    - ``seq_outlier_count``: rows whose sequence ratio e^{d_bar} is outside [1 - eps_low,
      1 + eps_high] but would be inside without its single most extreme token (n >= 2): one outlier
      token pushing a whole sequence out of the band.
    - ``seq_logratio_sum``, ``seq_logratio_sqsum``: the sums over rows of d_bar and d_bar^2, from
      which the spread of the sequence log-ratio across sequences (the scale a sequence-level clip
      acts on) follows: sqrt(sqsum/count - (sum/count)^2).

    ``logp``, ``old_logp``, ``mask``: ``[B, T]`` (detached here).
    """

    m = mask > 0
    n = m.sum(1).double()
    d = torch.where(m, logp.detach().double() - old_logp.detach().double(), 0.0)
    has = n > 0
    mean = d.sum(1) / n.clamp(min=1.0)
    dev = torch.where(m, d - mean[:, None], 0.0)
    std = (dev.pow(2).sum(1) / n.clamp(min=1.0)).sqrt()
    lo = math.log(1.0 - eps_low) if eps_low < 1 else -math.inf
    hi = math.log(1.0 + eps_high)
    outside = (mean < lo) | (mean > hi)
    worst = dev.abs().argmax(1)
    without = (d.sum(1) - d.gather(1, worst[:, None])[:, 0]) / (n - 1).clamp(min=1.0)
    inside_without = (without >= lo) & (without <= hi)
    outlier = has & (n >= 2) & outside & inside_without
    return {
        "seq_count": float(has.sum()),
        "seq_logratio_std_sum": float(std[has].sum()),
        "seq_outlier_count": float(outlier.sum()),
        "seq_logratio_sum": float(mean[has].sum()),
        "seq_logratio_sqsum": float(mean[has].pow(2).sum()),
    }


MISMATCH_RATIO_BAND = (0.5, 2.0)


def mismatch_stats(
    train_logp: torch.Tensor, engine_logp: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """Trainer-recomputed vs rollout-engine log-probs on the sampled tokens, before any
    truncation or masking.

    Args:
        train_logp: ``[B, T]`` log pi_train(a_t) recomputed by the trainer with the rollout weights.
        engine_logp: ``[B, T]`` log pi_roll(a_t) reported by the engine that sampled a_t.
        mask: ``[B, T]`` 1 on sampled (action) tokens.

    Returns (empty when no token is masked in) with d_t = log pi_train - log pi_roll and the
    importance ratio k_t = e^{d_t}:
        ``mismatch.logp_abs_mean`` / ``mismatch.logp_abs_max``: mean / max |d_t|;
        ``mismatch.kl``: k3 estimate of KL(pi_roll || pi_train), mean of e^d - 1 - d (tokens are
        samples of pi_roll, so it is unbiased and >= 0);
        ``mismatch.ratio_out_frac``: share of tokens whose ratio e^d leaves [0.5, 2];
        ``mismatch.ratio_abs_dev``: mean |k_t - 1|;
        ``mismatch.ratio_p1`` / ``_p50`` / ``_p99``: percentiles of k_t;
        ``mismatch.ess``: the normalized effective sample size of the token weights,
        (sum k)^2 / (N sum k^2), 1 when every k is equal;
        ``mismatch.seq_ess``: the same over the sequences' weights prod_t k_t (log-sum clamped to
        ±20), which long sequences drive toward 1/B.
    """

    m = mask > 0
    if not bool(m.any()):
        return {}
    dd = torch.where(m, train_logp.double() - engine_logp.double(), 0.0)
    d = dd[m]
    ratio = d.clamp(-20.0, 20.0).exp()  # a token that far out is outside any band anyway
    lo, hi = MISMATCH_RATIO_BAND
    p1, p50, p99 = quantiles(ratio, (0.01, 0.5, 0.99))
    seq = torch.exp(dd.sum(1)[m.any(1)].clamp(-20.0, 20.0))
    return {
        "mismatch.logp_abs_mean": float(d.abs().mean()),
        "mismatch.logp_abs_max": float(d.abs().max()),
        "mismatch.kl": float((ratio - 1.0 - d.clamp(-20.0, 20.0)).mean()),
        "mismatch.ratio_out_frac": float(((ratio < lo) | (ratio > hi)).double().mean()),
        "mismatch.ratio_abs_dev": float((ratio - 1.0).abs().mean()),
        "mismatch.ratio_p1": p1,
        "mismatch.ratio_p50": p50,
        "mismatch.ratio_p99": p99,
        "mismatch.ess": float(ratio.sum() ** 2 / (ratio.numel() * (ratio**2).sum())),
        "mismatch.seq_ess": float(seq.sum() ** 2 / (seq.numel() * (seq**2).sum())),
    }
