"""Executors: run a list of (spec, run_dir, warm_dir) jobs, locally or on a Ray cluster.

Both call :func:`sixblanks.harness.orchestration.runner.execute_run` in a separate process per run;
a run writes only inside its own directory. ``run(jobs, tick)`` returns {run_id: error} for failed
runs and calls ``tick()`` periodically (progress) and ``tick(final=True)`` at the end.

``session(workers)`` is for work handed out piece by piece (sweep trials): a context manager giving
a session that submits ``fn(*args)`` to a worker process (local pool of ``workers``, or Ray tasks),
waits for what is done and stops what is in flight on Ctrl-C; calling it runs one piece to its end.
Workers (and a Ray cluster started here) live as long as the session.

The Ray executor and its session are in :mod:`~sixblanks.harness.orchestration.ray_executor`; what
both share (a job, Ctrl-C's handling and its message) in :mod:`.interrupts`; the local workers'
own plumbing (their start, their end with this process, their stop) in :mod:`.local_workers`.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..layout import RunDir
from .interrupts import Interrupted, Job, deferred_interrupts, run_one, runs_interrupted
from .local_workers import (
    dismiss,
    fork_server_running,
    local_pool,
    outcome,
    preload,
    stop_fork_server,
    stop_workers,
    workers_ignore_ctrl_c,
)
from .runner import run_worker


class LocalExecutor:
    """Worker processes on this machine (spawned, so torch threads are not forked)."""

    def __init__(self, workers: int, threads: int, checkpoint_seconds: float = 30.0):
        self.workers, self.threads, self.ckpt = workers, threads, checkpoint_seconds
        self._pool: cf.ProcessPoolExecutor | None = None
        self._starter: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._server_was_running = False

    grace_seconds = 30.0
    """After Ctrl-C, how long runs in flight get to finish their step and checkpoint."""

    def start(self) -> LocalExecutor:
        """Start the workers now, from a thread of their own (the first worker of a process waits
        for the fork server's imports, seconds this process spends preparing meanwhile), each
        running :func:`preload` once forked; :meth:`run` then uses them. :meth:`close` ends them
        if no run comes."""

        # a server this process already had (an earlier experiment's) made its imports: workers
        # fork from it at once, and a close() before any run leaves it for the next experiment
        self._server_was_running = fork_server_running()
        pool = self._pool = local_pool(self.workers)
        self._starter = threading.Thread(
            target=self._start_workers, args=(pool,), daemon=True, name="workers"
        )
        self._starter.start()
        return self

    def _start_workers(self, pool: cf.ProcessPoolExecutor) -> None:
        # the fork server (started by the first worker) and the workers start with Ctrl-C
        # blocked, as :func:`workers_ignore_ctrl_c` starts them from the main thread: one still
        # booting is not killed with a traceback; the orchestrator alone decides
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            for _ in range(self.workers):
                pool.submit(preload)
        except Exception:  # noqa: BLE001 - closed meanwhile, or the server lost: run() says so
            pass
        finally:
            with self._lock:
                self._starter, closed = None, self._closed
            if closed:  # closed while its workers were starting: they end now
                dismiss(pool)

    def close(self) -> None:
        """End workers started by :meth:`start` that no :meth:`run` took (idle, or still making
        their imports: killed, nothing of a run is in them); while they are still being started,
        the starter ends them, and a fork server started for them is stopped (this returns at
        once). A server this process had before (an earlier experiment's) is kept, its imports
        made, for the next experiment."""

        pool, self._pool = self._pool, None
        if pool is None:
            return
        with self._lock:
            self._closed, starting = True, self._starter is not None
        if not starting:
            dismiss(pool)
        elif not self._server_was_running:  # the first worker still waits for the new server's
            # imports (Ctrl-C in the first seconds, say): the starter ends now, not seconds later
            stop_fork_server()
        # else the starter ends the workers itself in a moment: the server stays

    def _taken(self) -> cf.ProcessPoolExecutor:
        """The pool :meth:`start` made, its workers started (else a new one)."""

        starter = self._starter
        while starter is not None and starter.is_alive():
            # in short waits: a Ctrl-C that another thread received is raised here between two
            starter.join(0.2)
        pool, self._pool = self._pool or local_pool(self.workers), None
        return pool

    def run(self, jobs: list[Job], tick: Callable[..., None]) -> dict[str, str]:
        failures: dict[str, str] = {}
        try:
            pool = self._taken()
        except KeyboardInterrupt:  # while the early workers were still starting: nothing began
            self.close()
            tick(final=True)
            raise runs_interrupted([], [Path(rd).name for _, rd, _ in jobs]) from None
        with pool:
            futures: dict[cf.Future, str] = {}
            pending: set[cf.Future] = set()
            try:  # Ctrl-C while the runs are handed out, too (a pool left alone waits for them)
                with workers_ignore_ctrl_c():  # the pool starts its workers as runs are submitted
                    for spec, rd, wd in jobs:
                        job = (spec.to_json(), rd, wd, self.threads, self.ckpt)
                        f = pool.submit(run_worker, job)
                        futures[f] = Path(rd).name
                        pending.add(f)
                self._wait(pending, futures, failures, tick)
                # every run answered and wrote its files: the idle workers are ended rather than
                # waited for (each interpreter's exit, torch loaded, takes about a second)
                dismiss(pool)
            except KeyboardInterrupt:
                runs = {Path(rd).name: rd for _, rd, _ in jobs}
                raise self._interrupt(pool, futures, pending, runs, tick) from None
        tick(final=True)
        return failures

    @staticmethod
    def _wait(pending: set, futures: dict, failures: dict, tick: Callable[..., None]) -> None:
        """Wait for ``pending`` (emptied as they answer), a failed run's error into ``failures``.

        Ctrl-C here is noted by a handler that raises nothing and raised between two waits: a
        KeyboardInterrupt raised wherever this thread happens to be can leave a lock taken (the
        futures' wait takes each future's lock in a Python loop), and the pool's own thread,
        blocked on it, would then keep the command from ever exiting."""

        last_tick = time.monotonic()
        with deferred_interrupts(over_default_only=True) as ctrl_c:  # a second one raises at once
            while pending:
                done, _ = cf.wait(pending, timeout=0.1)
                pending -= done
                for f in done:
                    out = outcome(f)
                    if not out.get("ok"):
                        failures[futures[f]] = out.get("error", "unknown error")
                if ctrl_c.is_set():
                    raise KeyboardInterrupt
                if done or time.monotonic() - last_tick >= 0.5:
                    tick()
                    last_tick = time.monotonic()

    def _interrupt(self, pool, futures, pending, runs, tick) -> Interrupted:
        """Cancel the queued runs, stop the ones in flight (at their next step boundary or stop
        point, harness/stopping.py), kill what has not stopped after ``grace_seconds`` (or at a
        second Ctrl-C)."""

        workers = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for p in workers:
            if p.is_alive():
                os.kill(p.pid, signal.SIGTERM)
        # the pool cancels what it has not handed out from its own thread: decide at the end
        stop_workers(workers, pending, self.grace_seconds)
        stopped, not_started = [], []
        for f in pending:
            if f.cancelled():
                not_started.append(futures[f])
                continue
            out = outcome(f) if f.done() else {}
            if out.get("ok"):  # it finished meanwhile
                continue
            # a run handed out after the interrupt (or left when its worker exited) never started
            state = RunDir(runs[futures[f]]).read_status().get("state")
            (not_started if state == "pending" else stopped).append(futures[f])
        tick(final=True)
        return runs_interrupted(stopped, not_started)

    @contextmanager
    def session(self, workers: int = 1) -> Iterator[LocalSession]:
        with local_pool(workers) as pool:
            yield LocalSession(pool, self.grace_seconds)


class LocalSession:
    """Work handed out piece by piece (sweep trials) to up to ``workers`` local processes:
    ``submit`` gives a handle, ``wait`` the handles done, ``result`` one's value (raising if its
    worker died), ``interrupt`` stops what is in flight; calling it runs one piece to its end."""

    def __init__(self, pool: cf.ProcessPoolExecutor, grace_seconds: float):
        self.pool, self.grace_seconds = pool, grace_seconds

    def submit(self, fn: Callable[..., Any], *args: Any) -> cf.Future:
        with workers_ignore_ctrl_c():
            return self.pool.submit(fn, *args)

    @staticmethod
    def wait(handles: list[cf.Future], timeout: float = 0.2) -> list[cf.Future]:
        done, _ = cf.wait(handles, timeout=timeout, return_when=cf.FIRST_COMPLETED)
        return list(done)

    @staticmethod
    def result(handle: cf.Future) -> Any:
        return handle.result()

    def interrupt(self, handles: list[cf.Future]) -> dict[cf.Future, Any]:
        """Ctrl-C: each worker stops its piece at the next step (SIGTERM, as for runs) and returns
        what it has; killed after ``grace_seconds`` (or at a second Ctrl-C). Returns each handle's
        own result (None where it had to be killed)."""

        workers = list(getattr(self.pool, "_processes", {}).values())
        for p in workers:
            if p.is_alive():
                os.kill(p.pid, signal.SIGTERM)
        return stop_workers(workers, handles, self.grace_seconds)

    def __call__(self, fn: Callable[..., Any], *args: Any) -> Any:
        return run_one(self, fn, *args)


def preflight(cfg) -> None:
    """What an executor can check before anything starts (Ray: that a run fits on a node)."""

    if cfg.kind == "ray":
        make_executor(cfg, 1, 1).preflight()


def check_parallel_fits(model_cfg, executor_cfg) -> None:
    """A data-parallel run (``model.parallel``) needs all its ranks on one machine: on CUDA one GPU
    each; on a Ray cluster a node with ``world_size`` bundles of ``executor.num_cpus`` CPUs (and a
    GPU each on CUDA). Raise :class:`PlacementError` before anything starts where none has that."""

    par = model_cfg.parallel
    if par is None or par.world_size <= 1:
        return
    cuda = model_cfg.device.startswith("cuda")
    if executor_cfg.kind == "ray":
        from .ray_executor import RayExecutor

        n = par.world_size
        RayExecutor(
            executor_cfg.address,
            executor_cfg.num_cpus * n,
            float(n) if cuda else 0.0,
            1,
            executor_cfg.checkpoint_seconds,
            executor_cfg.memory_gib,
        ).preflight()
        return
    if not cuda:
        return
    import torch

    have = torch.cuda.device_count()
    if executor_cfg.kind == "local" and have < par.world_size:
        from .placement import PlacementError

        raise PlacementError(
            f"model.parallel.world_size {par.world_size} asks for {par.world_size} GPUs on this "
            f"machine, which has {have}; lower world_size (or use model.device: cpu, gloo ranks)"
        )


def early_executor(cfg, workers: int):
    """A local executor whose workers start now (:meth:`LocalExecutor.start`), for runs handed
    out later; None on a Ray cluster (its workers are the cluster's)."""

    if cfg.kind != "local":
        return None
    return LocalExecutor(workers, 1, cfg.checkpoint_seconds).start()


def make_executor(cfg, workers: int, threads: int):
    if cfg.kind == "ray":
        from .ray_executor import RayExecutor

        return RayExecutor(
            cfg.address, cfg.num_cpus, cfg.num_gpus, threads, cfg.checkpoint_seconds, cfg.memory_gib
        )
    return LocalExecutor(workers, threads, cfg.checkpoint_seconds)
