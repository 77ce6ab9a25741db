"""The collector side of asynchronous training (``data.concurrent``): a process of its own (or a
Ray actor) with its own copy of the policy and its own engine (``rollout.backend``: HF or vLLM).

It takes round requests (instance seeds, group offset, a generator seed), samples each round with
the newest weights it has been sent, and writes the round to the spool *before* it reports it done:

    spool/round-000012.<worker>.pt   {"round", "worker", "version", "batch", "cost",
                                      "device_seconds", "wall_seconds", "broadcast_seconds"}

so a round that finished is never lost, whichever process dies next (the trainer counts each spool
file exactly once: :mod:`.concurrent`). A round killed before it finishes leaves nothing and is
launched again. Weights arrive as files (``spool/weights-<version>.pt``): before each round the
process backend loads the newest one sent; the Ray actor loads them in the order they were sent.
"""

from __future__ import annotations

import os
import queue
import signal
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from ...checkpoint import save_record
from ...rollout.agent import run_episodes
from ...rollout.backends import make_engine
from ...tasks.verify import VerifierGate
from ..context import frozen_copy, rollout_cost, training_params
from ..meter import DeviceTimer


def round_file(r: int, worker: str) -> str:
    return f"round-{r:06d}.{worker}.pt"


def weights_file(spool: Path, version: int) -> Path:
    return spool / f"weights-{version:06d}.pt"


def parse_round_file(name: str) -> tuple[int, str] | None:
    """(round, worker) of a spool file name, or None for anything else."""

    parts = name.split(".")
    if len(parts) != 3 or not parts[0].startswith("round-") or parts[2] != "pt":
        return None
    return int(parts[0][len("round-") :]), parts[1]


def spooled_rounds(spool: Path, counted: set[str]) -> dict[int, list[str]]:
    """Round -> its spool files not yet counted, oldest first."""

    out: dict[int, list[str]] = {}
    for f in sorted(spool.glob("round-*.pt"), key=lambda p: p.stat().st_mtime):
        parsed = parse_round_file(f.name)
        if parsed is not None and f.name not in counted:
            out.setdefault(parsed[0], []).append(f.name)
    return out


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks after boot, /proc/<pid>/stat field 22): with the pid,
    it names one process (a pid alone may be reused)."""

    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def write_pid(pid_file: Path, pid: int) -> None:
    pid_file.write_text(f"{pid} {_start_time(pid) or ''}")


def wait_for_exit(pid_file: Path, timeout: float = 120.0) -> None:
    """Wait for the collector a killed trainer left behind (named in ``pid_file``) to finish its
    round and exit; after ``timeout`` seconds it is killed. A pid now used by another process (a
    different start time) is left alone."""

    if not pid_file.exists():
        return
    pid_s, _, started = pid_file.read_text().partition(" ")
    pid, t0 = int(pid_s or 0), time.monotonic()
    while pid and _alive(pid) and _start_time(pid) == (started.strip() or _start_time(pid)):
        if time.monotonic() - t0 > timeout:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    pid_file.unlink(missing_ok=True)


def collector_init(ctx, spool: Path, worker: str) -> dict[str, Any]:
    """What a collector is started with (:class:`CollectorCore`), from the trainer's context."""

    spec = ctx.blanks.data.concurrent
    return {  # a CPU copy: sent to the collector, never the live (possibly CUDA-shared) weights
        "model": frozen_copy(ctx.model).cpu(),
        "tokenizer": ctx.tokenizer,
        "task": ctx.task,
        "rollout": ctx.settings.rollout,
        "group_size": ctx.group_size,
        "max_context_tokens": ctx.settings.rollout.max_prompt_tokens,
        "seed": ctx.settings.train_seed,
        "spool": str(spool),
        "worker": worker,
        "device": str(ctx.device),
        # episode-level consumption: a streaming collector (:mod:`.stream_worker`)
        "stream": spec is not None and spec.consume == "episode",
        "partial": spec.partial if spec is not None else "continue",
    }


