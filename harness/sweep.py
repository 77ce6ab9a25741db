"""Hyperparameter search under a fixed budget: one Optuna study per arm, the same number of trials,
the same sampler, seed and pruner for every arm, the arm's default enqueued first; trials charged to the
arm's search ledger (the total is never exceeded: each trial's own budget is clamped to what is left);
pruning on the ledger resource (intermediate scores reported at launched-token checkpoints); then the
best configuration of each arm is confirmed on fresh seeds under the experiment's matched budget.

Everything lives in ``OUT/sweep/``: the Optuna journal (or ``sweep.storage``), the trials, the
confirmation runs, results.duckdb (table ``trials``) and the report.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from algorithms.blanks import deep_merge
from algorithms.presets import resolve
from budgets.counters import COUNTERS

from .config import ExperimentConfig, validate_mapping
from .errors import ConfigError, SixblanksError
from .runner import _settings_from_spec, _write_json


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
        self.cfg = cfg
        self.out = Path(out_dir) / "sweep"
        self.log = log or (lambda _m: None)
        sw = cfg.sweep
        if not sw.space:
            raise ConfigError(
                "sweep.space: no search space: give at least one arm a space, e.g. "
                "{grpo: {optimizer.lr: {type: float, low: 1.0e-5, high: 1.0e-3, log: true}}}"
            )
        self.arms = list(sw.space)
        self.trial_budget = dict(sw.trial_budget) or {k: v / 4 for k, v in cfg.budget.items()}
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
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        if self.cfg.sweep.storage:
            return self.cfg.sweep.storage
        self.out.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(self.out / "optuna.journal")))

    def _sampler(self):
        import optuna

        sw = self.cfg.sweep
        if sw.sampler == "random":
            return optuna.samplers.RandomSampler(seed=sw.seed)
        return optuna.samplers.TPESampler(seed=sw.seed)

    def _pruner(self):
        import optuna

        p = self.cfg.sweep.pruner
        counter = next(iter(self.trial_budget))
        if p == "median":
            return optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0)
        if p == "successive_halving":
            return optuna.pruners.SuccessiveHalvingPruner()
        if p == "hyperband":
            return optuna.pruners.HyperbandPruner(
                min_resource=max(1, int(self.trial_budget[counter] / 8)),
                max_resource=int(self.trial_budget[counter]),
            )
        return optuna.pruners.NopPruner()

    def _default_params(self, arm: str, base_spec: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for path in self.cfg.sweep.space[arm]:
            parts = path.split(".")
            out[path] = _get_path(base_spec, parts)
        return out

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

    def _apply(self, spec: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
        spec = copy.deepcopy(spec)
        blank_over: dict[str, Any] = {}
        for path, value in params.items():
            parts = path.split(".")
            if parts[0] == "blanks":
                _set_path(blank_over, parts[1:], value)
            else:
                _set_path(spec, parts, value)
        if blank_over:
            spec["blanks"] = resolve(
                spec["preset"], deep_merge(spec["blanks"], blank_over)
            ).model_dump(mode="json")
        return spec

    # ------------------------------------------------------------------ the search

    def _objective(self, arm: str, base_spec: dict[str, Any], warm: Path, used: dict[str, float]):
        import optuna

        from .models import load_pretrained
        from .tasks import make_task
        from .trainer import Trainer, TrainingError

        def objective(trial) -> float:
            params = self._suggest(trial, arm)
            spec = self._apply(base_spec, params)
            # checked inside the trial: its own ledger may not spend more than the search has left
            spec["budget"] = {
                k: min(v, self.total_budget.get(k, float("inf")) - used.get(k, 0.0))
                for k, v in self.trial_budget.items()
            }
            counter = next(iter(spec["budget"]))
            spec["eval"]["every"] = self.trial_budget[counter] / 4
            spec["eval"]["counter"] = counter
            settings = _settings_from_spec(spec)
            task = make_task(spec["task"]["name"], spec["task"]["params"])
            settings.reward_range = task.reward_range
            model, tok = load_pretrained(warm)
            ref, _ = load_pretrained(warm)
            trainer = Trainer(settings, task, model, tok, ref_model=ref)
            seen = [0]

            def on_step(tr, metrics):
                trial.set_user_attr("counters", dict(tr.ledger.counters))
                every = spec["eval"]["every"]
                for ev in tr.result.evals[seen[0] :]:
                    # pruning on the ledger resource: the score at each token checkpoint (aligned across trials)
                    trial.report(ev["score"], step=int(ev["position"][counter] // every * every))
                seen[0] = len(tr.result.evals)
                if trial.should_prune():
                    trial.set_user_attr("pruned_at", tr.ledger.counters[counter])
                    raise optuna.TrialPruned(
                        f"pruned at {counter} = {tr.ledger.counters[counter]:g}"
                    )

            try:
                res = trainer.train(on_step=on_step)
            except (TrainingError, SixblanksError) as exc:
                trial.set_user_attr("counters", dict(trainer.ledger.counters))
                trial.set_user_attr("error", str(exc))
                raise
            trial.set_user_attr("counters", dict(trainer.ledger.counters))
            return float(res.evals[-1]["score"])

        return objective

    def run(self) -> dict[str, Any]:
        import optuna
        from optuna.trial import TrialState

        from .orchestrator import Orchestrator

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        orch = Orchestrator(self.cfg, self.out, log=self.log, progress=False)
        specs = orch.prepare()
        warm = orch.warm_dir
        storage = self._storage()
        summary: dict[str, Any] = {
            "arms": {},
            "trial_budget": self.trial_budget,
            "total_budget": self.total_budget,
        }
        for arm in self.arms:
            base_spec = next(s for s in specs if s["arm"] == arm)
            study = optuna.create_study(
                study_name=f"{self.cfg.name}:{arm}",
                storage=storage,
                direction="maximize",
                sampler=self._sampler(),
                pruner=self._pruner(),
                load_if_exists=True,
            )
            # a trial interrupted by a kill is left RUNNING: count it as failed, with what it had spent
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                study.tell(t.number, state=TrialState.FAIL)
            if not study.trials:
                study.enqueue_trial(self._default_params(arm, base_spec))
            used = dict.fromkeys(COUNTERS, 0.0)
            for t in study.trials:
                for k, v in (t.user_attrs.get("counters") or {}).items():
                    used[k] += v
            stopped = None
            while len(study.trials) < self.cfg.sweep.n_trials:
                left = {k: self.total_budget[k] - used.get(k, 0.0) for k in self.total_budget}
                if any(v <= 0 for v in left.values()):
                    stopped = f"search budget exhausted after {len(study.trials)} trials"
                    break
                self.log(f"sweep {arm}: trial {len(study.trials) + 1}/{self.cfg.sweep.n_trials}")
                study.optimize(
                    self._objective(arm, base_spec, warm, used), n_trials=1, catch=(SixblanksError,)
                )
                last = study.trials[-1]
                for k, v in (last.user_attrs.get("counters") or {}).items():
                    used[k] += v
            states = [t.state.name for t in study.trials]
            complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
            best = max(complete, key=lambda t: t.value) if complete else None
            summary["arms"][arm] = {
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
                        "intermediate": {int(k): v for k, v in t.intermediate_values.items()},
                    }
                    for t in study.trials
                ],
            }
        _write_json(self.out / "sweep.json", summary)
        summary["confirm"] = self.confirm(summary)
        self._store_trials(summary)
        _write_json(self.out / "sweep.json", summary)
        return summary

    def confirm(self, summary: dict[str, Any]) -> dict[str, Any]:
        """Re-run each arm at its defaults and at its best configuration on fresh seeds, matched budget."""

        from .orchestrator import Orchestrator

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
                if parts[0] == "rollout":
                    continue  # rollout settings are shared by all arms; not tunable per arm here
                _set_path(tuned, parts, value)
            arms[f"{arm}.tuned"] = tuned
        data["arms"] = arms
        data["seeds"] = list(self.cfg.sweep.confirm_seeds)
        cfg = validate_mapping(data)
        self.confirm_cfg = cfg
        res = Orchestrator(cfg, self.out, log=self.log, progress=False).run()
        return {"failures": res["failures"], "runs": len(res["summary"])}

    def _store_trials(self, summary: dict[str, Any]) -> None:
        from .store import _insert, connect, ensure_schema

        con = connect(self.out)
        try:
            ensure_schema(con)
            con.execute("DELETE FROM trials WHERE experiment_id = ?", [self.cfg.name])
            rows = []
            for arm, rec in summary["arms"].items():
                for t in rec["trials_detail"]:
                    c = t["counters"] or {}
                    rows.append(
                        {
                            "experiment_id": self.cfg.name,
                            "arm": arm,
                            "trial": t["number"],
                            "state": t["state"],
                            "params": json.dumps(t["params"]),
                            "value": t["value"],
                            "launched_tokens": c.get("launched_tokens"),
                            "device_seconds": c.get("device_seconds"),
                            "pruned_at": t["pruned_at"],
                            "run_id": None,
                        }
                    )
            _insert(con, "trials", rows)
        finally:
            con.close()
        self._track_trials(summary)

    def _track_trials(self, summary: dict[str, Any]) -> None:
        if not self.cfg.tracking.mlflow:
            return
        try:
            from .tracking import Tracker, tracking_uri

            tr = Tracker(
                self.out,
                tracking_uri(self.cfg.tracking.uri, self.out),
                (self.cfg.tracking.experiment or self.cfg.name) + "-sweep",
            )
            client, exp_id = tr._client()
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
        except Exception as exc:  # noqa: BLE001 - the trials are in DuckDB and sweep.json regardless
            self.log(f"MLflow unreachable for the sweep: {exc}")
