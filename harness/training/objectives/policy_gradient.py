"""The critic-free policy-gradient objective: the six blanks' template loss.

prepare: pi_old (recomputed by the trainer) and pi_ref on the batch, then the A blank (with the
reward-side mask and regularizer: overlong shaping and filtering, KL in the reward).
update: the template loss (w, Z, loss-side R) over the data blank's epochs x minibatches, one
:class:`~.pg_pass.PolicyPass` per batch.
"""

from __future__ import annotations

from typing import Any

import torch

from sixblanks.algorithms.loss import compute_advantages
from sixblanks.algorithms.weights import mismatch_stats

from ...rollout.trajectory import TrajectoryBatch
from ..base import Collected, Objective, Prepared, Stateless, TrainingError
from ..context import RunContext
from ..diagnostics import grad_noise_probe, step_diagnostics
from ..faults import planted_rewards
from .clip_scale import ClipScale
from .offpolicy import off_policy
from .pg_pass import PolicyPass


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


def shaping_metrics(info: dict[str, Any], batch: TrajectoryBatch) -> dict[str, float]:
    """Every shaping term of the reward the A blank reported in ``info`` (the audit lists them; a
    term that never changed a reward is reported as inert)."""

    metrics = {}
    for k in ("reward_kl", "gigpo_anchor_frac"):
        if k in info:
            metrics[k.replace("gigpo_", "gigpo.")] = info[k]
    if "potential_shaping" in info:
        shaping = info["potential_shaping"]
        metrics["potential_shaping_mean"] = float(shaping.mean())
        # the audit's evidence that shaping acted: a mean of 0 can hide terms that cancel
        metrics["potential_shaping_absmax"] = float(shaping.abs().max()) if shaping.numel() else 0.0
    if "overlong_penalty" in info:
        pen = info["overlong_penalty"]
        metrics["overlong_penalty_mean"] = float(pen.mean())
        metrics["overlong_penalty_frac"] = float((pen != 0).double().mean())
        # the proxy a soft penalty must not become: correct answers it still penalized
        correct = batch.reward >= 1
        metrics["overlong_penalty_correct_frac"] = (
            float((pen[correct] != 0).double().mean()) if bool(correct.any()) else 0.0
        )
    return metrics


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
        """pi_old and pi_ref on the batch, the A blank (with the reward-side mask and
        regularizer), the off-policy corrections that mask, and the batch's metrics. The tensors:
        ``old_logp`` and ``ref_logp`` ``[B, T]`` (None where not computed), ``adv`` ``[B, T]``."""

        ctx, batch = self.ctx, collected.batch
        ctx.model.eval()
        old_logp, ref_logp = self.policy_logprobs(batch)
        mask0 = batch.action_mask.clone()
        adv, mask, info = self.advantages(collected, mask0, old_logp, ref_logp)
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
        metrics.update(shaping_metrics(info, batch))
        tensors = {"old_logp": old_logp, "ref_logp": ref_logp, "adv": adv}
        return Prepared(batch, mask, batch.size, tensors, metrics)

    def policy_logprobs(self, batch: TrajectoryBatch):
        """(pi_old, pi_ref) log-probs ``[B, T]``, each None where not computed. pi_old:
        recomputed by the trainer, or (exactly on-policy) None, taken from the training forward,
        or (the bypass form, weight.old_policy: rollout) the rollout's own log-probs."""

        ctx = self.ctx
        if ctx.blanks.weight.old_policy == "rollout":
            old_logp = batch.behavior_logprobs.clone()
        elif self.reuse_forward:
            old_logp = None
        else:
            old_logp = ctx.batched_logprobs(ctx.model, batch)
        ref_logp = ctx.batched_logprobs(ctx.ref_model, batch) if self.ref_forward else None
        return old_logp, ref_logp

    def advantages(self, collected: Collected, mask0, old_logp, ref_logp):
        """The A blank on the batch: (advantages ``[B, T]``, the reward-side mask ``[B, T]``, the
        estimator's info), from the rewards learnt from (the batch's, or a planted fault's:
        arms.<arm>.fault). ``mask0``: the action mask ``[B, T]``."""

        ctx, batch = self.ctx, collected.batch
        reward, turn_rewards = planted_rewards(
            ctx.settings.reward_fault,
            batch.reward,
            batch.turn_rewards,
            batch.n_turns,
            ctx.settings.train_seed,
            ctx.step,
        )
        return compute_advantages(
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

    def update(self, p: Prepared) -> dict[str, Any]:
        """The template loss over the data blank's epochs x minibatches (:class:`PolicyPass`)."""

        run = PolicyPass(self.ctx, p, self.clip_scale, self.probe)
        out = run.run()
        mismatch = run.mismatch_metrics()
        return {
            **out.summary(),
            **(out.early_stop_metrics() if run.target_kl is not None else {}),
            **p.metrics,
            **mismatch,
            **(self.probe.end_step() if self.probe is not None else {}),
            "policy_version": float(self.ctx.engine.policy_version),
            **self.clip_scale.metrics(),
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
