"""The critic-free policy-gradient objective: the six blanks' template loss.

prepare: pi_old (recomputed by the trainer) and pi_ref on the batch, then the A blank (with the
reward-side mask and regularizer: overlong shaping and filtering, KL in the reward).
update: the template loss (w, Z, loss-side R) over the data blank's epochs x minibatches.
"""

from __future__ import annotations

from typing import Any

import torch

from sixblanks.algorithms.critic import approx_kl
from sixblanks.algorithms.loss import compute_advantages, correction_stats, policy_loss
from sixblanks.algorithms.normalization import loss_weights
from sixblanks.algorithms.weights import mismatch_stats

from ...rollout.trajectory import TrajectoryBatch
from ..base import Collected, Objective, Prepared, Stateless, TrainingError
from ..context import RunContext
from ..diagnostics import (
    ENTROPY_SUM,
    entropy_token_sum,
    grad_noise_probe,
    step_diagnostics,
    trained_params,
)
from ..faults import planted_rewards
from .accumulate import accumulate
from .clip_scale import ClipScale
from .offpolicy import off_policy


def batch_metrics(
    batch: TrajectoryBatch, adv: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """Rewards, advantage size, lengths and failures of a trained batch; with step labels from
    the environment (a multi-step task), the share of labelled steps that were right."""

    rewards = batch.reward
    out = {
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()) if rewards.numel() > 1 else 0.0,
        "adv_abs_mean": float((adv.abs() * mask).sum() / mask.sum().clamp(min=1)),
        "truncated_frac": float(batch.truncated.float().mean()),
        "failed": float(batch.failed.sum()),
    }
    labelled = batch.step_labels[~batch.step_labels.isnan()]
    if labelled.numel():
        out["step_accuracy"] = float(labelled.mean())
    return out


def reads_reference(blanks) -> bool:
    """Whether any blank reads the reference policy's log-probs (KL in the loss or the reward)."""

    reg = blanks.regularizer
    return reg.loss_kl_coef > 0 or reg.reward_kl_coef > 0


def reads_old_before_update(blanks) -> bool:
    """Whether the batch needs pi_old's log-probs before the update: KL in the reward (from pi_old),
    the corrections that mask off-policy tokens, or the lag's measured divergence."""

    d, w = blanks.data, blanks.weight
    masks_before = w.old_policy != "rollout" and (  # the bypass form masks inside the loss
        w.gate is not None or w.trust_region == "dis" or w.tis_form.endswith("_mask")
    )
    return (
        blanks.regularizer.reward_kl_coef > 0
        or masks_before
        or bool(d.lag or d.broadcast_every > 1 or d.staleness is not None)
        or d.concurrent is not None
    )


