"""Judges: a reward that asks a user-supplied callable or a local model, through one counted choke
point like the verifier.

Configured per task (``task.judge``, see :class:`JudgeConfig` in harness/config.py):

- ``kind: callable``: ``callable: "module:function"``, called as
  ``function(prompt, response, data)`` (the instance's prompt, the policy's response, the
  instance's data) and returning a number.
- ``kind: model``: a local Hugging Face causal LM directory (``path``); the reward is
  P(yes) / (P(yes) + P(no)) of the next token after ``prompt`` filled with the instance's prompt
  and the response (no download, no sampling).

``use`` says where the judge's score goes: ``replace`` the verifier's reward, be ``add``-ed to it,
or ``task``: the task's own ``verify`` calls ``self.judge(instance, response)`` where it needs to.
Every call is counted (the ledger's ``judge_calls``, which can carry a budget; a rollout reserves
``max_calls_per_verify`` calls per verifier call), and a judge that raises, times out, returns
something that is not a finite number or is called more often than ``max_calls_per_verify`` in
one verification fails that sample (a :class:`JudgeFailure`, counted by reason) instead of the run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..imports import ImportObjectError, import_object
from .base import Instance
from .verify import VERIFICATION, CallStats, VerifierFailure, call_with_timeout

JudgeFn = Callable[[Instance, str], float]


class JudgeFailure(VerifierFailure):
    """A judge call failed: the sample is failed like one whose verifier failed."""


class JudgeError(ValueError):
    """A judge that cannot be built (not importable, not callable, no model there)."""


@dataclass
class JudgeStats(CallStats):
    failures: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


class JudgeGate:
    """The counted choke point of one task's judge: ``gate(instance, response) -> score``."""

    def __init__(
        self,
        fn: JudgeFn,
        name: str,
        use: str = "replace",
        max_calls_per_verify: int = 1,
        timeout_s: float | None = 30.0,
    ):
        self.fn, self.name, self.use = fn, name, use
        self.max_calls_per_verify, self.timeout_s = max_calls_per_verify, timeout_s
        self.stats = JudgeStats()
        self._pool: list = [None]
        self._in_verify = 0
        self._verification = 0

    def begin_verify(self) -> int:
        """A new verification starts: its call count restarts; returns its id (calls made for an
        earlier one, e.g. by a verifier abandoned on timeout, are refused)."""

        self._in_verify = 0
        self._verification += 1
        return self._verification

    def _fail(self, kind: str, reason: str) -> JudgeFailure:
        self.stats.failures += 1
        self.stats.reasons[kind] = self.stats.reasons.get(kind, 0) + 1
        return JudgeFailure(reason)

    def __call__(self, instance: Instance, response: str) -> float:
        caller = VERIFICATION.get()
        if caller is not None and caller != self._verification:
            self.stats.reasons["abandoned"] = self.stats.reasons.get("abandoned", 0) + 1
            raise JudgeFailure(
                f"judge '{self.name}' called for verification {caller}, abandoned (now at "
                f"{self._verification}): not counted"
            )
        self._in_verify += 1
        if self._in_verify > self.max_calls_per_verify:
            # past what the rollout reserved: refused, so the judge_calls budget holds
            raise self._fail(
                "over_limit",
                f"judge '{self.name}' called {self._in_verify} times in one verification "
                f"(task.judge.max_calls_per_verify = {self.max_calls_per_verify})",
            )
        self.stats.calls += 1
        t0 = time.perf_counter()
        try:
            score = call_with_timeout(self.fn, (instance, response), self.timeout_s, self._pool)
        except TimeoutError:
            raise self._fail(
                "timeout", f"judge '{self.name}' timed out after {self.timeout_s:g}s"
            ) from None
        except Exception as exc:  # noqa: BLE001 - any judge bug becomes a failed sample
            raise self._fail(
                "raised", f"judge '{self.name}' raised {type(exc).__name__}: {exc}"
            ) from None
        finally:
            self.stats.seconds += time.perf_counter() - t0
        try:
            value = float(score)
        except (TypeError, ValueError):
            raise self._fail(
                "invalid", f"judge '{self.name}' returned {score!r}, not a number"
            ) from None
        if not math.isfinite(value):
            raise self._fail("non_finite", f"judge '{self.name}' returned {value}")
        return value


def import_callable(path: str) -> Callable[..., Any]:
    """The judge function ``path`` names (``module:function``; :func:`import_object`)."""

    try:
        fn = import_object(path, "callable")
    except ImportObjectError as exc:
        raise JudgeError(f"task.judge.callable: {exc}") from None
    if not callable(fn):
        raise JudgeError(f"task.judge.callable: '{path}' is not callable")
    return fn


class ModelJudge:
    """A local causal LM asked a yes/no question: the score is P(yes) / (P(yes) + P(no)) of the
    first token of ``yes`` and ``no`` after the filled ``prompt``."""

    def __init__(self, path: str, prompt: str, yes: str, no: str, device: str = "cpu"):
        from pathlib import Path

        if not Path(path).is_dir():
            raise JudgeError(f"task.judge.path: {path!r} is not a local model directory")
        from ..models import load_pretrained

        self.model, self.tok = load_pretrained(path, device, "float32")
        self.model.eval()
        self.prompt, self.device = prompt, device
        ids = [self.tok(w, add_special_tokens=False)["input_ids"] for w in (yes, no)]
        if not ids[0] or not ids[1] or ids[0][0] == ids[1][0]:
            raise JudgeError(
                f"task.judge: {yes!r} and {no!r} must start with different tokens of the judge's "
                "tokenizer"
            )
        self.yes, self.no = ids[0][0], ids[1][0]

    def __call__(self, instance: Instance, response: str) -> float:
        import torch

        text = self.prompt.format(prompt=instance.prompt, response=response)
        enc = self.tok(text, return_tensors="pt").to(self.device)
        with torch.no_grad():
            logits = self.model(**enc).logits[0, -1]
        two = torch.stack([logits[self.yes], logits[self.no]]).double().softmax(0)
        return float(two[0])


def make_judge(cfg: dict[str, Any]) -> JudgeGate:
    """The gate of a task's judge from its config (``JudgeConfig`` as a dict)."""

    if cfg["kind"] == "callable":
        fn = import_callable(cfg["callable"])
        name = cfg["callable"]

        def call(instance: Instance, response: str) -> float:
            return fn(instance.prompt, response, instance.data)

    else:
        call = ModelJudge(cfg["path"], cfg["prompt"], cfg["yes"], cfg["no"])
        name = cfg["path"]
    return JudgeGate(call, name, cfg["use"], cfg["max_calls_per_verify"], cfg["timeout_s"])


def attach_judge(task, cfg: dict[str, Any] | None):
    """Give ``task`` its judge (``task.judge``: a :class:`JudgeGate`); returns the task."""

    if cfg:
        task.judge = make_judge(cfg)
    return task
