"""The walk of the ablation ladder: set-up, the rungs in order, progress and results (the package's
docstring lists the rungs)."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from sixblanks.algorithms.blanks import deep_merge
from sixblanks.algorithms.presets import resolve
from sixblanks.budgets.ledger import divide_budget

from ...config import ExperimentConfig
from ...errors import SixblanksError
from ...layout import ExperimentDir, write_json
from ...models import load_pretrained, set_fp32_lm_head
from ...orchestration.progress import PlainLines, plain_wanted
from ...orchestration.runner import build_trainer
from ...rollout.backends import make_engine
from ...rollout.engine import RolloutError
from ...tasks import make_task
from ...tasks.judge import attach_judge
from ...training import TrainingError
from .frozen_batch import (
    contract_rung,
    engine_name,
    frozen_batch_check,
    no_update_rung,
)
from .stats import (
    MARGIN,
    SPLIT,
    VERDICT,
    RungResult,
    explain_scale,
    first_failure,
    judge_compare,
    mean_of,
    paired_diff_ci,
    verdict,
    verdicts,
)

__all__ = [
    "MARGIN",
    "RUNGS",
    "SPLIT",
    "VERDICT",
    "Ladder",
    "LadderFailed",
    "RungResult",
    "first_failure",
    "paired_diff_ci",
    "verdicts",
]

RUNGS = [
    (1, "contract"),
    (2, "frozen_batch"),
    (3, "no_update_eval"),
    (4, "curriculum"),
    (5, "advantage"),
    (6, "normalization"),
    (7, "clip_kl_lr"),
    (8, "credit"),
    (9, "asynchrony"),
]


class Ladder:
    def __init__(
        self,
        cfg: ExperimentConfig,
        out_dir: str | Path,
        arm: str | None = None,
        log: Callable[[str], None] | None = None,
    ):
        from ...config.parallel_checks import refuse_in_one_process
        from ...orchestration.orchestrator import Orchestrator

        refuse_in_one_process(cfg, "the ablation ladder")
        self.cfg = cfg
        self.out = Path(out_dir)
        self.arm = arm or cfg.ladder.arm or next(iter(cfg.arms))
        if self.arm in cfg.arms:  # the arm's sampling settings (its rollout overrides)
            self.rollout = cfg.rollout_for(self.arm)
        if self.arm not in cfg.arms:
            from ...errors import ConfigError, unknown_name

            raise ConfigError(f"--arm: {unknown_name('arm', self.arm, cfg.arms)}")
        self.log = log or (lambda _m: None)
        self.orch = Orchestrator(cfg, self.out, log=self.log, progress=False)  # for its set-up
        self.plain = plain_wanted(log)  # a line per evaluation and end of each short run
        self.seeds = list(cfg.ladder.seeds)
        self.results: list[RungResult] = []
        self.trained: dict[str, tuple[str, dict[str, Any]]] = {}  # spec -> (first name, result)
        self.trained_outs: dict[str, dict[str, Any]] = {}  # the last comparing rung's, by label

    # ------------------------------------------------------------------ set-up

    def prepare(self) -> None:
        specs = self.orch.prepare()
        self.spec = next(s for s in specs if s["arm"] == self.arm)
        self.spec = copy.deepcopy(self.spec)
        lad = self.cfg.ladder
        self.spec["budget"] = dict(lad.budget) or divide_budget(self.cfg.budget, 10)
        self.spec["eval"]["every"] = None
        self.spec["eval"]["split"] = SPLIT  # the short runs select on validation, never on test
        self.task = attach_judge(
            make_task(self.spec["task"]["name"], self.spec["task"]["params"]),
            self.spec["task"].get("judge"),
        )
        self.warm = self.orch.warm_dir

    def _policy(self):
        model, tok = load_pretrained(
            self.warm, self.spec["model"]["device"], self.spec["model"]["dtype"]
        )
        set_fp32_lm_head(model, bool(self.spec["model"].get("fp32_lm_head")))
        return model, tok

    def _engine(self, model, tok):
        """The rollout engine ``rollout.backend`` names (hf or vllm), as runs get it."""

        return make_engine(self.rollout, model, tok, seed=self.seeds[0])

    def _train(
        self,
        blanks_over: dict[str, Any] | None = None,
        lr: float | None = None,
        preset: str | None = None,
        seed: int = 0,
        name: str = "ladder short run",
        optimizer: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One short run of a variant under the rung budget; returns its per-instance scores on the
        validation split (at the start and the end) and diagnostics. ``name``: its plain lines'.
        ``optimizer``: settings of the optimizer section replaced (rung 6's ``grad_clip``)."""

        spec = copy.deepcopy(self.spec)
        spec["seed"] = seed
        spec["eval"]["split"] = SPLIT
        if preset is not None:
            spec["blanks"] = resolve(preset).model_dump(mode="json")
            spec["preset"] = preset
        if blanks_over:
            spec["blanks"] = resolve(
                spec["preset"], deep_merge(spec["blanks"], blanks_over)
            ).model_dump(mode="json")
        if lr is not None:
            spec["optimizer"]["lr"] = lr
        if optimizer:
            spec["optimizer"].update(optimizer)
        # the same setting (the nominal one is in rung 4 and in every comparing rung) is trained
        # once and its result reused: a short run is deterministic given its spec and seed (with a
        # concurrent collector its lag depends on timing: every rung then compares with one run)
        key = json.dumps(spec, sort_keys=True, default=str)
        if key in self.trained:
            first, out = self.trained[key]
            self.log(f"{name}: the same setting as {first}: its result reused (not trained again)")
            return copy.deepcopy(out)
        out = self._train_spec(spec, name)
        self.trained[key] = (name, copy.deepcopy(out))
        return out

    def _train_spec(self, spec: dict[str, Any], name: str) -> dict[str, Any]:
        # as a run builds it: the configured engine, a frozen reference, the declared reward range
        trainer = build_trainer(spec, self.warm)
        engine = engine_name(trainer.engine)
        lines = PlainLines(name, spec["budget"], self.plain)
        try:
            res = trainer.train(on_step=lines.evals)
        except (TrainingError, RolloutError) as exc:
            lines.end(trainer, f"FAILED: {exc}")
            return {
                "error": str(exc),
                "diverged": True,
                "scores": None,
                "grad_norm": None,
                "engine": engine,
                "split": SPLIT,
            }
        lines.end(trainer, f"finished after {len(res.steps)} steps")
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
            # how far behind its samples were: versions, and the behaviour-to-current k3 KL
            "versions_behind": mean_of(res.steps, "lag.versions_behind") or 0.0,
            "behavior_kl": mean_of(res.steps, "mismatch.kl"),
            # a concurrent collector's split, its samples' version spans and what it dropped
            "staleness_split": {
                k: mean_of(res.steps, f"lag.{k}")
                for k in ("inflight_behind", "queue_behind", "version_span")
            },
            "async_dropped": {
                r: float(getattr(res.ledger, "discarded_by_reason", {}).get(r, 0.0))
                for r in ("stale_inflight", "stale_queue", "staleness", "aborted", "unconsumed")
            },
            "diverged": False,
            "engine": engine,
            "split": res.evals[-1].get("split"),
        }

    # ------------------------------------------------------------------ rungs

    def rung_contract(self) -> list[RungResult]:
        model, tok = self._policy()
        G = self.spec["blanks"]["data"].get("group_size") or self.rollout.group_size
        engine = self._engine(model, tok)
        return contract_rung(engine, model, tok, self.task, self.rollout, G, self.seeds[0])

    def rung_frozen_batch(self) -> list[RungResult]:
        """The arm's update as its runs build it (policy, reference, engine, objective), on a
        frozen batch stored in the output folder (``ExperimentDir.ladder_frozen_batch``)."""

        try:
            trainer = build_trainer(self.spec, self.warm)
        except TrainingError as exc:  # e.g. a trained PRM on a task without step labels
            reason = f"the arm's update cannot be built: {exc}"
            return [
                RungResult(2, "frozen_batch", "repeat + micro-batch split", "fail", reason),
                verdict(2, "frozen_batch", "fail", reason),
            ]
        path = ExperimentDir(self.out).ladder_frozen_batch
        return frozen_batch_check(trainer, path, policy=str(self.warm))

    def rung_no_update_eval(self) -> list[RungResult]:
        model, tok = self._policy()
        n = int(self.spec["eval"].get("size") or self.spec["task"]["eval_size"])
        engine = self._engine(model, tok)
        return no_update_rung(engine, model, tok, self.task, n, self.rollout)

    def rung_curriculum(self) -> list[RungResult]:
        diffs = [self.task.make_instance(s).difficulty for s in range(200)]
        out = self._train(seed=self.seeds[0], name="ladder rung 4 (curriculum) short run")
        hist = {str(k): int(v) for k, v in zip(*np.unique(diffs, return_counts=True))}
        if out.get("diverged"):
            reason = f"the short run diverged: {out['error']}"
            detail = {"hist": hist, "engine": out["engine"]}
            return [
                RungResult(
                    4,
                    "curriculum",
                    "short run",
                    "inconclusive",
                    f"difficulty histogram {hist}; {reason}",
                    detail=detail,
                ),
                verdict(4, "curriculum", "inconclusive", reason),
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
            "split": out["split"],
        }
        ev = f"difficulty histogram {hist}; trainable-group fraction {start:.2f} at the start, {mean:.2f} over the run"
        data = self.cfg.resolved_blanks(self.arm).data
        G = data.group_size or self.rollout.group_size
        if not tr and out["trainable"]:  # steps ran, none measured its groups
            status = "inconclusive"
            if data.source != "rollouts":
                reason = (
                    f"data.source '{data.source}': the arm's collector samples no groups of "
                    "the policy's own whose reward variance it measures"
                )
            elif G == 1:
                reason = (
                    "the arm samples one response per prompt: no group of 2+ samples whose "
                    "reward variance could be measured"
                )
            else:
                reason = "no step measured the trainable-group fraction of its groups"
        elif not tr:
            status = "inconclusive"
            reason = "no training step fit the rung budget: no group was measured"
        elif mean == 0.0:
            status = "fail"
            reason = "no group has reward variance (every task too easy or too hard)"
            ev = f"{reason}: {ev}"
        elif mean < 0.1:
            status = "inconclusive"
            reason = f"only {mean:.2f} of the groups carry a learning signal (under 0.10)"
        else:
            status = "pass"
            reason = f"{mean:.2f} of the groups carry a learning signal over a short run"
        return [
            RungResult(4, "curriculum", "short run", status, ev, detail=detail),
            verdict(4, "curriculum", status, reason),
        ]

    def _compare(
        self, rung: int, name: str, variants: dict[str, dict[str, Any]], nominal_key: str
    ) -> list[RungResult]:
        """Runs each variant under the rung budget, then judges them against the nominal setting
        (:func:`~sixblanks.harness.studies.ladder.stats.judge_compare`): rows and the rung's verdict."""

        outs = {}
        for label, kw in variants.items():
            self.log(f"ladder rung {rung} ({name}): {label}")
            outs[label] = self._train(
                seed=self.seeds[0], name=f"ladder rung {rung} ({name}) {label}", **kw
            )
        self.trained_outs = outs
        return judge_compare(rung, name, outs, nominal_key)

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
        """Each Z of ``ladder.normalization_variants`` against the arm's, twice where its gradient
        scale differs: as is (the weighting and the scale changed), and scale-matched (the weighting
        only). A mode's scale is its total loss weight on one sampled batch (sum of its weights,
        :meth:`_total_loss_weights`); its ratio c to the nominal's scales the gradient by c, which
        AdamW's steps ignore except through the gradient-norm clip: the scale-matched variant
        clips at ``grad_clip`` x c, and so takes the steps of its weights rescaled to the nominal's
        total. Without a clip every variant is its own scale-matched one."""

        n = self.spec["blanks"]["normalization"]
        nominal = n["mode"]
        key = f"Z={nominal} (nominal)"
        modes = [m.replace("_", "-") for m in self.cfg.ladder.normalization_variants]
        modes = [m for m in dict.fromkeys(modes) if m != nominal]
        clip = self.spec["optimizer"].get("grad_clip")
        totals = self._total_loss_weights([nominal, *modes]) if clip and modes else {}
        # an actor-critic arm's critic steps under the same clip, its value loss a token mean
        # whatever Z is: no clip rescales the policy's gradient alone
        critic = self.spec["blanks"]["advantage"]["estimator"] == "gae"
        variants: dict[str, dict[str, Any]] = {key: {}}
        scale: dict[str, dict[str, Any]] = {}
        for mode in modes:
            over = {"blanks_over": {"normalization": {"mode": mode}}}
            variants[f"Z={mode}"] = over
            if not totals or min(totals[mode], totals[nominal]) <= 0:  # no clip, or no token
                scale[f"Z={mode}"] = {"mode": mode, "ratio": None, "matched": None}
                continue
            c = totals[mode] / totals[nominal]
            if critic and abs(c - 1.0) > 1e-6:
                scale[f"Z={mode}"] = {
                    "mode": mode,
                    "ratio": c,
                    "matched": None,
                    "unmatchable": True,
                }
                continue
            matched = None
            if abs(c - 1.0) > 1e-6:
                matched = f"Z={mode} (scale-matched: grad_clip x{c:.3g})"
                variants[matched] = over | {"optimizer": {"grad_clip": clip * c}}
            scale[f"Z={mode}"] = {
                "mode": mode,
                "total_weight": totals[mode],
                "nominal_total_weight": totals[nominal],
                "ratio": c,
                "matched": matched,
                "matched_grad_clip": clip * c if matched else None,
            }
        rows = self._compare(6, "normalization", variants, key)
        return explain_scale(rows, scale, clip)

    def _total_loss_weights(self, modes: list[str]) -> dict[str, float]:
        """The sum of each mode's loss weights on one batch the arm's initial policy samples (rung
        2's prompts and generator): the scale a mode gives the gradient, relative to another's."""

        import torch

        from sixblanks.algorithms.normalization import loss_weights

        from ...rollout.agent import run_episodes
        from ...rollout.engine import SamplingParams

        model, tok = self._policy()
        r = self.rollout
        G = self.spec["blanks"]["data"].get("group_size") or r.group_size
        batch = run_episodes(
            self._engine(model, tok),
            tok,
            self.task,
            self.task.instances(list(range(r.prompts_per_step))),
            G,
            SamplingParams(r.temperature, r.top_p, r.top_k, r.max_new_tokens),
            generator=torch.Generator().manual_seed(0),
        )
        n = self.spec["blanks"]["normalization"]
        l_max = n.get("l_max") or r.max_new_tokens * max(1, self.task.max_turns)
        # per optimizer step: the weights are computed on each minibatch (a mean mode sums to 1
        # on each, token-sum to the minibatch's tokens), so a step's scale is a minibatch's total
        import numpy as np

        parts = np.array_split(np.arange(batch.size), self.spec["blanks"]["data"]["minibatches"])
        out = {}
        for m in modes:
            sums = []
            for part in parts:
                rows = [int(i) for i in part]
                if not rows:
                    continue
                w = loss_weights(
                    batch.action_mask[rows], m, l_max, n["count_empty_rows"], **batch.unit_ids(rows)
                )
                sums.append(float(w.sum()))
            out[m] = float(np.mean(sums)) if sums else 0.0
        return out

    def rung_clip_kl_lr(self) -> list[RungResult]:
        lad = self.cfg.ladder
        lr0 = self.spec["optimizer"]["lr"]
        key = f"lr={lr0:g} (nominal)"
        variants: dict[str, dict[str, Any]] = {key: {}}
        for f in lad.lr_factors:
            if f != 1.0:
                variants[f"lr={lr0 * f:g} (x{f:g})"] = {"lr": lr0 * f}
        w = self.spec["blanks"]["weight"]
        sequence = w["ratio"] in ("sequence", "gspo_token")
        if w["trust_region"] == "clip" and not sequence:
            for lo, hi in lad.clip_variants:
                if (lo, hi) != (w["eps_low"], w["eps_high"]):
                    variants[f"clip=[{lo:g},{hi:g}]"] = {
                        "blanks_over": {"weight": {"eps_low": lo, "eps_high": hi}}
                    }
        elif w["trust_region"] == "clip" and w.get("clip_scale"):  # multiples of the spread
            for f in lad.scale_factors:
                lo, hi = w["clip_scale"]["low"] * f, w["clip_scale"]["high"] * f
                if f != 1.0:
                    variants[f"clip=[{lo:.3g},{hi:.3g}] x spread (x{f:g}, sequence scale)"] = {
                        "blanks_over": {"weight": {"clip_scale": {"low": lo, "high": hi}}}
                    }
        elif w["trust_region"] == "clip":  # a sequence ratio: its own bounds, scaled
            for f in lad.scale_factors:
                lo, hi = w["eps_low"] * f, w["eps_high"] * f
                if f != 1.0 and lo < 1:
                    variants[f"clip=[{lo:.3g},{hi:.3g}] (x{f:g}, sequence scale)"] = {
                        "blanks_over": {"weight": {"eps_low": lo, "eps_high": hi}}
                    }
        elif w["trust_region"] == "sapo":  # the soft gate's temperatures, scaled
            for f in lad.scale_factors:
                pos, neg = w["tau_pos"] * f, w["tau_neg"] * f
                if f != 1.0:
                    variants[f"tau=[{pos:.3g},{neg:.3g}] (x{f:g})"] = {
                        "blanks_over": {"weight": {"tau_pos": pos, "tau_neg": neg}}
                    }
        kl0 = self.spec["blanks"]["regularizer"]["loss_kl_coef"]
        for kl in lad.kl_variants:
            if kl != kl0:
                variants[f"loss_kl={kl:g}"] = {"blanks_over": {"regularizer": {"loss_kl_coef": kl}}}
        return self._compare(7, "clip_kl_lr", variants, key)

    def rung_credit(self) -> list[RungResult]:
        """Credit added by the advantage blank alone: each preset of ``ladder.credit_variants``
        lends the arm its advantage blank; every other blank stays the arm's (one axis)."""

        blanks = self.spec["blanks"]
        key = f"advantage={blanks['advantage']['estimator']} (nominal)"
        variants: dict[str, dict[str, Any]] = {key: {}}
        skipped: list[RungResult] = []
        for name in self.cfg.ladder.credit_variants:
            adv = resolve(name).advantage.model_dump(mode="json")
            if adv == blanks["advantage"]:
                continue  # the arm's own credit
            label = f"+{adv['estimator']} credit ({name}'s advantage blank)"
            task = self.spec["task"]
            labels = make_task(task["name"], task["params"]).has_step_labels
            if adv["estimator"] == "prm" and adv["prm"]["scorer"] == "trained" and not labels:
                why = f"a trained PRM needs step labels; task '{task['name']}' gives none"
                skipped.append(RungResult(8, "credit", label, "inconclusive", why))
                continue
            try:
                resolve(self.spec["preset"], deep_merge(blanks, {"advantage": adv}))
            except ValueError as exc:  # e.g. a critic with overlong shaping
                why = f"not applicable to this arm: {exc}"
                skipped.append(RungResult(8, "credit", label, "inconclusive", why))
                continue
            variants[label] = {"blanks_over": {"advantage": adv}}
        if len(variants) == 1:
            why = (
                "no credit variant differs from the arm's advantage blank (ladder.credit_variants)"
            )
            return [*skipped, verdict(8, "credit", "inconclusive", why)]
        return skipped + self._compare(8, "credit", variants, key)

    def rung_asynchrony(self) -> list[RungResult]:
        """The arm's asynchronous setting (``data.lag``, or a concurrent collector) against its
        synchronous one at the matched budget, paired on the same instances: the rung fails when
        asynchrony loses."""

        d = self.spec["blanks"]["data"]
        lag, conc = d.get("lag", 0), d.get("concurrent")
        if not lag and conc is None:
            reason = (
                "not applicable: the arm is synchronous (data.lag 0, no data.concurrent), there "
                "is no asynchronous setting to compare with synchronous parity"
            )
            return [
                RungResult(9, "asynchrony", "synchronous arm", "inconclusive", reason),
                verdict(9, "asynchrony", "inconclusive", reason),
            ]
        if lag:
            key = f"lag={lag} (nominal)"
        else:
            how = f", each group as it finishes, partial {conc.get('partial')}"
            key = (
                f"concurrent queue={conc['queue']}{how if conc.get('consume') == 'episode' else ''}"
            )
            key += " (nominal)"
        sync = {"blanks_over": {"data": {"lag": 0, "concurrent": None, "broadcast_every": 1}}}
        out = self._compare(9, "asynchrony", {key: {}, "lag=0 (synchronous)": sync}, key)
        nominal = self.trained_outs.get(key) or {}
        split = nominal.get("staleness_split") or {}
        if split.get("inflight_behind") is not None:  # the split says where the lag came from
            dropped = {r: n for r, n in (nominal.get("async_dropped") or {}).items() if n}
            note = (
                f" Its samples were {nominal.get('versions_behind', 0.0):.2f} versions behind on "
                f"average: {split['inflight_behind']:.2f} passed while they were generated, "
                f"{split.get('queue_behind') or 0.0:.2f} while they waited to be consumed"
                + (
                    f"; their tokens spanned {split['version_span']:.2f} versions"
                    if split.get("version_span")
                    else ""
                )
                + (
                    "; dropped tokens: "
                    + ", ".join(f"{r} {n:.0f}" for r, n in sorted(dropped.items()))
                    if dropped
                    else ""
                )
                + "."
            )
            for r in out:
                if r.variant == VERDICT:
                    r.evidence += note
                    r.detail["staleness_split"] = {**split, "dropped": dropped}
        return out

    # ------------------------------------------------------------------ the walk

    def run(self, all_rungs: bool = False, until: int | None = None) -> list[RungResult]:
        """Walk the rungs in order (up to rung ``until``), stopping at the first failing verdict
        unless ``all_rungs``; records the results, each rung's rows then its verdict row (ladder.json,
        the store's ladder table), and returns them."""

        self.prepare()
        t0 = time.time()
        done = self._progress()
        for rung, name in RUNGS:
            if until is not None and rung > until:
                break
            if str(rung) in done["rungs"]:  # a killed or interrupted walk resumes here
                res = [RungResult(**r) for r in done["rungs"][str(rung)]]
                self.log(f"ladder: rung {rung} ({name}): recorded by an earlier walk, reused")
            else:
                self.log(f"ladder: rung {rung} ({name})")
            try:
                if str(rung) not in done["rungs"]:
                    res = getattr(self, f"rung_{name}")()
                    done["rungs"][str(rung)] = [asdict(r) for r in res]
                    write_json(ExperimentDir(self.out).ladder_progress, done)
            except KeyboardInterrupt:  # Ctrl-C: the rungs done so far are recorded
                from ...orchestration.interrupts import Interrupted

                self.save(time.time() - t0)
                n_done = len(verdicts(self.results))
                raise Interrupted(
                    f"interrupted in rung {rung} ({name}): {n_done} finished rung(s) recorded in "
                    f"{ExperimentDir(self.out).ladder} and the store; the same command resumes "
                    f"the walk at rung {rung} (its short runs start again)",
                    [f"rung {rung}"],
                    [],
                ) from None
            (v,) = verdicts(res)  # exactly one verdict per rung
            self.results += res
            self.log(f"ladder: rung {rung} ({name}) {v.status}: {v.evidence}")
            if v.status == "fail" and not all_rungs:
                self.log(f"ladder: stopped at rung {rung} ({name})")
                break
        self.save(time.time() - t0)
        return self.results

    def _progress(self) -> dict[str, Any]:
        """The finished rungs of an earlier walk of the same ladder (the same arm, spec, code and
        ladder settings), else a fresh record."""

        import hashlib
        import json

        key = hashlib.sha256(
            json.dumps(
                [self.arm, self.spec, self.cfg.ladder.model_dump(mode="json"), self.seeds],
                sort_keys=True,
                default=str,
            ).encode()
        ).hexdigest()[:16]
        from ...layout import read_json

        old = read_json(ExperimentDir(self.out).ladder_progress, {}) or {}
        if old.get("key") == key:
            return old
        return {"key": key, "arm": self.arm, "rungs": {}}

    def save(self, seconds: float) -> None:
        from ...store.database import write_ladder

        rows = [asdict(r) for r in self.results]
        path = ExperimentDir(self.out).ladder
        write_json(path, {"arm": self.arm, "seconds": seconds, "rungs": rows})
        write_ladder(self.out, self.cfg.name, self.arm, rows)


class LadderFailed(SixblanksError):
    exit_code = 1