class PolicyGradient(Stateless, Objective):
    SKIPS_UNUSED = True
    """Subclasses that read pi_old or pi_ref for a model of their own (PRIME) set False."""

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        if ctx.blanks.data.potential_shaping.enabled and not ctx.task.has_potential:
            raise TrainingError(
                f"{ctx.settings.name}: data.potential_shaping: task '{ctx.task.name}' defines no "
                "potential (its environment has no potential()); turn it off or use a task that "
                "does"
            )
        b, skip = ctx.blanks, ctx.settings.rollout.skip_unused_forwards and self.SKIPS_UNUSED
        # no reference forward when no blank reads it (its KL is then not logged, unless asked)
        self.ref_forward = (
            not skip or reads_reference(b) or ctx.settings.rollout.reference_kl_metric
        )
        # exactly on-policy (one epoch of one minibatch: one optimizer step on the batch): pi_old
        # is the policy being trained, so the training forward's log-probs, detached, are pi_old
        self.reuse_forward = (
            skip
            and b.data.epochs == 1
            and b.data.minibatches == 1
            and not reads_old_before_update(b)
        )
        self.probe = grad_noise_probe(ctx)  # rollout.grad_noise_probe
        self.clip_scale = ClipScale(ctx)  # weight.clip_scale

    def process_inputs(self, collected: Collected, old_logp, ref_logp) -> dict[str, Any]:
        """Inputs from a second model (a process reward model): none here; see :mod:`.process`."""

        return {}

    def prepare(self, collected: Collected) -> Prepared:
        ctx, batch = self.ctx, collected.batch
        ctx.model.eval()
        # pi_old: recomputed by the trainer, or (exactly on-policy) taken from the training
        # forward, or (the bypass form, weight.old_policy: rollout) the rollout's own log-probs
        if ctx.blanks.weight.old_policy == "rollout":
            old_logp = batch.behavior_logprobs.clone()
        elif self.reuse_forward:
            old_logp = None
        else:
            old_logp = ctx.batched_logprobs(ctx.model, batch)
        ref_logp = ctx.batched_logprobs(ctx.ref_model, batch) if self.ref_forward else None
        mask0 = batch.action_mask.clone()
        # the rewards learnt from: the batch's, or a planted fault's (arms.<arm>.fault)
        reward, turn_rewards = planted_rewards(
            ctx.settings.reward_fault,
            batch.reward,
            batch.turn_rewards,
            batch.n_turns,
            ctx.settings.train_seed,
            ctx.step,
        )
        adv, mask, info = compute_advantages(
            ctx.blanks,
            reward,
            mask0,
            batch.group_ids,
            old_logp=old_logp,
            ref_logp=ref_logp,
            baseline_rewards=collected.baseline_rewards,
            l_max=ctx.l_max,
            **{**batch.advantage_inputs(), "turn_rewards": turn_rewards},
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
            **step_diagnostics(batch, mask, ctx.group_size),
        }
        if old_logp is not None and ctx.blanks.weight.old_policy != "rollout":
            # else measured on the training forward (update)
            metrics.update(mismatch_stats(old_logp, batch.behavior_logprobs, mask0))
        # every shaping term of the reward is logged (the audit lists them; a term that never
        # changed a reward is reported as inert)
        for k in ("reward_kl", "gigpo_anchor_frac"):
            if k in info:
                metrics[k.replace("gigpo_", "gigpo.")] = info[k]
        if "potential_shaping" in info:
            shaping = info["potential_shaping"]
            metrics["potential_shaping_mean"] = float(shaping.mean())
            # the audit's evidence that shaping acted: a mean of 0 can hide terms that cancel
            metrics["potential_shaping_absmax"] = (
                float(shaping.abs().max()) if shaping.numel() else 0.0
            )
        if "overlong_penalty" in info:
            pen = info["overlong_penalty"]
            metrics["overlong_penalty_mean"] = float(pen.mean())
            metrics["overlong_penalty_frac"] = float((pen != 0).double().mean())
            # the proxy a soft penalty must not become: correct answers it still penalized
            correct = batch.reward >= 1
            metrics["overlong_penalty_correct_frac"] = (
                float((pen[correct] != 0).double().mean()) if bool(correct.any()) else 0.0
            )
        tensors = {"old_logp": old_logp, "ref_logp": ref_logp, "adv": adv}
        return Prepared(batch, mask, batch.size, tensors, metrics)

    def update(self, p: Prepared) -> dict[str, Any]:
        ctx = self.ctx
        scale = self.clip_scale
        cur = [scale.scaled(ctx.blanks)]  # weight.clip_scale's bounds, once measured
        b = cur[0]
        batch, mask, t = p.batch, p.mask, p.tensors
        dev = ctx.device
        target_kl = b.weight.target_kl

        def weigh(rows: list[int]) -> torch.Tensor | None:
            sub = mask[rows]
            if float(sub.sum()) == 0:
                return None
            if scale.pending and stepped[0]:
                old = batch.behavior_logprobs if b.weight.old_policy == "rollout" else t["old_logp"]
                scale.measure(batch, rows, mask, old)
                cur[0] = scale.scaled(ctx.blanks)
            n = b.normalization
            return loss_weights(sub, n.mode, ctx.l_max, n.count_empty_rows, **batch.unit_ids(rows))

        reused = t["old_logp"] is None  # pi_old is the training forward's, detached
        # the trainer's log-probs against the rollout's, where no separate forward measured them:
        # the training forwards before the first optimizer step (the policy still the sampler's
        # weights), so no update's drift is counted as mismatch; with several minibatches, the
        # first minibatch's rows
        measure = reused or b.weight.old_policy == "rollout"
        fresh = torch.zeros(batch.action_mask.shape, dtype=torch.float32) if measure else None
        seen = torch.zeros(batch.size, dtype=torch.bool)
        stepped = [False]

        def micro_step(rows: list[int], weights: torch.Tensor, epoch: int) -> dict[str, float]:
            sub = batch.select(rows)
            logp, ent = ctx.logprobs(ctx.train_module, sub, entropy=True, grad=True)
            if measure and not stepped[0]:
                first = [i for i, r in enumerate(rows) if not seen[r]]
                if first:
                    idx = [rows[i] for i in first]
                    fresh[idx] = logp.detach()[first].float().cpu()
                    seen[idx] = True
            old = logp.detach() if reused else t["old_logp"][rows].to(dev)
            ref = t["ref_logp"]
            loss, met = policy_loss(
                cur[0],
                logp,
                old,
                t["adv"][rows].to(dev),
                mask[rows].to(dev),
                weights.to(dev),
                behavior_logp=sub.behavior_logprobs.to(dev),
                ref_logp=ref[rows].to(dev) if ref is not None else None,
                entropy=ent,
                turn_ids=sub.turn_ids.to(dev),
            )
            met[ENTROPY_SUM] = entropy_token_sum(ent, mask[rows])
            if not torch.isfinite(loss):
                raise TrainingError(
                    f"{ctx.settings.name}: loss is {float(loss.detach())} at step {ctx.step} "
                    f"(epoch {epoch}); metrics {met}. Lower optimizer.lr or check the rewards."
                )
            loss.backward()
            if target_kl is not None:  # the routine stops the epochs past 1.5 x target_kl
                met["approx_kl_num"] = approx_kl(logp, old, mask[rows].to(dev)) * float(
                    weights.sum()
                )
            return met

        probe = self.probe

        def before_step() -> None:
            stepped[0] = True
            if probe is not None:
                probe.add_update(trained_params(ctx.model))

        ctx.model.train()
        out = accumulate(
            ctx,
            p.units,
            weigh,
            micro_step,
            before_step=before_step,
        )
        ctx.model.eval()
        if measure and ctx.dp is not None:  # each rank saw its share of the rows
            fresh, seen = ctx.dp.union_rows(fresh, seen)
        # measured on the tokens trained (a minibatch with none is never forwarded)
        on = mask * seen[:, None].to(mask.dtype) if measure else mask
        mismatch = mismatch_stats(fresh, batch.behavior_logprobs, on) if measure else {}
        if reused:  # pi_old came from the training forward: truncated IS measured on it
            mismatch.update(correction_stats(b, fresh, batch.behavior_logprobs, on))
        return {
            **out.summary(),
            **(out.early_stop_metrics() if target_kl is not None else {}),
            **p.metrics,
            **mismatch,
            **(probe.end_step() if probe is not None else {}),
            "policy_version": float(ctx.engine.policy_version),
            **scale.metrics(),
        }

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.probe is not None:
            out["grad_noise_probe"] = self.probe.state_dict()
        return {**out, **self.clip_scale.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.probe is not None and "grad_noise_probe" in state:
            self.probe.load_state_dict(state["grad_noise_probe"])
        self.clip_scale.load_state_dict(state)
