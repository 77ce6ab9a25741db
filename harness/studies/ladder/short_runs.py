"""The ladder's short runs: one setting of the arm (its blanks, learning rate or optimizer changed)
trained from the warm start under the rung budget, as a run is built, and evaluated on the
validation split at the start and the end.

    runs = ShortRuns(log, plain=True)
    run = runs.train(spec, warm, lr=1e-5, name="ladder rung 7 (clip_kl_lr) lr=1e-05")
    run.scores, run.start  # per-instance validation scores at the end and the start

Each run is a :class:`~.short_run.ShortRun`.

A setting is trained once per ladder: the nominal one, which rung 4 trains and every comparing
rung compares with, is reused.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from sixblanks.algorithms.blanks import deep_merge
from sixblanks.algorithms.presets import resolve

from ...orchestration.progress import PlainLines
from ...orchestration.runner import build_trainer
from ...rollout.engine import RolloutError
from ...runspec import RunSpec
from ...training import TrainingError
from .rows import SPLIT, engine_name
from .short_run import ShortRun

STALENESS = ("inflight_behind", "queue_behind", "version_span")
"""A concurrent collector's lag figures (``lag.<name>`` step metrics), averaged over the run."""
ASYNC_DROPS = ("stale_inflight", "stale_queue", "staleness", "aborted", "unconsumed")
"""The discard reasons of asynchronous sampling whose token counts a short run reports."""


class ShortRuns:
    """The short runs of one ladder; ``plain``: a plain line per evaluation and at each run's
    end."""

    def __init__(self, log: Callable[[str], None], plain: bool):
        self.log = log
        self.plain = plain
        # spec -> (the first run's name, its result): a ShortRun is frozen, its sequences tuples
        # and its mappings read-only, so every rung that trains the setting gets the same one
        self.trained: dict[str, tuple[str, ShortRun]] = {}

    def train(
        self,
        base: RunSpec,
        warm: Path,
        blanks_over: dict[str, Any] | None = None,
        lr: float | None = None,
        preset: str | None = None,
        seed: int = 0,
        name: str = "ladder short run",
        optimizer: dict[str, Any] | None = None,
    ) -> ShortRun:
        """One short run of a variant of the run spec ``base`` under the rung budget, from the
        policy in ``warm``: its per-instance scores on the validation split (at the start and the
        end) and diagnostics. ``name``: its plain lines'. ``optimizer``: settings of the optimizer
        section replaced (rung 6's ``grad_clip``)."""

        spec = variant_spec(base, seed, blanks_over, lr, preset, optimizer)
        # the same setting (the nominal one is in rung 4 and in every comparing rung) is trained
        # once and its result reused: a short run is deterministic given its spec and seed (with a
        # concurrent collector its lag depends on timing: every rung then compares with one run)
        key = json.dumps(spec.as_dict(), sort_keys=True, default=str)
        if key in self.trained:
            first, run = self.trained[key]
            self.log(f"{name}: the same setting as {first}: its result reused (not trained again)")
            return run
        run = run_short(spec, warm, name, self.plain)
        self.trained[key] = (name, run)
        return run


def variant_spec(
    base: RunSpec,
    seed: int,
    blanks_over: dict[str, Any] | None = None,
    lr: float | None = None,
    preset: str | None = None,
    optimizer: dict[str, Any] | None = None,
) -> RunSpec:
    """The run spec ``base`` with a variant's changes, evaluating on validation."""

    name, blanks = base.preset, base.blanks
    if preset is not None:
        name, blanks = preset, resolve(preset).model_dump(mode="json")
    if blanks_over:
        blanks = resolve(name, deep_merge(blanks, blanks_over)).model_dump(mode="json")
    opt = dict(base.optimizer)
    if lr is not None:
        opt["lr"] = lr
    if optimizer:
        opt.update(optimizer)
    return base.replace(
        seed=seed, eval={**base.eval, "split": SPLIT}, preset=name, blanks=blanks, optimizer=opt
    )


def run_short(spec: RunSpec, warm: Path, name: str, plain: bool) -> ShortRun:
    """Trains ``spec`` from ``warm`` as a run builds it (the configured engine, a frozen reference,
    the declared reward range); a run that fails is reported as diverged, with its error."""

    trainer = build_trainer(spec, warm)
    engine = engine_name(trainer.engine)
    lines = PlainLines(name, spec.budget, plain)
    try:
        res = trainer.train(on_step=lines.evals)
    except (TrainingError, RolloutError) as exc:
        lines.end(trainer, f"FAILED: {exc}")
        return ShortRun(engine=engine, split=SPLIT, diverged=True, error=str(exc))
    lines.end(trainer, f"finished after {len(res.steps)} steps")
    return _finished(res, engine)


def _finished(res, engine: str) -> ShortRun:
    """What a finished short run reports: its scores, gradient norms, trainable groups, ledger
    counters and, for asynchronous sampling, how far behind its samples were."""

    grad = [m["grad_norm"] for m in res.steps if "grad_norm" in m]
    return ShortRun(
        engine=engine,
        split=res.evals[-1].get("split"),
        scores=res.evals[-1]["per_instance"],
        start=res.evals[0]["per_instance"],
        final=res.evals[-1]["score"],
        start_score=res.evals[0]["score"],
        grad_norm=float(np.mean(grad)) if grad else None,
        grad_norm_max=float(np.max(grad)) if grad else None,
        trainable=[m.get("trainable_group_frac") for m in res.steps],
        counters=res.ledger.counters,
        # how far behind its samples were: versions, and the behaviour-to-current k3 KL
        versions_behind=mean_of(res.steps, "lag.versions_behind") or 0.0,
        behavior_kl=mean_of(res.steps, "mismatch.kl"),
        # a concurrent collector's split, its samples' version spans and what it dropped
        staleness_split={k: mean_of(res.steps, f"lag.{k}") for k in STALENESS},
        async_dropped={
            r: float(getattr(res.ledger, "discarded_by_reason", {}).get(r, 0.0))
            for r in ASYNC_DROPS
        },
    )


def mean_of(steps: list[dict[str, Any]], key: str) -> float | None:
    """The mean of a step metric over the steps that have it (None: none has)."""

    vals = [m[key] for m in steps if key in m]
    return float(np.mean(vals)) if vals else None
