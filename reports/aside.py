"""A function of plain data (NumPy arrays, numbers, strings) run in a forked child on the other
core, its result collected later: the report draws its costliest figure so while it draws the
others (on the 2-core machine, the figures of a one-run report took 2.3-2.9 s one after the other,
now 0.6-0.7 s on each side).

Nothing is lost when the child cannot help: where ``os.fork`` is missing or fails, only one core
is usable or ``SIXBLANKS_REPORT_FORK=0`` asks for it, the function runs here when its result is
asked for; where the child raises, dies or is killed, it runs here again (so its error, if any, is
raised here with a real traceback). Warnings the child raised are raised again here. The child
touches only what the function touches: never pass it Polars frames (their thread pool does not
survive a fork) or anything holding a lock another thread may hold.
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import warnings
from collections.abc import Callable
from typing import Any

FORK_ENV = "SIXBLANKS_REPORT_FORK"


def _usable() -> bool:
    if os.environ.get(FORK_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return hasattr(os, "fork") and (cores or 1) > 1


class Aside:
    """``fn(*args)`` started in a forked child (see the module's docstring); ``result()`` waits
    for it. Use as a context manager, or call ``close()``: a child not collected is killed."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self.fn, self.args = fn, args
        self.pid: int | None = None
        self._fd: int | None = None
        if not _usable():
            return
        read, write = os.pipe()
        parent = os.getpid()
        try:
            with warnings.catch_warnings():  # Python 3.12+: forking with threads is deprecated
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError:  # no process to be had (a limit, memory): the work is done here
            os.close(read)
            os.close(write)
            return
        if pid == 0:  # the child: run, answer through the pipe, end without any teardown
            os.close(read)
            _child(write, fn, args, parent)
        os.close(write)
        self.pid, self._fd = pid, read

    def result(self) -> Any:
        """``fn(*args)``: the child's answer, or computed here where there was none."""

        answer = self._collect()
        if answer is None:
            return self.fn(*self.args)
        value, caught = answer
        for category, message in caught:
            warnings.warn(message, category, stacklevel=2)
        return value

    def _collect(self) -> tuple[Any, list] | None:
        if self.pid is None or self._fd is None:
            return None
        chunks = []
        try:
            while chunk := os.read(self._fd, 1 << 20):
                chunks.append(chunk)
        finally:
            self.close()
        try:
            ok, value, caught = pickle.loads(b"".join(chunks))
        except Exception:  # noqa: BLE001 - the child died before it answered: compute it here
            return None
        return (value, caught) if ok else None

    def close(self) -> None:
        """Kill the child if it still runs, and reap it."""

        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self.pid is not None:
            try:
                if os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            self.pid = None

    def __enter__(self) -> Aside:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _die_with(parent: int) -> None:
    """End this child when ``parent`` dies (a killed command leaves no child drawing behind): the
    kernel's parent-death signal on Linux, elsewhere nothing more than the broken pipe."""

    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the signal was asked for
        os._exit(1)


def _child(write: int, fn: Callable[..., Any], args: tuple, parent: int) -> None:
    """In the forked child: ``fn(*args)`` pickled into ``write`` as (ok, value, warnings)."""

    code = 0
    try:
        _die_with(parent)
        gc.disable()  # nothing of the parent's is freed here: the child ends with os._exit
        for sig in (signal.SIGINT, signal.SIGTERM):  # not the parent's handlers: they just end it
            signal.signal(sig, signal.SIG_DFL)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            value = fn(*args)
        answer = (True, value, [(w.category, str(w.message)) for w in caught])
        data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException:  # noqa: BLE001 - the parent computes it again and raises the error there
        data, code = pickle.dumps((False, None, [])), 1
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(write, view) :]
    finally:
        os._exit(code)
