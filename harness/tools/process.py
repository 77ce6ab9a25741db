"""One sandboxed call as the harness sees it: the init's process, the program's output and the
init's status records; it stops the call (timeout, output over the limit) and waits until nothing
of it runs."""

from __future__ import annotations

import json
import os
import select
import selectors
import signal
import subprocess
import time

SETUP_ALLOWANCE = 10.0
"""Seconds allowed past the timeout for starting and tearing down, after which the parent kills
the sandbox itself (the init enforces the timeout; this covers an init that hangs)."""

OUTPUT_GRACE = 0.2
"""Seconds to keep reading output after the init has reported (isolation: none only: a process
that left the program's group may hold the pipes)."""


class Call:
    """One call's processes and pipes, as the parent sees them: reads output and the init's status
    records, and kills the sandbox when it must stop (timeout, output over the limit)."""

    def __init__(self, proc: subprocess.Popen, status_fd: int, limit: int, group: bool):
        self.proc, self.status_fd, self.limit = proc, status_fd, limit
        self.group = group  # isolation none: the program runs in a process group of its own
        self.output = {"stdout": bytearray(), "stderr": bytearray()}
        self.records: list[dict] = []
        self.truncated = False
        self.flooded = ""  # the stream that passed the limit
        self.stopped: str | None = None
        self.init_pidfd: int | None = None
        self.child: int | None = None
        self.child_pidfd: int | None = None
        self._status = bytearray()

    def collect(self, deadline: float) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ, "stdout")
        sel.register(self.proc.stderr, selectors.EVENT_READ, "stderr")
        sel.register(self.status_fd, selectors.EVENT_READ, "status")
        reported = None  # when the init's status pipe closed (it has exited)
        try:
            while sel.get_map():
                now = time.monotonic()
                if now >= deadline:
                    return self.stop("timeout")
                if reported is not None and now - reported > OUTPUT_GRACE:
                    return
                for key, _ in sel.select(min(deadline - now, OUTPUT_GRACE)):
                    data = os.read(key.fd, 65536)
                    if not data:
                        sel.unregister(key.fileobj)
                        if key.data == "status":
                            reported = time.monotonic()
                    elif key.data == "status":
                        self._on_status(data)
                    else:
                        buf = self.output[key.data]
                        room = self.limit - len(buf)
                        buf += data[:room]
                        if len(data) > room:
                            self.truncated, self.flooded = True, key.data
                            return self.stop("output_limit")
        finally:
            sel.close()

    def _on_status(self, data: bytes) -> None:
        self._status += data
        *lines, rest = self._status.split(b"\n")
        self._status = bytearray(rest)
        for line in lines:
            record = json.loads(line)
            self.records.append(record)
            if "init" in record:
                self.init_pidfd = _pidfd(record["init"], self.proc.pid)
            if "child" in record and self.group:  # a pid of this namespace: the init's
                self.child = record["child"]
                self.child_pidfd = _pidfd(self.child, self.proc.pid)

    def stop(self, why: str) -> None:
        """Kill everything of this call and say why (``timeout``, ``output_limit``)."""

        self.stopped = why
        self.kill()

    def kill(self) -> None:
        """The init (with it, in a PID namespace, every process of the program), the program's
        process group (isolation none), and unshare."""

        if self.init_pidfd is not None:
            try:
                signal.pidfd_send_signal(self.init_pidfd, signal.SIGKILL)
            except OSError:
                pass
        if self.group and self.child is not None:
            try:
                os.killpg(self.child, signal.SIGKILL)
            except OSError:
                pass
        self.proc.kill()

    def finish(self) -> None:
        """Wait until nothing of the call runs: unshare (whose wait for the init returns once the
        namespace is empty) and the init itself, then close the pipes. A call that did not end
        (an exception while reading) is killed first."""

        if self.stopped is None and not any("status" in r for r in self.records):
            self.kill()
        try:
            self.proc.wait(timeout=SETUP_ALLOWANCE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        # in a PID namespace the init outlives every process of the program; without one the
        # program itself is awaited (it is not this process's child: a pidfd says when it ends)
        for fd in (self.init_pidfd, self.child_pidfd):
            if fd is not None:
                select.select([fd], [], [], SETUP_ALLOWANCE)
                os.close(fd)
        for stream in (self.proc.stdout, self.proc.stderr):
            stream.close()
        os.close(self.status_fd)


def _pidfd(pid: int, parent: int) -> int | None:
    """A pidfd on ``pid`` if it is ``parent`` or its child, checked after opening: a pid reused
    since it was reported is never signalled or awaited."""

    try:
        fd = os.pidfd_open(pid)
    except OSError:  # already gone
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        ppid = -1
    if parent in (pid, ppid):
        return fd
    os.close(fd)
    return None
