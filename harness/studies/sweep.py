"""Hyperparameter search under a fixed budget: one Optuna study per arm, the same number of trials,
the same sampler, seed and pruner for every arm, the arm's default enqueued first; trials charged to
the arm's search ledger (the total is never exceeded: each trial's own budget is clamped to what is
left); pruning on the ledger resource (intermediate scores reported at launched-token checkpoints);
then the best configuration of each arm is confirmed on fresh seeds under the experiment's matched
budget.

Everything lives in ``OUT/sweep/`` (:class:`~sixblanks.harness.layout.SweepDir`): the Optuna journal
(or ``sweep.storage``), the trials, the confirmation runs, the results store (table ``trials``) and
the report.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sixblanks.algorithms.blanks import deep_merge
from sixblanks.algorithms.presets import resolve
from sixblanks.budgets.counters import COUNTERS
from sixblanks.budgets.ledger import divide_budget

from ..config import ExperimentConfig, RolloutOverride, validate_mapping
from ..errors import ConfigError
from ..layout import ExperimentDir, write_json
from ..orchestration.interrupts import deferred_interrupts
from ..orchestration.progress import plain_wanted
from ..runspec import RunSpec
from .sweep_worker import make_pruner, open_storage, repair_journal, run_trial

TRIAL_SPLIT = "validation"
"""The split trials are scored (and selected) on; confirmation runs and reports score ``test``."""


def _set_path(d: dict[str, Any], path: list[str], value: Any) -> None:
    for k in path[:-1]:
        d = d.setdefault(k, {})
    d[path[-1]] = value


def _get_path(d: dict[str, Any], path: list[str]) -> Any:
    for k in path:
        d = d[k]
    return d


class Sweep:
    def __init__(
        self, cfg: ExperimentConfig, out_dir: str | Path, log: Callable[[str], None] | None = None
    ):
        from ..config.parallel_checks import refuse_in_one_process

        refuse_in_one_process(cfg, "the hyperparameter sweep")
        self.cfg = cfg
        self.dir = ExperimentDir(out_dir).sweep
        self.out = self.dir.path
        self.log = log or (lambda _m: None)
        self.plain = plain_wanted(log)  # a line per evaluation of a trial and of a confirmation run
        sw = cfg.sweep
        self.parallel = min(sw.parallel, sw.n_trials)
        if not sw.space:
            raise ConfigError(
                "sweep.space: no search space: give at least one arm a space, e.g. "
                "{grpo: {optimizer.lr: {type: float, low: 1.0e-5, high: 1.0e-3, log: true}}}"
            )
        self.arms = list(sw.space)
        self.trial_budget = dict(sw.trial_budget) or divide_budget(cfg.budget, 4)
        self.total_budget = dict(sw.total_budget) or {
            k: v * sw.n_trials for k, v in self.trial_budget.items()
        }
        for path_map in sw.space.values():
            for path in path_map:
                head = path.split(".")[0]
                if head not in ("optimizer", "blanks", "rollout"):
                    raise ConfigError(
                        f"sweep.space: '{path}' must start with optimizer., blanks. or rollout."
                    )

    # ------------------------------------------------------------------ optuna plumbing

    def _storage(self):
        self.out.mkdir(parents=True, exist_ok=True)
        kind, where = self._storage_ref()
        if kind == "journal":  # this process holds the output directory: no other writer is left
            for line in repair_journal(where):
                self.log(f"sweep journal: {line}")
        return open_storage((kind, where))

    def _sampler(self):
        import optuna

        sw = self.cfg.sweep
        if sw.sampler == "random":
            return optuna.samplers.RandomSampler(seed=sw.seed)
        # with trials in flight, TPE takes them as if they had scored the worst so far (constant
        # liar), so that parallel trials do not all suggest the same point
        return optuna.samplers.TPESampler(seed=sw.seed, constant_liar=self.parallel > 1)

    def _pruner_ref(self) -> tuple[str, float]:
        return (self.cfg.sweep.pruner, self.trial_budget[next(iter(self.trial_budget))])

    def _default_params(self, arm: str, base_spec: RunSpec) -> dict[str, Any]:
        form = base_spec.as_dict()  # a searched path names a key of the spec's JSON form
        return {path: _get_path(form, path.split(".")) for path in self.cfg.sweep.space[arm]}

    def _suggest(self, trial, arm: str) -> dict[str, Any]:
        params = {}
        for path, sp in self.cfg.sweep.space[arm].items():
            if sp.type == "float":
                params[path] = trial.suggest_float(path, sp.low, sp.high, log=sp.log)
            elif sp.type == "int":
                params[path] = trial.suggest_int(path, int(sp.low), int(sp.high), log=sp.log)
            else:
                params[path] = trial.suggest_categorical(path, sp.choices)
        return params

    def _apply(self, spec: RunSpec, params: dict[str, Any]) -> RunSpec:
        """``spec`` with the trial's ``params`` (paths into its JSON form) set; the blanks
        resolved again through the arm's preset, which validates them."""

        form = spec.as_dict()
        blank_over: dict[str, Any] = {}
        for path, value in params.items():
            parts = path.split(".")
            if parts[0] == "blanks":
                _set_path(blank_over, parts[1:], value)
            else:
                _set_path(form, parts, value)
        if blank_over:
            form["blanks"] = resolve(
                form["preset"], deep_merge(form["blanks"], blank_over)
            ).model_dump(mode="json")
        return RunSpec.from_dict(form)

    # ------------------------------------------------------------------ the search

    def _trial_spec(self, base_spec: RunSpec, params: dict[str, Any], budget) -> RunSpec:
        spec = self._apply(base_spec, params)
        counter = next(iter(budget))
        return spec.replace(
            # the trial's budget, reserved on the arm's search ledger (trials.py): its own ledger
            # stops it there, so the search total is never exceeded
            budget=dict(budget),
            eval={
                **spec.eval,
                "every": self.trial_budget[counter] / 4,
                "counter": counter,
                # trials are chosen on validation; confirmation runs and reports score test
                "split": TRIAL_SPLIT,
            },
        )

    def _storage_ref(self) -> tuple[str, str]:
        """How a worker process opens the same storage: ("url", URL) or ("journal", path)."""

        if self.cfg.sweep.storage:
            return ("url", self.cfg.sweep.storage)
        return ("journal", str(self.dir.optuna_journal))

    def run(self) -> dict[str, Any]:
        import optuna

        from ..orchestration.executors import make_executor
        from ..orchestration.orchestrator import Orchestrator, threads_per_worker

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        orch = Orchestrator(self.cfg, self.out, log=self.log, progress=False)
        orch.check_servers()  # and the study's database: both answer before the warm start
        if self.cfg.sweep.storage:
            from ..orchestration.servers import check_database

            check_database(self.cfg.sweep.storage, "sweep.storage")
        plan = orch.prepare()
        specs, warm = plan.specs, plan.warm_dir
        storage = self._storage()
        summary: dict[str, Any] = {
            "arms": {},
            "trial_budget": self.trial_budget,
            "total_budget": self.total_budget,
        }
        threads = threads_per_worker(self.parallel)
        executor = make_executor(self.cfg.executor, self.parallel, threads)
        # Ctrl-C is acted on between launches and while trials run, never inside a storage write
        with deferred_interrupts(), executor.session(self.parallel) as session:
            for arm in self.arms:
                self._search_arm(arm, specs, warm, storage, session, threads, summary)
        write_json(self.dir.sweep_summary, summary)
        summary["confirm"] = self.confirm(summary)
        self._store_trials(summary)
        write_json(self.dir.sweep_summary, summary)
        return summary

    def _search_arm(self, arm, specs, warm, storage, session, threads, summary) -> None:
        from .sweep_trials import SearchLedger, run_trials

        base_spec = next(s for s in specs if s.arm == arm)
        study = self._open_study(arm, storage, base_spec)
        search = SearchLedger(self.total_budget, self.trial_budget)
        before = dict.fromkeys(COUNTERS, 0.0)
        for t in study.trials:
            for k, v in (t.user_attrs.get("counters") or {}).items():
                before[k] += v
        search.spent_before(before)

        def make_job(trial, budget: dict[str, float]) -> tuple[str, dict[str, Any]]:
            # what it is selected on, recorded at once: a sweep killed while the sampler suggests
            # (right after a trial ends) leaves a trial that still names its split
            trial.set_user_attr("split", TRIAL_SPLIT)
            name = f"sweep {arm} trial {trial.number}"  # Optuna's number, as the report gives it
            self.log(f"{name}: start ({trial.number + 1}/{self.cfg.sweep.n_trials})")
            spec = self._trial_spec(base_spec, self._suggest(trial, arm), budget)
            return name, {
                "spec": spec.to_json(),  # the worker is another process (or a Ray node)
                "warm": str(warm),
                "storage": self._storage_ref(),
                "pruner": self._pruner_ref(),
                "study": study.study_name,
                # Optuna has no public trial id; the worker re-attaches to the asked trial by it
                "trial_id": trial._trial_id,
                "threads": threads,
                "name": name,
                "plain": self.plain,  # the worker says each evaluation (its stderr is ours)
            }

        stopped = run_trials(
            self, arm, study, search, session, make_job, run_trial, self.parallel, self.log
        )
        summary["arms"][arm] = self._arm_summary(arm, study, search, base_spec, stopped)

    def _open_study(self, arm: str, storage, base_spec: RunSpec):
        """The arm's Optuna study (resumed where it exists): a trial a kill left running counts as
        failed; a new study's first trial is the arm's default setting."""

        import optuna
        from optuna.trial import TrialState

        study = optuna.create_study(
            study_name=f"{self.cfg.name}:{arm}",
            storage=storage,
            direction="maximize",
            sampler=self._sampler(),
            pruner=make_pruner(*self._pruner_ref()),
            load_if_exists=True,
        )
        # a trial interrupted by a kill is left RUNNING: count it as failed, with what it had spent
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            study.tell(t.number, state=TrialState.FAIL)
            self.log(f"sweep {arm} trial {t.number}: FAIL: interrupted (a killed sweep)")
        if not study.trials:
            study.enqueue_trial(self._default_params(arm, base_spec))
        return study

    def _arm_summary(self, arm, study, search, base_spec, stopped) -> dict[str, Any]:
        """What the search of one arm did: its trials by state, what they spent, the best."""

        from optuna.trial import TrialState

        used = search.counters
        states = [t.state.name for t in study.trials]
        complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
        best = max(complete, key=lambda t: t.value) if complete else None
        return {
            "trials": len(study.trials),
            "complete": states.count("COMPLETE"),
            "pruned": states.count("PRUNED"),
            "failed": states.count("FAIL"),
            "spent": {k: used[k] for k in COUNTERS},
            "best_params": best.params if best else None,
            "best_value": best.value if best else None,
            "default_params": self._default_params(arm, base_spec),
            "stopped": stopped,
            "trials_detail": [
                {
                    "number": t.number,
                    "state": t.state.name,
                    "params": t.params,
                    "value": t.value,
                    "counters": t.user_attrs.get("counters"),
                    "pruned_at": t.user_attrs.get("pruned_at"),
                    "worker": t.user_attrs.get("worker"),
                    "ended": t.user_attrs.get("ended"),
                    "split": t.user_attrs.get("split", TRIAL_SPLIT),  # every trial is scored on it
                    "eval_seed_range": t.user_attrs.get("eval_seed_range"),
                    "error": t.user_attrs.get("error"),
                    "intermediate": {int(k): v for k, v in t.intermediate_values.items()},
                }
                for t in study.trials
            ],
        }

    def confirm(self, summary: dict[str, Any]) -> dict[str, Any]:
        """Re-run each arm at its defaults and at its best configuration on fresh seeds, matched
        budget."""

        from ..orchestration.orchestrator import Orchestrator

        if not self.cfg.sweep.confirm_seeds:
            self.log("sweep.confirm_seeds is empty: no confirmation runs")
            return {"failures": [], "runs": 0, "skipped": "sweep.confirm_seeds is empty"}
        data = json.loads(json.dumps(self.cfg.model_dump(mode="json", exclude={"task"})))
        arms = {}
        for arm, rec in summary["arms"].items():
            base = data["arms"][arm]
            arms[arm] = base
            if rec["best_params"] is None:
                continue
            tuned = copy.deepcopy(base)
            for path, value in rec["best_params"].items():
                parts = path.split(".")
                if parts == ["rollout", "group_size"]:  # an arm's group size is its data blank's
                    parts = ["blanks", "data", "group_size"]
                elif parts[0] == "rollout" and parts[1] not in RolloutOverride.model_fields:
                    self.log(
                        f"{arm}: {path} is shared by all arms; the tuned arm keeps the default"
                    )
                    continue
                _set_path(tuned, parts, value)
            # what the tuning cost, for the audit: the tuned arm is flagged against untuned ones
            tuned["search_budget"] = {
                k: sum((t["counters"] or {}).get(k, 0.0) for t in rec["trials_detail"])
                for k in self.total_budget
            }
            arms[f"{arm}.tuned"] = tuned
        data["arms"] = arms
        data["seeds"] = list(self.cfg.sweep.confirm_seeds)
        data["eval"]["split"] = "test"  # never the validation instances the trials were chosen on
        cfg = validate_mapping(data)
        self.confirm_cfg = cfg
        res = Orchestrator(cfg, self.out, log=self.log, progress=self.plain and "plain").run()
        return {"failures": res["failures"], "runs": len(res["summary"])}

    def _store_trials(self, summary: dict[str, Any]) -> None:
        from ..store.database import write_trials
        from ..store.rows import trial_rows

        write_trials(self.out, self.cfg.name, trial_rows(summary))
        self._track_trials(summary)

    def _track_trials(self, summary: dict[str, Any]) -> None:
        if not self.cfg.tracking.mlflow:
            return
        try:
            from ..orchestration.tracking import Tracker, tracking_uri

            tr = Tracker(
                self.out,
                tracking_uri(self.cfg.tracking.uri, self.out),
                (self.cfg.tracking.experiment or self.cfg.name) + "-sweep",
            )
            client, exp_id = tr.client()
            parent = client.create_run(
                exp_id,
                run_name=f"sweep {time.strftime('%Y-%m-%d %H:%M:%S')}",
                tags={"sixblanks.kind": "sweep"},
            ).info.run_id
            for arm, rec in summary["arms"].items():
                for t in rec["trials_detail"]:
                    run = client.create_run(
                        exp_id,
                        run_name=f"{arm} trial {t['number']}",
                        tags={
                            "mlflow.parentRunId": parent,
                            "sixblanks.arm": arm,
                            "trial.state": t["state"],
                        },
                    )
                    for k, v in t["params"].items():
                        client.log_param(run.info.run_id, k, v)
                    if t["value"] is not None:
                        client.log_metric(run.info.run_id, "value", t["value"])
                    for step, v in t["intermediate"].items():
                        client.log_metric(run.info.run_id, "intermediate", v, step=step)
                    client.set_terminated(run.info.run_id)
            client.set_terminated(parent)
        except Exception as exc:  # noqa: BLE001 - the trials are in DuckDB and sweep.json anyway
            self.log(f"MLflow unreachable for the sweep: {exc}")
