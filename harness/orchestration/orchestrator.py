"""The orchestrator: experiment -> warm-start stage + one run spec per arm x task x seed ->
executor.

It writes the experiment-level files (experiment.json, fairness.json, summary.json; see
:mod:`sixblanks.harness.layout`) and has the store ingest the run directories. Runs write only
inside their own directories. Finished runs are skipped; unfinished ones
resume from their last checkpoint.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import ExperimentConfig
from ..errors import SixblanksError
from ..layout import TOKENIZER_IDENTITY_JSON, ExperimentDir, write_json
from ..runspec import RunSpec
from ..version import code_fingerprint
from .data_files import arm_inputs, task_inputs
from .progress import runs_progress, say
from .runner import identity_of, spec_id


class RunFailed(SixblanksError):
    exit_code = 1


def build_specs(cfg: ExperimentConfig, warm_key: str, code: str | None = None) -> list[RunSpec]:
    """One fully resolved spec per arm x task x seed; ``code``: the code fingerprint (default: of
    the code running now), part of every run id."""

    code = code or code_fingerprint()
    # what decides a run beyond its configuration and the project's code: its data files' content
    # and its user modules' source (transitively), so that an edit runs it again
    task_ins = [task_inputs(t) for t in cfg.tasks or []]
    specs = []
    for arm in cfg.arms:
        blanks = cfg.resolved_blanks(arm).model_dump(mode="json")
        arm_ins = arm_inputs(cfg, arm)
        for task, task_in in zip(cfg.tasks or [], task_ins):
            for seed in cfg.seeds:
                fields = {
                    "experiment": cfg.name,
                    "arm": arm,
                    "preset": cfg.arms[arm].preset,
                    "seed": seed,
                    "task": task.model_dump(mode="json"),
                    "blanks": blanks,
                    "optimizer": cfg.optimizer_for(arm).model_dump(mode="json"),
                    "rollout": cfg.rollout_for(arm).model_dump(mode="json"),
                    "budget": dict(cfg.budget),
                    "eval": cfg.eval.model_dump(mode="json"),
                    "model": cfg.model.model_dump(mode="json"),
                    "warm_start_key": warm_key,
                    "code_version": code,
                }
                fields.update(cfg.arms[arm].run_fields())  # seed_offset, fault: only where set
                if (tools := cfg.tools_for(arm)) is not None:  # the code tool: where offered
                    fields["tools"] = tools.model_dump(mode="json")
                # only where there are some: a built-in task's run id is as it was
                fields.update({"task_inputs": task_in} if task_in else {})
                fields.update({"arm_inputs": arm_ins} if arm_ins else {})
                specs.append(RunSpec.from_dict({**fields, "run_id": spec_id(fields)}))
    return specs


def longest_first(specs: list[RunSpec]) -> list[RunSpec]:
    """``specs`` with the runs expected to take longest first (a stable order otherwise): with
    fewer workers than runs, a long run started last would leave the other workers idle while it
    ends. Expected: the optimizer steps a batch takes, twice over where a critic trains beside the
    policy (a second model's forward and backward)."""

    def cost(spec: RunSpec) -> int:
        data, critic = spec.blanks["data"], spec.blanks["advantage"]["estimator"] == "gae"
        return int(data["epochs"]) * int(data["minibatches"]) * (2 if critic else 1)

    return sorted(specs, key=cost, reverse=True)


def default_workers(n_runs: int, requested: int | None) -> int:
    cores = os.cpu_count() or 1
    return max(1, min(n_runs, requested or cores))


class Orchestrator:
    def __init__(
        self,
        cfg: ExperimentConfig,
        out_dir: str | Path,
        log: Callable[[str], None] | None = None,
        progress: bool | str = True,
        reuse_finished: bool = False,
    ):
        """``progress``: True, bars on a terminal and plain lines otherwise; ``"plain"``, plain
        lines (the sweep's confirmation runs, under a sweep that decided so); False, neither."""

        self.cfg = cfg
        self.out = Path(out_dir)
        self.dir = ExperimentDir(out_dir)
        self.log = log or (lambda _m: None)
        self.progress = progress
        self.reuse_finished = reuse_finished
        self._planned: tuple[list, str, list[RunSpec]] | None = None

    @property
    def runs_dir(self) -> Path:
        return self.dir.runs

    def _plan(self) -> tuple[list, str, list[RunSpec]]:
        """(the tasks, the warm start's key, one spec per run) of the configuration, made once:
        the key is a hash, so the specs are known before the warm start is trained or loaded."""

        if self._planned is None:
            from ..tasks import make_task
            from .warmstart import warm_start_key

            tasks = [make_task(t.name, t.params) for t in self.cfg.tasks or []]
            key = warm_start_key(self.cfg, tasks)
            self._planned = (tasks, key, build_specs(self.cfg, key))
        return self._planned

    def prepare(self):
        """Warm start (cached) and the run specs."""

        from .start_evals import prepare_start_evaluations
        from .warmstart import cached_warm_start, warm_start

        self._check_backend()
        self._check_tools()
        self.out.mkdir(parents=True, exist_ok=True)
        tasks, key, specs = self._plan()
        self.warm_dir = self.dir.warm_policy(key)
        cached = cached_warm_start(self.warm_dir)
        if cached is not None:  # nothing to load: the runs load the policy themselves
            info, identity = cached
        else:
            from ..fairness.identity import tokenizer_identity

            _, tok, info = warm_start(self.cfg, tasks, self.dir.warm_start, log=self.log, key=key)
            identity = tokenizer_identity(tok)
            # beside the policy: a later command checks the cached warm start from its files
            write_json(self.warm_dir / TOKENIZER_IDENTITY_JSON, identity)
        self.warm_info = {**info, "tokenizer": identity}
        prepare_start_evaluations(self.warm_dir, key, self.cfg.executor.share_start_evaluations)
        self.specs = list(specs)
        if self.reuse_finished:
            self.specs = self.reuse(self.specs)
        for line in self.changed_inputs(self.specs):
            self.log(line)
        from ..config import resolved_dict

        write_json(
            self.dir.experiment,
            {
                "config": resolved_dict(self.cfg),
                "code_version": code_fingerprint(),
                "warm_start": info,
                "runs": [s.run_id for s in self.specs],
            },
        )
        return self.specs

    def _check_backend(self) -> None:
        """Fail before the warm start, not in every run, where the rollout backend cannot work."""

        if self.cfg.rollout.backend != "vllm" or self.cfg.executor.kind != "local":
            return  # Ray: vLLM must be on the workers, which the runs check themselves
        from ..rollout.vllm_engine import INSTALL_HINT, vllm_available

        if not vllm_available():
            raise SixblanksError(
                f"rollout.backend is 'vllm' but vLLM is not installed in {sys.executable}: "
                f"{INSTALL_HINT}"
            )

    def _check_tools(self) -> None:
        """Refuse, before the warm start, an experiment whose code tool this machine cannot
        isolate as configured (SandboxUnavailable says what is missing)."""

        if any(self.cfg.tools_for(arm) is not None for arm in self.cfg.arms):
            from ..tools import Sandbox

            Sandbox(self.cfg.tools.sandbox)

    def reuse(self, specs: list[RunSpec]) -> list[RunSpec]:
        """Finished runs of other code for specs that are otherwise the same: their specs replace
        the new ones (the audit then flags them as run by other code)."""

        def same(spec: RunSpec) -> str:
            form = spec.as_dict(run_id=False)
            del form["code_version"]
            return spec_id(form)

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
                and old.run_id != spec.run_id
                and (self.dir.run(spec.run_id).read_status().get("state") != "finished")
            ):
                self.log(f"reusing {old.run_id} ({old.code_version}) for {spec.run_id}")
                spec = old
            out.append(spec)
        return out

    def changed_inputs(self, specs: list[RunSpec]) -> list[str]:
        """A line for each run trained afresh because a data file or user module changed since a
        finished run of the same configuration, naming what changed (such a run is never reused:
        its id holds its inputs)."""

        from .data_files import changed_inputs

        def rest(spec: RunSpec) -> str:  # the run's identity but what an input's edit changes
            volatile = ("run_id", "task_inputs", "arm_inputs", "warm_start_key")
            view = identity_of(spec.as_dict())
            return spec_id({k: v for k, v in view.items() if k not in volatile})

        def inputs(spec: RunSpec) -> dict[str, dict[str, str]]:
            t, a = spec.task_inputs or {}, spec.arm_inputs or {}
            return {k: {**t.get(k, {}), **a.get(k, {})} for k in ("files", "modules")}

        todo = {rest(s): s for s in specs if not self.dir.run(s.run_id).spec.exists()}
        if not todo or not self.runs_dir.exists():
            return []
        lines = []
        runs = [self.dir.run(d.name) for d in self.runs_dir.iterdir()]
        planned = [
            r for r in runs if r.spec.exists()
        ]  # the latest first: what the last command ran
        for run in sorted(planned, key=lambda r: r.spec.stat().st_mtime_ns, reverse=True):
            old = run.read_spec()
            new = todo.pop(rest(old), None)
            if new is None:
                continue
            what = changed_inputs(inputs(old), inputs(new)) or ["the warm start"]
            lines.append(
                f"{new.arm} seed {new.seed}: {', '.join(what)} changed since run "
                f"{old.run_id}; run {new.run_id} trains afresh"
            )
        return lines

    def pending(self) -> list[RunSpec]:
        return [
            s for s in self.specs if self.dir.run(s.run_id).read_status().get("state") != "finished"
        ]

    def run(self, track: bool = True) -> dict[str, Any]:
        """Every pending run, then the audit, the summary, the store and (``track``) MLflow."""

        from .executors import early_executor

        # local workers start now and make their imports while the warm start is prepared
        n = self._unfinished_before_prepare()
        ex = self.cfg.executor
        early = early_executor(ex, default_workers(n, ex.workers)) if n else None
        try:
            return self._run(track, early)
        finally:
            if early is not None:
                early.close()

    def _unfinished_before_prepare(self) -> int:
        """How many of the experiment's runs are not finished, from their ids alone (nothing is
        trained or loaded); 0 where that cannot be told here (:meth:`prepare` then says what is
        wrong)."""

        try:
            specs = self._plan()[2]
        except Exception:  # noqa: BLE001 - a bad task: prepare raises it, with its message
            return 0
        return sum(self.dir.run(s.run_id).read_status().get("state") != "finished" for s in specs)

    def _run(self, track: bool, early) -> dict[str, Any]:
        from .executors import make_executor
        from .interrupts import Interrupted
        from .placement import cuda_ranks

        self.check_servers()
        specs = self.prepare()
        todo = self.pending()
        skipped = len(specs) - len(todo)
        if skipped:
            self.log(f"{skipped} finished run(s) skipped")
        failures: dict[str, str] = {}
        if todo:
            ex = self.cfg.executor
            workers = default_workers(len(todo), ex.workers) if ex.kind == "local" else len(todo)
            if ex.kind == "local" and cuda_ranks(self.cfg.model):  # each takes GPUs 0..N-1
                workers = 1
            threads = max(1, (os.cpu_count() or 1) // max(1, min(workers, os.cpu_count() or 1)))
            # the early workers, where they run as many runs at a time (with this run's threads)
            if early is not None and min(early.workers, len(todo)) == workers:
                early.threads, executor = threads, early
            else:
                executor = make_executor(ex, workers, threads)
            jobs = [
                (s, str(self.dir.run(s.run_id).path), str(self.warm_dir))
                for s in longest_first(todo)
            ]
            self.log(f"running {len(todo)} run(s) on the {ex.kind} executor ({workers} worker(s))")
            try:
                failures = executor.run(jobs, runs_progress(self.progress, self.dir.run, todo))
            except Interrupted as stop:  # what finished and what stopped is recorded, then exit
                self.ingest(self.fairness())
                raise Interrupted(
                    f"{stop.problems[0]}; results so far are in {self.dir.results_db}",
                    stop.stopped,
                    stop.not_started,
                ) from None
        audit = self.fairness()
        summary = self.summary(failures)
        tables = self.ingest(audit)
        sync = self.track(audit) if track else None
        return {
            "summary": summary,
            "fairness": audit,
            "failures": failures,
            "skipped": skipped,
            "tables": tables,
            "mlflow": sync,
        }

    def ingest(self, audit: dict[str, Any] | None = None) -> dict[str, int]:
        from ..store.database import StoreDamaged, ingest, rebuild

        try:
            return ingest(self.out, self.dir.read_experiment(), audit)
        except StoreDamaged as exc:  # derived from the run directories: set aside, made again
            self.log(str(exc).split(":")[0] + " is damaged")
            return rebuild(self.out, log=self.log if self.log else say)

    def check_servers(self) -> None:
        """Before anything starts: the tracking server (where it is a server) answers, and a run
        fits on a node of the Ray cluster."""

        from .executors import check_parallel_fits, preflight
        from .servers import check_tracking
        from .tracking import tracking_uri

        t = self.cfg.tracking
        check_tracking(tracking_uri(t.uri, self.out), t.mlflow)
        preflight(self.cfg.executor)
        check_parallel_fits(self.cfg.model, self.cfg.executor)

    def tracker(self):
        from .tracking import Tracker, tracking_uri

        t = self.cfg.tracking
        return Tracker(
            self.out, tracking_uri(t.uri, self.out), t.experiment or self.cfg.name, enabled=t.mlflow
        )

    def track(
        self, audit: dict[str, Any] | None = None, artifacts: list[Path] | None = None
    ) -> dict[str, Any]:
        state = self.tracker().sync([s.run_id for s in self.specs], audit, artifacts)
        return self._said(state)

    def tracking_beside(self):
        """A context manager whose value sends the runs to MLflow from a process of its own,
        started now (:class:`~.sync_beside.SyncBeside`): ``send(run_ids, audit)`` once they are
        done, ``artifacts(paths)`` once written."""

        from .sync_beside import SyncBeside

        return SyncBeside(self.tracker(), self._said)

    def _said(self, state: dict[str, Any]) -> dict[str, Any]:
        if state.get("last_error"):
            self.log(
                f"MLflow unreachable ({state['last_error'][:120]}); events stay on disk: "
                f"`sixblanks sync {self.out}` sends them later"
            )
        return state

    # ------------------------------------------------------------------ audit and summary

    def fairness(self) -> dict[str, Any]:
        from ..fairness.audit import fairness_audit

        audit = fairness_audit(self.cfg, self.specs, self.runs_dir, self.warm_info)
        write_json(self.dir.fairness, audit)
        return audit

    def summary(self, failures: dict[str, str]) -> list[dict[str, Any]]:
        rows = []
        for s in self.specs:
            rd = self.dir.run(s.run_id)
            st = rd.read_status()
            res = rd.read_result()
            rows.append(
                {
                    "run_id": s.run_id,
                    "arm": s.arm,
                    "task": s.task_name,
                    "seed": s.seed,
                    "state": st.get("state"),
                    "error": failures.get(s.run_id) or st.get("error"),
                    "final_score": res.get("final_score"),
                    "start_score": res["evals"][0]["score"] if res.get("evals") else None,
                    "counters": res.get("counters") or st.get("counters"),
                }
            )
        write_json(self.dir.summary, {"runs": rows, "written": time.time()})
        return rows
