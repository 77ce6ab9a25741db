"""Stopping a run inside its long phases (Ctrl-C).

A worker whose orchestrator was interrupted gets SIGTERM, and its handler calls
:func:`request_stop`. The runner checks :data:`STOP` at each step boundary (it checkpoints there and
stops), and every long phase calls :func:`stop_point` at a fine grain: between the decode steps of a
generation, between the rounds of episodes and their environment steps, between the micro-batches
of an update or of a no-grad pass, while it waits for a concurrent collector, between the stages of
a run's setup. Within :func:`stop_points` (the runner and a sweep's trial enter it), a stop point
raises :class:`RunInterrupted` once the stop was requested ``grace`` seconds ago: a step that
reaches its boundary sooner is checkpointed there and loses nothing; a longer one is abandoned, and
the run resumes from its last checkpoint (nothing of the step in progress is committed: the runner
records the run as its checkpoint left it).

A stop point costs one Event check while no stop is requested; outside :func:`stop_points`, and in
any thread but the one that entered it, it does nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

ACTIVE = threading.Event()
"""Set while this worker process executes a run past its setup (or waits on a data-parallel run's
ranks). An idle worker, or one still setting a run up (imports, model loads: nothing of the run
recorded yet, long stretches no stop point divides), just exits on SIGTERM, at once; the run stays
as it was (pending, or resumable)."""

STOP = threading.Event()
"""Set in a worker process whose orchestrator was interrupted (SIGTERM, see
:func:`~sixblanks.harness.orchestration.local_workers.exit_with_parent`): its run stops at the
next step boundary, checkpointed, or at a stop point inside a long phase after the grace; a run
not yet started does not start."""

GRACE_SECONDS = 0.5
"""How long after a stop request a run may still reach its step boundary (and checkpoint the step)
before a stop point abandons the step."""


class RunInterrupted(BaseException):
    """The run stopped because its orchestrator was interrupted (Ctrl-C): at a step boundary,
    checkpointed, or at a stop point inside a phase. A BaseException, as KeyboardInterrupt: the
    ``except Exception`` that turns a task's or verifier's error into a failed sample must not
    swallow it."""


class _State:
    requested: float | None = None  # when the stop was requested (monotonic)
    owner: tuple[int, float] | None = None  # (thread id, grace) of the stop_points block


_STATE = _State()


def request_stop() -> None:
    """Ask the run of this process to stop (a signal handler may call it)."""

    if not STOP.is_set():
        _STATE.requested = time.monotonic()
    STOP.set()


def stop_point(where: str = "") -> None:
    """Raise :class:`RunInterrupted` where a stop was requested at least the grace ago (within
    :func:`stop_points`, in its thread); ``where`` names the phase for the message."""

    if not STOP.is_set():
        return
    owner = _STATE.owner
    if owner is None or owner[0] != threading.get_ident():
        return
    now = time.monotonic()
    if _STATE.requested is None:  # STOP set directly: the grace counts from the first check
        _STATE.requested = now
    if now - _STATE.requested >= owner[1]:
        raise RunInterrupted(f"interrupted during {where or 'a step'}")


@contextmanager
def stop_points(grace: float | None = None) -> Iterator[None]:
    """Within the block, :func:`stop_point` in this thread stops the run ``grace`` seconds (default
    :data:`GRACE_SECONDS`) after a stop request."""

    previous = _STATE.owner
    _STATE.owner = (threading.get_ident(), GRACE_SECONDS if grace is None else grace)
    try:
        yield
    finally:
        _STATE.owner = previous
