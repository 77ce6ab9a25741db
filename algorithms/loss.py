"""The template, assembled from the blanks:

    grad J = 1/Z * sum_{i,t} m * w * A * grad log pi(x_{i,t} | h_{i,t})  -  grad R

:func:`compute_advantages` (module ``advantage_blank``, importable from here) fills A and the
reward-side parts of m and R (overlong shaping and filtering, KL in the reward);
:func:`policy_loss` fills w, Z and the loss-side R, with the off-policy corrections of module
``corrections``. Both take plain tensors, so they can be used without the harness::

    from sixblanks.algorithms import compute_advantages, policy_loss, loss_weights, resolve
    blanks = resolve("grpo")
    adv, mask, _ = compute_advantages(blanks, rewards, mask, group_ids)
    w = loss_weights(mask, blanks.normalization.mode)
    loss, metrics = policy_loss(blanks, logp, old_logp, adv, mask, w, ref_logp=ref_logp)
"""

from __future__ import annotations

import torch

from .advantage_blank import as_blanks, compute_advantages
from .blanks import Blanks, flatten
from .corrections import behavior_mask, behavior_weight, correction_stats
from .normalization import aggregate
from .registry import Registry, Variant
from .regularizers import kl_estimate
from .specs import RegularizerSpec
from .weights import RATIOS, TRUST_REGIONS, sequence_ratio_counts

__all__ = [
    "OBJECTIVES",
    "behavior_mask",
    "behavior_weight",
    "compute_advantages",
    "correction_stats",
    "dpo_loss",
    "policy_loss",
    "sft_loss",
]


