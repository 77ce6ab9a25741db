"""Spawned processes that never run the user's script again.

A spawned child first imports the parent's ``__main__`` (by path, or by name for ``python -m``)
so that objects pickled from it can be found. For a script that calls ``sixblanks.run(...)`` at
module level, without an ``if __name__ == "__main__":`` guard (the documented three lines), that
import runs the experiment again in every worker: each meets the output directory's lock and dies.
Nothing sixblanks sends a child lives in ``__main__``, so children started through :data:`SPAWN`
are told of no main module at all: a script, ``python -m``, a notebook and the command line all
behave alike.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing import popen_forkserver
from multiprocessing.context import (
    ForkServerContext,
    ForkServerProcess,
    SpawnContext,
)

from ..ending import EndingSpawnProcess

_LOCK = threading.Lock()


@contextmanager
def main_hidden() -> Iterator[None]:
    """Within the block, ``__main__`` has neither a file nor a spec, the two things a spawned
    child's preparation reads to import it (restored afterwards)."""

    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    with _LOCK:
        missing = object()
        saved = {k: getattr(main, k, missing) for k in ("__file__", "__spec__")}
        try:
            if saved["__file__"] is not missing:
                del main.__file__
            main.__spec__ = None
            yield
        finally:
            for k, v in saved.items():
                if v is missing:
                    if hasattr(main, k):
                        delattr(main, k)
                else:
                    setattr(main, k, v)


class _MainHidden:
    """A process class whose ``start`` hides ``__main__`` (:func:`main_hidden`)."""

    def start(self) -> None:
        with main_hidden():
            super().start()  # type: ignore[misc]


class _Process(_MainHidden, EndingSpawnProcess):  # no teardown for its parent's join to wait out
    pass


class _Context(SpawnContext):
    Process = _Process


SPAWN: SpawnContext = _Context()
"""The spawn context (``mp.get_context("spawn")``) whose processes do not import ``__main__``."""


class _ForkServerProcess(_MainHidden, ForkServerProcess):
    pass


class _ForkServerContext(ForkServerContext):
    Process = _ForkServerProcess


class _KeptPopen(popen_forkserver.Popen):
    """A forkserver Popen whose server is its process's kept one (:mod:`.kept_server`), or the
    server this process was itself forked from (:func:`helper_context`)."""

    def _launch(self, process_obj) -> None:
        from .kept_server import launch

        launch(self, process_obj, *process_obj._kept)


class _KeptProcess(_MainHidden, ForkServerProcess):
    # module-level: a process object is pickled to its child by its class's name
    _kept: tuple[str, tuple[int, int] | None] = ("", (0, 0))
    """Its server's address and (keeper pid, server pid), set by its context (None: the server
    that forked this process, whose address it inherited)."""

    @staticmethod
    def _Popen(process_obj):
        return _KeptPopen(process_obj)

    def _bootstrap(self, parent_sentinel=None):
        from .kept_server import take_output

        take_output()  # the command's stdout and stderr, not the keeper's log
        return super()._bootstrap(parent_sentinel)


class _KeptContext(ForkServerContext):
    def __init__(self, kept: tuple[str, tuple[int, int] | None]):
        super().__init__()
        self._kept = kept

    def Process(self, *args, **kwargs):  # noqa: N802 - multiprocessing's name
        process = _KeptProcess(*args, **kwargs)
        process._kept = self._kept
        return process


def kept_context(address: str, owners: tuple[int, int] | None) -> ForkServerContext:
    """The context of workers forked from the kept fork server at ``address`` whose keeper and
    server are ``owners`` (pids; :mod:`.kept_server`); like :data:`FORKSERVER`'s, they do not
    import ``__main__``."""

    return _KeptContext((address, owners))


def fork_server_pid() -> int | None:
    """The pid of this process's own fork server, None where it has not started one (a fork
    server's child inherits the server's address, never its pid). multiprocessing keeps it in a
    private attribute: read here alone."""

    from multiprocessing import forkserver

    return getattr(forkserver._forkserver, "_forkserver_pid", None)


def helper_context() -> ForkServerContext:
    """The context of a process a run starts beside itself (a concurrent collector): forked from
    the fork server that forked this process, where it is a worker (its imports made: the helper
    starts in a fraction of a second, where a spawned one took about 4 s to import torch and
    transformers again), else from this process's own (:func:`worker_context`: a run trained in
    the caller's process, a notebook's or a test's). Like the workers, a helper ignores Ctrl-C
    (its run stops it) and does not import ``__main__``; it writes to this process's standard
    output and error."""

    from multiprocessing import forkserver

    server = forkserver._forkserver
    if fork_server_pid() is None and server._forkserver_address is not None:
        # a fork server's child: the server set its address before forking it; the socket sits in
        # a folder of this user's own (mode 0700), named in this process's memory, not in a file
        return kept_context(server._forkserver_address, None)
    return worker_context()


def worker_context() -> ForkServerContext:
    """The context of the local run workers: forked from a server process of this process that
    imported what every run needs once (:mod:`.fork_server`: torch, transformers' Llama, the
    training code, about 4 s in a fresh interpreter; started with the first worker, living as
    long as this process, ignoring Ctrl-C). A worker then starts in a fraction of a second, where
    a spawned one made those imports again: each of an experiment's workers, and every experiment
    of a process that runs several (a ladder, a sweep, the findings, the test suite). Like
    :data:`SPAWN`'s, its workers do not import ``__main__``. Each is forked from the server's
    state, not this process's: a worker takes this process's environment from its pool
    (:func:`~.local_workers.exit_with_parent`), its working directory and ``sys.path`` from
    multiprocessing's preparation. The server itself imports from the interpreter's own path
    (``PYTHONPATH`` and the installed packages), not from paths this process added to
    ``sys.path`` at run time: a sixblanks imported from such a path would differ from the
    workers'.

    Where a kept server of this code is alive (``sixblanks run --keep-warm``,
    :mod:`.kept_server`), the workers fork from it instead, and no server of this process starts:
    its imports were made by an earlier command."""

    from .kept_server import PRELOAD, attach

    kept = attach()
    if kept is not None:
        return kept_context(kept["address"], (kept["keeper"], kept["server"]))
    FORKSERVER.set_forkserver_preload([PRELOAD])
    return FORKSERVER


FORKSERVER: ForkServerContext = _ForkServerContext()
"""The fork-server context whose processes do not import ``__main__`` (:func:`worker_context`)."""
