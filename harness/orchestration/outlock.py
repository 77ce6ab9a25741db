"""One writer per output directory: ``run``, ``sweep`` and ``ladder`` hold an advisory
lock on ``<out>/.sixblanks.lock`` while they work.

The lock is an ``flock`` on that file, so the kernel releases it when its holder dies however it
dies (SIGKILL included); the file's text names the holder (pid, host, command, start time) for the
message a second process gets. A second process is refused at once with :class:`DirectoryBusy`
(exit code 3). A file still naming a holder when the lock is free was left by a process that ended
without releasing it: it is taken over, with a message naming the old holder.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import SixblanksError, disk_full, path_problem
from ..redact import redact

LOCK_NAME = ".sixblanks.lock"

_HELD: dict[Path, int] = {}  # directories this process holds -> nesting depth


class DirectoryBusy(SixblanksError):
    """Another sixblanks process is writing the output directory (exit code 3)."""

    exit_code = 3


class OutputUnwritable(SixblanksError):
    """The output directory cannot be made or written (exit code 2: a wrong ``--out``)."""

    exit_code = 2


def _holder(info: dict[str, Any]) -> str:
    started = info.get("started")
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if started else "?"
    return (
        f"`sixblanks {info.get('command', '?')}` (pid {info.get('pid', '?')} on "
        f"{info.get('host', '?')}, since {since})"
    )


def _read(fd: int) -> dict[str, Any]:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 65536)
    try:
        info = json.loads(raw.decode() or "{}")
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {"pid": "?", "note": "unreadable lock file"}
    return info if isinstance(info, dict) else {}


class OutDirLock:
    """Context manager: hold ``directory``'s lock for ``command`` (run, sweep, ladder).

    Re-entrant within one process (a sweep's confirmation runs inside the sweep's lock).
    ``log`` receives the take-over message of a stale lock (default: standard error).
    """

    def __init__(self, directory: Path, command: str, log: Callable[[str], None] | None = None):
        self.dir = Path(directory)
        self.path = self.dir / LOCK_NAME
        self.command = command
        self.log = log or (lambda m: sys.stderr.write(m + "\n"))
        self.fd: int | None = None
        self.key: Path | None = None

    def __enter__(self) -> OutDirLock:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._unwritable(exc) from None
        self.key = self.dir.resolve()
        if self.key in _HELD:
            _HELD[self.key] += 1
            return self
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise self._unwritable(exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            info = _read(fd)
            os.close(fd)
            raise DirectoryBusy(
                f"{self.dir} is in use by {_holder(info)}: one sixblanks run, sweep or ladder "
                "writes an output directory at a time (wait for it to end, stop it, or pass "
                "another --out)"
            ) from None
        old = _read(fd)
        if old.get("pid") is not None:  # its holder ended without releasing it
            self.log(
                f"taking over the lock of {self.dir} left by {_holder(old)}, no longer running"
            )
        mine = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": self.command,
            "started": time.time(),
            "argv": [redact(a) for a in sys.argv],  # a URI given on the command line, masked
        }
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps(mine).encode())
        os.fsync(fd)
        self.fd = fd
        _HELD[self.key] = 1
        return self

    def _unwritable(self, exc: OSError) -> Exception:
        """The error a failed mkdir or open of the lock file becomes: a plain sentence naming the
        directory and what is wrong with it (a full disk is said as such elsewhere)."""

        if disk_full(exc):
            return exc
        return OutputUnwritable(
            f"output directory {self.dir}: cannot be created or written: "
            f"{path_problem(getattr(exc, 'filename', None) or self.dir, exc)}; choose another "
            "output directory (--out)"
        )

    def __exit__(self, *exc: Any) -> None:
        assert self.key is not None
        _HELD[self.key] -= 1
        if _HELD[self.key] > 0 or self.fd is None:
            return
        del _HELD[self.key]
        os.ftruncate(self.fd, 0)  # released cleanly: nothing to take over
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None
