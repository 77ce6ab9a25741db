"""The Ray executor: each run (and each sweep trial) a Ray task, on a cluster joined at
``executor.address`` or started on this machine; placement, fit and shared-storage checks in
:mod:`~sixblanks.harness.orchestration.placement`."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import SixblanksError
from ..layout import RunDir, write_json
from ..rollout.gpu_share import SHARE_VAR
from .interrupts import Interrupted, Job, run_one, runs_interrupted
from .placement import (
    PlacementError,
    check_fits,
    check_shared_storage,
    cluster_nodes,
    placement_info,
    resources,
    this_machine,
)
from .processes import cmdline, descendants, running
from .ray_rank_launch import submit as submit_ranks


class RayExecutor:
    """Each run is a Ray task with its declared num_cpus / num_gpus. Joins the cluster at
    ``address`` if given; with none (or ``local``) starts a cluster on this machine and shuts it
    down after."""

    def __init__(
        self,
        address: str | None,
        num_cpus: float,
        num_gpus: float,
        threads: int,
        checkpoint_seconds: float = 30.0,
        memory_gib: float | None = None,
    ):
        try:
            import ray  # noqa: F401
        except ImportError:
            raise SixblanksError(
                "executor.kind 'ray' needs Ray: install the extra with `pip install -e '.[ray]'`"
            ) from None
        self.address, self.num_cpus, self.num_gpus = address, num_cpus, num_gpus
        self.request = resources(num_cpus, num_gpus, memory_gib)
        self.ckpt = checkpoint_seconds
        self.threads = max(1, int(num_cpus)) if num_cpus >= 1 else threads

    def _init(self) -> str | None:
        """Join or start the cluster, and refuse a run no node can hold (before anything starts).
        Returns "started" (a cluster started here, shut down here), "joined" (this process
        connected to a running cluster, and disconnects after) or None (already connected)."""

        import ray

        if ray.is_initialized():
            how = None
        elif self.address and self.address != "local":  # "local" starts a cluster like no address
            try:
                ray.init(address=self.address, log_to_driver=False, logging_level="WARNING")
            except (ConnectionError, RuntimeError) as exc:
                raise SixblanksError(
                    f"executor.address: no Ray cluster answers at {self.address!r} ({exc}); start "
                    "one (`ray start --head`; docs/guide/ray.md) or leave the address out"
                ) from None
            how = "joined"
        else:
            # address "local": start one, even where a `ray start` left its address in /tmp/ray
            ray.init(
                address="local",
                num_cpus=os.cpu_count() or 1,
                include_dashboard=False,
                log_to_driver=False,
            )
            how = "started"
        try:
            check_fits(self.request, cluster_nodes())
        except PlacementError:
            self._shutdown(how)
            raise
        return how

    def preflight(self) -> None:
        """Refuse, before any warm start or run, a run no node can hold: the running cluster's
        nodes (joined and left), or this machine where the cluster is to be started here."""

        import ray

        if ray.is_initialized():
            check_fits(self.request, cluster_nodes())
        elif self.address and self.address != "local":
            self._shutdown(self._init())  # _init checks the fit
        else:
            check_fits(self.request, [this_machine()])

    @staticmethod
    def _shutdown(how: str | None) -> None:
        """Disconnect from a joined cluster; shut down a cluster started here, all of it: Ray's
        agents (children of its raylet) may outlive ``ray.shutdown()`` for a while on a busy
        machine; they are waited for, then killed."""

        if how == "joined":
            import ray

            ray.shutdown()
        if how == "started":
            import ray

            mine = [p for p in descendants(os.getpid()) if b"ray" in cmdline(p)]
            ray.shutdown()
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline and any(running(p) for p in mine):
                time.sleep(0.1)
            for p in mine:
                if running(p):
                    try:
                        os.kill(p, signal.SIGKILL)
                    except OSError:
                        pass

    def run(self, jobs: list[Job], tick: Callable[..., None]) -> dict[str, str]:
        import ray

        how = self._init()  # "started", "joined" or None (already connected)
        try:
            nodes = cluster_nodes()
            if len(nodes) > 1 and jobs:  # runs write where this process reads them:
                runs = Path(jobs[0][1]).parent  # every node must see that directory
                runs.mkdir(parents=True, exist_ok=True)
                check_shared_storage(runs, nodes)
            remote = ray.remote(**self._task_resources())(run_placed)
            refs, placed = {}, {}  # a data-parallel run: a task per rank on a placement group
            for spec, rd, wd in jobs:
                if spec.world_size > 1:
                    placed[Path(rd).name] = submit_ranks(
                        spec, rd, wd, self.threads, self.ckpt, self.num_cpus
                    )
                    continue
                args = (spec.to_json(), rd, wd, self.threads, self.ckpt)
                refs[remote.remote(args, self.num_cpus, self.num_gpus)] = Path(rd).name
            names = {**refs, **{r: n for n, p in placed.items() for r in p.refs}}
            failures: dict[str, str] = {}
            pending, finished = list(names), set()
            try:
                while pending:
                    done, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5)
                    finished.update(done)
                    for name, p in list(placed.items()):
                        if p.done(finished):
                            out = placed.pop(name).outcome()
                            if not out.get("ok"):
                                failures[name] = out["error"]
                    for r in (r for r in done if r in refs):
                        try:
                            out = ray.get(r)
                        except Exception as exc:  # noqa: BLE001
                            out = {
                                "ok": False,
                                "error": f"ray task failed: {type(exc).__name__}: {exc}",
                            }
                        if not out.get("ok"):
                            failures[refs[r]] = out.get("error", "unknown error")
                    tick()
            except KeyboardInterrupt:
                raise self._interrupt(names, pending, jobs, tick, placed) from None
            tick(final=True)
            return failures
        finally:
            self._shutdown(how)

    def _interrupt(self, refs, pending, jobs, tick, placed=None) -> Interrupted:
        """Ctrl-C: Ray cancels the tasks (a running run gets KeyboardInterrupt and is left
        ``interrupted``, resumable from its last checkpoint; a queued one never starts). A
        data-parallel run's ranks are all cancelled and its placement group removed."""

        import ray

        for r in pending:
            ray.cancel(r)
        ray.wait(pending, num_returns=len(pending), timeout=self.grace_seconds)
        if placed:
            from ray.util.placement_group import remove_placement_group

            for p in placed.values():
                remove_placement_group(p.group)
        runs = {Path(rd).name: rd for _, rd, _ in jobs}
        stopped, not_started = [], []
        for name in dict.fromkeys(refs[r] for r in pending):
            state = RunDir(runs[name]).read_status().get("state")
            if state == "finished":
                continue
            (not_started if state == "pending" else stopped).append(name)
        tick(final=True)
        return runs_interrupted(stopped, not_started)

    grace_seconds = 30.0

    def _task_resources(self) -> dict[str, float]:
        kw = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}
        if "memory" in self.request:
            kw["memory"] = self.request["memory"]
        return kw

    @contextmanager
    def session(self, workers: int = 1) -> Iterator[RaySession]:
        how = self._init()  # "started", "joined" or None (already connected)
        try:
            yield RaySession(self._task_resources(), self.grace_seconds)
        finally:
            self._shutdown(how)


