"""A worker fork server kept between commands (``sixblanks run --keep-warm MINUTES``).

Each command's run workers are forked from a fork server that imported torch, transformers' Llama
and the training code (:mod:`.fork_server`): about 4.5 s of every command, paid before its first
step. A user iterating on one configuration pays it on every command. With ``--keep-warm`` the
server is started by a small detached *keeper* process instead of by the command, and outlives it:
the next commands of the same code on the same interpreter fork their workers from it at once.

- The keeper and its server are found through a state file under the machine cache
  (``$SIXBLANKS_CACHE/kept-workers/<key>.json``, default ``~/.cache/sixblanks``); the key hashes
  the interpreter, its path, where sixblanks is installed and the code's fingerprint, so an edited
  source file, another venv or another library version starts a fresh server rather than fork
  workers holding stale modules.
- A command using it registers its pid (``users/<pid>`` beside the state file); the keeper ends
  (and its server with it) once no registered command has been alive for its idle minutes. It
  never ends under a running command: a worker whose server is gone reads as dead to its pool.
- A worker forked from it is the same as one forked from the command's own server: it takes the
  command's environment and working directory, ignores Ctrl-C, and ends with the command (it
  watches the command's pipe, not the server).
- Nothing else changes: without ``--keep-warm`` and without a live keeper of the same key, the
  command starts its own server, which ends with it. ``sixblanks run --keep-warm 0`` stops the
  keeper of the current code.

This module imports no torch (the command's own process has none when its warm start is cached).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from .processes import running

PRELOAD = "sixblanks.harness.orchestration.fork_server"
POLL_S = 1.0
"""How often the keeper looks at its users."""


def state_dir() -> Path:
    """Where keepers leave their state: ``$SIXBLANKS_CACHE/kept-workers`` (default
    ``~/.cache/sixblanks/kept-workers``)."""

    root = Path(os.environ.get("SIXBLANKS_CACHE") or Path.home() / ".cache" / "sixblanks")
    return root / "kept-workers"


def server_key() -> str:
    """What a kept server's modules depend on: the interpreter, its import path, where sixblanks
    lives and the fingerprint of its code and libraries (16 hex digits)."""

    import sixblanks

    from ..version import code_fingerprint

    parts = [sys.executable, repr(_interpreter_path()), sixblanks.__file__, code_fingerprint()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _interpreter_path() -> list[str]:
    """``sys.path`` without the entries a script or the working directory put first."""

    return [p for p in sys.path if p and Path(p).resolve() != Path.cwd().resolve()]


def _alive(pid: int | None) -> bool:
    """Running and not a zombie (a server its keeper has not reaped yet is gone)."""

    return bool(pid) and running(pid)


def _read_state(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def find(key: str | None = None) -> dict | None:
    """The state of a live keeper of ``key`` (default: this code's): ``{"keeper", "server",
    "address", "key", "idle_s"}``; None where there is none (a dead one's files are removed)."""

    key = key or server_key()
    path = state_dir() / f"{key}.json"
    state = _read_state(path)
    if state is None:
        return None
    if _alive(state.get("keeper")) and _alive(state.get("server")):
        return state
    with contextlib.suppress(OSError):
        path.unlink()
    return None


def register(state: dict) -> None:
    """Count this process as a user of the keeper of ``state`` while it lives (the keeper checks
    the pid; the file is removed at exit or by the keeper once the pid is gone)."""

    users = state_dir() / f"{state['key']}.users"
    users.mkdir(parents=True, exist_ok=True)
    mark = users / str(os.getpid())
    mark.touch()
    import atexit

    atexit.register(lambda: mark.unlink(missing_ok=True))


def start(idle_s: float, key: str | None = None, wait_s: float = 30.0) -> dict:
    """The state of the keeper of ``key`` (default: this code's), started detached if none is
    alive; its idle time is set to ``idle_s`` either way. Raises RuntimeError naming the keeper's
    log where it did not come up within ``wait_s``."""

    key = key or server_key()
    state = find(key)
    if state is not None:
        _set_idle(key, idle_s)
        return state
    folder = state_dir()
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / f"{key}.log"
    code = f"from {__name__} import keep; keep({key!r}, {float(idle_s)!r})"
    with open(log, "w") as out:
        subprocess.Popen(
            [sys.executable, "-c", code],
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not in the terminal's group: Ctrl-C of a command spares it
            close_fds=True,
        )
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        state = find(key)
        if state is not None:
            return state
        time.sleep(0.02)
    raise RuntimeError(f"the kept worker server did not start within {wait_s:.0f} s; see {log}")


def _set_idle(key: str, idle_s: float) -> None:
    path = state_dir() / f"{key}.idle"
    path.write_text(repr(float(idle_s)))


def stop(key: str | None = None, wait_s: float = 10.0) -> bool:
    """Stop the keeper of ``key`` (default: this code's) and its server; whether one was alive."""

    state = find(key)
    if state is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(state["keeper"], signal.SIGTERM)
    path, users = state_dir() / f"{state['key']}.json", state_dir() / f"{state['key']}.users"
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and _alive(state["keeper"]):
        if _read_state(path) != state and _users_alive(users):
            break  # unpublished; it ends once the commands using it have ended
        time.sleep(0.02)
    return True


# ------------------------------------------------------------------------------------ the keeper


class _Stop(Exception):
    pass


def _raise_stop(*_):
    raise _Stop


def keep(key: str, idle_s: float) -> None:
    """The keeper's body (its own detached process): start the fork server, publish its state,
    and end it once no user has been alive for the idle time. SIGTERM (:func:`stop`) unpublishes
    it at once and ends it as soon as no user is alive."""

    from multiprocessing import forkserver

    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    folder = state_dir()
    server = forkserver.ForkServer()
    server.set_forkserver_preload([PRELOAD])
    server.ensure_running()  # listening now; forks wait until its imports are made
    path, users = folder / f"{key}.json", folder / f"{key}.users"
    users.mkdir(parents=True, exist_ok=True)
    _set_idle(key, idle_s)
    state = {
        "key": key,
        "keeper": os.getpid(),
        "server": server._forkserver_pid,
        "address": server._forkserver_address,
        "started": time.time(),
    }
    try:
        while True:
            _publish(path, state)
            if not _serve(key, server, users):  # the server died
                break
            _unpublish(path, state)  # idle: no new user from now on, then one last look
            time.sleep(0.2)
            if not _users_alive(users):
                break
    except _Stop:
        _unpublish(path, state)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        while _users_alive(users):  # a command still using it keeps its workers' server
            time.sleep(POLL_S / 4)
    finally:
        _unpublish(path, state)
        if server._forkserver_pid is not None:  # no user alive: nothing of a command is in it
            with contextlib.suppress(ProcessLookupError):
                os.kill(server._forkserver_pid, signal.SIGKILL)
            os.waitpid(server._forkserver_pid, 0)


def _publish(path: Path, state: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)


def _unpublish(path: Path, state: dict) -> None:
    if _read_state(path) == state:  # another keeper of the key may have published its own
        with contextlib.suppress(OSError):
            path.unlink()


def _users_alive(users: Path) -> bool:
    """Whether a registered user is alive (the marks of dead ones removed)."""

    alive = False
    for mark in list(users.iterdir()):
        if mark.name.isdigit() and _alive(int(mark.name)):
            alive = True
        else:
            with contextlib.suppress(OSError):
                mark.unlink()
    return alive


def _serve(key: str, server, users: Path) -> bool:
    """Until no registered user has been alive for the idle time (True) or the server died
    (False)."""

    last_busy = time.monotonic()
    while True:
        time.sleep(POLL_S)
        pid, _ = os.waitpid(server._forkserver_pid, os.WNOHANG)
        if pid:  # the server died (killed): nothing to keep
            server._forkserver_pid = None
            return False
        if _users_alive(users):
            last_busy = time.monotonic()
        idle = _read_state(state_dir() / f"{key}.idle")
        idle_s = float(idle) if isinstance(idle, int | float) else 600.0
        if time.monotonic() - last_busy > idle_s:
            return True


# ------------------------------------------------------------------------ forking from a kept one


def launch(popen, process_obj, address: str) -> None:
    """``popen``'s launch through the kept server at ``address`` (the fork server's own protocol,
    :class:`multiprocessing.popen_forkserver.Popen`'s ``_launch`` with another address): the
    process's preparation data and pickle go down a pipe, its pid and later its exit code come
    back up another."""

    from multiprocessing import forkserver, reduction, resource_tracker, spawn, util
    from multiprocessing.context import set_spawning_popen

    prep_data = spawn.get_preparation_data(process_obj._name)
    buf = io.BytesIO()
    set_spawning_popen(popen)
    try:
        reduction.dump(prep_data, buf)
        reduction.dump(process_obj, buf)
    finally:
        set_spawning_popen(None)
    resource_tracker.ensure_running()
    parent_r, child_w = os.pipe()
    child_r, parent_w = os.pipe()
    # the child's "alive" descriptor serves only a fork server of its own, which it never starts
    # from this one: any descriptor does
    spare = os.open(os.devnull, os.O_RDONLY)
    try:
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(address)
            fds = [child_r, child_w, spare, resource_tracker.getfd(), *popen._fds]
            reduction.sendfds(client, fds)
    except BaseException:
        os.close(parent_r)
        os.close(parent_w)
        raise
    finally:
        for fd in (child_r, child_w, spare):
            os.close(fd)
    popen.sentinel = parent_r
    popen.finalizer = util.Finalize(popen, util.close_fds, (os.dup(parent_w), parent_r))
    with open(parent_w, "wb", closefd=True) as f:
        f.write(buf.getbuffer())
    popen.pid = forkserver.read_signed(parent_r)


# ------------------------------------------------------------------------------- the command's use

ENV = "SIXBLANKS_KEEP_WARM"
"""Minutes a kept server waits idle (``sixblanks run --keep-warm``): set, a command starts or
refreshes the keeper; ``0``, it uses none; unset, it uses a live one of its code if there is one."""

_registered: set[str] = set()


def attach() -> dict | None:
    """The kept server this process's workers fork from (see :data:`ENV`), registered as used by
    this process; None: the process uses a fork server of its own. A keeper that fails to start
    is said on stderr and the process goes on with its own server."""

    want = os.environ.get(ENV)
    try:
        if want is None:
            state = find()
        elif float(want) <= 0:
            return None
        else:
            state = start(float(want) * 60)
    except (RuntimeError, OSError, ValueError) as exc:
        print(
            f"caution: no kept worker server ({exc}); the workers fork from the command's own",
            file=sys.stderr,
        )
        return None
    if state is None:
        return None
    if state["key"] + str(os.getpid()) not in _registered:
        register(state)
        _registered.add(state["key"] + str(os.getpid()))
        # registered first, then looked at again: a keeper ending meanwhile unpublished itself
        state = find(state["key"])
    return state
