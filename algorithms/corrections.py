"""The off-policy corrections applied where the loss is built: truncated importance sampling and
ratio gates that weigh tokens, and those (a mask form of truncated IS, a gate in mask mode, SAO's
DIS band) that drop tokens before Z is computed. Pure torch; every weight and mask is detached."""

from __future__ import annotations

import math

import torch

from .blanks import Blanks
from .offpolicy import dis, is_mask, ratio_gate, sequence_is_weight
from .weights import truncated_is_weight


def behavior_weight(
    blanks: Blanks,
    old_logp: torch.Tensor,
    behavior_logp: torch.Tensor | None,
    mask: torch.Tensor,
) -> torch.Tensor | float:
    """The detached per-token weight of the off-policy corrections that weigh: truncated IS in its
    token or sequence form (``weight.tis_cap``, ``weight.tis_form``) and a gate in clamp or weight
    mode (``weight.gate``; weight: IcePop/KPop's k on the kept tokens, 0 outside). ``[B, T]``, or
    1.0 when none applies. ``old_logp`` is pi_old, or pi_theta detached in the bypass form."""

    w_spec, out = blanks.weight, 1.0
    if w_spec.tis_cap is not None and w_spec.tis_form == "token":
        out = out * truncated_is_weight(old_logp, behavior_logp, w_spec.tis_cap)
    elif w_spec.tis_cap is not None and w_spec.tis_form == "sequence":
        out = out * sequence_is_weight(old_logp, behavior_logp, mask, w_spec.tis_cap)[:, None]
    g = w_spec.gate
    if g is not None and g.mode in ("clamp", "weight"):
        gated, _ = ratio_gate(
            old_logp, behavior_logp, mask, g.low, g.high, g.level, g.metric, g.mode
        )
        out = out * gated
    return out.to(old_logp.dtype) if isinstance(out, torch.Tensor) else out


def correction_stats(
    blanks: Blanks, old_logp: torch.Tensor, behavior_logp: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """The share of action tokens whose truncated-IS weight hit its cap (``tis.truncated_frac``),
    for the forms that weigh (the masking forms report their drops in :func:`behavior_mask`).
    ``[B, T]`` inputs; empty without truncated IS or action tokens."""

    w = blanks.weight
    m = mask > 0
    if w.tis_cap is None or w.tis_form.endswith("_mask") or not bool(m.any()):
        return {}
    log_cap = math.log(w.tis_cap)
    d = (old_logp.detach().double() - behavior_logp.detach().double()).masked_fill(~m, 0.0)
    if w.tis_form == "token":
        hit = d > log_cap
    else:
        hit = (d.sum(1) > log_cap)[:, None].expand_as(d)
    return {"tis.truncated_frac": float((hit & m).sum() / m.sum())}


def behavior_mask(
    blanks: Blanks, old_logp: torch.Tensor, behavior_logp: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, dict[str, tuple[float, int]], dict[str, float]]:
    """The off-policy corrections that mask, applied once per batch before Z is computed (so the
    tokens they drop leave the gradient and Z): truncated IS in a mask form, a gate in mask mode
    (reason ``masking``) and SAO's DIS band at the batch's start (reason ``dis``: pi_theta is pi_old
    then; the loss keeps enforcing the band as pi_theta moves). A gate in weight mode leaves the
    mask: its tokens stay in Z and are accepted (trained with weight 0); the share it weighs 0 is
    the metric ``gate.masked_frac``, not a discard.

    Args: ``[B, T]`` log-probs of pi_old (recomputed by the trainer) and of the behaviour policy,
    and the mask. Returns (the mask ``[B, T]``, {reason: (tokens dropped, rows left with none)},
    metrics).
    """

    w_spec, metrics = blanks.weight, {}
    dropped: dict[str, tuple[float, int]] = {}

    def drop(reason: str, before: torch.Tensor, after: torch.Tensor) -> None:
        tokens, rows = dropped.get(reason, (0.0, 0))
        gone = (before.sum(1) > 0) & (after.sum(1) == 0)
        dropped[reason] = (tokens + float(before.sum() - after.sum()), rows + int(gone.sum()))

    m = mask
    if w_spec.tis_cap is not None and w_spec.tis_form.endswith("_mask"):
        level = w_spec.tis_form.removesuffix("_mask")
        after = m * is_mask(old_logp, behavior_logp, m, w_spec.tis_cap, level).to(m.dtype)
        drop("masking", m, after)
        m = after
    g = w_spec.gate
    if g is not None:
        gated, info = ratio_gate(
            old_logp, behavior_logp, m, g.low, g.high, g.level, g.metric, g.mode
        )
        metrics.update({f"gate.{k}": float(v) for k, v in info.items()})
        if g.mode == "mask":
            after = gated.to(m.dtype)
            drop("masking", m, after)
            m = after

    if w_spec.trust_region == "dis":
        keep, _ = dis(old_logp, behavior_logp, m, w_spec.eps_low, w_spec.eps_high)
        after = m * keep.to(m.dtype)
        drop("dis", m, after)
        m = after
    return m, dropped, metrics