def policy_loss(
    blanks: Blanks | str,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    weights: torch.Tensor,
    *,
    behavior_logp: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    turn_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Scalar loss of the template for ``blanks`` on (a micro-batch of) the optimizer-step batch.

    Args:
        logp: ``[B, T]`` log pi_theta (requires grad). old_logp: ``[B, T]`` log pi_old (detached).
        advantages: ``[B, T]``. mask: ``[B, T]``.
        weights: ``[B, T]`` Z weights from :func:`sixblanks.algorithms.normalization.loss_weights`,
            computed on the *whole* optimizer-step batch and sliced like the other tensors; summing
            this function's loss over micro-batches gives the full-batch loss.
        behavior_logp: ``[B, T]`` rollout-engine log-probs (truncated IS, gates, the ratio
            'behavior' and the bypass form ``weight.old_policy: rollout``, where they replace
            ``old_logp``).
        ref_logp: ``[B, T]`` reference log-probs (KL in the loss). entropy: ``[B, T]`` (entropy
            bonus).
        turn_ids: ``[B, T]`` the environment turn of each token (a per-turn sequence ratio,
            ``weight.sequence: turn``).

    Returns:
        ``(loss, metrics)``; pg_loss, kl and entropy are Z-weighted sums, so they add up over
        micro-batches; the ratio diagnostics are plain counts over action tokens (``action_tokens``,
        ``clip_count``, ``ratio_sum``) and extremes (``ratio_max``, ``ratio_min``), whatever Z is:
        ``clip_frac = clip_count / action_tokens`` and ``ratio_mean = ratio_sum / action_tokens``.
    """

    b = as_blanks(blanks)
    old_logp, behavior_logp, ref_logp = _log_probs(b, mask, old_logp, behavior_logp, ref_logp)
    tok_loss, ratio, clipped, zeroed = _token_loss(
        b, logp, old_logp, advantages, mask, behavior_logp, turn_ids
    )
    m = mask.to(logp.dtype)
    weights = weights.to(logp.dtype)
    pg = aggregate(tok_loss * m, weights)
    metrics: dict[str, float] = {"pg_loss": float(pg.detach())}
    with torch.no_grad():  # plain counts over action tokens, whatever Z weighs them by
        metrics.update(_ratio_counts(b, logp, old_logp, mask, ratio, clipped))
        if zeroed is not None:  # the bypass form's corrections, measured where they act
            metrics.update(_bypass_counts(b, logp, behavior_logp, mask, zeroed))
    total = _regularized(pg, b.regularizer, logp, ref_logp, entropy, m, weights, metrics)
    metrics["loss"] = float(total.detach())
    return total, metrics


def _log_probs(
    b: Blanks,
    mask: torch.Tensor,
    old_logp: torch.Tensor,
    behavior_logp: torch.Tensor | None,
    ref_logp: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """pi_old's, the rollout's and the reference's log-probs ``[B, T]`` as the loss reads them:
    checked for the corrections that need the rollout's, zeroed on padding, and with pi_old
    replaced by pi_rollout in the bypass form (``weight.old_policy: rollout``)."""

    w_spec = b.weight
    if behavior_logp is None and (
        w_spec.ratio == "behavior" or w_spec.tis_cap is not None or w_spec.gate is not None
    ):
        raise ValueError(
            "weight.ratio 'behavior', weight.tis_cap and weight.gate need behavior_logp "
            "(the rollout engine's log-probs)"
        )
    # padding (m = 0) may hold NaN or inf log-probs (an engine's, or ART-style NaN old log-probs):
    # zeroed before any product, since a NaN times a zero weight (or a zero gradient) is NaN
    on = mask > 0
    old_logp, behavior_logp, ref_logp = (
        None if x is None else torch.where(on, x, torch.zeros_like(x))
        for x in (old_logp, behavior_logp, ref_logp)
    )
    if w_spec.old_policy == "rollout":  # pi_old := pi_rollout
        if behavior_logp is None:
            raise ValueError(
                "weight.old_policy 'rollout' needs behavior_logp (the rollout log-probs)"
            )
        old_logp = behavior_logp
    return old_logp, behavior_logp, ref_logp


def _token_loss(
    b: Blanks,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    behavior_logp: torch.Tensor | None,
    turn_ids: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The per-token loss ``[B, T]`` of the ratio and trust region blanks, times the corrections
    that weigh (and, in the bypass form, those that mask). Returns it with the ratio and the clip
    indicator (``[B, T]``, or ``[B, 1]`` for a sequence ratio) and, in the bypass form, the tokens
    ``[B, T]`` the corrections zeroed (None otherwise)."""

    w_spec, fields = b.weight, flatten(b)
    bypass = w_spec.old_policy == "rollout"
    adv = advantages.detach().to(logp.dtype)
    inputs = {"logp": logp, "old_logp": old_logp, "adv": adv, "mask": mask}
    extra = {"behavior_logp": behavior_logp, "turn_ids": turn_ids}
    ratio, adv = RATIOS[w_spec.ratio].call({**inputs, **extra}, fields)
    anchor = behavior_logp if w_spec.ratio == "behavior" else old_logp
    tok_loss, clipped = TRUST_REGIONS[w_spec.trust_region].call(
        {"ratio": ratio, "adv": adv, "logp": logp, "anchor_logp": anchor}, fields
    )
    # the corrections read pi_theta (detached) in pi_old's place in the bypass form
    corr_old = logp.detach() if bypass else old_logp
    corr = behavior_weight(b, corr_old, behavior_logp, mask)
    tok_loss = tok_loss * corr
    zeroed = None
    if bypass:  # the masking corrections zero tokens in each micro-batch; Z keeps them (verl)
        kept, _, _ = behavior_mask(b, corr_old, behavior_logp, mask.to(logp.dtype))
        tok_loss = tok_loss * kept.to(logp.dtype)
        zeroed = (kept == 0) | (corr == 0) if isinstance(corr, torch.Tensor) else kept == 0
    return tok_loss, ratio, clipped, zeroed


def _ratio_counts(
    b: Blanks,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    mask: torch.Tensor,
    ratio: torch.Tensor,
    clipped: torch.Tensor,
) -> dict[str, float]:
    """The ratio diagnostics as plain counts over action tokens (``action_tokens``, ``clip_count``,
    ``ratio_sum``), the extremes where there are tokens, and the sequence ratio's counts."""

    m = mask.to(logp.dtype)
    on = m > 0
    r = ratio.detach().expand_as(m)
    out = {
        "action_tokens": float(on.sum()),
        "clip_count": float((clipped.expand_as(m) * on).sum()),
        "ratio_sum": float((r * on).sum()),
    }
    if bool(on.any()):  # extremes of the tokens there are (none: nothing to widen the range)
        out["ratio_max"] = float(r[on].max())
        out["ratio_min"] = float(r[on].min())
    w_spec = b.weight
    out.update(sequence_ratio_counts(logp, old_logp, mask, w_spec.eps_low, w_spec.eps_high))
    return out


def _bypass_counts(
    b: Blanks,
    logp: torch.Tensor,
    behavior_logp: torch.Tensor,
    mask: torch.Tensor,
    zeroed: torch.Tensor,
) -> dict[str, float]:
    """The bypass form's corrections counted where they act: the action tokens they zeroed and
    those whose truncated-IS weight hit its cap."""

    on = mask.to(logp.dtype) > 0
    out = {"bypass_zeroed_count": float((zeroed & on).sum())}
    capped = correction_stats(b, logp.detach(), behavior_logp, mask)
    if capped:
        out["tis_capped_count"] = capped["tis.truncated_frac"] * float(on.sum())
    return out


def _regularized(
    pg: torch.Tensor,
    reg: RegularizerSpec,
    logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    entropy: torch.Tensor | None,
    m: torch.Tensor,
    weights: torch.Tensor,
    metrics: dict[str, float],
) -> torch.Tensor:
    """The policy-gradient loss plus the KL to the reference and minus the entropy bonus, each
    Z-weighted (``m``, ``weights``: ``[B, T]``) and logged in ``metrics`` even at coefficient 0."""

    total = pg
    if ref_logp is not None:
        kl_tok = kl_estimate(logp, ref_logp.detach(), reg.loss_kl_estimator) * m
        kl = aggregate(kl_tok, weights)
        metrics["kl"] = float(kl.detach())
        if reg.loss_kl_coef > 0:
            total = total + reg.loss_kl_coef * kl
    elif reg.loss_kl_coef > 0:
        raise ValueError("KL in the loss (regularizer.loss_kl_coef > 0) needs ref_logp")
    if entropy is not None:
        ent = aggregate(entropy * m, weights)
        metrics["entropy"] = float(ent.detach())
        if reg.entropy_coef > 0:
            total = total - reg.entropy_coef * ent
    return total


def sft_loss(
    logp: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """NLL of the masked tokens: -sum(w m log pi), token-mean over the batch by default.
    ``[B, T]`` inputs."""

    m = mask.to(logp.dtype)
    if weights is None:
        weights = m / m.sum().clamp(min=1.0)
    return -(logp * m * weights.to(logp.dtype)).sum()


def dpo_loss(
    chosen_logp: torch.Tensor,
    rejected_logp: torch.Tensor,
    ref_chosen_logp: torch.Tensor,
    ref_rejected_logp: torch.Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DPO on sequence log-prob *sums* ``[N]``: the mean over pairs of
    -(1-eps) log sigma(beta h) - eps log sigma(-beta h), where

    h = [log pi(y_w) - log pi_ref(y_w)] - [log pi(y_l) - log pi_ref(y_l)].
    """

    h = (chosen_logp - ref_chosen_logp.detach()) - (rejected_logp - ref_rejected_logp.detach())
    losses = -(1 - label_smoothing) * torch.nn.functional.logsigmoid(beta * h) - label_smoothing * (
        torch.nn.functional.logsigmoid(-beta * h)
    )
    loss = losses.mean()
    return loss, {
        "loss": float(loss.detach()),
        "dpo_margin": float(h.detach().mean()),
        "dpo_accuracy": float((h.detach() > 0).float().mean()),
    }


OBJECTIVES = Registry("objective")
"""objective -> its loss, and the spec fields that apply to it. The harness binds each loss's
arguments (``inputs`` None), so ``reads`` is empty and every field is in ``applies``."""

OBJECTIVES.add(
    Variant(
        "pg",
        policy_loss,
        inputs=None,
        applies=(
            "mask.overlong_filter",  # compute_advantages
            "weight.ratio",
            "weight.trust_region",
            "weight.gate",
            "advantage.estimator",
            "normalization.mode",
            "regularizer.reward_kl_coef",
            "regularizer.loss_kl_coef",
            "regularizer.loss_kl_estimator",  # also the logged kl metric when the coefficient is 0
            "regularizer.entropy_coef",
            "data.source",
            "data.group_size",
            "data.dynamic_sampling",
            "data.zero_variance_filter",
            "data.prompt_pool",
            "data.epochs",
            "data.minibatches",
            "data.overlong_shaping.enabled",
            "data.potential_shaping.enabled",
            "data.staleness",
            "data.lag",
            "data.broadcast_every",
            "data.replay",
            "data.concurrent",
            "data.branching",
            "data.self_play",
            "data.world_model",
        ),
    )
)
OBJECTIVES.add(
    Variant(
        "sft",
        sft_loss,
        inputs=None,
        applies=("data.source", "data.group_size", "data.epochs", "data.minibatches"),
    )
)
OBJECTIVES.add(
    Variant(
        "dpo",
        dpo_loss,
        inputs=None,
        applies=(
            "data.source",
            "data.group_size",
            "regularizer.dpo_beta",
            "regularizer.dpo_label_smoothing",
        ),
    )
)
