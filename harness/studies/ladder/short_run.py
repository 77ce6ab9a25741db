"""One short run's result (:class:`ShortRun`), as the ladder's short runs hand it to the rungs
(:mod:`.short_runs` trains it) and as a rung's row records it (:meth:`ShortRun.as_dict`).

This module imports nothing heavy: a rung, a test or a statistic reads a ShortRun without torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class ShortRun:
    """One setting trained from the warm start under the rung budget, evaluated on the validation
    split at its start and its end; or, ``diverged``, a run that failed (``error``), whose
    measurements are None or empty.

    Its sequences are tuples and its mappings read-only (a list or dict given is copied into one):
    the ladder hands the same ShortRun to every rung that trains the same setting."""

    engine: str
    """The rollout engine's class that sampled it (``HFEngine``, ``VLLMEngine``)."""
    split: str | None
    """The held-out split its last evaluation scored (``validation``; a diverged run: the split it
    was to score)."""
    diverged: bool = False
    """Whether training failed (a non-finite loss, a failed rollout): then ``error`` says why."""
    error: str | None = None
    """The failure's message (a diverged run); None for a finished one."""
    scores: tuple[float, ...] | None = None
    """Per-instance scores of the last evaluation, shape (n,): one per validation instance in the
    evaluation's order, each the mean reward of its ``eval.samples`` samples. None: diverged."""
    start: tuple[float, ...] | None = None
    """Per-instance scores of the evaluation at step 0 (the warm start), shape (n,), on the same
    instances in the same order as ``scores``. None: diverged."""
    final: float | None = None
    """The last evaluation's score: the mean of ``scores``. None: diverged."""
    start_score: float | None = None
    """The step-0 evaluation's score: the mean of ``start``. None: diverged."""
    grad_norm: float | None = None
    """The mean gradient norm over the steps that measured one (None: none did, or diverged)."""
    grad_norm_max: float | None = None
    """The largest gradient norm over those steps (None: none did, or diverged)."""
    trainable: tuple[float | None, ...] = ()
    """The trainable-group fraction of each training step, shape (steps,): the share of its
    launched groups with a reward spread; None where a step measured none (no groups of 2+)."""
    counters: Mapping[str, float] = field(default_factory=dict)
    """The run's ledger counters at its end (``launched_tokens``, ``rollouts_launched``, ...)."""
    versions_behind: float | None = None
    """Policy versions its samples were behind the trainer, averaged over the steps (0.0 for a
    synchronous run; None: diverged)."""
    behavior_kl: float | None = None
    """The mean k3 KL from the behaviour policy to the current one over the steps that measured it
    (None: none did)."""
    staleness_split: Mapping[str, float | None] = field(default_factory=dict)
    """A concurrent collector's lag, each of ``inflight_behind``, ``queue_behind`` and
    ``version_span`` averaged over the steps (None where no step measured it; empty: diverged)."""
    async_dropped: Mapping[str, float] = field(default_factory=dict)
    """Tokens asynchronous sampling discarded, by reason (``stale_inflight``, ``stale_queue``,
    ``staleness``, ``aborted``, ``unconsumed``; 0.0 where none; empty: diverged)."""

    def __post_init__(self) -> None:
        for name in ("scores", "start", "trainable"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        for name in ("counters", "staleness_split", "async_dropped"):
            value = getattr(self, name)
            if not isinstance(value, MappingProxyType):
                object.__setattr__(self, name, MappingProxyType(dict(value)))

    def as_dict(self) -> dict[str, Any]:
        """The run as the rungs' rows record it, in plain lists and dicts made anew: a finished run
        every field but ``error``; a diverged one its error, ``diverged``, ``scores`` and
        ``grad_norm`` (None), engine and split."""

        if self.diverged:
            return {
                "error": self.error,
                "diverged": True,
                "scores": None,
                "grad_norm": None,
                "engine": self.engine,
                "split": self.split,
            }
        return {
            "scores": _list(self.scores),
            "start": _list(self.start),
            "final": self.final,
            "start_score": self.start_score,
            "grad_norm": self.grad_norm,
            "grad_norm_max": self.grad_norm_max,
            "trainable": list(self.trainable),
            "counters": dict(self.counters),
            "versions_behind": self.versions_behind,
            "behavior_kl": self.behavior_kl,
            "staleness_split": dict(self.staleness_split),
            "async_dropped": dict(self.async_dropped),
            "diverged": False,
            "engine": self.engine,
            "split": self.split,
        }


def _list(values: tuple[float, ...] | None) -> list[float] | None:
    return None if values is None else list(values)
