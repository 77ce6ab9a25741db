"""The actor-critic objective: a value model, GAE advantages, and the template loss plus a value
loss.

prepare: pi_old and values in one no-grad pass (micro-batched; a shared trunk reuses the policy's
hidden states), pi_ref, rewards on tokens (KL in the reward from pi_old), GAE (a bootstrap only
where a limit cut the episode short), whitening. update: the policy loss and the (clipped) value
loss per micro-batch; target-KL early stop before a step; a separate critic takes its own optimizer
steps (``critic.updates_per_step``)."""

from __future__ import annotations

import time
from typing import Any

import torch

from sixblanks.algorithms.critic import approx_kl, explained_variance, value_loss, whiten_population
from sixblanks.algorithms.loss import policy_loss
from sixblanks.algorithms.normalization import loss_weights
from sixblanks.algorithms.weights import mismatch_stats

from ...rollout.trajectory import TrajectoryBatch
from ...stopping import stop_point
from ..base import Collected, Objective, Prepared, TrainingError
from ..context import RunContext, make_optimizer
from ..critic import ValueModel, pool_values, token_values
from ..diagnostics import ENTROPY_SUM, entropy_token_sum, step_diagnostics
from ..policy import policy_forward
from .accumulate import accumulate
from .critic_targets import advantages_and_returns, token_rewards
from .offpolicy import off_policy
from .policy_gradient import batch_metrics


