"""How sixblanks' own processes end: without the interpreter's teardown, once what it must do is
done (:func:`end_now`): the ``sixblanks`` program, the helpers it spawns
(:class:`EndingSpawnProcess`: the MLflow sync beside the runs) and a data-parallel run's ranks. A
run's concurrent collector, forked from the fork server, ends through ``os._exit`` as every forked
child does.

The teardown frees every module and object a process loaded: after a command that loaded Polars,
DuckDB, PyArrow, SciPy and Matplotlib about half a second, after MLflow's imports about one, after
torch and transformers' 1-1.5 s; whoever waits for the process (a join, torchrun, a reader of its
output through a pipe) waits that long too, for nothing a process that ends needs."""

from __future__ import annotations

import os
from multiprocessing.context import SpawnProcess


def end_now(code: int) -> None:
    """End this process with exit status ``code`` without the interpreter's teardown, once what that
    teardown must do is done: every atexit handler run (logging's flush, multiprocessing's
    children, temporary directories), standard output and error flushed. Where a thread that is
    no daemon is still running it returns instead: the ordinary exit waits for that thread."""

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


class EndingSpawnProcess(SpawnProcess):
    """A spawned process (``multiprocessing.get_context("spawn").Process``) that ends through
    :func:`end_now` once its target, its finalizers and its output's flush are done: the exit code
    is the target's (1 for an exception, whose traceback was printed; a ``sys.exit`` code)."""

    def _bootstrap(self, parent_sentinel=None):
        code = super()._bootstrap(parent_sentinel)
        end_now(code)
        return code
