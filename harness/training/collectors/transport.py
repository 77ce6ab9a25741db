"""How the trainer talks to its concurrent collector (:mod:`.worker`): a child process with three
queues (rounds, weights, reports), or a Ray actor. Both send requests, broadcast weight files, poll
for reports (``("done", round, spool file)`` or ``("error", round, traceback)``) and stop."""

from __future__ import annotations

import os
import queue
import time
from typing import Any

from ...stopping import stop_point
from .stream_worker import stream_main
from .worker import CollectorCore, process_main

READY_SECONDS = 600.0
"""How long a Ray actor collector may take to be placed and built before the run fails."""


class ProcessWorker:
    """A collector in a child process, one torch thread: started from ``context()`` (the run's
    fork server, whose imports are made), or spawned (a fresh interpreter) where it is None."""

    def __init__(self, init: dict[str, Any], weights: tuple[int, str], context=None):
        import torch.multiprocessing as mp  # also its tensor reductions, for the model sent

        from ...ending import EndingSpawnProcess

        ctx = context() if context is not None else mp.get_context("spawn")
        self.rounds_q, self.weights_q, self.done_q = ctx.Queue(), ctx.Queue(), ctx.Queue()
        self.weights_q.put(weights)
        # vLLM starts processes of its own, which a daemonic process may not
        daemon = init["rollout"].backend != "vllm"
        # either ends without the teardown of torch and its model (1-1.5 s) that stop()'s join
        # would wait out: a forked child through os._exit, a spawned one as EndingSpawnProcess
        start = ctx.Process if context is not None else EndingSpawnProcess
        self.proc = start(
            target=stream_main if init.get("stream") else process_main,
            args=(init, self.rounds_q, self.weights_q, self.done_q, os.getpid()),
            daemon=daemon,
            name=f"sixblanks-collector-{init['worker']}",
        )
        self.proc.start()
        self.pid = self.proc.pid

    def send(self, req: dict[str, Any]) -> None:
        self.rounds_q.put(req)

    def broadcast(self, version: int, path: str) -> None:
        self.weights_q.put((version, path))

    def poll(self, timeout: float) -> tuple[str, int, str] | None:
        """The next message (("done", round, file) or ("error", round, traceback)), or None. A
        stop point (Ctrl-C, harness/stopping.py) before it waits."""

        stop_point("the wait for the collector")
        try:
            return self.done_q.get(timeout=timeout)
        except queue.Empty:
            return None

    def alive(self) -> bool:
        return self.proc.is_alive()

    def death(self) -> str:
        return f"exit code {self.proc.exitcode}"

    def stop(self, kill: bool = False, restart: bool = False) -> None:
        if self.proc.is_alive() and not kill:
            self.rounds_q.put(None)
            self.proc.join(timeout=30)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=10)
        for q in (self.rounds_q, self.weights_q, self.done_q):
            q.cancel_join_thread()
            q.close()


class RayWorker:
    """A collector as a Ray actor (one CPU, or one GPU where the model is on CUDA). The spool must
    be a directory the actor can write and the trainer read (one machine, or shared storage)."""

    def __init__(self, init: dict[str, Any], weights: tuple[int, str]):
        import ray

        self.ray = ray
        if not ray.is_initialized():  # a local cluster of our own, shut down by the last stop
            # address "local": a new cluster, never one a `ray start` left recorded in /tmp/ray
            ray.init(address="local", num_cpus=max(2, os.cpu_count() or 2), include_dashboard=False)
            RayWorker.owns_ray = True
        gpus = 1 if str(init.get("device", "cpu")).startswith("cuda") else 0
        actor = ray.remote(num_cpus=1, num_gpus=gpus)(_RayCollector)
        self.actor = actor.remote(init)
        self.pending: dict[Any, int] = {}
        self.error = ""
        self.pid = None
        try:  # placed and built (a request no node can satisfy would wait forever)
            ray.get(self.actor.ready.remote(), timeout=READY_SECONDS)
        except ray.exceptions.GetTimeoutError as exc:
            ray.kill(self.actor)
            raise RuntimeError(
                f"the Ray actor collector (num_cpus=1, num_gpus={gpus}) was not running after "
                f"{READY_SECONDS:g} s: the cluster has no free resources for it"
            ) from exc
        self.actor.load.remote(*weights)

    def send(self, req: dict[str, Any]) -> None:
        self.pending[self.actor.round.remote(req)] = int(req["round"])

    def broadcast(self, version: int, path: str) -> None:
        self.actor.load.remote(version, path)

    def poll(self, timeout: float) -> tuple[str, int, str] | None:
        stop_point("the wait for the collector")
        if not self.pending:
            time.sleep(min(timeout, 0.05))
            return None
        done, _ = self.ray.wait(list(self.pending), num_returns=1, timeout=timeout)
        if not done:
            return None
        r = self.pending.pop(done[0])
        try:
            return ("done", r, self.ray.get(done[0]))
        except self.ray.exceptions.RayActorError as exc:
            self.dead, self.error = True, str(exc).strip().splitlines()[0][:300]
            return None
        except Exception as exc:  # noqa: BLE001 - a task error, reported to the trainer
            return ("error", r, f"{type(exc).__name__}: {exc}")

    dead = False

    def alive(self) -> bool:
        return not self.dead

    def death(self) -> str:
        return self.error or "the actor died"

    owns_ray = False

    def stop(self, kill: bool = False, restart: bool = False) -> None:
        try:
            self.ray.kill(self.actor)
        finally:
            if RayWorker.owns_ray and not restart:
                RayWorker.owns_ray = False
                self.ray.shutdown()


class _RayCollector:
    def __init__(self, init: dict[str, Any]):
        self.core = CollectorCore(init)

    def ready(self) -> bool:
        return True

    def load(self, version: int, path: str) -> bool:
        return self.core.load(version, path)  # False: superseded, a newer load comes next

    def round(self, req: dict[str, Any]) -> str:
        return self.core.round(req)
