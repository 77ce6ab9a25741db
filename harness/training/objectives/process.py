"""Policy gradient with a process reward model: the A blank's 'prm' and 'prime'
estimators, whose inputs come from a second model trained online in the same budget.

- prm: an explicit step scorer (:class:`~sixblanks.harness.training.process_reward.StepScorer`)
  trained on the environment's step labels, or a user-supplied scorer (``module:function``, its
  calls counted as judge calls). Each batch is scored before the scorer trains on it, so the
  calibration counts (``prm_calib.*``) measure it on steps it has not seen.
- prime: PRIME's implicit PRM (:class:`~sixblanks.harness.training.process_reward.ImplicitPRM`),
  trained on the outcome labels before (default) or after its token rewards are computed. Its
  outcome-prediction AUC is measured on each batch before it trains on it; the intervention probe
  runs every step.

The second model's work is charged under its own label ('prm' / 'prime'); ``credit_seconds`` is
its device time in the step.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from ...imports import ImportObjectError, import_object
from ...stopping import stop_point
from ..base import Collected, Prepared, TrainingError
from ..context import RunContext
from ..process_reward import (
    ImplicitPRM,
    StepScorer,
    auc,
    calibration_metrics,
    intervention,
    log_ratio,
    step_bce,
    user_scores,
)
from .policy_gradient import PolicyGradient


class ProcessCredit(PolicyGradient):
    SKIPS_UNUSED = False  # PRIME's implicit PRM reads pi_ref; the scorers read pi_old

    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        a, opt = ctx.blanks.advantage, ctx.settings.optimizer
        self.kind = a.estimator
        self.scorer = self.user = self.implicit = self.optimizer = None
        self.extra: dict[str, float] = {}
        name = ctx.settings.name
        if self.kind == "prime":
            self.implicit = ImplicitPRM(
                ctx.model, a.prime.beta, a.prime.lr or opt.lr, opt.betas, opt.weight_decay
            )
        elif a.prm.scorer == "trained":
            d = ctx.blanks.data
            tree = d.source == "search" and d.search.tree_labels and d.search.mode != "best_of_n"
            if not ctx.task.has_step_labels and not tree:
                raise TrainingError(
                    f"{name}: advantage.prm.scorer 'trained' learns from step labels, and task "
                    f"'{ctx.task.name}' gives none (info['step_correct']); use a task with step "
                    "labels (chain_arithmetic, plan_execute), a search tree's labels (data.source "
                    "search, search.tree_labels) or a scorer 'module:function'"
                )
            self.scorer = StepScorer(ctx.model, a.prm.trunk).to(ctx.device)
            params = [p for p in self.scorer.parameters() if p.requires_grad]
            if a.prm.trunk == "shared":  # the policy's own weights are not the PRM's to train
                params = list(self.scorer.model.head.parameters())
            self.optimizer = torch.optim.AdamW(
                params, lr=a.prm.lr or opt.lr, betas=tuple(opt.betas), weight_decay=opt.weight_decay
            )
        else:
            try:
                self.user = import_object(a.prm.scorer, "callable")
            except ImportObjectError as exc:
                raise TrainingError(f"{name}: advantage.prm.scorer: {exc}") from None
            if not callable(self.user):
                raise TrainingError(
                    f"{name}: advantage.prm.scorer: '{a.prm.scorer}' is not callable"
                )

    def worst_extra(self, rows: int) -> dict[str, float]:
        """A user-supplied scorer's calls: one per episode (judge calls)."""

        return {"judge_calls": float(rows)} if self.user is not None else {}

    def process_inputs(self, collected: Collected, old_logp, ref_logp) -> dict[str, Any]:
        ctx, batch = self.ctx, collected.batch
        self.extra = {}  # this step's metrics only
        calls = [0.0]
        charge = ctx.meter.must_reserve(
            self.worst_extra(batch.size), f"{self.kind} model step {ctx.step}"
        )
        with charge:
            if self.implicit is not None:
                inputs = self.prime(batch, ref_logp)
            else:
                inputs = self.prm(batch, calls)
            if self.user is not None:
                charge.actual = {"judge_calls": calls[0]}
        self.extra["credit_seconds"] = charge.elapsed[0]
        return inputs

    def prepare(self, collected: Collected) -> Prepared:
        p = super().prepare(collected)
        p.metrics.update(self.extra)
        return p

    # ------------------------------------------------------------------ explicit PRM

    def prm(self, batch, calls: list[float]) -> dict[str, Any]:
        ctx, spec = self.ctx, self.ctx.blanks.advantage.prm
        labels = batch.step_labels.clone()
        labels[batch.failed] = float("nan")
        if self.user is not None:

            def count(n: int) -> None:
                calls[0] += n

            try:
                scores = user_scores(self.user, batch, count)
            except ValueError as exc:
                raise TrainingError(f"{ctx.settings.name}: {exc}") from None
        else:
            self.scorer.eval()
            with torch.no_grad():
                logits = self.batched(lambda sub: self.scorer.logits(sub, ctx.device), batch)
            scores = torch.sigmoid(logits)
            self.extra.update(self.train_scorer(batch, labels))
        has = ~labels.isnan() & ~scores.isnan()
        if has.any():  # scored before the scorer saw these labels
            self.extra["prm.brier"] = float(((scores[has] - labels[has]) ** 2).mean())
            step_auc = auc(scores[has], labels[has])
            if step_auc is not None:
                self.extra["prm.auc"] = step_auc
        self.extra.update(calibration_metrics(scores, labels, spec.calibration_bins))
        self.extra["prm.score_mean"] = float(scores[~scores.isnan()].mean())
        return {"step_scores": scores}

    def train_scorer(self, batch, labels) -> dict[str, float]:
        """One optimizer step of BCE on the batch's labelled steps (micro-batched)."""

        ctx = self.ctx
        n = int((~labels.isnan()).sum())
        if n == 0:
            return {"prm.labelled_steps": 0.0}
        self.scorer.train()
        self.optimizer.zero_grad(set_to_none=True)
        total, mb = 0.0, ctx.settings.rollout.micro_batch_size
        for s0 in range(0, batch.size, mb):
            stop_point("the process reward model's update")  # Ctrl-C (harness/stopping.py)
            rows = list(range(s0, min(batch.size, s0 + mb)))
            loss, k = step_bce(self.scorer.logits(batch.select(rows), ctx.device), labels[rows])
            if k:
                (loss / n).backward()
                total += float(loss.detach())
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        torch.nn.utils.clip_grad_norm_(params, ctx.settings.optimizer.grad_clip or float("inf"))
        self.optimizer.step()
        self.scorer.eval()
        return {"prm.loss": total / n, "prm.labelled_steps": float(n)}

    def batched(self, fn, batch) -> torch.Tensor:
        mb = self.ctx.settings.rollout.micro_batch_size

        def part(s: int) -> torch.Tensor:
            stop_point("a process reward pass")  # Ctrl-C (harness/stopping.py)
            return fn(batch.select(list(range(s, min(batch.size, s + mb))))).cpu()

        return torch.cat([part(s) for s in range(0, batch.size, mb)])

    # ------------------------------------------------------------------ PRIME

    def prime(self, batch, ref_logp) -> dict[str, Any]:
        ctx, spec = self.ctx, self.ctx.blanks.advantage.prime
        prm = self.implicit
        prm.phi.to(ctx.device)

        def score(model, sub, grad: bool = False) -> torch.Tensor:
            return ctx.logprobs(model, sub, grad=grad)[0]

        rows = [i for i in range(batch.size) if not batch.failed[i]]
        train = batch.select(rows) if len(rows) < batch.size else batch
        mb = ctx.settings.rollout.micro_batch_size
        clip = ctx.settings.optimizer.grad_clip
        if rows and spec.update == "before":
            z_pre, loss = prm.train_step(train, ref_logp[rows], score, mb, clip)
        phi_logp = ctx.batched_logprobs(prm.phi, batch)
        if rows and spec.update == "after":
            z_pre = prm.sequence_logits(phi_logp[rows], ref_logp[rows], train.action_mask)
            _, loss = prm.train_step(train, ref_logp[rows], score, mb, clip)
        mask = batch.action_mask
        rewards = prm.beta * log_ratio(phi_logp, ref_logp, mask)
        m = {"prime.token_reward_mean": float(rewards.sum() / mask.sum().clamp(min=1))}
        if rows:
            m["prime.loss"] = loss
            held_out = auc(z_pre, train.reward)  # the PRM had not trained on this batch
            if held_out is not None:
                m["prime.auc"] = held_out
        if spec.probes:
            m.update(
                intervention(
                    prm,
                    ctx.ref_model,
                    batch,
                    ctx.task,
                    ctx.tokenizer,
                    score,
                    spec.probes,
                    random.Random(ctx.settings.train_seed * 100003 + ctx.step),
                )
            )
        self.extra.update(m)
        return {"process_rewards": rewards}

    # ------------------------------------------------------------------ checkpoint

    def state_dict(self) -> dict[str, Any]:
        out = super().state_dict()  # the gradient-noise probe's, if any
        if self.implicit is not None:
            return {**out, "prime": self.implicit.state_dict()}
        if self.scorer is not None:
            return {
                **out,
                "prm": {k: v.detach().cpu().clone() for k, v in self.scorer.state_dict().items()},
                "prm_optimizer": self.optimizer.state_dict(),
            }
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.implicit is not None:
            self.implicit.load_state_dict(state["prime"])
        elif self.scorer is not None:
            self.scorer.load_state_dict(state["prm"])
            self.optimizer.load_state_dict(state["prm_optimizer"])
