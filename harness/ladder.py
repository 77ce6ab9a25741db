"""The ablation ladder: debug a failing arm one axis at a time, in order.

    1 contract         masks, behavior vs recomputed log-probs, ratio 1 on-policy, rewards, groups, turns
    2 frozen_batch     one update on a frozen batch: twice, and across micro-batch splits -> same loss, grads
    3 no_update_eval   the initial policy evaluated repeatedly (same seeds, new engine version) -> same scores
    4 curriculum       difficulty distribution; trainable-group fraction at the start and over a short run
    5 advantage        advantage estimator varied, everything else fixed
    6 normalization    loss normalization varied
    7 clip_kl_lr       clipping, KL and learning rate varied (gradient norms reported)
    8 critic           value credit (a critic preset) added
    9 asynchrony       only after synchronous parity

Each rung is a small experiment under the same ledger machinery (a budget per rung); the ladder stops at
the first failing rung unless ``all_rungs``. Variants are compared to the arm's nominal setting by a
paired bootstrap over the same held-out instances, so one seed already gives an interval.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sixblanks.algorithms.blanks import deep_merge
from sixblanks.algorithms.presets import resolve

from .config import ExperimentConfig
from .contract import sample_and_check
from .errors import SixblanksError
from .evaluate import evaluate
from .layout import ExperimentDir, write_json
from .models import load_pretrained
from .rollout.agent import run_episodes
from .rollout.engine import RolloutError, SamplingParams, make_engine
from .runner import build_trainer
from .seeds import TRAIN_SEED_RANGE
from .tasks import make_task
from .training import TrainingError

RUNGS = [
    (1, "contract"),
    (2, "frozen_batch"),
    (3, "no_update_eval"),
    (4, "curriculum"),
    (5, "advantage"),
    (6, "normalization"),
    (7, "clip_kl_lr"),
    (8, "critic"),
    (9, "asynchrony"),
]
MARGIN = 0.05
"""A variant must beat the nominal setting by more than this (paired CI lower bound) to fail a rung."""


@dataclass
class RungResult:
    rung: int
    rung_name: str
    variant: str
    status: str  # pass / fail / inconclusive
    evidence: str
    ci_low: float | None = None
    ci_high: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def paired_diff_ci(
    a: list[float], b: list[float], resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean of a - b over paired instances with a 95% bootstrap interval."""

    d = np.asarray(a, float) - np.asarray(b, float)
    if len(d) < 2:
        return float(d.mean()) if len(d) else float("nan"), float("nan"), float("nan")
    idx = np.random.default_rng(seed).integers(0, len(d), size=(resamples, len(d)))
    boots = d[idx].mean(1)
    lo, hi = np.quantile(boots, [0.025, 0.975])
    return float(d.mean()), float(lo), float(hi)


