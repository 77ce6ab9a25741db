"""The critic-free policy-gradient objective: the six blanks' template loss.

prepare: pi_old (recomputed by the trainer) and pi_ref on the batch, then the A blank (with the
reward-side mask and regularizer: overlong shaping and filtering, KL in the reward).
update: the template loss (w, Z, loss-side R) over the data blank's epochs x minibatches.
"""

from __future__ import annotations

from typing import Any

import torch

from sixblanks.algorithms.critic import approx_kl
from sixblanks.algorithms.loss import compute_advantages, policy_loss
from sixblanks.algorithms.normalization import loss_weights
from sixblanks.algorithms.weights import mismatch_stats

from ...rollout.trajectory import TrajectoryBatch
from ..base import Collected, Prepared, Stateless, TrainingError
from ..context import RunContext
from .accumulate import accumulate
from .offpolicy import off_policy


def batch_metrics(
    batch: TrajectoryBatch, adv: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """Rewards, advantage size, lengths and failures of a trained batch; with step labels from
    the environment (a multi-step task), the share of labelled steps that were right."""

    r = batch.reward
    out = {
        "reward_mean": float(r.mean()),
        "reward_std": float(r.std()) if r.numel() > 1 else 0.0,
        "adv_abs_mean": float((adv.abs() * mask).sum() / mask.sum().clamp(min=1)),
        "truncated_frac": float(batch.truncated.float().mean()),
        "failed": float(batch.failed.sum()),
    }
    labelled = batch.step_labels[~batch.step_labels.isnan()]
    if labelled.numel():
        out["step_accuracy"] = float(labelled.mean())
    return out


class PolicyGradient(Stateless):
    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        if ctx.blanks.data.potential_shaping.enabled and not ctx.task.has_potential:
            raise TrainingError(
                f"{ctx.settings.name}: data.potential_shaping: task '{ctx.task.name}' defines no "
                "potential (its environment has no potential()); turn it off or use a task that does"
            )

    def process_inputs(self, collected: Collected, old_logp, ref_logp) -> dict[str, Any]:
        """Inputs from a second model (a process reward model): none here; see :mod:`.process`."""

        return {}

    def prepare(self, collected: Collected) -> Prepared:
        ctx, batch = self.ctx, collected.batch
        ctx.model.eval()
        old_logp = ctx.batched_logprobs(ctx.model, batch)  # pi_old: recomputed by the trainer
        ref_logp = ctx.batched_logprobs(ctx.ref_model, batch)
        mask0 = batch.action_mask.clone()
        adv, mask, info = compute_advantages(
            ctx.blanks,
            batch.reward,
            mask0,
            batch.group_ids,
            old_logp=old_logp,
            ref_logp=ref_logp,
            baseline_rewards=collected.baseline_rewards,
            l_max=ctx.l_max,
            **batch.advantage_inputs(),
            **self.process_inputs(collected, old_logp, ref_logp),
        )
        filtered = (mask0.sum(1) > 0) & (mask.sum(1) == 0)
        filtered[batch.size - collected.replayed_rows :] = False  # replayed: accounted for before
        ctx.meter.discard("overlong_filter", float(mask0[filtered].sum()), int(filtered.sum()))
        mask, off = off_policy(ctx, old_logp, batch, mask, collected.replayed_rows)
        metrics = {
            **off,
            **batch_metrics(batch, adv, mask),
            "response_length": float(mask0.sum(1).float().mean()),
            "groups_launched": float(collected.groups_launched),
            **mismatch_stats(old_logp, batch.behavior_logprobs, mask0),
        }
        # every shaping term of the reward is logged (the audit lists them; a term that never
        # changed a reward is reported as inert)
        for k in ("reward_kl", "gigpo_anchor_frac"):
            if k in info:
                metrics[k.replace("gigpo_", "gigpo.")] = info[k]
        if "potential_shaping" in info:
            metrics["potential_shaping_mean"] = float(info["potential_shaping"].mean())
        if "overlong_penalty" in info:
            pen = info["overlong_penalty"]
            metrics["overlong_penalty_mean"] = float(pen.mean())
            metrics["overlong_penalty_frac"] = float((pen != 0).double().mean())
        tensors = {"old_logp": old_logp, "ref_logp": ref_logp, "adv": adv}
        return Prepared(batch, mask, batch.size, tensors, metrics)

    def update(self, p: Prepared) -> dict[str, Any]:
        ctx, b = self.ctx, self.ctx.blanks
        batch, mask, t = p.batch, p.mask, p.tensors
        dev = ctx.device
        target_kl = b.weight.target_kl

        def weigh(rows: list[int]) -> torch.Tensor | None:
            sub = mask[rows]
            if float(sub.sum()) == 0:
                return None
            n = b.normalization
            return loss_weights(sub, n.mode, ctx.l_max, n.count_empty_rows)

        def micro_step(rows: list[int], weights: torch.Tensor, epoch: int) -> dict[str, float]:
            sub = batch.select(rows)
            logp, ent = ctx.logprobs(ctx.model, sub, entropy=True, grad=True)
            loss, met = policy_loss(
                b,
                logp,
                t["old_logp"][rows].to(dev),
                t["adv"][rows].to(dev),
                mask[rows].to(dev),
                weights.to(dev),
                behavior_logp=sub.behavior_logprobs.to(dev),
                ref_logp=t["ref_logp"][rows].to(dev),
                entropy=ent,
            )
            if not torch.isfinite(loss):
                raise TrainingError(
                    f"{ctx.settings.name}: loss is {float(loss.detach())} at step {ctx.step} "
                    f"(epoch {epoch}); metrics {met}. Lower optimizer.lr or check the rewards."
                )
            loss.backward()
            if target_kl is not None:  # the routine stops the epochs past 1.5 x target_kl
                old = t["old_logp"][rows].to(dev)
                met["approx_kl_num"] = approx_kl(logp, old, mask[rows].to(dev)) * float(
                    weights.sum()
                )
            return met

        ctx.model.train()
        out = accumulate(ctx, p.units, weigh, micro_step)
        ctx.model.eval()
        return {
            **out.summary(),
            **(out.early_stop_metrics() if target_kl is not None else {}),
            **p.metrics,
            "policy_version": float(ctx.engine.policy_version),
        }
