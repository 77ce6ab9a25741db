"""A data-parallel run's processes, one per rank (``model.parallel.world_size`` above 1).

:func:`launch` starts them with torchrun on this machine and waits: every rank
(:mod:`.rank_worker`) runs :func:`~.runner.execute_run` on the same spec (the training side,
:mod:`..training.parallel`), rank 0 writes the run's files. A rank that fails or dies ends the
run: torchrun stops the others (on gloo a rank whose peer is gone errors at once), the run's
status says "failed" and names the rank that failed first, and no process of the run is left. The
same command resumes it from rank 0's last checkpoint, with the usual accounting of the work lost
since.

A stop (Ctrl-C) ends the ranks at once; the run resumes from its last checkpoint.

Each rank that fails writes ``rank<r>.error.json`` in the run's directory (its error, and whether
it was a peer's loss); a rank killed outright writes nothing, and torchrun's report names it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..layout import RunDir, write_json
from ..runspec import RunSpec
from ..stopping import ACTIVE, STOP, RunInterrupted

PEER_LOST = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "ncclRemoteError",
    "communicator was aborted",
)
"""Words of the error a rank raises when another rank died under it (not a cause of its own)."""


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Have the kernel send ``sig`` to this process when its parent dies (Linux; elsewhere
    nothing): a worker killed outright leaves no torchrun behind, a torchrun no rank."""

    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(sig))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class RankFailed(RuntimeError):
    """A rank of a data-parallel run failed or died; the message names it."""


def torchrun_command(
    run_dir, warm_dir, threads: int, checkpoint_seconds: float, world: int
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={world}",
        "--max-restarts=0",
        "--monitor-interval=0.2",
        "-m",
        "sixblanks.harness.orchestration.rank_worker",
        str(run_dir),
        str(warm_dir),
        str(threads),
        str(checkpoint_seconds),
    ]


def launch(
    spec: RunSpec,
    run_dir: str | Path,
    warm_dir: str | Path,
    threads: int = 1,
    checkpoint_seconds: float = 0.0,
) -> dict[str, Any]:
    """Run (or resume) a data-parallel spec with torchrun; the result summary rank 0 wrote.
    ``threads``: the run's CPU threads, shared by its ranks. Raises :class:`RankFailed` naming the
    rank, :class:`RunInterrupted` on a stop."""

    rd = prepare_dir(spec, run_dir)
    world = spec.world_size
    threads = max(1, threads // world)  # the run's threads shared by its ranks: no oversubscription
    log = rd.path / "ranks.log"
    start = log.stat().st_size if log.exists() else 0  # this attempt's output begins here
    ACTIVE.set()  # a worker's SIGTERM now stops the run (STOP, seen below), not the worker at once
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            torchrun_command(rd.path, warm_dir, threads, checkpoint_seconds, world),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the run's processes are one group: stopped together
            env={**os.environ, "OMP_NUM_THREADS": str(max(1, threads))},
            preexec_fn=die_with_parent,
        )
        try:
            while proc.poll() is None:
                if STOP.is_set():
                    _stop(proc)
                    _mark_interrupted(rd)
                    raise RunInterrupted(
                        "interrupted: a data-parallel run stops at once and resumes from its "
                        "last checkpoint"
                    )
                time.sleep(0.2)
        finally:
            _stop(proc)  # whatever is left of the group (nothing, after a clean end)
    if proc.returncode == 0 and rd.result.exists():
        return json.loads(rd.result.read_text(encoding="utf-8"))
    with open(log, "rb") as f:
        f.seek(start)
        output = f.read().decode("utf-8", errors="replace")
    rank, why = failed_rank(rd, output)
    message = f"rank {rank} of {world} failed: {why}" if rank is not None else why
    raise record_rank_failure(rd, rank, message, ranks_log=str(log))


def prepare_dir(spec: RunSpec, run_dir: str | Path) -> RunDir:
    """The run's directory with its spec, cleared of an earlier attempt's rank error files."""

    rd = RunDir(run_dir)
    rd.path.mkdir(parents=True, exist_ok=True)
    if not rd.spec.exists():
        write_json(rd.spec, spec.as_dict())
    for old in rd.path.glob("rank*.error.json"):
        old.unlink()
    return rd


def record_rank_failure(rd: RunDir, rank: int | None, message: str, **extra: Any) -> RankFailed:
    """Status "failed", naming the rank (``failed_rank``); returns the error to raise."""

    status = rd.read_status()
    status.update(
        {
            "state": "failed",
            "error": f"data-parallel run: {message}",
            "failed_rank": rank,
            "updated": time.time(),
            **extra,
        }
    )
    write_json(rd.status, status)
    where = f" (the ranks' output: {extra['ranks_log']})" if "ranks_log" in extra else ""
    return RankFailed(f"run {rd.run_id}: {message}{where}")


def _stop(proc: subprocess.Popen) -> None:
    """End the run's process group: SIGTERM, then SIGKILL what is left after 5 s."""

    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            os.killpg(proc.pid, 0)  # a rank outliving torchrun: the next signal ends it
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def _mark_interrupted(rd: RunDir) -> None:
    status = rd.read_status()
    if status.get("state") == "running":
        status.update(
            {
                "state": "interrupted",
                "updated": time.time(),
                "interrupted": "stopped; resumes from its last checkpoint",
            }
        )
        write_json(rd.status, status)


def failed_rank(rd: RunDir, output: str) -> tuple[int | None, str]:
    """The rank that failed first and why, from the ranks' error files and torchrun's report of
    this attempt (``output``): a rank's own error first (the earliest), then a rank a signal other
    than torchrun's own SIGTERM killed, then a rank that lost a peer, then one torchrun stopped."""

    errors = []
    for f in rd.path.glob("rank*.error.json"):
        try:
            errors.append(json.loads(f.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    errors.sort(key=lambda e: e["time"])
    own = [e for e in errors if not e.get("peer_lost")]
    if own:
        return int(own[0]["rank"]), own[0]["error"]
    killed = _killed_ranks(output)
    for rank, code in killed:
        if code != -signal.SIGTERM:
            return rank, f"its process died (killed by {_signal_name(code)})"
    if errors:
        return int(errors[0]["rank"]), errors[0]["error"]
    if killed:
        return killed[0][0], f"its process died (killed by {_signal_name(killed[0][1])})"
    tail = "\n".join(output.strip().splitlines()[-5:])
    return None, f"torchrun ended without a result: {tail}"


def _signal_name(code: int) -> str:
    return signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"


def _killed_ranks(output: str) -> list[tuple[int, int]]:
    """(rank, negative exit code) of each rank torchrun's failure report says a signal ended: the
    root cause first, and SIGTERM (torchrun's own way of stopping the others) last."""

    report = output[output.rfind("Failures:") :] if "Failures:" in output else ""
    root = report.find("Root Cause")
    blocks = re.split(r"\n\[\d+\]:", report[root:]) + re.split(r"\n\[\d+\]:", report[:root])
    out = []
    for block in blocks:
        rank = re.search(r"^\s*rank\s*:\s*(\d+)", block, re.M)
        code = re.search(r"^\s*exitcode\s*:\s*(-?\d+)", block, re.M)
        if rank and code and int(code.group(1)) < 0:
            item = (int(rank.group(1)), int(code.group(1)))
            if item not in out:
                out.append(item)
    return sorted(out, key=lambda rc: rc[1] == -15)
