"""What flows between the stages of the loop: settings, a collected batch, a prepared update, results.

A collector returns :class:`Collected` (a batch and what it cost is already charged); an objective turns
it into :class:`Prepared` (the no-grad passes: pi_old, reference, advantages, the trained mask) and
then into optimizer steps. See :mod:`sixblanks.harness.training.loop`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from sixblanks.algorithms.blanks import Blanks
from sixblanks.budgets.ledger import Ledger

from ..errors import SixblanksError
from ..rollout.trajectory import TrajectoryBatch


class TrainingError(SixblanksError):
    exit_code = 1


@dataclass
class RunSettings:
    """Everything one run needs, resolved from the experiment config."""

    blanks: Blanks
    rollout: Any  # RolloutConfig
    optimizer: Any  # OptimizerConfig
    budget: dict[str, float]
    seed: int
    eval_every: float | None = None
    eval_counter: str | None = None
    eval_size: int = 64
    eval_temperature: float = 0.0
    eval_samples: int = 1
    eval_beam: dict[str, Any] | None = None
    """Inference-time beam search at each evaluation (``eval.beam``: beam, expand, temperature)."""
    eval_split: str = "test"
    reward_range: tuple[float, float] = (0.0, 1.0)
    name: str = "run"
    evaluate: bool = True
    """False: no held-out evaluation at all (the warm start)."""
    work_dir: str | None = None
    """The run's directory: a concurrent collector spools its rounds under ``work_dir/spool``
    (None: a temporary directory, so a killed run cannot recover them)."""


@dataclass
class RunResult:
    steps: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    census: list[dict[str, Any]] = field(default_factory=list)
    ledger: Ledger | None = None
    eval_cost: dict[str, float] = field(
        default_factory=lambda: {"generated_tokens": 0.0, "verifier_calls": 0.0}
    )
    ended_because: str = ""


@dataclass
class Collected:
    """A collector's output. ``batch`` None: the step trains on nothing (``metrics`` say why)."""

    batch: TrajectoryBatch | None
    metrics: dict[str, float] = field(default_factory=dict)
    census: dict[str, Any] | None = None
    baseline_rewards: torch.Tensor | None = None
    """``[B]`` rewards of the greedy rollouts of the same instances (ReMax)."""
    groups_launched: int = 0
    pairs: int = 0
    """Preference pairs: rows ``[0, pairs)`` are chosen, ``[pairs, 2 pairs)`` rejected."""
    nothing_fit: bool = False
    """The budget had no room for any of the step's data: the run ends."""
    replayed_rows: int = 0
    """The batch's last rows come from a replay buffer: launched and accounted for before."""


@dataclass
class Prepared:
    """An update ready to run: the batch, its trained mask ``[B, T]`` and per-objective tensors."""

    batch: TrajectoryBatch
    mask: torch.Tensor
    units: int
    """What the minibatches split: rows, or pairs for DPO."""
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


class Stateless:
    """A collector or objective with nothing to checkpoint."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class Collector(Protocol):
    def worst_case(self) -> dict[str, float]:
        """The most one ``collect()`` can cost (every counter it may charge, at least
        ``launched_tokens`` and ``rollouts_launched``)."""

    def collect(self) -> Collected:
        """One step's data, charged to the budget (``nothing_fit``: no room for any of it)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def update_bound(collector, worst: dict[str, float]) -> tuple[float, float]:
    """The most rows and tokens the next update can accept: what the collector may hand it (its
    ``update_bound()`` where its worst case no longer counts rounds launched ahead)."""

    bound = getattr(collector, "update_bound", None)
    return bound() if bound is not None else (worst["rollouts_launched"], worst["launched_tokens"])


class Objective(Protocol):
    def prepare(self, collected: Collected) -> Prepared: ...

    def update(self, prepared: Prepared) -> dict[str, Any]:
        """Optimizer steps on the prepared batch; returns metrics with ``optimizer_steps``."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...
