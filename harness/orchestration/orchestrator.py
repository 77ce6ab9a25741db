"""The orchestrator: experiment -> its plan (:mod:`.plan`: the warm-start stage and one run spec
per arm x task x seed) -> executor.

It writes the experiment-level files (experiment.json through its plan, fairness.json,
summary.json; see :mod:`sixblanks.harness.layout`) and has the store ingest the run directories.
Runs write only inside their own directories. Finished runs are skipped; unfinished ones resume
from their last checkpoint.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import ExperimentConfig
from ..errors import SixblanksError
from ..layout import ExperimentDir, RunDir, write_json
from ..runspec import RunSpec

# build_specs: where the tests import it from
from .plan import Draft, Plan, draft, prepare_experiment
from .plan import build_specs as build_specs
from .progress import runs_progress, say


class RunFailed(SixblanksError):
    exit_code = 1


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


def threads_per_worker(workers: int) -> int:
    """Torch threads for each of ``workers`` local workers running at once: the cores shared out,
    at most ``OMP_NUM_THREADS`` where it is set (the usual cap on a process's threads, as torch's
    own default honours it). A process given more threads than it can have cores to itself, beside
    other busy processes, spends much of its time with one thread waiting for the other at every
    parallel operation: a machine shared with other work sets ``OMP_NUM_THREADS=1``."""

    cores = os.cpu_count() or 1
    threads = max(1, cores // max(1, min(workers, cores)))
    cap = os.environ.get("OMP_NUM_THREADS", "").strip()
    return min(threads, max(1, int(cap))) if cap.isdigit() else threads


class Orchestrator:
    def __init__(
        self,
        cfg: ExperimentConfig,
        out_dir: str | Path,
        log: Callable[[str], None] | None = None,
        progress: bool | str = True,
        reuse_finished: bool = False,
        plan: Plan | None = None,
    ):
        """``progress``: True, bars on a terminal and plain lines otherwise; ``"plain"``, plain
        lines (the sweep's confirmation runs, under a sweep that decided so); False, neither.
        ``plan``: :func:`~.plan.prepare_experiment` of ``cfg`` into ``out_dir``, already made (the
        runs use it as it is; without one, :meth:`prepare` makes it)."""

        self.cfg = cfg
        self.out = Path(out_dir)
        self.dir = ExperimentDir(out_dir)
        self.log = log or (lambda _m: None)
        self.progress = progress
        self.reuse_finished = reuse_finished
        self._given = plan is not None
        self._plan = plan
        self._draft: Draft | None = None

    @property
    def runs_dir(self) -> Path:
        return self.dir.runs

    @property
    def plan(self) -> Plan:
        """The experiment's plan: the one given, else the one :meth:`prepare` made last."""

        if self._plan is None:
            raise SixblanksError("the orchestrator has no plan yet: prepare() makes it")
        return self._plan

    def _drafted(self) -> Draft:
        """The configuration's tasks, warm-start key and specs, made once: the key is a hash, so
        the specs are known before the warm start is trained or loaded."""

        if self._draft is None:
            self._draft = draft(self.cfg)
        return self._draft

    def prepare(self) -> Plan:
        """The plan given to this orchestrator; else made now (:func:`~.plan.prepare_experiment`:
        the warm start, cached, the run specs and experiment.json), kept and returned."""

        if self._given:
            return self.plan
        self._plan = prepare_experiment(
            self.cfg, self.out, self.log, self.reuse_finished, drafted=self._drafted()
        )
        return self._plan

    def pending(self) -> list[RunSpec]:
        return [
            s
            for s in self.plan.specs
            if self.dir.run(s.run_id).read_status().get("state") != "finished"
        ]

    def run(self, track: bool = True) -> dict[str, Any]:
        """Every pending run, then the audit, the summary, the store and (``track``) MLflow."""

        from .executors import early_executor

        # local workers start now and make their imports (torch and transformers' Llama, about 4 s)
        # while this process drafts the specs and prepares the warm start; where the output
        # directory may hold every run finished already, only once the specs say some are not (a
        # rerun that skips them all starts no worker)
        ex = self.cfg.executor
        n = self._planned_runs()
        counted = bool(n) and self._finished_dirs() >= n  # n: the unfinished runs, from the specs
        if counted:
            n = self._unfinished_before_prepare()
        early = early_executor(ex, default_workers(n, ex.workers)) if n else None
        try:
            if early is not None and not counted and not self._unfinished_before_prepare():
                early.close()  # every run was finished: nothing for the workers
            return self._run(track, early)
        finally:
            if early is not None:
                early.close()

    def _planned_runs(self) -> int:
        """How many runs the experiment has (arms x tasks x seeds), from its configuration alone;
        the plan's, where one was given."""

        if self._given:
            return len(self.plan.specs)
        return len(self.cfg.arms) * len(self.cfg.tasks or []) * len(self.cfg.seeds)

    def _finished_dirs(self) -> int:
        """How many run directories under the output directory say they are finished (of any
        experiment definition: an upper bound on this one's)."""

        if not self.runs_dir.is_dir():
            return 0
        return sum(
            RunDir(d).read_status().get("state") == "finished" for d in self.runs_dir.iterdir()
        )

    def _unfinished_before_prepare(self) -> int:
        """How many of the experiment's runs are not finished, from their ids alone (nothing is
        trained or loaded); 0 where that cannot be told here (:meth:`prepare` then says what is
        wrong)."""

        try:
            specs = self._plan.specs if self._given else self._drafted().specs
        except Exception:  # noqa: BLE001 - a bad task: prepare raises it, with its message
            return 0
        return sum(self.dir.run(s.run_id).read_status().get("state") != "finished" for s in specs)

    def _run(self, track: bool, early) -> dict[str, Any]:
        from .executors import make_executor
        from .interrupts import Interrupted
        from .placement import cuda_ranks
        from .prefetch import imported_meanwhile

        self.check_servers()
        specs = self.prepare().specs
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
            threads = threads_per_worker(workers)
            # the early workers, where they run as many runs at a time (with this run's threads)
            if early is not None and min(early.workers, len(todo)) == workers:
                early.threads, executor = threads, early
            else:
                executor = make_executor(ex, workers, threads)
            jobs = [
                (s, str(self.dir.run(s.run_id).path), str(self.plan.warm_dir))
                for s in longest_first(todo)
            ]
            self.log(f"running {len(todo)} run(s) on the {ex.kind} executor ({workers} worker(s))")
            try:
                with imported_meanwhile():  # what the audit, the store and the report import
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
        state = self.tracker().sync([s.run_id for s in self.plan.specs], audit, artifacts)
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

        audit = fairness_audit(self.cfg, list(self.plan.specs), self.runs_dir, self.plan.warm_info)
        write_json(self.dir.fairness, audit)
        return audit

    def summary(self, failures: dict[str, str]) -> list[dict[str, Any]]:
        rows = []
        for s in self.plan.specs:
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