class Ladder:
    def __init__(
        self,
        cfg: ExperimentConfig,
        out_dir: str | Path,
        arm: str | None = None,
        log: Callable[[str], None] | None = None,
    ):
        from .orchestrator import Orchestrator

        self.cfg = cfg
        self.out = Path(out_dir)
        self.arm = arm or cfg.ladder.arm or next(iter(cfg.arms))
        if self.arm not in cfg.arms:
            from .errors import ConfigError, unknown_name

            raise ConfigError(f"--arm: {unknown_name('arm', self.arm, cfg.arms)}")
        self.log = log or (lambda _m: None)
        self.orch = Orchestrator(cfg, self.out, log=self.log, progress=False)
        self.results: list[RungResult] = []

    # ------------------------------------------------------------------ set-up

    def prepare(self) -> None:
        specs = self.orch.prepare()
        self.spec = next(s for s in specs if s["arm"] == self.arm)
        self.spec = copy.deepcopy(self.spec)
        lad = self.cfg.ladder
        self.spec["budget"] = dict(lad.budget) or {k: v / 10 for k, v in self.cfg.budget.items()}
        self.spec["eval"]["every"] = None
        self.task = make_task(self.spec["task"]["name"], self.spec["task"]["params"])
        self.warm = self.orch.warm_dir
        self.seeds = list(lad.seeds)

    def _policy(self):
        model, tok = load_pretrained(
            self.warm, self.spec["model"]["device"], self.spec["model"]["dtype"]
        )
        return model, tok

    def _engine(self, model, tok):
        """The rollout engine ``rollout.backend`` names (hf or vllm), as runs get it."""

        return make_engine(self.cfg.rollout, model, tok, seed=self.seeds[0])

    def _train(
        self,
        blanks_over: dict[str, Any] | None = None,
        lr: float | None = None,
        preset: str | None = None,
        seed: int = 0,
    ) -> dict[str, Any]:
        """One short run of a variant under the rung budget; returns scores and diagnostics."""

        spec = copy.deepcopy(self.spec)
        spec["seed"] = seed
        if preset is not None:
            spec["blanks"] = resolve(preset).model_dump(mode="json")
            spec["preset"] = preset
        if blanks_over:
            spec["blanks"] = resolve(
                spec["preset"], deep_merge(spec["blanks"], blanks_over)
            ).model_dump(mode="json")
        if lr is not None:
            spec["optimizer"]["lr"] = lr
        # as a run builds it: the configured engine, a frozen reference, the declared reward range
        trainer = build_trainer(spec, self.warm)
        engine = _engine_name(trainer.engine)
        try:
            res = trainer.train()
        except (TrainingError, RolloutError) as exc:
            return {
                "error": str(exc),
                "diverged": True,
                "scores": None,
                "grad_norm": None,
                "engine": engine,
            }
        grad = [m["grad_norm"] for m in res.steps if "grad_norm" in m]
        return {
            "scores": res.evals[-1]["per_instance"],
            "start": res.evals[0]["per_instance"],
            "final": res.evals[-1]["score"],
            "start_score": res.evals[0]["score"],
            "grad_norm": float(np.mean(grad)) if grad else None,
            "grad_norm_max": float(np.max(grad)) if grad else None,
            "trainable": [m.get("trainable_group_frac") for m in res.steps],
            "counters": dict(res.ledger.counters),
            "diverged": False,
            "engine": engine,
        }

    # ------------------------------------------------------------------ rungs

    def rung_contract(self) -> list[RungResult]:
        model, tok = self._policy()
        engine = self._engine(model, tok)
        r = self.cfg.rollout
        rng = np.random.default_rng(self.seeds[0])
        instances = self.task.instances(
            [int(x) for x in rng.integers(0, TRAIN_SEED_RANGE, r.prompts_per_step)]
        )
        G = resolve(self.spec["preset"]).data.group_size or r.group_size
        _, rep = sample_and_check(
            engine,
            model,
            tok,
            self.task,
            instances,
            G,
            r,
            seed=self.seeds[0],
            reward_range=self.task.reward_range,
        )
        detail = {**rep.to_dict(), "engine": _engine_name(engine)}
        if rep.passed:
            return [
                RungResult(1, "contract", "fresh rollouts", "pass", rep.summary(), detail=detail)
            ]
        fails = "; ".join(f"{f.name}: {f.detail}" for f in rep.failures)
        return [
            RungResult(
                1,
                "contract",
                "fresh rollouts",
                "fail",
                f"trajectory contract broken: {fails}",
                detail=detail,
            )
        ]

    def rung_frozen_batch(self) -> list[RungResult]:
        from sixblanks.algorithms.loss import compute_advantages, policy_loss
        from sixblanks.algorithms.normalization import loss_weights

        from .policy import policy_logprobs

        model, tok = self._policy()
        engine = self._engine(model, tok)
        r = self.cfg.rollout
        blanks = resolve(self.spec["preset"], self.spec["blanks"])
        G = blanks.data.group_size or r.group_size
        instances = self.task.instances(list(range(r.prompts_per_step)))
        batch = run_episodes(
            engine,
            tok,
            self.task,
            instances,
            G,
            SamplingParams(r.temperature, r.top_p, r.top_k, r.max_new_tokens),
            generator=torch.Generator().manual_seed(0),
        )
        with torch.no_grad():
            old, _ = policy_logprobs(model, batch.tokens, batch.attention_mask, r.temperature)
        adv, mask, _ = (
            compute_advantages(
                blanks,
                batch.reward,
                batch.action_mask,
                batch.group_ids,
                old_logp=old,
                ref_logp=old,
                turn_rewards=batch.turn_rewards,
                turn_ids=batch.turn_ids,
                baseline_rewards=batch.reward * 0,
                truncated=batch.truncated,
                l_max=r.max_new_tokens * max(1, self.task.max_turns),
            )
            if blanks.advantage.estimator != "gae"
            else (batch.action_mask * 0, batch.action_mask, {})
        )
        w = loss_weights(
            mask, blanks.normalization.mode, r.max_new_tokens * max(1, self.task.max_turns)
        )

        def loss_and_grad(splits: list[list[int]]):
            model.zero_grad(set_to_none=True)
            total = 0.0
            for rows in splits:
                sub = batch.select(rows)
                lp, _ = policy_logprobs(model, sub.tokens, sub.attention_mask, r.temperature)
                loss, _ = policy_loss(
                    blanks, lp, old[rows], adv[rows], mask[rows], w[rows], ref_logp=old[rows]
                )
                loss.backward()
                total += float(loss.detach())
            g = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
            return total, g.clone()

        rows = list(range(batch.size))
        l1, g1 = loss_and_grad([rows])
        l2, g2 = loss_and_grad([rows])
        half = batch.size // 2
        l3, g3 = loss_and_grad([rows[:half], rows[half:]])
        scale = max(float(g1.abs().max()), 1e-12)
        rep_diff = float((g1 - g2).abs().max()) / scale
        split_diff = float((g1 - g3).abs().max()) / scale
        detail = {
            "loss": [l1, l2, l3],
            "grad_rel_diff_repeat": rep_diff,
            "grad_rel_diff_split": split_diff,
            "engine": _engine_name(engine),
        }
        ok = (
            abs(l1 - l2) <= 1e-6 * max(1, abs(l1))
            and abs(l1 - l3) <= 1e-5 * max(1, abs(l1))
            and rep_diff <= 1e-4
            and split_diff <= 1e-3
        )
        ev = (
            f"loss {l1:.6g} / repeat {l2:.6g} / 2 micro-batches {l3:.6g}; max relative grad difference: repeat "
            f"{rep_diff:.2g}, split {split_diff:.2g}"
        )
        return [
            RungResult(
                2,
                "frozen_batch",
                "repeat + micro-batch split",
                "pass" if ok else "fail",
                ev if ok else "update not reproducible on a frozen batch: " + ev,
                detail=detail,
            )
        ]

    def rung_no_update_eval(self) -> list[RungResult]:
        model, tok = self._policy()
        engine = self._engine(model, tok)
        r = self.cfg.rollout
        n = int(self.spec["eval"].get("size") or self.spec["task"]["eval_size"])
        runs = []
        for i in range(3):
            if i == 2:
                engine.load_weights(
                    {k: v.clone() for k, v in model.state_dict().items()}
                )  # new version, same weights
            ev = evaluate(
                engine,
                tok,
                self.task,
                n,
                max_new_tokens=r.max_new_tokens,
                seed=0,
                max_context_tokens=r.max_prompt_tokens,
            )
            runs.append(ev)
        scores = [e["score"] for e in runs]
        changed = sum(a != b for a, b in zip(runs[0]["per_instance"], runs[1]["per_instance"]))
        detail = {
            "scores": scores,
            "instances_changed": changed,
            "n": n,
            "engine": _engine_name(engine),
        }
        if len(set(scores)) == 1 and changed == 0:
            return [
                RungResult(
                    3,
                    "no_update_eval",
                    "3 evaluations, same policy",
                    "pass",
                    f"identical held-out scores {scores} across repeats and an engine version bump",
                    detail=detail,
                )
            ]
        return [
            RungResult(
                3,
                "no_update_eval",
                "3 evaluations, same policy",
                "fail",
                f"environment drift: the same policy on the same seeds scored {scores} "
                f"({changed} of {n} instances changed between repeats)",
                detail=detail,
            )
        ]

    def rung_curriculum(self) -> list[RungResult]:
        diffs = [self.task.make_instance(s).difficulty for s in range(200)]
        out = self._train(seed=self.seeds[0])
        hist = {str(k): int(v) for k, v in zip(*np.unique(diffs, return_counts=True))}
        if out.get("diverged"):
            return [
                RungResult(
                    4,
                    "curriculum",
                    "short run",
                    "inconclusive",
                    f"difficulty histogram {hist}; the short run diverged: {out['error']}",
                    detail={"hist": hist, "engine": out["engine"]},
                )
            ]
        tr = [t for t in out["trainable"] if t is not None]
        start = tr[0] if tr else 0.0
        mean = float(np.mean(tr)) if tr else 0.0
        detail = {
            "difficulty_hist": hist,
            "trainable_start": start,
            "trainable_mean": mean,
            "trainable": tr,
            "engine": out["engine"],
        }
        ev = f"difficulty histogram {hist}; trainable-group fraction {start:.2f} at the start, {mean:.2f} over the run"
        if mean == 0.0:
            return [
                RungResult(
                    4,
                    "curriculum",
                    "short run",
                    "fail",
                    "no group has reward variance (every task too easy or too hard): " + ev,
                    detail=detail,
                )
            ]
        status = "inconclusive" if mean < 0.1 else "pass"
        return [RungResult(4, "curriculum", "short run", status, ev, detail=detail)]

    def _compare(
        self, rung: int, name: str, variants: dict[str, dict[str, Any]], nominal_key: str
    ) -> list[RungResult]:
        """Runs each variant; fails the rung when one beats the nominal by > MARGIN (paired CI over instances)."""

        outs = {}
        for label, kw in variants.items():
            self.log(f"ladder rung {rung} ({name}): {label}")
            outs[label] = self._train(seed=self.seeds[0], **kw)
        nominal = outs[nominal_key]
        results = []
        for label, o in outs.items():
            gn = (
                f"grad norm mean {o['grad_norm']:.3g} max {o['grad_norm_max']:.3g}"
                if o.get("grad_norm")
                else ""
            )
            if o.get("diverged"):
                results.append(
                    RungResult(
                        rung,
                        name,
                        label,
                        "fail" if label == nominal_key else "inconclusive",
                        f"diverged: {o['error']}",
                        detail={"diverged": True, "engine": o["engine"]},
                    )
                )
                continue
            d, lo, hi = paired_diff_ci(o["scores"], o["start"])
            results.append(
                RungResult(
                    rung,
                    name,
                    label,
                    "pass",
                    f"score {o['start_score']:.3f} -> {o['final']:.3f} "
                    f"(gain {d:+.3f} [{lo:+.3f}, {hi:+.3f}]) {gn}".strip(),
                    lo,
                    hi,
                    detail={
                        k: v for k, v in o.items() if k not in ("scores", "start", "trainable")
                    },
                )
            )
        nom_res = next(r for r in results if r.variant == nominal_key)
        if nominal.get("diverged"):
            best = max(
                (o for k, o in outs.items() if not o.get("diverged")),
                key=lambda o: o["final"],
                default=None,
            )
            if best is None:  # the cause is not on this axis
                nom_res.status = "inconclusive"
                nom_res.evidence = f"every variant of this rung diverged ({nominal['error']}); the cause lies elsewhere"
                return results
            label = next(k for k, o in outs.items() if o is best)
            nom_res.evidence = (
                f"nominal setting {nominal_key} diverged ({nominal['error']}); {label} reaches "
                f"{best['final']:.3f}"
            )
            nom_res.status = "fail"
            return results
        beaten = []
        for label, o in outs.items():
            if label == nominal_key or o.get("diverged"):
                continue
            d, lo, hi = paired_diff_ci(o["scores"], nominal["scores"])
            if lo > MARGIN:
                beaten.append((label, d, lo, hi))
        gains = [
            paired_diff_ci(o["scores"], o["start"])[0]
            for o in outs.values()
            if not o.get("diverged")
        ]
        if beaten:
            label, d, lo, hi = max(beaten, key=lambda x: x[1])
            nom_res.status = "fail"
            nom_res.evidence = (
                f"{label} beats the nominal {nominal_key} by {d:+.3f} [{lo:+.3f}, {hi:+.3f}] on the "
                f"same held-out instances; " + nom_res.evidence
            )
        elif max(gains) <= 0:
            nom_res.status = "inconclusive"
            nom_res.evidence = (
                "no variant improves on the warm start within the rung budget; " + nom_res.evidence
            )
        return results

    def _vary(
        self, rung: int, name: str, blank: str, field: str, values: list, label: str
    ) -> list[RungResult]:
        """One field of one blank varied over ``values``, everything else at the arm's setting."""

        nominal = self.spec["blanks"][blank][field]
        key = f"{label}={nominal} (nominal)"
        variants: dict[str, dict[str, Any]] = {key: {}}
        for value in values:
            if value != nominal:
                variants[f"{label}={value}"] = {"blanks_over": {blank: {field: value}}}
        return self._compare(rung, name, variants, key)

    def rung_advantage(self) -> list[RungResult]:
        lad = self.cfg.ladder
        return self._vary(
            5, "advantage", "advantage", "estimator", lad.advantage_variants, "advantage"
        )

    def rung_normalization(self) -> list[RungResult]:
        lad = self.cfg.ladder
        return self._vary(
            6, "normalization", "normalization", "mode", lad.normalization_variants, "Z"
        )

    def rung_clip_kl_lr(self) -> list[RungResult]:
        lad = self.cfg.ladder
        lr0 = self.spec["optimizer"]["lr"]
        key = f"lr={lr0:g} (nominal)"
        variants: dict[str, dict[str, Any]] = {key: {}}
        for f in lad.lr_factors:
            if f != 1.0:
                variants[f"lr={lr0 * f:g} (x{f:g})"] = {"lr": lr0 * f}
        w = self.spec["blanks"]["weight"]
        if w["trust_region"] == "clip":
            for lo, hi in lad.clip_variants:
                if (lo, hi) != (w["eps_low"], w["eps_high"]):
                    variants[f"clip=[{lo:g},{hi:g}]"] = {
                        "blanks_over": {"weight": {"eps_low": lo, "eps_high": hi}}
                    }
        kl0 = self.spec["blanks"]["regularizer"]["loss_kl_coef"]
        for kl in lad.kl_variants:
            if kl != kl0:
                variants[f"loss_kl={kl:g}"] = {"blanks_over": {"regularizer": {"loss_kl_coef": kl}}}
        return self._compare(7, "clip_kl_lr", variants, key)

    def rung_critic(self) -> list[RungResult]:
        if resolve(self.spec["preset"]).advantage.estimator == "gae":
            return [
                RungResult(
                    8,
                    "critic",
                    "already a critic arm",
                    "pass",
                    "the arm already uses a value model",
                )
            ]
        key = f"{self.spec['preset']} (nominal)"
        return self._compare(
            8,
            "critic",
            {
                key: {},
                f"+critic ({self.cfg.ladder.critic_preset})": {
                    "preset": self.cfg.ladder.critic_preset
                },
            },
            key,
        )

    def rung_asynchrony(self) -> list[RungResult]:
        return [
            RungResult(
                9,
                "asynchrony",
                "-",
                "inconclusive",
                "not built: sixblanks has no asynchronous / off-policy training yet, so there is nothing "
                "to compare against synchronous parity",
            )
        ]

    # ------------------------------------------------------------------ the walk

    def run(self, all_rungs: bool = False, until: int | None = None) -> list[RungResult]:
        """Walk the rungs in order (up to rung ``until``), stopping at the first failing one unless
        ``all_rungs``; records the results (ladder.json, the store's ladder table) and returns them."""

        self.prepare()
        t0 = time.time()
        for rung, name in RUNGS:
            if until is not None and rung > until:
                break
            self.log(f"ladder: rung {rung} ({name})")
            res = getattr(self, f"rung_{name}")()
            self.results += res
            if any(r.status == "fail" for r in res) and not all_rungs:
                self.log(f"ladder: stopped at rung {rung} ({name})")
                break
        self.save(time.time() - t0)
        return self.results

    def save(self, seconds: float) -> None:
        from .store import write_ladder

        rows = [asdict(r) for r in self.results]
        write_json(
            ExperimentDir(self.out).ladder, {"arm": self.arm, "seconds": seconds, "rungs": rows}
        )
        write_ladder(self.out, self.cfg.name, self.arm, rows)


def _engine_name(engine) -> str:
    """The engine class that sampled a rung's rollouts (HFEngine, VLLMEngine), for its evidence."""

    return type(engine).__name__


def first_failure(results: list[RungResult]) -> RungResult | None:
    return next((r for r in results if r.status == "fail"), None)


class LadderFailed(SixblanksError):
    exit_code = 1
