"""Processes on this machine, read from Linux's /proc (elsewhere: none found). Used to shut a Ray
cluster down whole (harness/orchestration/ray_executor.py) and by the tests' stray-process check."""

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