class ActorCritic(Objective):
    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.spec = ctx.blanks.advantage.critic
        opt = ctx.settings.optimizer
        self.shared = self.spec.trunk == "shared"
        self.critic = ValueModel(ctx.model, self.spec.trunk).to(ctx.device)
        self.critic_optimizer = None
        if self.shared:
            ctx.optimizer.add_param_group(
                {"params": list(self.critic.head.parameters()), "lr": opt.lr}
            )
        else:
            params = [p for p in self.critic.parameters() if p.requires_grad]
            self.critic_optimizer = make_optimizer(params, opt, self.spec.lr)

    def values(self, sub: TrajectoryBatch, hidden=None):
        """(values at the declared granularity [B, T], value positions [B, T], bootstrap value
        [B])."""

        dev = self.ctx.device
        v_all = self.critic(sub.tokens.to(dev), sub.attention_mask.to(dev), hidden)
        mask = sub.action_mask.to(dev)
        v_tok, boot = token_values(v_all, mask)
        used, vmask = pool_values(v_tok, mask, sub.turn_ids.to(dev), self.spec.granularity)
        return used, vmask, boot

    def forward(self, sub: TrajectoryBatch, entropy: bool = False):
        temp, top_k, top_p = self.ctx.score_params
        return policy_forward(
            self.ctx.model,
            sub.tokens,
            sub.attention_mask,
            temp,
            top_k=top_k,
            top_p=top_p,
            entropy=entropy,
            want_hidden=self.shared,
        )

    def prepare(self, collected: Collected) -> Prepared:
        """pi_old and the values in one no-grad pass, pi_ref, the rewards on tokens, the
        advantages (whitened) and value targets, the off-policy corrections that mask. The
        tensors, each ``[B, T]``: ``old_logp``, ``ref_logp``, ``adv``, ``old_v``, ``vmask`` (the
        value positions) and ``ret`` (the value targets)."""

        ctx, batch = self.ctx, collected.batch
        ctx.model.eval()
        self.critic.eval()
        (old_logp, old_v, vmask, boot), critic_seconds = self.critic_pass(batch)
        ref_logp = ctx.batched_logprobs(ctx.ref_model, batch)
        mask = batch.action_mask.clone()  # the episode's steps: rewards, GAE and whitening
        rewards, metrics = token_rewards(ctx, batch, mask, old_logp, ref_logp)
        a = ctx.blanks.advantage
        adv, ret = advantages_and_returns(a, self.spec, batch, rewards, old_v, mask, boot, old_logp)
        adv_w = whiten_population(adv, mask, self.spec.whiten, batch.group_ids).float()
        ret = ret.float()
        # the off-policy corrections that mask act on the policy's tokens only (the critic still
        # learns every step's value)
        mask, off = off_policy(ctx, old_logp, batch, mask, collected.replayed_rows)
        metrics.update(off)
        metrics.update(
            {
                **batch_metrics(batch, adv_w, mask),
                "explained_variance": explained_variance(old_v, ret, vmask),
                "response_length": float(mask.sum(1).float().mean()),
                "groups_launched": float(collected.groups_launched),
                "critic_seconds": critic_seconds,
                **mismatch_stats(old_logp, batch.behavior_logprobs, batch.action_mask),
                **step_diagnostics(batch, mask, ctx.group_size),
            }
        )
        tensors = {
            "old_logp": old_logp,
            "ref_logp": ref_logp,
            "adv": adv_w,
            "old_v": old_v,
            "vmask": vmask,
            "ret": ret,
        }
        return Prepared(batch, mask, batch.size, tensors, metrics)

    def critic_pass(self, batch: TrajectoryBatch):
        """((pi_old ``[B, T]``, values ``[B, T]``, value positions ``[B, T]``, bootstrap values
        ``[B]``), the seconds the critic took): one no-grad pass in micro-batches, pi_old in the
        critic's forward where the trunk is shared, charged as one."""

        ctx, mb = self.ctx, self.ctx.settings.rollout.micro_batch_size
        parts: list[list[torch.Tensor]] = [[], [], [], []]
        critic_seconds = 0.0
        with ctx.meter.must_reserve({}, f"critic pass step {ctx.step}"), torch.no_grad():
            for s0 in range(0, batch.size, mb):
                stop_point("the critic pass")  # Ctrl-C (harness/stopping.py)
                sub = batch.select(list(range(s0, min(batch.size, s0 + mb))))
                lp, _, hid = self.forward(sub)
                tc = time.perf_counter()
                values = self.values(sub, hid)
                critic_seconds += time.perf_counter() - tc
                for part, x in zip(parts, (lp, *values)):
                    part.append(x.cpu())
        return tuple(torch.cat(x) for x in parts), critic_seconds

    def update(self, p: Prepared) -> dict[str, Any]:
        """Minibatch updates of the policy and the value model on one batch (``accumulate``), the
        critic stepped with the policy, then ``updates_per_step - 1`` more times alone."""

        ctx = self.ctx
        self.prepared, self.value_weights = p, None  # this update's batch; the value loss weights
        self.critic_time, self.critic_steps = p.metrics["critic_seconds"], 0
        ctx.model.train()
        self.critic.train()
        extra = (self.critic_optimizer,) if self.critic_optimizer is not None else ()
        out = accumulate(
            ctx,
            p.units,
            self._weigh,
            self._micro_step,
            optimizers=extra,
            after_step=self._after_step,
        )
        ctx.model.eval()
        self.critic.eval()
        return {
            **out.summary(),
            **out.early_stop_metrics(),
            **p.metrics,
            "critic_seconds": self.critic_time,  # and a separate critic's own optimizer steps:
            **({"critic_optimizer_steps": float(self.critic_steps)} if extra else {}),
            "policy_version": float(ctx.engine.policy_version),
        }

    def _weigh(self, rows: list[int]) -> dict[str, torch.Tensor] | None:
        """The loss weights of a minibatch's rows (None: no trained token in them) and the value
        loss's, a mean over its value tokens (the extra critic steps reuse them)."""

        mask, vmask = self.prepared.mask[rows], self.prepared.tensors["vmask"][rows]
        if float(mask.sum()) == 0:
            return None
        norm = self.ctx.blanks.normalization
        self.value_weights = vmask / vmask.sum().clamp(min=1.0)
        return {
            "loss": loss_weights(
                mask,
                norm.mode,
                self.ctx.l_max,
                norm.count_empty_rows,
                **self.prepared.batch.unit_ids(rows),
            ),
            "value": self.value_weights,
        }

    def _value_part(self, sub, rows, hid, vw):
        """The clipped value loss of ``rows`` (weighted by ``vw``) and which tokens were clipped."""

        t, dev = self.prepared.tensors, self.ctx.device
        v_new, _, _ = self.values(sub, hid)
        vl_tok, clipped = value_loss(
            v_new, t["old_v"][rows].to(dev), t["ret"][rows].to(dev), self.spec.value_clip
        )
        return (vl_tok * vw).sum(), clipped

    def _micro_step(self, rows: list[int], w: dict[str, torch.Tensor], epoch: int) -> dict:
        """One micro-batch: policy loss plus vf_coef x value loss, backpropagated."""

        ctx, t, dev = self.ctx, self.prepared.tensors, self.ctx.device
        sub, weights = self.prepared.batch.select(rows), w["loss"]
        logp, ent, hid = self.forward(sub, entropy=True)
        m_dev = self.prepared.mask[rows].to(dev)
        pl, met = policy_loss(
            ctx.blanks,
            logp,
            t["old_logp"][rows].to(dev),
            t["adv"][rows].to(dev),
            m_dev,
            weights.to(dev),
            behavior_logp=sub.behavior_logprobs.to(dev),
            ref_logp=t["ref_logp"][rows].to(dev),
            entropy=ent,
            turn_ids=sub.turn_ids.to(dev),
        )
        met[ENTROPY_SUM] = entropy_token_sum(ent, m_dev)
        tc = time.perf_counter()  # the value part's time (the update's charge counts it)
        vw = w["value"].to(dev)
        vl, vclipped = self._value_part(sub, rows, hid, vw)
        total = pl + self.spec.vf_coef * vl
        if not torch.isfinite(total):
            raise TrainingError(
                f"{ctx.settings.name}: loss is {float(total.detach())} at step {ctx.step} "
                f"(epoch {epoch}); policy {met.get('pg_loss')}, value {float(vl.detach())}"
            )
        total.backward()
        self.critic_time += time.perf_counter() - tc
        kl = approx_kl(logp, t["old_logp"][rows].to(dev), m_dev) * float(weights.sum())
        met.update(
            value_loss=float(vl.detach()),
            value_clip_count=float((vclipped * (vw > 0)).sum()),
            value_tokens=float((vw > 0).sum()),
            approx_kl_num=kl,
        )
        return met

    def _after_step(self, rows: list[int]) -> None:
        """After each optimizer step: the critic's, then its extra steps on the same rows."""

        if self.critic_optimizer is None:
            return
        self.step_critic()
        micro = self.ctx.settings.rollout.micro_batch_size
        for _ in range(self.spec.updates_per_step - 1):
            self.critic_optimizer.zero_grad(set_to_none=True)
            for s0 in range(0, len(rows), micro):
                stop_point("the critic's update")
                part = rows[s0 : s0 + micro]
                vw = self.value_weights[s0 : s0 + micro].to(self.ctx.device)
                vl, _ = self._value_part(self.prepared.batch.select(part), part, None, vw)
                (self.spec.vf_coef * vl).backward()
            self.step_critic()

    def step_critic(self) -> None:
        torch.nn.utils.clip_grad_norm_(
            self.critic.parameters(), self.ctx.settings.optimizer.grad_clip or float("inf")
        )
        self.critic_optimizer.step()
        self.critic_steps += 1

    def state_dict(self) -> dict[str, Any]:
        state = {
            "critic": {k: v.detach().cpu().clone() for k, v in self.critic.state_dict().items()}
        }
        if self.critic_optimizer is not None:
            state["critic_optimizer"] = self.critic_optimizer.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.critic.load_state_dict(state["critic"])
        if self.critic_optimizer is not None:
            self.critic_optimizer.load_state_dict(state["critic_optimizer"])
