"""What every policy objective does with off-policy data before its update: the corrections that
mask (truncated IS in a mask form, a gate in mask mode, SAO's DIS band; their tokens leave the
gradient and Z and are discarded by reason) and the lag measured per sample (versions behind and the
actual divergence, the k3 KL between the behaviour and the current policy on the sampled tokens)."""

from __future__ import annotations

import torch

from sixblanks.algorithms.loss import behavior_mask, correction_stats
from sixblanks.algorithms.offpolicy import lag_stats

from ...rollout.trajectory import TrajectoryBatch
from ..context import RunContext


def off_policy(
    ctx: RunContext,
    old_logp: torch.Tensor,
    batch: TrajectoryBatch,
    mask: torch.Tensor,
    replayed_rows: int = 0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """(the mask after the masking corrections ``[B, T]``, their metrics and the lag's). Only the
    fresh rows' drops are discarded: the last ``replayed_rows`` were accounted for when fresh."""

    d, w = ctx.blanks.data, ctx.blanks.weight
    metrics: dict[str, float] = {}
    masking = w.gate is not None or w.trust_region == "dis" or w.tis_form.endswith("_mask")
    # the bypass form (pi_old := pi_rollout) applies its corrections inside the loss, to
    # pi_theta/pi_rollout of each micro-batch, zeroing tokens that stay in Z (policy_loss)
    if masking and w.old_policy != "rollout":
        fresh = batch.size - replayed_rows
        parts = []
        for rows in (slice(0, fresh), slice(fresh, batch.size)):
            m, dropped, met = behavior_mask(
                ctx.blanks, old_logp[rows], batch.behavior_logprobs[rows], mask[rows]
            )
            parts.append(m)
            if rows.start == 0:
                metrics = met
                total = max(float(mask[rows].sum()), 1.0)
                for reason, (tokens, n) in dropped.items():
                    ctx.meter.discard(reason, tokens, n)
                    metrics[f"dropped.{reason}_tokens"] = tokens
                    metrics[f"dropped.{reason}_frac"] = tokens / total
        mask = torch.cat(parts)
    if w.old_policy != "rollout" and old_logp is not None:  # truncated IS: how often capped
        metrics.update(correction_stats(ctx.blanks, old_logp, batch.behavior_logprobs, mask))
    lagged = d.lag or d.broadcast_every > 1 or d.staleness is not None or d.concurrent is not None
    # (in the bypass form pi_old is the rollout's: no current policy to measure the lag against)
    if lagged and w.old_policy != "rollout":
        behind = (ctx.engine.policy_version - batch.policy_version).clamp(min=0)
        stats = lag_stats(batch.behavior_logprobs, old_logp, batch.action_mask, behind)
        metrics.update({f"lag.{k}": float(v) for k, v in stats.items() if k.startswith("kl_")})
    return mask, metrics
