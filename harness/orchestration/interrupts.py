"""What the executors share: a job, Ctrl-C deferred to a safe point (:func:`deferred_interrupts`),
the :class:`Interrupted` error it ends an experiment with, and one piece of work waited for with
Ctrl-C honoured (:func:`run_one`)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import SixblanksError
from ..runspec import RunSpec

Job = tuple[RunSpec, str, str]
"""(run spec, run directory, warm-start policy directory)"""

SIGINT_SEEN = threading.Event()
"""Set by :func:`deferred_interrupts`'s handler: Ctrl-C was pressed; acted on at the next safe
point."""


@contextmanager
def deferred_interrupts(over_default_only: bool = False) -> Iterator[threading.Event]:
    """Within the block, Ctrl-C (SIGINT) only sets :data:`SIGINT_SEEN` (a second one raises
    KeyboardInterrupt at once): the sweep acts on it between trials and while it waits for one,
    never in the middle of a write to its study's storage. Only in the main thread; restored
    after. Within such a block already, the block changes nothing; with ``over_default_only``,
    nor where Ctrl-C does not raise KeyboardInterrupt to begin with (ignored, as in a job a shell
    started in the background, or handled by the program's own handler)."""

    held = signal.getsignal(signal.SIGINT)
    if (
        threading.current_thread() is not threading.main_thread()
        or getattr(held, "defers_ctrl_c", False)
        or (over_default_only and held is not signal.default_int_handler)
    ):
        yield SIGINT_SEEN
        return

    def handler(*_: Any) -> None:
        if SIGINT_SEEN.is_set():
            raise KeyboardInterrupt
        SIGINT_SEEN.set()

    handler.defers_ctrl_c = True  # type: ignore[attr-defined]
    SIGINT_SEEN.clear()
    old = signal.signal(signal.SIGINT, handler)
    try:
        yield SIGINT_SEEN
    finally:
        signal.signal(signal.SIGINT, old)
        SIGINT_SEEN.clear()


class Interrupted(SixblanksError):
    """Ctrl-C (SIGINT) during an experiment: exit code 130 after what finished is recorded."""

    exit_code = 130

    def __init__(self, message: str, stopped: list[str], not_started: list[str]):
        super().__init__(message)
        self.stopped, self.not_started = stopped, not_started
        self.partial: dict[str, Any] | None = None  # a session call's own result, if it returned


def runs_interrupted(stopped: list[str], not_started: list[str]) -> Interrupted:
    """What Ctrl-C left of an experiment's runs, as the one line the command ends with."""

    return Interrupted(
        f"interrupted: {len(stopped)} run(s) stopped in flight (resumable), "
        f"{len(not_started)} not started; the same command resumes them",
        stopped,
        not_started,
    )


def run_one(session, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on ``session``, waited for; Ctrl-C (or :data:`SIGINT_SEEN`) stops it and
    raises :class:`Interrupted` carrying its own result (``partial``)."""

    handle = session.submit(fn, *args)
    try:
        while not session.wait([handle]):
            if SIGINT_SEEN.is_set():
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        stop = Interrupted("interrupted", ["in flight"], [])
        stop.partial = session.interrupt([handle])[handle]
        raise stop from None
    return session.result(handle)
