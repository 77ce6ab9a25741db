"""The orchestrator: experiment -> warm-start stage + one run spec per arm x task x seed -> executor.

It writes the experiment-level files (experiment.json, fairness.json, summary.json; see
:mod:`sixblanks.harness.layout`) and has the store ingest the run directories. Runs write only
inside their own directories. Finished runs are skipped; unfinished ones
resume from their last checkpoint.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import ExperimentConfig
from .errors import SixblanksError
from .layout import ExperimentDir, RunDir, write_json
from .runner import spec_id
from .version import CODE_VERSION, code_fingerprint


class RunFailed(SixblanksError):
    exit_code = 1


def build_specs(
    cfg: ExperimentConfig, warm_key: str, code: str | None = None
) -> list[dict[str, Any]]:
    """One fully resolved spec per arm x task x seed; ``code``: the code fingerprint (default: of
    the code running now), part of every run id."""

    code = code or code_fingerprint()
    specs = []
    for arm in cfg.arms:
        blanks = cfg.resolved_blanks(arm).model_dump(mode="json")
        for task in cfg.tasks or []:
            for seed in cfg.seeds:
                spec = {
                    "experiment": cfg.name,
                    "arm": arm,
                    "preset": cfg.arms[arm].preset,
                    "seed": seed,
                    "task": task.model_dump(mode="json"),
                    "blanks": blanks,
                    "optimizer": cfg.optimizer_for(arm).model_dump(mode="json"),
                    "rollout": cfg.rollout.model_dump(mode="json"),
                    "budget": dict(cfg.budget),
                    "eval": cfg.eval.model_dump(mode="json"),
                    "model": cfg.model.model_dump(mode="json"),
                    "warm_start_key": warm_key,
                    "code_version": code,
                }
                spec["run_id"] = spec_id(spec)
                specs.append(spec)
    return specs


def default_workers(n_runs: int, requested: int | None) -> int:
    cores = os.cpu_count() or 1
    return max(1, min(n_runs, requested or cores))


class Orchestrator:
    def __init__(
        self,
        cfg: ExperimentConfig,
        out_dir: str | Path,
        log: Callable[[str], None] | None = None,
        progress: bool = True,
        reuse_finished: bool = False,
    ):
        self.cfg = cfg
        self.out = Path(out_dir)
        self.dir = ExperimentDir(out_dir)
        self.log = log or (lambda _m: None)
        self.progress = progress
        self.reuse_finished = reuse_finished

    @property
    def runs_dir(self) -> Path:
        return self.dir.runs

    def prepare(self):
        """Warm start (cached) and the run specs."""

        from .tasks import make_task
        from .warmstart import warm_start, warm_start_key

        self._check_backend()
        self.out.mkdir(parents=True, exist_ok=True)
        tasks = [make_task(t.name, t.params) for t in self.cfg.tasks or []]
        key = warm_start_key(self.cfg, tasks)
        _, _, info = warm_start(self.cfg, tasks, self.dir.warm_start, log=self.log)
        self.warm_dir = self.dir.warm_policy(key)
        self.warm_info = info
        self.specs = build_specs(self.cfg, key)
        if self.reuse_finished:
            self.specs = self.reuse(self.specs)
        from .config import resolved_dict

        write_json(
            self.dir.experiment,
            {
                "config": resolved_dict(self.cfg),
                "code_version": code_fingerprint(),
                "warm_start": info,
                "runs": [s["run_id"] for s in self.specs],
            },
        )
        return self.specs

    def _check_backend(self) -> None:
        """Fail before the warm start, not in every run, where the rollout backend cannot work."""

        if self.cfg.rollout.backend != "vllm" or self.cfg.executor.kind != "local":
            return  # Ray: vLLM must be on the workers, which the runs check themselves
        from .rollout.vllm_engine import INSTALL_HINT, vllm_available

        if not vllm_available():
            raise SixblanksError(
                f"rollout.backend is 'vllm' but vLLM is not installed in {sys.executable}: "
                f"{INSTALL_HINT}"
            )

    def reuse(self, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Finished runs of other code for specs that are otherwise the same: their specs replace
        the new ones (the audit then flags them as run by other code)."""

        def same(spec: dict[str, Any]) -> str:
            return spec_id({k: v for k, v in spec.items() if k not in ("run_id", "code_version")})

        finished = {}
        if self.runs_dir.exists():
            for d in sorted(self.runs_dir.iterdir()):
                run = self.dir.run(d.name)
                if run.read_status().get("state") == "finished" and run.spec.exists():
                    found = run.read_spec()
                    finished.setdefault(same(found), found)
        out = []
        for spec in specs:
            old = finished.get(same(spec))
            if (
                old is not None
                and old["run_id"] != spec["run_id"]
                and (self.dir.run(spec["run_id"]).read_status().get("state") != "finished")
            ):
                self.log(f"reusing {old['run_id']} ({old['code_version']}) for {spec['run_id']}")
                spec = old
            out.append(spec)
        return out

    def pending(self) -> list[dict[str, Any]]:
        return [
            s
            for s in self.specs
            if self.dir.run(s["run_id"]).read_status().get("state") != "finished"
        ]

    def run(self) -> dict[str, Any]:
        from .executors import make_executor

        specs = self.prepare()
        todo = self.pending()
        skipped = len(specs) - len(todo)
        if skipped:
            self.log(f"{skipped} finished run(s) skipped")
        failures: dict[str, str] = {}
        if todo:
            ex = self.cfg.executor
            workers = default_workers(len(todo), ex.workers) if ex.kind == "local" else len(todo)
            threads = max(1, (os.cpu_count() or 1) // max(1, min(workers, os.cpu_count() or 1)))
            executor = make_executor(ex, workers, threads)
            jobs = [(s, str(self.dir.run(s["run_id"]).path), str(self.warm_dir)) for s in todo]
            self.log(f"running {len(todo)} run(s) on the {ex.kind} executor ({workers} worker(s))")
            failures = executor.run(jobs, self._progress_callback(todo))
        audit = self.fairness()
        summary = self.summary(failures)
        tables = self.ingest(audit)
        sync = self.track(audit)
        return {
            "summary": summary,
            "fairness": audit,
            "failures": failures,
            "skipped": skipped,
            "tables": tables,
            "mlflow": sync,
        }

    def ingest(self, audit: dict[str, Any] | None = None) -> dict[str, int]:
        from .store import ingest

        return ingest(self.out, self.dir.read_experiment(), audit)

    def tracker(self):
        from .tracking import Tracker, tracking_uri

        t = self.cfg.tracking
        return Tracker(
            self.out, tracking_uri(t.uri, self.out), t.experiment or self.cfg.name, enabled=t.mlflow
        )

    def track(
        self, audit: dict[str, Any] | None = None, artifacts: list[Path] | None = None
    ) -> dict[str, Any]:
        state = self.tracker().sync([s["run_id"] for s in self.specs], audit, artifacts)
        if state.get("last_error"):
            self.log(
                f"MLflow unreachable ({state['last_error'][:120]}); events stay on disk: "
                f"`sixblanks sync {self.out}` sends them later"
            )
        return state

    # ------------------------------------------------------------------ progress

    def _progress_callback(self, todo: list[dict[str, Any]]):
        if not self.progress:
            return lambda final=False: None
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        prog = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.percentage:>5.1f}%"),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            transient=False,
        )
        ids = {}
        state = {"started": False}

        def update() -> None:
            if not state["started"]:
                prog.start()
                for s in todo:
                    ids[s["run_id"]] = prog.add_task(
                        f"{s['arm']}/{s['task']['name']}/seed{s['seed']}", total=1.0, info="pending"
                    )
                state["started"] = True
            for s in todo:
                st = self.dir.run(s["run_id"]).read_status()
                frac = budget_fraction(st)
                last = st.get("last_eval")
                info = st.get("state", "pending")
                if last:
                    info += f" | eval {last['score']:.3f}"
                if st.get("state") == "failed":
                    info = "FAILED: " + str(st.get("error", ""))[:60]
                prog.update(
                    ids[s["run_id"]],
                    completed=1.0 if st.get("state") == "finished" else frac,
                    info=info,
                )

        def callback(final: bool = False) -> None:
            update()
            if final and state["started"]:
                prog.stop()

        return callback

    # ------------------------------------------------------------------ audit and summary

    def fairness(self) -> dict[str, Any]:
        audit = fairness_audit(self.cfg, self.specs, self.runs_dir, self.warm_info)
        write_json(self.dir.fairness, audit)
        return audit

    def summary(self, failures: dict[str, str]) -> list[dict[str, Any]]:
        rows = []
        for s in self.specs:
            rd = self.dir.run(s["run_id"])
            st = rd.read_status()
            res = rd.read_result()
            rows.append(
                {
                    "run_id": s["run_id"],
                    "arm": s["arm"],
                    "task": s["task"]["name"],
                    "seed": s["seed"],
                    "state": st.get("state"),
                    "error": failures.get(s["run_id"]) or st.get("error"),
                    "final_score": res.get("final_score"),
                    "start_score": res["evals"][0]["score"] if res.get("evals") else None,
                    "counters": res.get("counters") or st.get("counters"),
                }
            )
        write_json(self.dir.summary, {"runs": rows, "written": time.time()})
        return rows


