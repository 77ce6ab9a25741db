"""Executors: run a list of (spec, run_dir, warm_dir) jobs, locally or on a Ray cluster.

Both call :func:`sixblanks.harness.orchestration.runner.execute_run` in a separate process per run;
a run writes only inside its own directory. ``run(jobs, tick)`` returns {run_id: error} for failed
runs and calls ``tick()`` periodically (progress) and ``tick(final=True)`` at the end.

``session(workers)`` is for work handed out piece by piece (sweep trials): a context manager giving
a session that submits ``fn(*args)`` to a worker process (local pool of ``workers``, or Ray tasks),
waits for what is done and stops what is in flight on Ctrl-C; calling it runs one piece to its end.
Workers (and a Ray cluster started here) live as long as the session.

The Ray executor and its session are in :mod:`~sixblanks.harness.orchestration.ray_executor`; what
both share (a job, Ctrl-C's handling and its message) in :mod:`.interrupts`.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..layout import RunDir
from ..stopping import request_stop
from .interrupts import Interrupted, Job, deferred_interrupts, run_one, runs_interrupted
from .runner import ACTIVE, run_worker
from .spawning import worker_context


def exit_with_parent(
    parent_pid: int, env: dict[str, str] | None = None, every: float = 1.0
) -> None:
    """Worker initializer: take the pool's environment (``env``: its parent's when the pool was
    made; a worker forked from the fork server has the server's, from when it started), and end
    this worker once its parent is gone (a killed ``sixblanks run`` or sweep). An orphaned pool
    worker would otherwise wait for work forever; a run it was doing resumes from its checkpoint
    next time, as after any kill."""

    import multiprocessing

    if env is not None:  # and what the server's own imports set (TOKENIZERS_PARALLELISM, say)
        server = sys.modules.get("sixblanks.harness.orchestration.fork_server")
        os.environ.clear()
        os.environ.update({**getattr(server, "SET_BY_IMPORTS", {}), **env})
    parent = multiprocessing.parent_process()  # its sentinel closes when the parent dies

    def gone() -> bool:
        if parent is not None:
            return not parent.is_alive()
        return os.getppid() != parent_pid

    def watch() -> None:
        while not gone():
            time.sleep(every)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()
    # Ctrl-C reaches the whole process group: the orchestrator alone decides, and asks a worker to
    # stop its run with SIGTERM (stopping.STOP: at its next step boundary or stop point)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(*_: Any) -> None:
    """A worker asked to stop: an idle one, or one still setting its run up, exits at once; one
    whose run has begun stops it (harness/stopping.py)."""

    if not ACTIVE.is_set():
        os._exit(0)
    request_stop()


@contextmanager
def workers_ignore_ctrl_c() -> Iterator[None]:
    """Processes started within the block (a pool starts its workers on ``submit``, and the first
    starts the fork server, whose forked workers inherit its mask) start with SIGINT blocked, as
    the signal mask is inherited: Ctrl-C, sent to the whole process group, does not kill one that
    is still booting (before :func:`exit_with_parent` ignores it) with a traceback. This thread
    gets a Ctrl-C of that time after the block (other threads at once)."""

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def local_pool(workers: int) -> cf.ProcessPoolExecutor:
    """Worker processes forked from this process's fork server (:func:`.spawning.worker_context`:
    its imports made once; no torch thread is forked, the server never computed) that end with
    this process and take its environment as it is now."""

    return cf.ProcessPoolExecutor(
        max_workers=workers,
        mp_context=worker_context(),  # never runs the user's script again
        initializer=exit_with_parent,
        initargs=(os.getpid(), dict(os.environ)),
    )


def dismiss(pool: cf.ProcessPoolExecutor) -> None:
    """Shut ``pool`` down without waiting: what it had not started is cancelled, its workers
    killed (call it once nothing they hold matters: idle, or only importing)."""

    workers = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in workers:  # by pid: a worker whose fork server is gone reads as dead, yet runs
        if p.pid is not None:
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def stop_fork_server() -> None:
    """Kill this process's fork server, so that a worker start waiting for its imports fails at
    once (a later pool starts another server)."""

    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if pid is not None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def preload() -> None:
    """A worker's first task when its pool starts early: the imports every run needs (torch,
    transformers' Llama, the training code: about 4 s in a fresh interpreter), made while the
    command still prepares (the warm start), not when the first run arrives."""

    import torch  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401
    from transformers.models.llama import modeling_llama  # noqa: F401

    from ..rollout import backends  # noqa: F401
    from ..training import Trainer  # noqa: F401
    from .runner import build_trainer  # noqa: F401


class LocalExecutor:
    """Worker processes on this machine (spawned, so torch threads are not forked)."""

    def __init__(self, workers: int, threads: int, checkpoint_seconds: float = 30.0):
        self.workers, self.threads, self.ckpt = workers, threads, checkpoint_seconds
        self._pool: cf.ProcessPoolExecutor | None = None
        self._starter: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    grace_seconds = 30.0
    """After Ctrl-C, how long runs in flight get to finish their step and checkpoint."""

    def start(self) -> LocalExecutor:
        """Start the workers now, from a thread of their own (the first worker of a process waits
        for the fork server's imports, seconds this process spends preparing meanwhile), each
        running :func:`preload` once forked; :meth:`run` then uses them. :meth:`close` ends them
        if no run comes."""

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
        the fork server is stopped and the starter ends them (this returns at once)."""

        pool, self._pool = self._pool, None
        if pool is None:
            return
        with self._lock:
            self._closed, starting = True, self._starter is not None
        if not starting:
            dismiss(pool)
        else:  # the first worker still waits for the server's imports (Ctrl-C in the first
            stop_fork_server()  # seconds, say): the starter ends now, not seconds later

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
        with deferred_interrupts() as ctrl_c:  # a second Ctrl-C raises at once
            while pending:
                done, still = cf.wait(pending, timeout=0.1)
                pending.intersection_update(still)
                for f in done:
                    out = _outcome(f)
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
            out = _outcome(f) if f.done() else {}
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


def stop_workers(workers: list, handles, grace_seconds: float) -> dict[cf.Future, Any]:
    """After SIGTERM to ``workers``: wait until each of ``handles`` has its worker's answer or every
    worker has exited, at most ``grace_seconds`` (a second Ctrl-C: no more), then kill the workers
    left (idle by then, or stuck). Returns each handle's outcome (None: none came).

    A future that failed because the pool broke (a worker that exited, its run stopped, breaks it
    for all) is no answer: its own run may still be stopping, and is waited for until its worker
    exits; what it left is in its status file."""

    def answered(f: cf.Future) -> bool:
        return f.done() and (f.cancelled() or not isinstance(f.exception(), BrokenProcessPool))

    deadline = time.monotonic() + grace_seconds
    try:
        while time.monotonic() < deadline:
            if all(map(answered, handles)) or not any(p.is_alive() for p in workers):
                break
            cf.wait([f for f in handles if not f.done()] or handles, timeout=0.05)
            if all(f.done() for f in handles):  # some broke: wait for the workers instead
                time.sleep(0.05)
    except KeyboardInterrupt:  # a second Ctrl-C: no grace
        pass
    for p in workers:
        if p.is_alive():
            p.kill()
    return {h: _outcome(h) if h.done() and not h.cancelled() else None for h in handles}


def _outcome(f: cf.Future) -> dict[str, Any]:
    try:
        return f.result()
    except Exception as exc:  # noqa: BLE001 - a worker killed by the OS, say
        return {"ok": False, "error": f"worker died: {type(exc).__name__}: {exc}"}


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
