"""Off-policy corrections for asynchronous training: IS weights and masks, ratio gates, DIS (SAO),
bounded staleness and lag statistics, and V-trace (defined with the critic's targets, importable
from here). Pure torch.

Conventions (``[B, T]`` unless stated), as in :mod:`sixblanks.algorithms.critic`:

- ``mask`` is 1 on action tokens (a 0/1 tensor). The steps of the token-level MDP are the masked
  positions of each row, in order; observation tokens (mask 0) are skipped, so gamma counts action
  tokens and values and the trace chain are carried across observations unchanged.
- ``values[:, t]`` is V of the state in which action token t is generated; ``rewards[:, t]`` is the
  reward received after token t.
- Log-probs are of the sampled token. ``behavior`` / ``roll`` is the policy that sampled it (the
  rollout engine, possibly several versions behind); ``old`` / ``train`` the trainer's
  recomputation.
- Every returned weight, mask, target and advantage is detached; quantities are computed in float64.
"""

from __future__ import annotations

import math

import torch

from .critic import vtrace as vtrace
from .regularizers import kl_estimate

LOG_RATIO_CLAMP = 20.0
"""Log-ratios are clamped to ±20 before an exp that returns a value (verl's clamp)."""


def _rows(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(bool mask ``[B, T]``, action tokens per row as float64 ``[B]``)."""

    m = mask > 0
    return m, m.sum(1).to(torch.float64)


def _log_diff(a: torch.Tensor, b: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """a - b in float64, detached, 0 off the mask (so NaN padding never leaks). ``[B, T]``."""

    d = a.detach().double() - b.detach().double()
    return torch.where(m, d, torch.zeros_like(d))


def _log_bound(x: float) -> float:
    """log x, with -inf for x <= 0 (a ratio bound at or below 0 excludes nothing)."""

    return math.log(x) if x > 0 else -math.inf


def quantiles(x: torch.Tensor, qs: tuple[float, ...]) -> list[float]:
    """Quantiles of a 1-D tensor ``[N]`` with linear interpolation (numpy's default, like
    ``torch.quantile`` but with no size limit). NaN for every q when N = 0."""

    n = x.numel()
    if n == 0:
        return [float("nan")] * len(qs)
    s = x.detach().double().flatten().sort().values
    out = []
    for q in qs:
        pos = q * (n - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, n - 1)
        out.append(float(s[lo] + (pos - lo) * (s[hi] - s[lo])))
    return out


def sequence_log_is(
    old_logp: torch.Tensor, behavior_logp: torch.Tensor, mask: torch.Tensor, normalize: bool = False
) -> torch.Tensor:
    """Sequence log IS ratio ``[B]``: sum_t m_t (old - behavior), or with ``normalize`` the mean
    over the row's action tokens (log of the per-token geometric mean); 0 for a row without one."""

    m, n = _rows(mask)
    s = _log_diff(old_logp, behavior_logp, m).sum(1)
    return s / n.clamp(min=1.0) if normalize else s


def sequence_is_weight(
    old_logp: torch.Tensor,
    behavior_logp: torch.Tensor,
    mask: torch.Tensor,
    cap: float,
    normalize: bool = False,
) -> torch.Tensor:
    """Truncated sequence IS weight ``[B]``: min(exp(sum_t m_t (log pi_old - log pi_behav)), cap).

    With ``normalize`` the exponent is the mean over the row's action tokens instead, i.e. the
    per-token geometric mean of the ratio (GSPO's length-normalized form). TRL's sequence modes sum
    the log-differences without length normalization (``normalize=False``); the product over a long
    response is high-variance. Detached; a row with no action token gets min(1, cap).

    Args:
        old_logp, behavior_logp, mask: ``[B, T]``.
        cap: C > 0.

    Returns:
        ``[B]`` in ``old_logp.dtype``.
    """

    if cap <= 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    log_w = sequence_log_is(old_logp, behavior_logp, mask, normalize)
    return torch.exp(log_w.clamp(max=math.log(cap))).to(old_logp.dtype)


def is_mask(
    old_logp: torch.Tensor,
    behavior_logp: torch.Tensor,
    mask: torch.Tensor,
    cap: float,
    level: str = "token",
    normalize: bool = False,
) -> torch.Tensor:
    """The mask form of IS truncation ``[B, T]``: drop instead of capping the weight.

    ``level="token"``: m_t 1[pi_old/pi_behav <= cap] per token. ``level="sequence"``: every token of
    a row whose sequence ratio (the one of :func:`sequence_is_weight`, summed unless ``normalize``)
    exceeds ``cap`` is dropped. A ratio equal to ``cap`` is kept (compared in log space). Multiply
    the ratio by this mask for a weight that is the ratio on kept tokens and 0 elsewhere.

    Args:
        old_logp, behavior_logp, mask: ``[B, T]``.

    Returns:
        The new mask ``[B, T]``, detached, in ``mask.dtype``.
    """

    if cap <= 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    m = mask > 0
    log_cap = math.log(cap)
    if level == "token":
        keep = _log_diff(old_logp, behavior_logp, m) <= log_cap
    elif level == "sequence":
        keep = (sequence_log_is(old_logp, behavior_logp, mask, normalize) <= log_cap)[:, None]
    else:
        raise ValueError(f"unknown IS level '{level}' (valid: token, sequence)")
    return (m & keep).to(mask.dtype)


GATE_LEVELS = ("token", "sequence", "sequence_sum")
"""What a gate bounds, with d_t = log pi_train - log pi_roll on the sampled tokens:

- ``token``: each token (ratio metric: keep m_t 1[low <= e^{d_t} <= high]);
- ``sequence``: a whole row (ratio metric: keep it iff low <= exp(mean_t d_t) <= high, the geometric
  mean of its token ratios; KL metrics: their mean over the row's action tokens);
- ``sequence_sum``: a whole row, ratio metric only: keep it iff low <= exp(sum_t d_t) <= high (the
  product of its token ratios; verl's ``seq_sum_k1`` bounds 1/k, so its "lo_hi" is [1/hi, 1/lo]
  here).
"""

GATE_METRICS = ("ratio", "kl", "binary_kl")
"""What a gate measures:

- ``ratio``: the importance ratio pi_train/pi_roll, kept within [low, high];
- ``kl``: k3 = e^{d} - 1 - d, the estimate of KL(pi_roll || pi_train) on tokens sampled from pi_roll
  (clamped to 10, as in :func:`~sixblanks.algorithms.regularizers.kl_estimate`). Only ``high``
  applies: drop when KL > high;
- ``binary_kl`` (KPop): keep where :func:`binary_kl_max` <= ``high``.
"""

GATE_MODES = ("mask", "clamp", "weight")
"""What a gate returns:

- ``mask``: the new mask (``mask.dtype``);
- ``clamp`` (ratio metric only, as in AReaL): the detached weights ``[B, T]``, the token (or
  sequence) ratio clamped into [low, high], zero off the mask; the mask itself is unchanged;
- ``weight`` (IcePop, KPop; with level ``sequence``, OpenRLHF's seq-mask-tis): the detached weights
  ``[B, T]``, each kept token's own ratio e^{d_t} (at ``sequence_sum``, the row's product
  exp(sum_t d_t) on every token: verl's sequence IS with "lo_hi", TRL's ``sequence_mask``), 0 on
  what is outside; the mask is unchanged, so what is outside stays in Z contributing 0, as in verl,
  OpenRLHF, AReaL and TRL.
"""


def _check_gate(level: str, metric: str, mode: str, low: float, high: float) -> None:
    if level not in GATE_LEVELS:
        raise ValueError(f"unknown gate level '{level}' (valid: {', '.join(GATE_LEVELS)})")
    if metric not in GATE_METRICS:
        raise ValueError(f"unknown gate metric '{metric}' (valid: {', '.join(GATE_METRICS)})")
    if mode not in GATE_MODES:
        raise ValueError(f"unknown gate mode '{mode}' (valid: {', '.join(GATE_MODES)})")
    if mode == "clamp" and metric != "ratio":
        raise ValueError("mode='clamp' clamps an importance ratio: it needs metric='ratio'")
    if level == "sequence_sum" and metric != "ratio":
        raise ValueError("level='sequence_sum' bounds a product of ratios: it needs metric='ratio'")
    if metric == "ratio" and low > high:
        raise ValueError(f"low ({low}) must be <= high ({high})")


def binary_kl_max(train_logp: torch.Tensor, roll_logp: torch.Tensor, clamp: float = 1e-8):
    """KPop's statistic ``[B, T]``: max(KL_B(p_train || p_roll), KL_B(p_roll || p_train)), KL_B the
    KL between the Bernoulli distributions (p, 1 - p) of the sampled token's probability under
    each policy, probabilities clamped into [clamp, 1 - clamp] (AReaL: 1e-8)."""

    p = torch.exp(train_logp.detach().double()).clamp(clamp, 1 - clamp)
    q = torch.exp(roll_logp.detach().double()).clamp(clamp, 1 - clamp)

    def kl(a, b):
        return a * torch.log(a / b) + (1 - a) * torch.log((1 - a) / (1 - b))

    return torch.maximum(kl(p, q), kl(q, p))


def _kl_inside(
    train_logp, roll_logp, m, n, level: str, high: float, info, metric: str = "kl"
) -> torch.Tensor:
    """The KL gate: k3 estimates of KL(pi_roll || pi_train) (or, for ``binary_kl``, KPop's
    binary KL of :func:`binary_kl_max`) on the action tokens ``m [B, T]``, per
    token or their mean over a row's ``n [B]`` action tokens; kept where at most ``high``
    (``[B, T]``, or ``[B, 1]`` at sequence level). Its mean and max go to ``info``."""

    if metric == "binary_kl":
        kl = torch.where(m, binary_kl_max(train_logp, roll_logp), 0.0)
    else:
        kl = torch.where(
            m, kl_estimate(roll_logp.detach().double(), train_logp.detach().double(), "k3"), 0.0
        )
    if level == "sequence":
        stat = kl.sum(1) / n.clamp(min=1.0)
        inside = (stat <= high)[:, None]
        stat = stat[n > 0]
    else:
        inside = kl <= high
        stat = kl[m]
    info["kl_mean"] = float(stat.mean()) if stat.numel() else float("nan")
    info["kl_max"] = float(stat.max()) if stat.numel() else float("nan")
    return inside


def ratio_gate(
    train_logp: torch.Tensor,
    roll_logp: torch.Tensor,
    mask: torch.Tensor,
    low: float,
    high: float,
    level: str = "token",
    metric: str = "ratio",
    mode: str = "mask",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Train/rollout mismatch gate (IcePop-style; AReaL ``rejection_sampling``) on
    d_t = log pi_train - log pi_roll of the sampled tokens: what it keeps at ``level`` by ``metric``
    (:data:`GATE_LEVELS`, :data:`GATE_METRICS`) and what it returns in ``mode``
    (:data:`GATE_MODES`). Whether dropped tokens stay in Z is the caller's choice: aggregate over
    the original mask to keep them (contributing 0) or over the returned one to drop them.

    Args:
        train_logp, roll_logp, mask: ``[B, T]``.
        low, high: ratio bounds (low may be 0); for ``metric="kl"`` ``high`` is the KL threshold.

    Returns:
        ``(mask_or_weight [B, T], info)``; info (floats): ``masked_frac`` (share of action tokens
        dropped, or weighted 0 in weight mode; 0 in clamp mode), ``clamped_frac`` (share of action
        tokens whose weight was clamped; 0 in mask mode), ``log_ratio_p1/p50/p99`` (token d_t before
        any truncation), and at sequence level ``seq_log_ratio_p1/p50/p99`` (ratio metric) or
        ``kl_mean``/``kl_max`` of the gated KL statistic (kl metric). Percentiles are NaN without
        action tokens.
    """

    _check_gate(level, metric, mode, low, high)
    m, n = _rows(mask)
    d = _log_diff(train_logp, roll_logp, m)
    info: dict[str, float] = {}
    p1, p50, p99 = quantiles(d[m], (0.01, 0.5, 0.99))
    info.update(log_ratio_p1=p1, log_ratio_p50=p50, log_ratio_p99=p99)
    inside, log_r = _gate_inside(train_logp, roll_logp, d, m, n, level, metric, low, high, info)

    out_tok = m & ~inside
    total = max(float(n.sum()), 1.0)
    frac = float(out_tok.sum()) / total
    if mode == "mask":
        info.update(masked_frac=frac, clamped_frac=0.0)
        return (m & inside).to(mask.dtype), info
    if mode == "weight":  # IcePop / KPop: what is kept weighs by its ratio, unclamped
        info.update(masked_frac=frac, clamped_frac=0.0)
        # the product's own ratio at sequence_sum (verl's sequence IS, TRL's sequence_mask); each
        # token's own k at token and sequence level (OpenRLHF's seq-mask-tis)
        log_k = log_r if level == "sequence_sum" else d
        k = torch.exp(log_k.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
        return torch.where(m & inside, k, torch.zeros_like(k)).to(train_logp.dtype), info
    info.update(masked_frac=0.0, clamped_frac=frac)
    w = torch.exp(log_r.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)).clamp(min=max(low, 0.0), max=high)
    return torch.where(m, w, torch.zeros_like(w)).to(train_logp.dtype), info


def _gate_inside(
    train_logp: torch.Tensor,
    roll_logp: torch.Tensor,
    d: torch.Tensor,
    m: torch.Tensor,
    n: torch.Tensor,
    level: str,
    metric: str,
    low: float,
    high: float,
    info: dict[str, float],
) -> tuple[torch.Tensor, torch.Tensor]:
    """What the gate keeps (``[B, T]`` per token, ``[B, 1]`` per row) and the log-ratio ``[B, T]``
    a clamping or weighing gate uses (the row's at sequence levels); ``d`` is the token log-ratio
    ``[B, T]``, ``m`` the bool mask, ``n`` ``[B]`` the action tokens per row. A sequence level's
    percentiles, or the KL statistic's mean and max, go to ``info``."""

    lo, hi = _log_bound(low), _log_bound(high)
    if metric in ("kl", "binary_kl"):
        return _kl_inside(train_logp, roll_logp, m, n, level, high, info, metric), d
    if level == "token":
        return (d >= lo) & (d <= hi), d
    seq = d.sum(1) if level == "sequence_sum" else d.sum(1) / n.clamp(min=1.0)
    q1, q50, q99 = quantiles(seq[n > 0], (0.01, 0.5, 0.99))
    info.update(seq_log_ratio_p1=q1, seq_log_ratio_p50=q50, seq_log_ratio_p99=q99)
    return ((seq >= lo) & (seq <= hi))[:, None], seq[:, None].expand_as(d)


def dis(
    logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float,
    eps_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SAO's DIS band: rho_t = pi_theta/pi_roll (no pi_old); keep the tokens with
    1 - eps_low < rho_t < 1 + eps_high, STRICT inequalities, compared in log space.

    Both tails are masked whatever the advantage's sign (unlike PPO's clip, which passes the
    gradient of an A < 0 token above the band). A lower bound 1 - eps_low <= 0 excludes nothing.

    Args:
        logp: ``[B, T]`` log pi_theta of the sampled tokens (may carry a gradient; not used here).
        rollout_logp, mask: ``[B, T]``.

    Returns:
        ``(keep [B, T] in mask.dtype, rho [B, T])``, both detached; rho's log is clamped to ±20 (a
        token that far out is outside any practical band) and rho is 1 off the mask.
    """

    if eps_low < 0 or eps_high < 0:
        raise ValueError(f"DIS needs eps_low, eps_high >= 0, got {eps_low}, {eps_high}")
    m = mask > 0
    d = _log_diff(logp, rollout_logp, m)
    inside = (d > _log_bound(1.0 - eps_low)) & (d < math.log(1.0 + eps_high))
    rho = torch.exp(d.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    return (m & inside).to(mask.dtype), rho.to(logp.dtype)


def within_staleness(versions_behind: torch.Tensor, max_staleness: int) -> torch.Tensor:
    """AReaL bounded staleness at consumption: keep a sample iff versions_behind <= eta.

    Args:
        versions_behind: ``[B]`` integer, trainer version minus the version that generated the
            sample (>= 0).
        max_staleness: eta >= 0; 0 is synchronous (only samples of the current version).

    Returns:
        bool ``[B]``.

    Raises:
        ValueError: eta < 0, or a sample ahead of the trainer (a version-counter bug).
    """

    if max_staleness < 0:
        raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
    if versions_behind.numel() and bool((versions_behind < 0).any()):
        raise ValueError("a sample is ahead of the trainer (versions_behind < 0)")
    return versions_behind <= max_staleness


def staleness_capacity(eta: int, version: int, batch_size: int, accepted: int, running: int) -> int:
    """Rollouts that may still be launched under AReaL's admission rule: (eta + i + 1) B -
    (accepted + running), i the trainer's version counted from the start of the run.

    Equivalent to admitting the next rollout iff floor((N_r - 1) / B) <= i + eta with N_r = accepted
    + running + 1, the count including it: with rollouts finishing in launch order, none is ever
    consumed more than eta versions behind. <= 0: launch none. ``accepted`` counts the rollouts
    consumed and trained on so far (those dropped free their place), ``running`` those launched
    and not yet consumed.
    """

    return (eta + version + 1) * batch_size - (accepted + running)


def lag_stats(
    behavior_logp: torch.Tensor,
    current_logp: torch.Tensor,
    mask: torch.Tensor,
    versions_behind: torch.Tensor,
) -> dict:
    """How far the behaviour policy lags the current one on the sampled tokens.

    Per sample: kl_i = mean over its action tokens of k3 = e^{d} - 1 - d, d = log pi_current -
    log pi_behav, the unbiased estimate of KL(pi_behav || pi_current) from tokens sampled by
    pi_behav (k3 clamped to 10, as in :func:`~sixblanks.algorithms.regularizers.kl_estimate`).

    Args:
        behavior_logp, current_logp, mask: ``[B, T]``.
        versions_behind: ``[B]``.

    Returns:
        ``{"kl": [B] float64 tensor (0 for a row without action tokens), "versions_behind_mean",
        "versions_behind_max", "kl_mean", "kl_p50", "kl_p90", "kl_max"}``; the KL summaries (floats)
        are over the rows with action tokens, per sample (not token-weighted), NaN if none.
    """

    m, n = _rows(mask)
    k = kl_estimate(behavior_logp.detach().double(), current_logp.detach().double(), "k3")
    kl = torch.where(m, k, torch.zeros_like(k)).sum(1) / n.clamp(min=1.0)
    vb = versions_behind.detach().double()
    has = kl[n > 0]
    p50, p90 = quantiles(has, (0.5, 0.9))
    nan = float("nan")
    return {
        "kl": kl,
        "versions_behind_mean": float(vb.mean()) if vb.numel() else nan,
        "versions_behind_max": float(vb.max()) if vb.numel() else nan,
        "kl_mean": float(has.mean()) if has.numel() else nan,
        "kl_p50": p50,
        "kl_p90": p90,
        "kl_max": float(has.max()) if has.numel() else nan,
    }
