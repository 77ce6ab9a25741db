"""What a rung works with: the arm's set-up, prepared once by the ladder, and the ladder's short
runs. A rung is a function of a :class:`RungContext` that returns its rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...runspec import RunSpec

if TYPE_CHECKING:
    from ...config import ExperimentConfig, RolloutConfig
    from ...tasks.base import Task
    from .rows import RungResult
    from .short_run import ShortRun

Variants = dict[str, dict[str, Any]]
"""Settings a rung compares, by label: each one's changes to the arm (``blanks_over``, ``lr``,
``optimizer``: the keywords of :meth:`RungContext.train`); the nominal setting's is empty."""


@dataclass
class RungContext:
    cfg: ExperimentConfig
    arm: str
    spec: RunSpec
    """The arm's run spec under the rung budget, evaluating once at the end on the validation
    split: what every short run starts from."""
    task: Task
    """The arm's task with its judge."""
    warm: Path
    """The warm-start policy, every rung's initial policy."""
    seeds: list[int]
    """``ladder.seeds``; the rungs sample and train with the first."""
    rollout: RolloutConfig
    """The arm's sampling settings (the experiment's rollout section with the arm's overrides)."""
    out: Path
    log: Callable[[str], None]
    policy: Callable[[], tuple[Any, Any]]
    """Loads the warm-start policy as runs load it: (model, tokenizer)."""
    engine: Callable[[Any, Any], Any]
    """The rollout engine ``rollout.backend`` names, on a (model, tokenizer), as runs get it."""
    train: Callable[..., ShortRun]
    """One short run of a setting under the rung budget (keywords: ``blanks_over``, ``lr``,
    ``optimizer``, ``seed``, ``name``): its per-instance validation scores at the start and the
    end, and its diagnostics (:class:`~sixblanks.harness.studies.ladder.short_run.ShortRun`,
    trained by :mod:`~sixblanks.harness.studies.ladder.short_runs`)."""
    compare: Callable[[int, str, Variants, str], list[RungResult]]
    """Trains each setting of a rung (its number, its name, the settings, the nominal one's
    label) and judges each against the nominal: rows and the rung's verdict
    (:func:`~sixblanks.harness.studies.ladder.one_axis.compare_settings`)."""
