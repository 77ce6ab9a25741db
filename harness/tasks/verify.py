"""The single choke point through which every verifier call passes.

It counts calls, turns a raising verifier, a hung verifier (timeout) or a
non-finite reward into a :class:`VerifierFailure` that names the reason, so the
agent loop can mark that sample failed instead of crashing the run.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextvars
import math
import threading
import time
from dataclasses import dataclass, field

from .base import Instance, Task


class VerifierFailure(RuntimeError):
    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


@dataclass
class CallStats:
    """What a counted choke point records: its calls and their time."""

    calls: int = 0
    seconds: float = 0.0


@dataclass
class VerifierStats(CallStats):
    failures: int = 0
    timeouts: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


class VerifierGate:
    """Callable ``(instance, response) -> reward`` wrapping ``task.verify``.

    Args:
        task: the task whose verifier is called.
        timeout_s: a call running longer is abandoned and the sample failed (None: no timeout,
            and the call runs inline, which is cheaper); by default the task's
            ``verifier_timeout_s`` (10 s unless the task class says otherwise).
    """

    def __init__(self, task: Task, timeout_s: float | None | str = "task"):
        self.task = task
        self.timeout_s = (
            getattr(task, "verifier_timeout_s", 10.0) if timeout_s == "task" else timeout_s
        )
        self.stats = VerifierStats()
        self._pool: list[cf.ThreadPoolExecutor | None] = [None]
        # calls from concurrent environment steps (rollout.env_workers) one at a time: the
        # counts stay exact, and a caller holding it can read what its own call added
        self.lock = threading.RLock()

    def _fail(self, kind: str, reason: str) -> VerifierFailure:
        self.stats.failures += 1
        self.stats.reasons[kind] = self.stats.reasons.get(kind, 0) + 1
        return VerifierFailure(reason)

    @property
    def judge(self):
        """The task's judge gate (harness/tasks/judge.py), or None."""

        return getattr(self.task, "judge", None)

    def counts(self) -> tuple[int, int]:
        """(verifier calls, judge calls) so far."""

        return self.stats.calls, self.judge.stats.calls if self.judge is not None else 0

    def __getstate__(self) -> dict:
        return {**self.__dict__, "lock": None, "_pool": [None]}  # neither crosses a process

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.lock = threading.RLock()

    def __call__(self, instance: Instance, response: str) -> float:
        with self.lock:
            return self._call(instance, response)

    def _call(self, instance: Instance, response: str) -> float:
        self.stats.calls += 1
        judge = self.judge
        verification = None
        if judge is not None:
            verification = judge.begin_verify()
        if judge is not None and judge.use == "replace":
            return judge(instance, response)  # the judge's score is the reward
        t0 = time.perf_counter()
        try:
            reward = call_with_timeout(
                self.task.verify, (instance, response), self.timeout_s, self._pool, verification
            )
        except TimeoutError:
            self.stats.timeouts += 1
            raise self._fail(
                "timeout",
                f"verifier of task '{self.task.name}' timed out after {self.timeout_s:g}s",
            ) from None
        except VerifierFailure:  # a judge the task called failed: counted by the judge
            raise
        except Exception as exc:  # noqa: BLE001 - any verifier bug becomes a failed sample
            raise self._fail(
                "raised", f"verifier of task '{self.task.name}' raised {type(exc).__name__}: {exc}"
            ) from None
        finally:
            self.stats.seconds += time.perf_counter() - t0
        try:
            value = float(reward)
        except (TypeError, ValueError):
            raise self._fail(
                "invalid", f"verifier of task '{self.task.name}' returned {reward!r}, not a number"
            ) from None
        if not math.isfinite(value):
            raise self._fail("non_finite", f"verifier of task '{self.task.name}' returned {value}")
        if judge is not None and judge.use == "add":
            value += judge(instance, response)
        return value


VERIFICATION: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "sixblanks_verification", default=None
)
"""The verification a verifier's code runs for: a judge refuses calls from one it has moved past (a
verifier abandoned on timeout whose thread goes on), so they never land in a later round's count."""


def call_with_timeout(
    fn, args: tuple, timeout_s: float | None, pool: list, verification: int | None = None
):
    """``fn(*args)``, abandoned after ``timeout_s`` (TimeoutError); None: inline, no thread.

    ``pool`` holds the one worker thread of the caller (``[executor or None]``); a hung call's
    worker is abandoned and the next call gets a fresh one. ``fn`` runs with :data:`VERIFICATION`
    set to ``verification``."""

    ctx = contextvars.copy_context()
    ctx.run(VERIFICATION.set, verification)
    if timeout_s is None:
        return ctx.run(fn, *args)
    if pool[0] is None:
        pool[0] = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="verifier")
    future = pool[0].submit(ctx.run, fn, *args)
    try:
        return future.result(timeout=timeout_s)
    except cf.TimeoutError:
        pool[0].shutdown(wait=False, cancel_futures=True)
        pool[0] = None
        raise TimeoutError(f"no result after {timeout_s:g}s") from None
