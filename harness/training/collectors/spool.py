"""The spool of a concurrent collector: a directory (``<run dir>/spool``, or a temporary one when a
trainer has no run directory) where the collector writes each finished round before it reports it,
and the trainer writes the weights it broadcasts.

    round-000012.<collector>.pt   one round: {"round", "worker", "version", "batch", "cost", ...}
    weights-000007.pt             the weights of version 7 (the last two broadcasts are kept)
    worker.pid                    the running collector process: "<pid> <start time>"

A round's file stays until a checkpoint has counted it (``prune``), or for good with
``data.concurrent.keep_spool``.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from ...checkpoint import load_record
from .worker import save_atomic, spooled_rounds, wait_for_exit, weights_file, write_pid


class Spool:
    def __init__(self, work_dir: str | None, keep: bool):
        self.tmp = None if work_dir else tempfile.mkdtemp(prefix="sixblanks-spool-")
        self.path = Path(work_dir or self.tmp) / "spool"
        self.path.mkdir(parents=True, exist_ok=True)
        self.keep = keep
        self.kept: set[str] = set()  # weight files a broadcast still needs

    def load(self, name: str) -> dict[str, Any]:
        """A spooled round, read with the weights-only loader (harness/checkpoint.py): a planted
        file cannot run code in the trainer."""

        return load_record(self.path / name)

    def uncounted(self, counted: set[str]) -> dict[int, list[str]]:
        """Round -> its files not in ``counted``, oldest first."""

        return spooled_rounds(self.path, counted)

    def weights(self, version: int) -> Path:
        return weights_file(self.path, version)

    def write_weights(self, model, version: int, previous: int | None) -> Path:
        """The weights of ``version``; the files older than ``previous`` are deleted (a collector
        loading one of those finds it gone and takes the newer one announced before)."""

        path = self.weights(version)
        save_atomic({k: t.detach().cpu() for k, t in model.state_dict().items()}, path)
        self.kept = {path.name, self.weights(version if previous is None else previous).name}
        for f in self.path.glob("weights-*.pt"):
            if f.name not in self.kept:
                f.unlink(missing_ok=True)
        return path

    def record_pid(self, pid: int | None) -> None:
        if pid is not None:
            write_pid(self.path / "worker.pid", pid)

    def wait_for_old_collector(self) -> None:
        """A killed trainer's collector finishes its round, sees its trainer gone and exits."""

        wait_for_exit(self.path / "worker.pid")

    def prune(self, names: set[str]) -> None:
        """Delete counted rounds' files (unless ``keep_spool``)."""

        if not self.keep:
            for name in names:
                (self.path / name).unlink(missing_ok=True)

    def close(self, counted: set[str]) -> None:
        """The run's collector is gone: its pid file, the weight files and counted rounds go."""

        (self.path / "worker.pid").unlink(missing_ok=True)
        for f in self.path.glob("weights-*.pt"):
            f.unlink(missing_ok=True)
        self.prune(counted)
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
