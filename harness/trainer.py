"""One run: rollout -> rewards -> data blank -> advantage -> template loss -> optimizer step,
under a budget ledger, with periodic held-out evaluation (counted apart from the budget).

The run ends when the worst-case cost of the next batch would not fit in the budget.
"""

from __future__ import annotations

import copy
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from sixblanks.algorithms.blanks import Blanks
from sixblanks.algorithms.data import DynamicSampler, minibatches
from sixblanks.algorithms.loss import compute_advantages, dpo_loss, policy_loss, sft_loss
from sixblanks.algorithms.normalization import loss_weights
from sixblanks.algorithms.weights import mismatch_stats
from sixblanks.budgets.ledger import TIME_COUNTERS, Budget, Ledger

from .errors import SixblanksError
from .evaluate import evaluate
from .policy import policy_logprobs
from .rollout.agent import run_episodes
from .rollout.engine import HFEngine, RolloutEngine, SamplingParams
from .rollout.trajectory import TrajectoryBatch
from .tasks.base import Task
from .tasks.verify import VerifierGate

TRAIN_SEED_RANGE = 400_000_000
"""Training instances use seeds below this (demonstrations and held-out sets use disjoint ranges)."""


class TrainingError(SixblanksError):
    exit_code = 1


@dataclass
class RunSettings:
    """Everything one run needs, resolved from the experiment config."""

    blanks: Blanks
    rollout: Any  # RolloutConfig
    optimizer: Any  # OptimizerConfig
    budget: dict[str, float]
    seed: int
    eval_every: float | None = None
    eval_counter: str | None = None
    eval_size: int = 64
    eval_temperature: float = 0.0
    eval_samples: int = 1
    reward_range: tuple[float, float] = (0.0, 1.0)
    name: str = "run"


@dataclass
class RunResult:
    steps: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    census: list[dict[str, Any]] = field(default_factory=list)
    ledger: Ledger | None = None
    eval_cost: dict[str, float] = field(
        default_factory=lambda: {"generated_tokens": 0.0, "verifier_calls": 0.0}
    )
    ended_because: str = ""


