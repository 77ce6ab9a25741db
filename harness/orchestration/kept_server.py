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

from .processes import descendants, running

PRELOAD = "sixblanks.harness.orchestration.fork_server"
POLL_S = 1.0
"""How often the keeper looks at its users."""
IMPORT_ENV = ("HF_", "TRANSFORMERS_", "TORCH", "PYTORCH_", "OMP_", "MKL_", "TOKENIZERS_")
"""Prefixes of the environment variables the server's imports may read once (part of its key)."""


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

    # what the server's imports read from the environment once (a cache folder, offline mode,
    # thread counts) stays as the first command had it: another value, another server
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(IMPORT_ENV))
    parts = [sys.executable, repr(_interpreter_path()), sixblanks.__file__, code_fingerprint()]
    parts += [socket.gethostname(), repr(env)]
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
    "address", "key", "started"}``; None where there is none."""

    key = key or server_key()
    path = state_dir() / f"{key}.json"
    state = _read_state(path)
    if state is None:
        return None
    if _alive(state.get("keeper")) and _alive(state.get("server")):
        return state
    return None  # a dead keeper's file is left: a newer one may be replacing it


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
    with open(log, "a") as out:
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
        if _read_state(path) != state and _busy(state["server"], users):
            break  # unpublished; it ends once the commands using it have ended
        time.sleep(0.02)
    return True


# ------------------------------------------------------------------------------------ the keeper


_stopping = False


def _ask_stop(*_) -> None:
    global _stopping
    _stopping = True


def keep(key: str, idle_s: float) -> None:
    """The keeper's body (its own detached process): start the fork server, publish its state,
    and end it once no command has used it for the idle time. SIGTERM (:func:`stop`) unpublishes
    it at once; it ends as soon as nothing uses it. "Used": a registered command alive, or a worker
    forked from the server still running (the server must outlive it: the worker's pool reads its
    exit code from the server). One keeper a key: a second one exits at once."""

    import fcntl
    from multiprocessing import forkserver

    signal.signal(signal.SIGTERM, _ask_stop)  # a flag the loops read: no exception mid-step
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    folder = state_dir()
    lock = open(folder / f"{key}.lock", "a")  # noqa: SIM115 - held for the keeper's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return  # another keeper of this key lives: the command finds its state
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
        while not _stopping:
            _publish(path, state)
            if not _serve(key, server._forkserver_pid, users):  # the server died
                return
            _unpublish(path, state)  # idle: no new user from now on, then one last look
            time.sleep(0.2)
            if not _busy(server._forkserver_pid, users):
                break
    finally:
        _unpublish(path, state)
        _end_server(server._forkserver_pid, users)


def _end_server(pid: int, users: Path) -> None:
    """Kill the server once nothing uses it (waiting as long as something does), and reap it."""

    with contextlib.suppress(ChildProcessError):
        while _busy(pid, users) and not os.waitpid(pid, os.WNOHANG)[0]:
            time.sleep(POLL_S / 4)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _publish(path: Path, state: dict) -> None:
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)


def _unpublish(path: Path, state: dict) -> None:
    if _read_state(path) == state:
        with contextlib.suppress(OSError):
            path.unlink()


def _busy(server: int, users: Path) -> bool:
    """Whether a registered user is alive (the marks of dead ones removed) or a worker forked from
    the server still runs (its user's mark lost with a cleared cache, say)."""

    alive = any(running(p) for p in descendants(server))
    try:
        marks = list(users.iterdir())
    except OSError:
        marks = []
    for mark in marks:
        if mark.name.isdigit() and _alive(int(mark.name)):
            alive = True
        else:
            with contextlib.suppress(OSError):
                mark.unlink()
    return alive


def _serve(key: str, server: int, users: Path) -> bool:
    """Until nothing has used the server for the idle time or a stop was asked (True), or the
    server died (False)."""

    last_busy = time.monotonic()
    while not _stopping:
        time.sleep(POLL_S)
        if os.waitpid(server, os.WNOHANG)[0]:  # the server died (killed): nothing to keep
            return False
        if _busy(server, users):
            last_busy = time.monotonic()
        idle = _read_state(state_dir() / f"{key}.idle")
        idle_s = float(idle) if isinstance(idle, int | float) else 600.0
        if time.monotonic() - last_busy > idle_s:
            return True
    return True


# ------------------------------------------------------------------------ forking from a kept one


def launch(popen, process_obj, address: str, owners: tuple[int, int] | None) -> None:
    """``popen``'s launch through the kept server at ``address`` (the fork
    server's own protocol, :class:`multiprocessing.popen_forkserver.Popen`'s ``_launch`` with
    another address): the process's preparation data and pickle go down a pipe, its pid and later
    its exit code come back up another. The command's stdout and stderr go along as the last two
    inherited descriptors (:func:`take_output`): the server's are the keeper's log. Raises
    ConnectionError where the socket was not opened by ``owners`` (the keeper's and the server's
    pids) of this user; None: not checked (the address of the server that forked this process)."""

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
    if len(popen._fds) + 6 >= forkserver.MAXFDS_TO_SEND:
        raise ValueError("too many fds")
    parent_r, child_w = os.pipe()
    child_r, parent_w = os.pipe()
    # the child's "alive" descriptor serves only a fork server of its own, which it never starts
    # from this one: any descriptor does
    spare = os.open(os.devnull, os.O_RDONLY)
    fds = [child_r, child_w, spare, resource_tracker.getfd(), *popen._fds, 1, 2]
    try:
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(address)
            if owners is not None:
                _check_peer(client, owners)
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


def _check_peer(client: socket.socket, owners: tuple[int, int]) -> None:
    """ConnectionError unless the socket's other end was opened by one of ``owners`` (its keeper
    listens, its server accepts) run by this user: the state file names them, and a cache folder
    others can write must not hand our pipes to a process of theirs."""

    import struct

    creds = client.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", creds)
    if pid not in owners or uid != os.getuid():
        raise ConnectionError(f"the kept worker server's socket is held by pid {pid}, uid {uid}")


def take_output() -> None:
    """In a worker forked from a kept server: the command's stdout and stderr (the last two
    descriptors :func:`launch` sent) in place of the server's."""

    from multiprocessing import forkserver

    fds = forkserver.get_inherited_fds() or []
    if len(fds) >= 2:
        os.dup2(fds[-2], 1)
        os.dup2(fds[-1], 2)


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
