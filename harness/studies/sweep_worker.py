"""The sweep's Optuna studies: where a study is stored, the pruner every process asks,
and one trial as an executor's worker runs it (a local process or a Ray task), reporting its
token-checkpoint scores to the shared storage and stopping when the pruner says so.

The sweep process (:mod:`~sixblanks.harness.studies.sweep`,
:mod:`~sixblanks.harness.studies.sweep_trials`) asks the study for each trial and tells it the
result; :func:`run_trial` is what runs in between.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from ..orchestration.progress import PlainLines
from ..orchestration.runner import ACTIVE, STOP, RunInterrupted, build_trainer, exit_soon
from ..runspec import RunSpec
from ..stopping import stop_points


def open_storage(ref: tuple[str, str]):
    """An Optuna storage from ``("journal", path)`` (safe for several local processes) or
    ``("url", database URL)`` (for a cluster, where workers do not share a file system)."""

    kind, where = ref
    if kind == "url":
        return where
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(where))


def repair_journal(path: str | Path) -> list[str]:
    """Undo what a kill can leave in an Optuna journal file, before the search resumes: the lock of
    a process killed while it wrote (Optuna would wait 30 s, then force it) and a record cut short
    (the reader stops at it with a JSONDecodeError). The cut record was never acknowledged to its
    writer, so dropping it is as if the kill came just before it. Returns what was done."""

    import json

    path, done = Path(path), []
    lock = Path(str(path) + ".lock")
    if os.path.lexists(lock):
        lock.unlink()
        done.append("removed a lock left by a killed process")
    if not path.exists():
        return done
    raw = path.read_bytes()
    kept, cut = [], 0
    for line in raw.splitlines(keepends=True):
        try:
            json.loads(line)
            kept.append(line if line.endswith(b"\n") else line + b"\n")
        except ValueError:
            cut += 1
    if cut:
        tmp = path.with_name(path.name + ".repair")
        tmp.write_bytes(b"".join(kept))
        os.replace(tmp, path)
        done.append(f"dropped {cut} record(s) cut short by a kill")
    return done


def make_pruner(kind: str, max_resource: float):
    """The same pruner in the sweep process and in every trial's worker."""

    import optuna

    if kind == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0)
    if kind == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner()
    if kind == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=max(1, int(max_resource / 8)), max_resource=int(max_resource)
        )
    return optuna.pruners.NopPruner()


def worker_info() -> dict[str, Any]:
    """Where a trial ran: the process, and the Ray task when it ran on Ray."""

    info: dict[str, Any] = {"pid": os.getpid(), "ray_task": None}
    # a Ray task's process has imported ray; a local worker has not, and importing it only to ask
    # would cost each trial's worker a second or more
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        info["ray_task"] = ray.get_runtime_context().get_task_id()
        info["node_id"] = ray.get_runtime_context().get_node_id()
    return info


def run_trial(job: dict[str, Any]) -> dict[str, Any]:
    """One trial, in an executor's worker: train under the trial's budget, report the score at each
    token checkpoint to the study's storage and stop when the pruner says so.

    Returns {"state": COMPLETE | PRUNED | FAIL, "value", "counters", "error"}; the sweep process
    tells the study. Never raises for a failing trial."""

    import optuna

    spec, trial = _open_trial(job)
    counter = next(iter(spec.budget))
    every = spec.eval["every"]
    trainer = None
    spent = [None]  # the counters at the last step boundary: an interrupted trial is charged them
    lines = PlainLines(job["name"], spec.budget, job["plain"])  # it counts the evaluations seen
    try:
        with stop_points(grace=0.0):  # in its setup (SIGTERM: the worker exits at once) at once
            trainer = build_trainer(spec, job["warm"])
        # SIGTERM (the sweep was interrupted) now stops the trial (harness/stopping.py)
        ACTIVE.set()
        spent[0] = dict(trainer.ledger.counters)
        on_step = _reporting(trial, lines, spent, counter, every)
        with stop_points():  # inside a long phase, too: the step in progress is then not charged
            res = trainer.train(on_step=on_step)
            lines.evals(trainer)  # the final evaluation, after the last step
            return {
                "state": "COMPLETE",
                "value": float(res.evals[-1]["score"]),
                "counters": dict(trainer.ledger.counters),
            }
    except optuna.TrialPruned:
        counters = dict(trainer.ledger.counters)
        trial.set_user_attr("pruned_at", counters[counter])
        return {"state": "PRUNED", "counters": counters}
    except RunInterrupted as exc:
        exit_soon()  # this worker takes no more work
        return {"state": "FAIL", "error": f"interrupted: {exc}", "counters": spent[0]}
    except Exception as exc:  # noqa: BLE001 - a failing trial is a FAIL, counted and reported
        return {
            "state": "FAIL",
            "error": f"{type(exc).__name__}: {exc}",
            "counters": dict(trainer.ledger.counters) if trainer is not None else None,
        }
    finally:
        ACTIVE.clear()
        trial.set_user_attr("ended", time.time())


def _open_trial(job: dict[str, Any]):
    """The worker set up for ``job`` (Optuna's warnings only, its torch threads) and the trial's
    spec and Optuna trial, loaded from the study's storage with the sweep's pruner; the trial
    records where it runs and when it started (when its worker took it)."""

    started = time.time()
    import optuna
    import torch

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    torch.set_num_threads(max(1, int(job["threads"])))
    spec = RunSpec.from_json(job["spec"])
    study = optuna.load_study(
        study_name=job["study"],
        storage=open_storage(tuple(job["storage"])),
        pruner=make_pruner(*job["pruner"]),
    )
    trial = optuna.trial.Trial(study, job["trial_id"])
    trial.set_user_attr("worker", worker_info() | {"started": started})
    return spec, trial


def _reporting(trial, lines: PlainLines, spent: list, counter: str, every: float):
    """The trainer's ``on_step`` for a trial: it keeps the counters spent (``spent[0]``, also in the
    storage), stops on SIGTERM (RunInterrupted), reports each new evaluation's score at its token
    checkpoint (``counter`` rounded down to a multiple of ``every``) and raises TrialPruned when
    the pruner says so."""

    import optuna

    def on_step(tr, metrics):
        spent[0] = dict(tr.ledger.counters)
        if STOP.is_set():
            raise RunInterrupted(f"interrupted after step {tr.step_idx}")
        # spending so far, in the storage: a trial killed mid-way is still charged on resume
        trial.set_user_attr("counters", spent[0])
        for ev in tr.result.evals[lines.seen :]:
            # pruning on the ledger resource: the score at each token checkpoint (aligned across
            # trials). The evaluation before any spending is the initial policy's, the same in
            # every trial: it says nothing of a trial, and since the median pruner compares a
            # trial's best score so far, reporting it would keep a wrecked trial from ever being
            # pruned while the good ones stay at their starting score
            if ev["position"][counter] > 0:
                trial.report(ev["score"], step=int(ev["position"][counter] // every * every))
        if tr.result.evals:  # the held-out instances it is selected on (seed range)
            trial.set_user_attr("eval_seed_range", tr.result.evals[-1]["seed_range"])
        lines.evals(tr)  # each new one on stderr where plain lines are wanted
        if trial.should_prune():
            raise optuna.TrialPruned(f"pruned at {counter} = {tr.ledger.counters[counter]:g}")

    return on_step