def save_atomic(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


class CollectorCore:
    """What the collector does, whatever runs it. ``init``: model (architecture; weights come from
    the broadcast files), tokenizer, task, rollout config, group_size, max_context_tokens, seed,
    spool (a directory), worker (a name unique to this incarnation)."""

    def __init__(self, init: dict[str, Any]):
        torch.set_num_threads(int(init.get("threads", 1)))
        self.init = init
        self.model = init["model"].to(init.get("device", "cpu"))
        self.model.eval()
        self.timer = DeviceTimer(torch.device(init.get("device", "cpu")))
        rollout = init["rollout"]
        self.params = training_params(rollout)  # the run's, its rollout.mismatch included
        self.engine = make_engine(rollout, self.model, init["tokenizer"], seed=int(init["seed"]))
        self.gate = VerifierGate(init["task"])
        self.spool = Path(init["spool"])
        self.version: int | None = None
        self.broadcast_seconds = 0.0  # loading weights since the last round: charged with it

    def load(self, version: int, path: str) -> bool:
        """Take the weights of ``version`` (a file the trainer wrote). False: the file is gone,
        because the trainer has since broadcast two newer versions (a newer one comes next)."""

        if self.version is not None and int(version) <= self.version:
            return True  # not newer than what it has
        t0 = self.timer.now()
        try:
            state = torch.load(path, weights_only=True)
        except FileNotFoundError:
            return False
        self.model.load_state_dict(state)
        self.engine.load_weights(None)  # a vLLM engine reloads from the model; HF shares it
        self.engine.policy_version = self.version = int(version)
        self.broadcast_seconds += self.timer.now() - t0
        return True

    def round(self, req: dict[str, Any]) -> str:
        """Sample one round, spool it, return its file name."""

        if self.version is None:
            raise RuntimeError("the collector has no weights yet (no broadcast received)")
        t0, w0 = self.timer.now(), time.perf_counter()
        init, task = self.init, self.init["task"]
        calls0 = self.gate.counts()
        batch = run_episodes(
            self.engine,
            init["tokenizer"],
            task,
            task.instances(list(req["seeds"])),
            int(init["group_size"]),
            self.params,
            self.gate,
            max_context_tokens=int(init["max_context_tokens"]),
            generator=torch.Generator().manual_seed(int(req["gen_seed"])),
            group_offset=int(req["group_offset"]),
        )
        name = round_file(int(req["round"]), init["worker"])
        record = {
            "round": int(req["round"]),
            "worker": init["worker"],
            "version": self.version,
            "batch": batch,
            "cost": rollout_cost([batch], self.gate, calls0),
            "device_seconds": self.timer.now() - t0 + self.broadcast_seconds,
            "wall_seconds": time.perf_counter() - w0,
            "broadcast_seconds": self.broadcast_seconds,
        }
        save_record(record, self.spool / name)  # read back weights-only (checkpoint.py)
        self.broadcast_seconds = 0.0
        return name


def trainer_alive(parent_pid: int) -> bool:
    """In a collector process: whether the trainer (pid ``parent_pid``) that started it still
    runs, i.e. still holds its end of the pipe the process was started through. A collector forked
    from a fork server is the server's child, not the trainer's: its parent pid says nothing."""

    import multiprocessing

    parent = multiprocessing.parent_process()
    if parent is None or parent.pid != parent_pid:  # not started through multiprocessing
        return os.getppid() == parent_pid
    return parent.is_alive()


def process_main(init, rounds_q, weights_q, done_q, parent_pid: int) -> None:
    """The collector process: newest weights, next round, spool, report; it exits when asked
    (a None request) or when the trainer that started it is gone."""

    try:
        core = CollectorCore(init)
    except BaseException:  # noqa: BLE001 - reported to the trainer
        done_q.put(("error", -1, traceback.format_exc(limit=8)))
        return

    def newest_weights() -> None:
        latest = None
        while True:
            try:
                latest = weights_q.get_nowait()
            except queue.Empty:
                if latest is None or core.load(*latest):
                    return
                # its file is gone: a newer version was announced before it was deleted
                latest = weights_q.get(timeout=60)

    r = -1  # the round it works on (-1: between rounds)
    try:
        while trainer_alive(parent_pid):
            newest_weights()
            try:
                req = rounds_q.get(timeout=0.2)
            except queue.Empty:
                continue
            if req is None:
                return
            r = int(req["round"])
            newest_weights()
            want = req.get("min_version")
            while want is not None and (core.version is None or core.version < want):
                # the weights broadcast before this request travel on another queue and may
                # arrive after it: sample with no older ones (the lag stays within the queue)
                core.load(*weights_q.get(timeout=60))
            done_q.put(("done", r, core.round(req)))
            r = -1
    except BaseException:  # noqa: BLE001 - reported to the trainer
        done_q.put(("error", r, traceback.format_exc(limit=8)))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not reaped) is gone for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True
