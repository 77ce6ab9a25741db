"""Processes on this machine, read from Linux's /proc (elsewhere: none found). Used to shut a Ray
cluster down whole (harness/orchestration/ray_executor.py) and by the tests' stray-process check;
and :func:`end_now`, how the ``sixblanks`` program and its spawned helpers end."""

from __future__ import annotations

import os


def stat(pid: int) -> list[bytes]:
    """The fields of /proc/<pid>/stat after the command name: [state, parent pid, ...]; [] if
    the process is gone."""

    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return []


def cmdline(pid: int) -> bytes:
    """The process's command line, NUL-separated; b"" if it is gone."""

    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def running(pid: int) -> bool:
    """Alive and not a zombie."""

    st = stat(pid)
    return bool(st) and st[0] not in (b"Z", b"X")


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``."""

    try:
        names = [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []
    children: dict[int, list[int]] = {}
    for n in names:
        st = stat(n)
        if len(st) > 1:
            children.setdefault(int(st[1]), []).append(n)
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def end_now(code: int) -> None:
    """End this process with exit status ``code`` without the interpreter's teardown, once what that
    teardown must do is done: every atexit handler run (logging's flush, multiprocessing's
    children, temporary directories), standard output and error flushed. Where a thread that is
    no daemon is still running it returns instead: the ordinary exit waits for that thread.

    The teardown frees every module and object the process loaded: after a command that loaded
    Polars, DuckDB, PyArrow, SciPy and Matplotlib about half a second, after MLflow's imports about
    one, which a process waiting for this one (joining it, or reading its output through a pipe)
    waits too, for nothing a process that ends needs."""

    import atexit
    import sys
    import threading

    main = threading.main_thread()
    if any(t is not main and t.is_alive() and not t.daemon for t in threading.enumerate()):
        return
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    os._exit(code)