def budget_fraction(status: dict[str, Any]) -> float:
    limits = status.get("limits") or {}
    counters = status.get("counters") or {}
    if not limits:
        return 0.0
    return max(min(1.0, counters.get(k, 0.0) / v) for k, v in limits.items())


HELD_CONSTANT = (
    "initial_policy",
    "tokenizer",
    "task",
    "reward",
    "sampling",
    "limits",
    "evaluation",
    "budget",
    "search_budget",
)


def fairness_audit(
    cfg: ExperimentConfig, specs: list[dict[str, Any]], runs_dir: Path, warm_info: dict[str, Any]
) -> dict[str, Any]:
    """What the chapter says to hold constant, per arm, and each arm's consumption; flags differences.

    An arm is flagged when it differs from the first arm on a held-constant item, when a run
    consumed less than 90% of the matched budget on a budgeted counter, or when a run was made by
    other code than the code running now (reused with ``--reuse-finished``).
    """

    def items_of(s: dict[str, Any], shaping: Any) -> dict[str, Any]:
        return {
            "initial_policy": warm_info.get("policy_hash"),
            "tokenizer": warm_info.get("key"),
            "task": {
                "name": s["task"]["name"],
                "params": s["task"]["params"],
                "env_version": CODE_VERSION,
            },
            "reward": {"verifier": s["task"]["name"], "overlong_shaping": shaping},
            "sampling": {k: s["rollout"][k] for k in ("backend", "temperature", "top_p", "top_k")},
            "limits": {k: s["rollout"][k] for k in ("max_new_tokens", "max_prompt_tokens")},
            "evaluation": {
                "eval": s["eval"],
                "eval_size": s["task"]["eval_size"],
                "seeds": cfg.seeds,
            },
            "budget": s["budget"],
            "search_budget": cfg.sweep.total_budget or None,
        }

    per_arm: dict[str, dict[str, Any]] = {}
    reference: dict[str, dict[str, Any]] = {}
    for s in specs:
        b = s["blanks"]
        shaping = (
            b["data"]["overlong_shaping"] if b["data"]["overlong_shaping"]["enabled"] else None
        )
        items = items_of(s, shaping)
        # the experiment's own value of each item: the task's reward without arm-specific shaping
        reference.setdefault(s["task"]["name"], items_of(s, None))
        per_arm.setdefault(s["arm"], {"items": items, "runs": []})
        st = RunDir(runs_dir / s["run_id"]).read_status()
        per_arm[s["arm"]]["runs"].append(
            {
                "run_id": s["run_id"],
                "seed": s["seed"],
                "task": s["task"]["name"],
                "state": st.get("state"),
                "counters": st.get("counters"),
                "code_version": s.get("code_version"),
            }
        )
    code = code_fingerprint()
    flags = []
    for arm, rec in per_arm.items():
        ref = reference[rec["runs"][0]["task"]]
        for item in HELD_CONSTANT:
            if json.dumps(rec["items"][item], sort_keys=True, default=str) != json.dumps(
                ref[item], sort_keys=True, default=str
            ):
                flags.append(
                    {
                        "arm": arm,
                        "item": item,
                        "reason": "differs from the experiment's held-constant value",
                        "value": rec["items"][item],
                        "reference": ref[item],
                    }
                )
        for run in rec["runs"]:
            if run["code_version"] != code:
                flags.append(
                    {
                        "arm": arm,
                        "item": "code",
                        "run_id": run["run_id"],
                        "reason": f"run by other code ({run['code_version']}; now {code}), "
                        "reused on request (--reuse-finished)",
                    }
                )
            counters = run["counters"] or {}
            for counter, limit in cfg.budget.items():
                used = counters.get(counter, 0.0)
                if run["state"] == "finished" and used < 0.9 * limit:
                    flags.append(
                        {
                            "arm": arm,
                            "item": "consumption",
                            "run_id": run["run_id"],
                            "reason": f"consumed {used:g} of {limit:g} {counter} (< 90% of the matched budget)",
                        }
                    )
                if run["state"] != "finished":
                    flags.append(
                        {
                            "arm": arm,
                            "item": "consumption",
                            "run_id": run["run_id"],
                            "reason": f"run is {run['state']}: consumption not final",
                        }
                    )
    return {
        "held_constant": HELD_CONSTANT,
        "arms": per_arm,
        "flags": flags,
        "flagged_arms": sorted({f["arm"] for f in flags}),
    }
