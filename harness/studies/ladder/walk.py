"""The walk of the ablation ladder: the arm's set-up, the rungs of the registry in order, the
progress a killed walk resumes from, and the results (``ladder.json``, the store's ladder table).

    ladder = Ladder(cfg, "runs/ladder", arm="grpo", log=print)
    results = ladder.run(until=4)  # rungs 1-4, stopping at the first failing verdict
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from sixblanks.budgets.ledger import divide_budget

from ...errors import ConfigError, SixblanksError, unknown_name
from ...layout import ExperimentDir, read_json, write_json
from ...orchestration.progress import plain_wanted
from ...runspec import RunSpec
from . import asynchrony, checks, curriculum, normalization, one_axis
from .context import RungContext, Variants
from .registry import RUNGS, Rung
from .rows import SPLIT, RungResult, verdicts

if TYPE_CHECKING:
    from ...config import ExperimentConfig
    from .short_run import ShortRun


class Ladder:
    def __init__(
        self,
        cfg: ExperimentConfig,
        out_dir: str | Path,
        arm: str | None = None,
        log: Callable[[str], None] | None = None,
    ):
        from ...config.parallel_checks import refuse_in_one_process
        from .short_runs import ShortRuns  # torch and the trainer: loaded once a ladder is made

        refuse_in_one_process(cfg, "the ablation ladder")
        self.cfg = cfg
        self.out = Path(out_dir)
        self.arm = arm or cfg.ladder.arm or next(iter(cfg.arms))
        if self.arm not in cfg.arms:
            raise ConfigError(f"--arm: {unknown_name('arm', self.arm, cfg.arms)}")
        self.rollout = cfg.rollout_for(self.arm)  # the arm's sampling settings
        self.log = log or (lambda _m: None)
        self.seeds = list(cfg.ladder.seeds)
        # a line per evaluation and end of each short run
        self.short_runs = ShortRuns(self.log, plain_wanted(log))
        self.results: list[RungResult] = []
        # the arm's set-up, made by prepare() (a test sets what its rung reads instead)
        self.spec: RunSpec | None = None
        self.task = None
        self.warm: Path | None = None

    # ------------------------------------------------------------------ set-up

    def prepare(self) -> None:
        """The warm start (trained, or found cached) and the arm's run spec under the rung
        budget, evaluating once at the end on the validation split, and its task."""

        from ...orchestration.plan import prepare_experiment
        from ...tasks import make_task
        from ...tasks.judge import attach_judge

        plan = prepare_experiment(self.cfg, self.out, log=self.log)
        base = next(s for s in plan.specs if s.arm == self.arm)
        self.spec = base.replace(
            budget=dict(self.cfg.ladder.budget) or divide_budget(self.cfg.budget, 10),
            # the short runs select on validation, never on test
            eval={**base.eval, "every": None, "split": SPLIT},
        )
        task = self.spec.task
        self.task = attach_judge(make_task(task["name"], task["params"]), task.get("judge"))
        self.warm = plan.warm_dir

    def context(self) -> RungContext:
        """What the rungs work with: this ladder's set-up and its services. The services are this
        ladder's methods, looked up now: one replaced on an instance (a planted policy, engine or
        short run) is the one the rungs call."""

        return RungContext(
            cfg=self.cfg,
            arm=self.arm,
            spec=self.spec,
            task=self.task,
            warm=self.warm,
            seeds=self.seeds,
            rollout=self.rollout,
            out=self.out,
            log=self.log,
            policy=self._policy,
            engine=self._engine,
            train=self._train,
            compare=self._compare,
        )

    def _policy(self):
        from ...models import load_pretrained, set_fp32_lm_head

        model_cfg = self.spec.model
        model, tok = load_pretrained(self.warm, model_cfg["device"], model_cfg["dtype"])
        set_fp32_lm_head(model, bool(model_cfg.get("fp32_lm_head")))
        return model, tok

    def _engine(self, model, tok):
        from ...rollout.backends import make_engine

        return make_engine(self.rollout, model, tok, seed=self.seeds[0])

    def _train(self, **variant: Any) -> ShortRun:
        return self.short_runs.train(self.spec, self.warm, **variant)

    def _compare(
        self, rung: int, name: str, variants: Variants, nominal_key: str
    ) -> list[RungResult]:
        return one_axis.compare_settings(self.context(), rung, name, variants, nominal_key)

    # ------------------------------------------------- one rung by itself, on this set-up

    def rung_contract(self) -> list[RungResult]:
        return checks.contract(self.context())

    def rung_frozen_batch(self) -> list[RungResult]:
        return checks.frozen_batch(self.context())

    def rung_no_update_eval(self) -> list[RungResult]:
        return checks.no_update_eval(self.context())

    def rung_curriculum(self) -> list[RungResult]:
        return curriculum.curriculum(self.context())

    def rung_advantage(self) -> list[RungResult]:
        return one_axis.advantage(self.context())

    def rung_normalization(self) -> list[RungResult]:
        return normalization.normalization(self.context())

    def _total_loss_weights(self, modes: list[str]) -> dict[str, float]:
        return normalization.total_loss_weights(self.context(), modes)

    def rung_clip_kl_lr(self) -> list[RungResult]:
        return one_axis.clip_kl_lr(self.context())

    def rung_credit(self) -> list[RungResult]:
        return one_axis.credit(self.context())

    def rung_asynchrony(self) -> list[RungResult]:
        return asynchrony.asynchrony(self.context())

    # ------------------------------------------------------------------ the walk

    def run(self, all_rungs: bool = False, until: int | None = None) -> list[RungResult]:
        """Walk the rungs in order (up to rung ``until``), stopping at the first failing verdict
        unless ``all_rungs``; records the results, each rung's rows then its verdict row
        (ladder.json, the store's ladder table), and returns them."""

        self.prepare()
        t0 = time.time()
        done = self._progress()
        ctx = self.context()
        for rung in RUNGS:
            if until is not None and rung.number > until:
                break
            try:
                res = self._rows_of(rung, ctx, done)
            except KeyboardInterrupt:  # Ctrl-C: the rungs done so far are recorded
                self._interrupted(rung, time.time() - t0)
            (v,) = verdicts(res)  # exactly one verdict per rung
            self.results += res
            self.log(f"ladder: rung {rung.number} ({rung.name}) {v.status}: {v.evidence}")
            if v.status == "fail" and not all_rungs:
                self.log(f"ladder: stopped at rung {rung.number} ({rung.name})")
                break
        self.save(time.time() - t0)
        return self.results

    def _rows_of(self, rung: Rung, ctx: RungContext, done: dict[str, Any]) -> list[RungResult]:
        """The rung's rows: as an earlier walk recorded them (a killed or interrupted walk
        resumes there), else run now and recorded in ``done`` and the progress file."""

        key = str(rung.number)
        if key in done["rungs"]:
            self.log(
                f"ladder: rung {rung.number} ({rung.name}): recorded by an earlier walk, reused"
            )
            return [RungResult(**r) for r in done["rungs"][key]]
        self.log(f"ladder: rung {rung.number} ({rung.name})")
        res = rung.run(ctx)
        done["rungs"][key] = [asdict(r) for r in res]
        write_json(ExperimentDir(self.out).ladder_progress, done)
        return res

    def _interrupted(self, rung: Rung, seconds: float) -> NoReturn:
        """Records the finished rungs and says where the same command resumes."""

        from ...orchestration.interrupts import Interrupted

        self.save(seconds)
        n_done = len(verdicts(self.results))
        raise Interrupted(
            f"interrupted in rung {rung.number} ({rung.name}): {n_done} finished rung(s) "
            f"recorded in {ExperimentDir(self.out).ladder} and the store; the same command "
            f"resumes the walk at rung {rung.number} (its short runs start again)",
            [f"rung {rung.number}"],
            [],
        ) from None

    def _progress(self) -> dict[str, Any]:
        """The finished rungs of an earlier walk of the same ladder (the same arm, spec, code and
        ladder settings), else a fresh record."""

        key = hashlib.sha256(
            json.dumps(
                [
                    self.arm,
                    self.spec.as_dict(),
                    self.cfg.ladder.model_dump(mode="json"),
                    self.seeds,
                ],
                sort_keys=True,
                default=str,
            ).encode()
        ).hexdigest()[:16]
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