class DeviceTimer:
    """Device-seconds: process CPU time on CPU; synchronized elapsed time on CUDA (per device)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            return time.perf_counter()
        return time.process_time()


class Trainer:
    def __init__(
        self,
        settings: RunSettings,
        task: Task,
        model,
        tokenizer,
        *,
        ref_model=None,
        engine: RolloutEngine | None = None,
        ledger: Ledger | None = None,
        log: Callable[[str], None] | None = None,
    ):
        self.s, self.task, self.model, self.tok = settings, task, model, tokenizer
        self.blanks = settings.blanks
        self.device = next(model.parameters()).device
        self.ref_model = ref_model if ref_model is not None else self._frozen_copy(model)
        self.engine = engine or HFEngine(model, tokenizer)
        self.ledger = ledger or Ledger(Budget(dict(settings.budget)))
        self.log = log or (lambda _m: None)
        self.rng = random.Random(settings.seed)
        self.gen = torch.Generator().manual_seed(settings.seed)
        torch.manual_seed(settings.seed)
        opt = settings.optimizer
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=opt.lr, betas=tuple(opt.betas), weight_decay=opt.weight_decay
        )
        self.critic = None
        self.critic_optimizer = None
        if self.blanks.advantage.estimator == "gae":
            from .critic import ValueModel

            cspec = self.blanks.advantage.critic
            self.critic = ValueModel(model, cspec.trunk).to(self.device)
            if cspec.trunk == "separate":
                self.critic_optimizer = torch.optim.AdamW(
                    self.critic.parameters(),
                    lr=cspec.lr or opt.lr,
                    betas=tuple(opt.betas),
                    weight_decay=opt.weight_decay,
                )
            else:
                self.optimizer.add_param_group(
                    {"params": list(self.critic.head.parameters()), "lr": opt.lr}
                )
        self.gate = VerifierGate(task)
        self.timer = DeviceTimer(self.device)
        self.result = RunResult(ledger=self.ledger)
        self.step_idx = 0
        self.group_counter = 0
        self._last_step_cost: dict[str, float] = {}
        self._next_eval = 0.0
        r = settings.rollout
        self.G = self.blanks.data.group_size or r.group_size
        if self.blanks.advantage.estimator == "remax":
            self.G = 1
        self.params = SamplingParams(r.temperature, r.top_p, r.top_k, r.max_new_tokens)
        self.score_params = self.params.scoring()
        self.l_max = self.blanks.normalization.l_max or r.max_new_tokens * max(1, task.max_turns)
        self.eval_counter = settings.eval_counter or next(iter(settings.budget))
        limit = settings.budget.get(self.eval_counter)
        self.eval_every = settings.eval_every or (limit / 4 if limit else None)

    @staticmethod
    def _frozen_copy(model):
        ref = copy.deepcopy(model)
        ref.eval()
        for p in ref.parameters():
            p.requires_grad_(False)
        return ref

    # ------------------------------------------------------------------ budget helpers

    def _worst_case_round(self, n_prompts: int, greedy: bool = False) -> dict[str, float]:
        r = self.s.rollout
        turns = max(1, self.task.max_turns)
        n = n_prompts * self.G + (n_prompts if greedy else 0)
        cost = {
            "launched_tokens": n * turns * r.max_new_tokens,
            "prompt_tokens": n * turns * r.max_prompt_tokens,
            "rollouts_launched": n,
            "env_steps": n * turns,
            "verifier_calls": n * turns,
            "judge_calls": 0.0,
        }
        return {k: float(v) for k, v in cost.items()}

    def _worst_case_update(self, n_rollouts: int, tokens: float) -> dict[str, float]:
        d = self.blanks.data
        return {
            "optimizer_steps": float(d.epochs * d.minibatches),
            "accepted_tokens": float(tokens),
            "rollouts_accepted": float(n_rollouts),
        }

    def _with_time_estimate(self, cost: dict[str, float]) -> dict[str, float]:
        out = dict(cost)
        for k in TIME_COUNTERS:
            if k in self.ledger.budget.limits:
                out[k] = self._last_step_cost.get(k, 0.0) * 1.2
        return {k: v for k, v in out.items() if k in self.ledger.budget.limits}

    def _sample_instances(self, n: int):
        return self.task.instances([self.rng.randrange(TRAIN_SEED_RANGE) for _ in range(n)])

    def _rollout_round(self, n_prompts: int, greedy_baseline: bool):
        """Reserve, generate, commit. Returns (batch, greedy batch or None), or None if it would not fit."""

        worst = self._worst_case_round(n_prompts, greedy_baseline)
        res = self.ledger.reserve(
            self._with_time_estimate(worst), label=f"rollout step {self.step_idx}"
        )
        if res is None:
            return None
        calls0 = self.gate.stats.calls
        instances = self._sample_instances(n_prompts)
        batch = run_episodes(
            self.engine,
            self.tok,
            self.task,
            instances,
            self.G,
            self.params,
            self.gate,
            max_context_tokens=self.s.rollout.max_prompt_tokens,
            generator=self.gen,
            group_offset=self.group_counter,
        )
        self.group_counter += n_prompts
        greedy = None
        if greedy_baseline:
            gparams = SamplingParams(0.0, 1.0, 0, self.s.rollout.max_new_tokens)
            greedy = run_episodes(
                self.engine,
                self.tok,
                self.task,
                instances,
                1,
                gparams,
                self.gate,
                max_context_tokens=self.s.rollout.max_prompt_tokens,
                generator=self.gen,
            )
        batches = [batch] + ([greedy] if greedy is not None else [])
        actual = {
            "launched_tokens": float(sum(b.launched_tokens() for b in batches)),
            "prompt_tokens": float(sum(b.prompt_tokens() for b in batches)),
            "rollouts_launched": float(sum(b.size for b in batches)),
            "env_steps": float(sum(int(b.n_turns.sum()) for b in batches)),
            "verifier_calls": float(self.gate.stats.calls - calls0),
        }
        self.ledger.commit(res, actual)
        if greedy is not None:
            self.ledger.discard("baseline", greedy.launched_tokens(), greedy.size)
        return batch, greedy

    # ------------------------------------------------------------------ one step

    def step(self) -> dict[str, Any] | None:
        """One optimizer-step batch (several optimizer steps with epochs/minibatches). None: budget spent."""

        if self.blanks.objective == "sft":
            return self._step_sft()
        if self.blanks.objective == "dpo":
            return self._step_dpo()
        t_dev0, t_wall0 = self.timer.now(), time.perf_counter()
        d = self.blanks.data
        n_prompts = self.s.rollout.prompts_per_step
        greedy = self.blanks.advantage.estimator == "remax"
        # the whole step must fit: worst-case rollouts (one round) and the update
        if not self.ledger.fits(
            self._with_time_estimate(
                {**self._worst_case_round(n_prompts, greedy), **self._worst_case_update(0, 0)}
            )
        ):
            return None
        sampler = DynamicSampler(
            n_prompts, d.max_sampling_rounds if d.dynamic_sampling else 1, d.dynamic_sampling
        )
        kept_batches, greedy_batches = [], []
        while not sampler.done:
            out = self._rollout_round(n_prompts, greedy)
            if out is None:
                break
            batch, gbatch = out
            tokens_per = torch.tensor(
                [sum(e - s for k, s, e in segs if k == "action") for segs in batch.segments]
            )
            kept = sampler.add_round(batch.reward, batch.group_ids, tokens_per)
            keep_rows = [i for i, g in enumerate(batch.group_ids.tolist()) if g in set(kept)]
            drop_rows = [i for i in range(batch.size) if i not in set(keep_rows)]
            if drop_rows:
                self.ledger.discard(
                    "dynamic_sampling", float(tokens_per[drop_rows].sum()), len(drop_rows)
                )
            if keep_rows:
                kept_batches.append(batch.select(keep_rows))
                if gbatch is not None:
                    gbatch_rows = [i for i in range(gbatch.size) if i in set(keep_rows)]
                    greedy_batches.append(gbatch.select(gbatch_rows))
        census = sampler.census.as_dict()
        self.result.census.append({"step": self.step_idx, **census})
        if sampler.census.cap_hit and d.dynamic_sampling and d.on_round_cap == "error":
            raise TrainingError(
                f"{self.s.name}: dynamic sampling kept {sampler.census.groups_kept}/{n_prompts} groups after "
                f"{sampler.census.rounds} rounds (data.max_sampling_rounds); set data.on_round_cap: train_short to continue"
            )
        if not kept_batches:
            if sampler.census.rounds == 0:
                return None
            metrics = {"step": self.step_idx, "skipped": 1.0, "trainable_group_frac": 0.0}
            self._finish_step(metrics, t_dev0, t_wall0)
            return metrics
        batch = TrajectoryBatch.concat(kept_batches, self.tok.pad_token_id or 0)
        baseline = (
            TrajectoryBatch.concat(greedy_batches, self.tok.pad_token_id or 0).reward
            if greedy
            else None
        )
        metrics = self._update(batch, baseline, sampler.census.groups_launched)
        metrics["sampling_rounds"] = float(sampler.census.rounds)
        self._finish_step(metrics, t_dev0, t_wall0)
        return metrics

    def _finish_step(self, metrics: dict[str, Any], t_dev0: float, t_wall0: float) -> None:
        dev, wall = self.timer.now() - t_dev0, time.perf_counter() - t_wall0
        self._last_step_cost = {"device_seconds": dev, "wall_seconds": wall}
        self.ledger.add(
            {"device_seconds": dev, "wall_seconds": wall}, label=f"step {self.step_idx}"
        )
        # sync the engine: a colocated HF engine shares the weights (a version bump); vLLM reloads
        self.engine.load_weights(None)
        snap = self.ledger.snapshot(self.step_idx)
        metrics.update({f"ledger.{k}": v for k, v in snap.items() if k != "step"})
        self.result.steps.append(metrics)
        self.step_idx += 1

    def _logprobs(self, model, batch: TrajectoryBatch, entropy: bool = False, grad: bool = False):
        temp, top_k, top_p = self.score_params
        ctx = torch.enable_grad() if grad else torch.no_grad()
        with ctx:
            return policy_logprobs(
                model,
                batch.tokens,
                batch.attention_mask,
                temp,
                top_k=top_k,
                top_p=top_p,
                entropy=entropy,
            )

    def _batched_logprobs(self, model, batch: TrajectoryBatch) -> torch.Tensor:
        mb = self.s.rollout.micro_batch_size
        parts = [
            self._logprobs(model, batch.select(list(range(s, min(batch.size, s + mb)))))[0]
            for s in range(0, batch.size, mb)
        ]
        return torch.cat(parts, 0).cpu()

    def _admit_update(self, batch: TrajectoryBatch, mask: torch.Tensor):
        """Charge failed samples as discards and reserve the update: (accepted tokens, rows, reservation)."""

        failed_tokens = sum(
            e - s
            for i in batch.failed.nonzero().flatten().tolist()
            for k, s, e in batch.segments[i]
            if k == "action"
        )
        if failed_tokens:
            self.ledger.discard("failed", float(failed_tokens), int(batch.failed.sum()))
        accepted = float(mask.sum())
        rows_accepted = int((mask.sum(1) > 0).sum())
        upd_res = self.ledger.reserve(
            self._worst_case_update(rows_accepted, accepted), label=f"update {self.step_idx}"
        )
        if upd_res is None:  # pragma: no cover - the step's worst case was checked before launch
            raise TrainingError("the update of an admitted batch no longer fits the budget")
        return accepted, rows_accepted, upd_res

    def _commit_update(
        self, reservation, opt_steps: int, accepted: float, rows_accepted: int
    ) -> None:
        self.ledger.commit(
            reservation,
            {
                "optimizer_steps": float(opt_steps),
                "accepted_tokens": accepted,
                "rollouts_accepted": float(rows_accepted),
            },
        )

    def _update(
        self, batch: TrajectoryBatch, baseline_rewards, groups_launched: int
    ) -> dict[str, Any]:
        if self.critic is not None:
            return self._update_gae(batch, groups_launched)
        b = self.blanks
        self.model.eval()
        old_logp = self._batched_logprobs(self.model, batch)  # pi_old: recomputed by the trainer
        ref_logp = self._batched_logprobs(self.ref_model, batch)
        mask0 = batch.action_mask.clone()
        adv, mask, info = compute_advantages(
            b,
            batch.reward,
            mask0,
            batch.group_ids,
            old_logp=old_logp,
            ref_logp=ref_logp,
            turn_rewards=batch.turn_rewards,
            turn_ids=batch.turn_ids,
            baseline_rewards=baseline_rewards,
            truncated=batch.truncated,
            l_max=self.l_max,
        )
        filtered = (mask0.sum(1) > 0) & (mask.sum(1) == 0)
        if filtered.any():
            self.ledger.discard(
                "overlong_filter", float(mask0[filtered].sum()), int(filtered.sum())
            )
        accepted, rows_accepted, upd_res = self._admit_update(batch, mask)

        self.model.train()
        opt_steps = 0
        sums: dict[str, float] = {}
        n_mb = 0
        grad_norms = []
        need_entropy = True
        for epoch, rows in minibatches(batch.size, b.data.minibatches, b.data.epochs, self.gen):
            sub_mask = mask[rows]
            weights = loss_weights(
                sub_mask, b.normalization.mode, self.l_max, b.normalization.count_empty_rows
            )
            if float(sub_mask.sum()) == 0:
                continue
            self.optimizer.zero_grad(set_to_none=True)
            mb_metrics: dict[str, float] = {}
            micro = self.s.rollout.micro_batch_size
            for s in range(0, len(rows), micro):
                r_idx = rows[s : s + micro]
                local = list(range(s, min(len(rows), s + micro)))
                sub = batch.select(r_idx)
                logp, ent = self._logprobs(self.model, sub, entropy=need_entropy, grad=True)
                loss, met = policy_loss(
                    b,
                    logp,
                    old_logp[r_idx].to(self.device),
                    adv[r_idx].to(self.device),
                    mask[r_idx].to(self.device),
                    weights[local].to(self.device),
                    behavior_logp=sub.behavior_logprobs.to(self.device),
                    ref_logp=ref_logp[r_idx].to(self.device),
                    entropy=ent,
                )
                if not torch.isfinite(loss):
                    raise TrainingError(
                        f"{self.s.name}: loss is {float(loss.detach())} at step {self.step_idx} (epoch {epoch}); "
                        f"metrics {met}. Lower optimizer.lr or check the rewards."
                    )
                loss.backward()
                for k, v in met.items():
                    if k != "ratio_max":
                        mb_metrics[k] = mb_metrics.get(k, 0.0) + v
                    else:
                        mb_metrics[k] = max(mb_metrics.get(k, 0.0), v)
            gn = self._clip_and_step()
            grad_norms.append(gn)
            opt_steps += 1
            n_mb += 1
            for k, v in mb_metrics.items():
                sums[k] = sums.get(k, 0.0) + v
        self.model.eval()
        self._commit_update(upd_res, opt_steps, accepted, rows_accepted)
        rewards = batch.reward
        groups = torch.unique(batch.group_ids)
        trainable = sum(
            1 for g in groups.tolist() if torch.unique(rewards[batch.group_ids == g]).numel() > 1
        )
        metrics = {k: v / max(1, n_mb) for k, v in sums.items()}
        metrics.update(
            {
                "step": self.step_idx,
                "reward_mean": float(rewards.mean()),
                "reward_std": float(rewards.std()) if rewards.numel() > 1 else 0.0,
                "adv_abs_mean": float((adv.abs() * mask).sum() / mask.sum().clamp(min=1)),
                "response_length": float(mask0.sum(1).float().mean()),
                "truncated_frac": float(batch.truncated.float().mean()),
                "failed": float(batch.failed.sum()),
                "trainable_group_frac": trainable / max(1, len(groups)),
                "groups_launched": float(groups_launched),
                "optimizer_steps": float(opt_steps),
                "grad_norm": float(sum(grad_norms) / max(1, len(grad_norms))),
                "policy_version": float(self.engine.policy_version),
                **mismatch_stats(old_logp, batch.behavior_logprobs, mask0),
            }
        )
        if "reward_kl" in info:
            metrics["reward_kl"] = info["reward_kl"]
        return metrics

    # ------------------------------------------------------------------ actor-critic (gae)

    def _critic_values(self, sub: TrajectoryBatch, hidden=None):
        from .critic import pool_values, token_values

        v_all = self.critic(sub.tokens.to(self.device), sub.attention_mask.to(self.device), hidden)
        mask = sub.action_mask.to(self.device)
        v_tok, boot = token_values(v_all, mask)
        used, vmask = pool_values(
            v_tok, mask, sub.turn_ids.to(self.device), self.blanks.advantage.critic.granularity
        )
        return used, vmask, boot

    def _update_gae(self, batch: TrajectoryBatch, groups_launched: int) -> dict[str, Any]:
        from sixblanks.algorithms.critic import (
            approx_kl,
            explained_variance,
            gae,
            place_rewards,
            target_kl_exceeded,
            value_loss,
            whiten_population,
        )
        from sixblanks.algorithms.regularizers import kl_estimate

        from .policy import policy_forward

        b = self.blanks
        a, cspec = b.advantage, b.advantage.critic
        shared = cspec.trunk == "shared"
        temp, top_k, top_p = self.score_params
        self.model.eval()
        self.critic.eval()
        mb_size = self.s.rollout.micro_batch_size
        old_parts, v_parts, vm_parts, boot_parts = [], [], [], []
        t_critic = 0.0
        with torch.no_grad():
            for s0 in range(0, batch.size, mb_size):
                sub = batch.select(list(range(s0, min(batch.size, s0 + mb_size))))
                lp, _, hid = policy_forward(
                    self.model,
                    sub.tokens,
                    sub.attention_mask,
                    temp,
                    top_k=top_k,
                    top_p=top_p,
                    want_hidden=shared,
                )
                old_parts.append(lp.cpu())
                tc = time.perf_counter()
                used, vmask, boot = self._critic_values(sub, hid)
                t_critic += time.perf_counter() - tc
                v_parts.append(used.cpu())
                vm_parts.append(vmask.cpu())
                boot_parts.append(boot.cpu())
        old_logp = torch.cat(old_parts)
        old_v, vmask_all, boot = torch.cat(v_parts), torch.cat(vm_parts), torch.cat(boot_parts)
        ref_logp = self._batched_logprobs(self.ref_model, batch)
        mask = batch.action_mask.clone()
        penalty = None
        info = {}
        if b.regularizer.reward_kl_coef > 0:
            kl_tok = kl_estimate(old_logp, ref_logp, b.regularizer.reward_kl_estimator) * mask
            penalty = b.regularizer.reward_kl_coef * kl_tok
            info["reward_kl"] = float(kl_tok.sum(1).mean())
        token_rewards = place_rewards(mask, batch.turn_ids, batch.turn_rewards, penalty)
        # bootstrap only where a limit cut the episode short; never past the environment's terminal state
        cut = ~batch.terminated & ~batch.failed
        bootstrap = torch.where(
            cut & torch.tensor(cspec.bootstrap_truncated),
            boot.double(),
            torch.zeros_like(boot, dtype=torch.float64),
        )
        adv, ret = gae(token_rewards, old_v.double(), mask, a.gamma, a.lam, bootstrap)
        adv_w = whiten_population(adv, mask, cspec.whiten, batch.group_ids).float()
        ret = ret.float()
        accepted, rows_accepted, upd_res = self._admit_update(batch, mask)

        self.model.train()
        self.critic.train()
        opt_steps, n_mb = 0, 0
        sums: dict[str, float] = {}
        grad_norms: list[float] = []
        early_stop = None
        for epoch, rows in minibatches(batch.size, b.data.minibatches, b.data.epochs, self.gen):
            sub_mask = mask[rows]
            if float(sub_mask.sum()) == 0:
                continue
            weights = loss_weights(
                sub_mask, b.normalization.mode, self.l_max, b.normalization.count_empty_rows
            )
            vm = vmask_all[rows]
            v_weights = vm / vm.sum().clamp(min=1.0)
            self.optimizer.zero_grad(set_to_none=True)
            if self.critic_optimizer is not None:
                self.critic_optimizer.zero_grad(set_to_none=True)
            mbm: dict[str, float] = {}
            kl_num = 0.0
            for s0 in range(0, len(rows), mb_size):
                r_idx = rows[s0 : s0 + mb_size]
                local = list(range(s0, min(len(rows), s0 + mb_size)))
                sub = batch.select(r_idx)
                logp, ent, hid = policy_forward(
                    self.model,
                    sub.tokens,
                    sub.attention_mask,
                    temp,
                    top_k=top_k,
                    top_p=top_p,
                    entropy=True,
                    want_hidden=shared,
                )
                m_dev = mask[r_idx].to(self.device)
                pl, met = policy_loss(
                    b,
                    logp,
                    old_logp[r_idx].to(self.device),
                    adv_w[r_idx].to(self.device),
                    m_dev,
                    weights[local].to(self.device),
                    behavior_logp=sub.behavior_logprobs.to(self.device),
                    ref_logp=ref_logp[r_idx].to(self.device),
                    entropy=ent,
                )
                tc = time.perf_counter()
                v_new, _, _ = self._critic_values(sub, hid)
                vl_tok, vclipped = value_loss(
                    v_new,
                    old_v[r_idx].to(self.device),
                    ret[r_idx].to(self.device),
                    cspec.value_clip,
                )
                vw = v_weights[local].to(self.device)
                vl = (vl_tok * vw).sum()
                total = pl + cspec.vf_coef * vl
                if not torch.isfinite(total):
                    raise TrainingError(
                        f"{self.s.name}: loss is {float(total.detach())} at step {self.step_idx} (epoch {epoch}); "
                        f"policy {met.get('pg_loss')}, value {float(vl.detach())}"
                    )
                total.backward()
                t_critic += time.perf_counter() - tc
                w_sum = float(weights[local].sum())
                kl_num += approx_kl(logp, old_logp[r_idx].to(self.device), m_dev) * w_sum
                met["value_loss"] = float(vl.detach())
                met["value_clip_frac"] = float((vclipped * vw).sum())
                for k, v in met.items():
                    mbm[k] = max(mbm.get(k, 0.0), v) if k == "ratio_max" else mbm.get(k, 0.0) + v
            kl_mb = kl_num / max(float(weights.sum()), 1e-12)
            mbm["approx_kl"] = kl_mb
            if target_kl_exceeded(kl_mb, b.weight.target_kl):
                early_stop = {"epoch": epoch, "minibatch": n_mb, "approx_kl": kl_mb}
                self.optimizer.zero_grad(set_to_none=True)
                break
            grad_norms.append(self._clip_and_step())
            if self.critic_optimizer is not None:
                torch.nn.utils.clip_grad_norm_(
                    self.critic.parameters(), self.s.optimizer.grad_clip or float("inf")
                )
                self.critic_optimizer.step()
                for _ in range(cspec.updates_per_step - 1):
                    self._extra_critic_update(batch, rows, old_v, ret, v_weights)
            opt_steps += 1
            n_mb += 1
            for k, v in mbm.items():
                sums[k] = sums.get(k, 0.0) + v
        self.model.eval()
        self.critic.eval()
        self._commit_update(upd_res, opt_steps, accepted, rows_accepted)
        rewards = batch.reward
        metrics = {k: v / max(1, n_mb) for k, v in sums.items()}
        metrics.update(
            {
                "step": self.step_idx,
                "reward_mean": float(rewards.mean()),
                "reward_std": float(rewards.std()) if rewards.numel() > 1 else 0.0,
                "adv_abs_mean": float((adv_w.abs() * mask).sum() / mask.sum().clamp(min=1)),
                "explained_variance": explained_variance(old_v, ret, vmask_all),
                "response_length": float(mask.sum(1).float().mean()),
                "truncated_frac": float(batch.truncated.float().mean()),
                "failed": float(batch.failed.sum()),
                "trainable_group_frac": 1.0,
                "groups_launched": float(groups_launched),
                "optimizer_steps": float(opt_steps),
                "grad_norm": float(sum(grad_norms) / max(1, len(grad_norms))),
                "critic_seconds": t_critic,
                "early_stop_epoch": float(early_stop["epoch"]) if early_stop else -1.0,
                "early_stop_minibatch": float(early_stop["minibatch"]) if early_stop else -1.0,
                "policy_version": float(self.engine.policy_version),
                **mismatch_stats(old_logp, batch.behavior_logprobs, batch.action_mask),
            }
        )
        if early_stop:
            metrics["early_stop_approx_kl"] = early_stop["approx_kl"]
        metrics.update(info)
        if not math.isfinite(metrics.get("loss", 0.0)) and n_mb:
            raise TrainingError(
                f"{self.s.name}: loss is NaN at step {self.step_idx}"
            )  # pragma: no cover
        return metrics

    def _extra_critic_update(self, batch, rows, old_v, ret, v_weights) -> None:
        from sixblanks.algorithms.critic import value_loss

        cspec = self.blanks.advantage.critic
        self.critic_optimizer.zero_grad(set_to_none=True)
        mb = self.s.rollout.micro_batch_size
        for s0 in range(0, len(rows), mb):
            r_idx = rows[s0 : s0 + mb]
            local = list(range(s0, min(len(rows), s0 + mb)))
            v_new, _, _ = self._critic_values(batch.select(r_idx))
            vl_tok, _ = value_loss(
                v_new, old_v[r_idx].to(self.device), ret[r_idx].to(self.device), cspec.value_clip
            )
            (cspec.vf_coef * (vl_tok * v_weights[local].to(self.device)).sum()).backward()
        torch.nn.utils.clip_grad_norm_(
            self.critic.parameters(), self.s.optimizer.grad_clip or float("inf")
        )
        self.critic_optimizer.step()

    def _clip_and_step(self) -> float:
        params = [p for p in self.model.parameters() if p.grad is not None]
        clip = self.s.optimizer.grad_clip
        gn = torch.nn.utils.clip_grad_norm_(params, clip if clip else float("inf"))
        if not torch.isfinite(gn):
            raise TrainingError(
                f"{self.s.name}: gradient norm is {float(gn)} at step {self.step_idx}"
            )
        warm = self.s.optimizer.warmup_steps
        for group in self.optimizer.param_groups:
            group["lr"] = self.s.optimizer.lr * (
                min(1.0, (self.step_idx + 1) / warm) if warm else 1.0
            )
        self.optimizer.step()
        return float(gn)

    # ------------------------------------------------------------------ offline objectives

    def _step_sft(self) -> dict[str, Any] | None:
        """SFT as a preset: NLL on oracle demonstrations; demonstration tokens count as launched and accepted."""

        from .warmstart import demonstration_batch

        t_dev0, t_wall0 = self.timer.now(), time.perf_counter()
        n = self.s.rollout.prompts_per_step * self.G
        worst = {
            "launched_tokens": float(
                n * self.s.rollout.max_new_tokens * max(1, self.task.max_turns)
            ),
            "accepted_tokens": float(
                n * self.s.rollout.max_new_tokens * max(1, self.task.max_turns)
            ),
            "optimizer_steps": 1.0,
            "rollouts_launched": float(n),
            "rollouts_accepted": float(n),
        }
        res = self.ledger.reserve(self._with_time_estimate(worst), "sft")
        if res is None:
            return None
        batch = demonstration_batch(
            self.task, self.tok, [self.rng.randrange(TRAIN_SEED_RANGE) for _ in range(n)]
        )
        toks = float(batch.action_mask.sum())
        if toks > worst["launched_tokens"]:
            self.ledger.release(res)
            raise TrainingError("demonstrations are longer than max_new_tokens allows")
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        logp, _ = self._logprobs(self.model, batch, grad=True)
        loss = sft_loss(logp, batch.action_mask.to(self.device))
        loss.backward()
        gn = self._clip_and_step()
        self.model.eval()
        self.ledger.commit(
            res,
            {
                "launched_tokens": toks,
                "accepted_tokens": toks,
                "optimizer_steps": 1.0,
                "rollouts_launched": float(batch.size),
                "rollouts_accepted": float(batch.size),
            },
        )
        with torch.no_grad():
            kl = float(
                (
                    (logp.detach() - self._batched_logprobs(self.ref_model, batch).to(self.device))
                    * batch.action_mask.to(self.device)
                ).sum()
                / batch.action_mask.sum()
            )
        metrics = {
            "step": self.step_idx,
            "loss": loss.item(),
            "kl": kl,
            "grad_norm": gn,
            "optimizer_steps": 1.0,
        }
        self._finish_step(metrics, t_dev0, t_wall0)
        return metrics

    def _step_dpo(self) -> dict[str, Any] | None:
        """DPO: pairs (best, worst response of a group) from scored rollouts of the initial (reference) policy."""

        t_dev0, t_wall0 = self.timer.now(), time.perf_counter()
        n_prompts = self.s.rollout.prompts_per_step
        G = max(2, self.G)
        worst = self._worst_case_round(n_prompts)
        worst = {k: v * G / self.G for k, v in worst.items()}
        if not self.ledger.fits(
            self._with_time_estimate({**worst, **self._worst_case_update(0, 0)})
        ):
            return None
        res = self.ledger.reserve(self._with_time_estimate(worst), "dpo rollouts")
        calls0 = self.gate.stats.calls
        ref_engine = HFEngine(self.ref_model, self.tok)
        instances = self._sample_instances(n_prompts)
        batch = run_episodes(
            ref_engine,
            self.tok,
            self.task,
            instances,
            G,
            self.params,
            self.gate,
            max_context_tokens=self.s.rollout.max_prompt_tokens,
            generator=self.gen,
        )
        self.ledger.commit(
            res,
            {
                "launched_tokens": float(batch.launched_tokens()),
                "prompt_tokens": float(batch.prompt_tokens()),
                "rollouts_launched": float(batch.size),
                "env_steps": float(batch.n_turns.sum()),
                "verifier_calls": float(self.gate.stats.calls - calls0),
            },
        )
        chosen, rejected = [], []
        for g in torch.unique(batch.group_ids).tolist():
            rows = (batch.group_ids == g).nonzero().flatten()
            r = batch.reward[rows]
            if float(r.max()) > float(r.min()):
                chosen.append(int(rows[r.argmax()]))
                rejected.append(int(rows[r.argmin()]))
        used = set(chosen) | set(rejected)
        unused_tokens = sum(
            e - s
            for i in range(batch.size)
            if i not in used
            for k, s, e in batch.segments[i]
            if k == "action"
        )
        if unused_tokens:
            self.ledger.discard("dynamic_sampling", float(unused_tokens), batch.size - len(used))
        if not chosen:
            metrics = {"step": self.step_idx, "skipped": 1.0, "pairs": 0.0}
            self._finish_step(metrics, t_dev0, t_wall0)
            return metrics
        pair_batch = batch.select(chosen + rejected)
        m = pair_batch.action_mask.to(self.device)
        with torch.no_grad():
            ref_lp = self._batched_logprobs(self.ref_model, pair_batch).to(self.device)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        logp, _ = self._logprobs(self.model, pair_batch, grad=True)
        seq = (logp * m).sum(1)
        ref_seq = (ref_lp * m).sum(1)
        k = len(chosen)
        reg = self.blanks.regularizer
        loss, met = dpo_loss(
            seq[:k], seq[k:], ref_seq[:k], ref_seq[k:], reg.dpo_beta, reg.dpo_label_smoothing
        )
        if not torch.isfinite(loss):
            raise TrainingError(f"{self.s.name}: DPO loss is {float(loss)} at step {self.step_idx}")
        loss.backward()
        gn = self._clip_and_step()
        self.model.eval()
        upd = {
            "optimizer_steps": 1.0,
            "accepted_tokens": float(m.sum()),
            "rollouts_accepted": float(2 * k),
        }
        r2 = self.ledger.reserve(upd, "dpo update")
        if r2 is None:
            raise TrainingError("the DPO update no longer fits the budget")  # pragma: no cover
        self.ledger.commit(r2, upd)
        with torch.no_grad():
            kl = float(((logp.detach() - ref_lp) * m).sum() / m.sum())
        met.update(
            {
                "step": self.step_idx,
                "pairs": float(k),
                "kl": kl,
                "grad_norm": gn,
                "optimizer_steps": 1.0,
                "reward_mean": float(batch.reward.mean()),
            }
        )
        self._finish_step(met, t_dev0, t_wall0)
        return met

    # ------------------------------------------------------------------ evaluation and the loop

    def evaluate(self) -> dict[str, Any]:
        ev = evaluate(
            self.engine,
            self.tok,
            self.task,
            self.s.eval_size,
            max_new_tokens=self.s.rollout.max_new_tokens,
            temperature=self.s.eval_temperature,
            samples=self.s.eval_samples,
            seed=self.s.seed,
            max_context_tokens=self.s.rollout.max_prompt_tokens,
        )
        self.result.eval_cost["generated_tokens"] += ev["generated_tokens"]
        self.result.eval_cost["verifier_calls"] += ev["verifier_calls"]
        pos = dict(self.ledger.counters)
        record = {
            "step": self.step_idx,
            "position": pos,
            "score": ev["score"],
            "n": ev["n"],
            "success_rate": ev["success_rate"],
            "per_instance": ev["per_instance"],
        }
        self.result.evals.append(record)
        return record

    def _maybe_eval(self, force: bool = False) -> None:
        if self.eval_every is None and not force:
            return
        value = self.ledger.counters[self.eval_counter]
        if force or value >= self._next_eval:
            rec = self.evaluate()
            self.log(
                f"{self.s.name}: eval at {self.eval_counter}={value:g}: score {rec['score']:.3f}"
            )
            if self.eval_every:
                while self._next_eval <= value:
                    self._next_eval += self.eval_every

    def train(
        self,
        max_steps: int | None = None,
        evaluate_start: bool = True,
        on_step: Callable[[Trainer, dict[str, Any]], None] | None = None,
    ) -> RunResult:
        """Train until the budget is spent (or ``max_steps``). ``on_step(trainer, metrics)`` runs after
        each step and its evaluation (checkpoints, progress). A resumed trainer does not re-evaluate
        the start."""

        if evaluate_start and not self.result.evals:
            self._maybe_eval(force=True)
        while max_steps is None or self.step_idx < max_steps:
            m = self.step()
            if m is None:
                self.result.ended_because = "budget"
                break
            for k in ("loss", "kl", "reward_mean"):
                if k in m and isinstance(m[k], float) and math.isnan(m[k]):
                    raise TrainingError(f"{self.s.name}: {k} is NaN at step {m['step']}")
            self.log(
                f"{self.s.name}: step {m['step']} reward {m.get('reward_mean', float('nan')):.3f} "
                f"loss {m.get('loss', float('nan')):.4f} kl {m.get('kl', float('nan')):.4f} "
                f"launched {self.ledger.counters['launched_tokens']:g}"
            )
            self._maybe_eval()
            if on_step is not None:
                on_step(self, m)
        else:
            self.result.ended_because = "max_steps"
        if not self.result.evals or self.result.evals[-1]["step"] != self.step_idx:
            self._maybe_eval(force=True)
        problems = self.ledger.check_invariants()
        if problems:
            raise TrainingError(f"{self.s.name}: ledger invariants broken: {'; '.join(problems)}")
        return self.result

    # ------------------------------------------------------------------ checkpoint

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly: weights, optimizers, RNG states, ledger, position, results."""

        state: dict[str, Any] = {
            "model": {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "rng_py": self.rng.getstate(),
            "gen": self.gen.get_state(),
            "torch_rng": torch.get_rng_state(),
            "step_idx": self.step_idx,
            "group_counter": self.group_counter,
            "next_eval": self._next_eval,
            "last_step_cost": dict(self._last_step_cost),
            "engine_version": self.engine.policy_version,
            "ledger": self.ledger.state_dict(),
            "result": {
                "steps": self.result.steps,
                "evals": self.result.evals,
                "census": self.result.census,
                "eval_cost": self.result.eval_cost,
            },
        }
        if self.critic is not None:
            state["critic"] = {
                k: v.detach().cpu().clone() for k, v in self.critic.state_dict().items()
            }
            if self.critic_optimizer is not None:
                state["critic_optimizer"] = self.critic_optimizer.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.engine.load_weights(None)  # a vLLM engine still holds the initial weights
        self.optimizer.load_state_dict(state["optimizer"])
        if self.critic is not None and "critic" in state:
            self.critic.load_state_dict(state["critic"])
            if self.critic_optimizer is not None and "critic_optimizer" in state:
                self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.rng.setstate(state["rng_py"])
        self.gen.set_state(state["gen"])
        torch.set_rng_state(state["torch_rng"])
        self.step_idx = state["step_idx"]
        self.group_counter = state["group_counter"]
        self._next_eval = state["next_eval"]
        self._last_step_cost = dict(state["last_step_cost"])
        self.engine.policy_version = state["engine_version"]
        self.ledger = Ledger.from_state(state["ledger"])
        r = state["result"]
        self.result = RunResult(
            steps=list(r["steps"]),
            evals=list(r["evals"]),
            census=list(r["census"]),
            ledger=self.ledger,
            eval_cost=dict(r["eval_cost"]),
        )
