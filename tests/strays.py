"""Process hygiene for the test suite: no process started by a test outlives it.

Every process the suite starts inherits two environment variables: ``SIXBLANKS_TEST_RUN`` (one
value for the whole ``pytest`` invocation, xdist workers included) and ``SIXBLANKS_TEST_WORKER``
(the pid of the pytest process running the test). A process keeps them when it is orphaned (a
killed ``sixblanks sweep``'s pool worker is re-parented to init), so the check finds what a
parent/child walk would miss:

- after each test, a process of this worker that was not there before the test and is still
  running after a grace period fails the test (it is killed then, so that one leak is reported
  once);
- at the end of the run, the controlling pytest process lists every process of the run that is
  still alive (its own xdist workers excepted) and fails the run.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

from sixblanks.harness.orchestration.processes import cmdline, stat

RUN_VAR, WORKER_VAR = "SIXBLANKS_TEST_RUN", "SIXBLANKS_TEST_WORKER"
GRACE_SECONDS = 15.0
"""How long a test's processes may take to exit after it (a Ray cluster shutting down, a pool)."""

RUN = os.environ.setdefault(RUN_VAR, uuid.uuid4().hex)
os.environ[WORKER_VAR] = str(os.getpid())  # this pytest process: the controller or an xdist worker


def _environ(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:  # gone, or a zombie
        return b""


def _state(pid: int) -> str:
    st = stat(pid)
    return st[0].decode() if st else "X"


def _describe(pid: int) -> str:
    st = stat(pid)
    if len(st) < 2:
        return f"pid {pid} (gone)"
    cmd = cmdline(pid).replace(b"\0", b" ").decode(errors="replace").strip()
    return f"pid {pid} (parent {int(st[1])}): {cmd[:160]}"


def _own_tracker(pid: int) -> bool:
    """multiprocessing's resource tracker of this process: started with the first process pool, it
    lives as long as this process (it exits when this process's end of its pipe closes)."""

    st = stat(pid)
    return (
        b"multiprocessing.resource_tracker" in cmdline(pid)
        and len(st) > 1
        and int(st[1]) == os.getpid()
    )


def _own_fork_server(pid: int) -> bool:
    """The fork server of this process's run workers (harness/orchestration/spawning.py): started
    with the first pool, it lives as long as this process (it exits when this process's end of its
    pipe closes)."""

    st = stat(pid)
    return (
        b"multiprocessing.forkserver" in cmdline(pid) and len(st) > 1 and int(st[1]) == os.getpid()
    )


def processes(var: str, value: str) -> set[int]:
    """Live processes (zombies excepted) whose environment has ``var=value``: this one, its own
    resource tracker and its own fork server excepted."""

    needle = f"{var}={value}\0".encode()
    me, out = os.getpid(), set()
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me and needle in _environ(int(name)):
            pid = int(name)
            if _state(pid) not in ("Z", "X") and not (_own_tracker(pid) or _own_fork_server(pid)):
                out.add(pid)
    return out


def _settle(pids: set[int], grace: float) -> set[int]:
    """Those of ``pids`` still running after up to ``grace`` seconds."""

    deadline = time.monotonic() + grace
    alive = {p for p in pids if _state(p) not in ("Z", "X")}
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = {p for p in alive if _state(p) not in ("Z", "X")}
    return alive


def _kill(pids: set[int]) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def _is_xdist_worker(pid: int) -> bool:
    return b"exec(eval(sys.stdin.readline()))" in cmdline(pid)


@pytest.fixture(autouse=True)
def no_stray_processes():
    """Fails a test that leaves a process of its own running (listed, then killed)."""

    before = processes(WORKER_VAR, os.environ[WORKER_VAR])
    yield
    new = processes(WORKER_VAR, os.environ[WORKER_VAR]) - before
    if not new:
        return
    left = _settle(new, GRACE_SECONDS)
    if left:
        listing = "\n  ".join(_describe(p) for p in sorted(left))
        _kill(left)
        pytest.fail(f"{len(left)} process(es) started by this test outlived it:\n  {listing}")


def pytest_sessionfinish(session, exitstatus):
    """In the controlling process: any process of this run still alive fails the run."""

    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller checks
        return
    left = {p for p in processes(RUN_VAR, RUN) if not _is_xdist_worker(p)}
    left = _settle(left, GRACE_SECONDS)
    report = session.config.pluginmanager.get_plugin("terminalreporter")
    write = report.write_line if report is not None else print
    if not left:
        write("stray-process check: no process started by the suite outlived it")
        return
    write(f"stray-process check: {len(left)} process(es) started by the suite are still running:")
    for p in sorted(left):
        write(f"  {_describe(p)}")
    _kill(left)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
