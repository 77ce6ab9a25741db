"""The local executor's worker processes: forked from this process's fork server, ending with it,
Ctrl-C left to the orchestrator, stopped (SIGTERM, then killed after a grace) or dismissed.

:mod:`.executors` hands runs and sweep trials to them; the workers import this module (their
initializer and first task live here), so it imports nothing of the training code itself.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any

from ..stopping import request_stop
from .runner import ACTIVE
from .spawning import fork_server_pid, worker_context


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


def fork_server_running() -> bool:
    """Whether this process's fork server is started (its imports made, or being made)."""

    return fork_server_pid() is not None


def stop_fork_server() -> None:
    """Kill this process's fork server, so that a worker start waiting for its imports fails at
    once (a later pool starts another server)."""

    pid = fork_server_pid()
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
    return {h: outcome(h) if h.done() and not h.cancelled() else None for h in handles}


def outcome(f: cf.Future) -> dict[str, Any]:
    try:
        return f.result()
    except Exception as exc:  # noqa: BLE001 - a worker killed by the OS, say
        return {"ok": False, "error": f"worker died: {type(exc).__name__}: {exc}"}