class RaySession:
    """:class:`LocalSession`'s interface on Ray tasks (as many at once as the cluster places)."""

    def __init__(self, task_resources: dict[str, float], grace_seconds: float):
        self.task_resources, self.grace_seconds = task_resources, grace_seconds

    def submit(self, fn: Callable[..., Any], *args: Any):
        import ray

        # no retry: a trial whose worker died is a failed trial, charged what it spent (a retry
        # would start it again and lose the first attempt's spending)
        task = ray.remote(**self.task_resources, max_retries=0)
        return task(fn).remote(*args)

    @staticmethod
    def wait(handles: list, timeout: float = 0.2) -> list:
        import ray

        return ray.wait(handles, num_returns=1, timeout=timeout)[0]

    @staticmethod
    def result(handle) -> Any:
        import ray

        return ray.get(handle)

    def interrupt(self, handles: list) -> dict[Any, Any]:
        """Ctrl-C: the tasks are cancelled (KeyboardInterrupt in each); none returns a result."""

        import ray

        for h in handles:
            ray.cancel(h)
        ray.wait(handles, num_returns=len(handles), timeout=self.grace_seconds)
        return dict.fromkeys(handles)

    def __call__(self, fn: Callable[..., Any], *args: Any) -> Any:
        return run_one(self, fn, *args)


def run_placed(args: tuple, num_cpus: float, num_gpus: float) -> dict[str, Any]:
    """A Ray task's body for one run: record the placement in the run directory, then run it with
    the GPU share set for its vLLM engine."""

    from .runner import run_worker

    info = placement_info(num_cpus, num_gpus)
    Path(args[1]).mkdir(parents=True, exist_ok=True)
    write_json(Path(args[1]) / "placement.json", info)
    os.environ[SHARE_VAR] = str(info["gpu_share"] or 1.0)
    try:
        return run_worker(args)
    finally:
        os.environ.pop(SHARE_VAR, None)
