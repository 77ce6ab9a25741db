"""MLflow's sync from a spawned process of its own, beside the command that runs the experiment:
MLflow imported while the runs run, the runs sent while the report is built
(:class:`SyncBeside`)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from ..version import code_fingerprint
from .tracking import Tracker, sync_state


class SyncBeside:
    """:meth:`Tracker.sync` from a spawned process of its own, started at the top of a command
    (MLflow imported while the runs run; the tracking URI, credentials included, reaches it
    through the pipe that starts it, never a file or its command line): :meth:`send` hands it the
    runs once they are done, :meth:`artifacts` the files to add once written (the report, built
    meanwhile: the two share no files and each keeps a core busy). Leaving the ``with`` block waits
    for it; an error in the block stops it before the runs it was not yet sent (as an in-process
    sync that never happened), a Ctrl-C stops it at once. ``state`` is then the sync state as
    ``OUT/mlflow_sync.json`` records it: what was not sent stays pending for ``sixblanks sync``."""

    def __init__(self, tracker: Tracker, said=lambda s: s):
        self.tracker, self.said = tracker, said
        self.proc, self.state, self.sent = None, {}, False

    def __enter__(self) -> SyncBeside:
        if self.tracker.enabled:
            from .spawning import SPAWN as ctx  # never runs the user's script again

            self.queue = ctx.Queue()
            t = self.tracker
            self.proc = ctx.Process(
                target=_sync_beside,
                args=(str(t.dir.path), t.uri, t.experiment, code_fingerprint(), self.queue),
                name="mlflow-sync",
                daemon=True,
            )
            self.proc.start()
        return self

    def send(self, run_ids: list[str], fairness: dict[str, Any] | None) -> None:
        """The runs to send (all done): sent now, while the caller goes on."""

        if self.proc is not None:
            self.queue.put(("runs", run_ids, fairness))
            self.sent = True

    def artifacts(self, paths: list[Path]) -> None:
        """Files for the parent run, sent after the runs."""

        if self.proc is not None:
            self.queue.put(("artifacts", [str(p) for p in paths]))

    def __exit__(self, exc_type, *_) -> None:
        if self.proc is None:
            self.state = sync_state(self.tracker.dir)
            return
        if not self.sent or (exc_type is not None and issubclass(exc_type, KeyboardInterrupt)):
            # no runs to send; or Ctrl-C: what it had not sent is pending, and a parent run it
            # had made is ended KILLED on the way out (its SIGTERM handler)
            self.proc.terminate()
            self.proc.join(timeout=30)  # that last write, bounded (an HTTP server: 5 s a call)
            if self.proc.is_alive():
                self.proc.kill()
        else:
            self.queue.put(("done",))
        self.proc.join()
        state = sync_state(self.tracker.dir)
        if self.proc.exitcode not in (0, None) and exc_type is None:
            state["last_error"] = f"the MLflow sync process exited with code {self.proc.exitcode}"
        self.state = self.said(state) if self.sent else state


def _sync_beside(out, uri, experiment, code_version, queue) -> None:
    """:class:`SyncBeside`'s process: MLflow's imports first, then what the queue hands it."""

    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides (it terminates this one)
    with contextlib.suppress(OSError):
        os.nice(5)  # bookkeeping: the warm start and the runs come first
    tracker = Tracker(out, uri, experiment, code_version=code_version)
    # MLflow imported while the runs run; its store is opened (a new one created and migrated)
    # only once there is something to send, so that a Ctrl-C before then, which ends this
    # process at once, cannot leave a store half made
    with contextlib.suppress(Exception):  # its absence is said by sync, which keeps the runs
        import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
        import mlflow.tracking  # noqa: F401
    msg = queue.get()
    if msg[0] != "runs":
        return
    # from here on the parent's SIGTERM (its Ctrl-C) stops the sync as a Ctrl-C stops it in
    # process: the transaction under way rolled back, the experiment's parent run ended KILLED
    # (until now SIGTERM ends this process at once: it has written nothing)
    signal.signal(signal.SIGTERM, _interrupt)
    _, run_ids, fairness = msg
    try:
        state = tracker.sync(run_ids, fairness)
        msg = queue.get()
        if msg[0] == "artifacts" and not state.get("last_error"):
            tracker.sync(run_ids, fairness, [Path(p) for p in msg[1]])
    except KeyboardInterrupt:
        return  # recorded by sync: pending runs stay pending for `sixblanks sync`


def _interrupt(*_) -> None:
    raise KeyboardInterrupt
