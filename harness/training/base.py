"""What flows between the stages of the loop: settings, a collected batch, a prepared update,
results.

A collector returns :class:`Collected` (a batch and what it cost is already charged); an objective
turns it into :class:`Prepared` (the no-grad passes: pi_old, reference, advantages, the trained
mask) and then into optimizer steps. See :mod:`sixblanks.harness.training.loop`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
    seed_offset: int = 0
    """Added to ``seed`` for all the run's training randomness (``arms.<arm>.seed_offset``): see
    :attr:`train_seed`. The held-out evaluation keeps ``seed``."""
    parallel: dict[str, Any] | None = None
    """Data parallelism (``model.parallel``: backend, world_size); None: one process."""
    start_evaluations: str | None = None
    """A directory of start evaluations shared by runs with equal evaluation inputs
    (:mod:`.start_eval`); None: every run computes its own."""
    start_key: str | None = None
    """This run's key in ``start_evaluations`` (None: its start evaluation is not shared)."""
    process_context: Any = None
    """A callable giving the multiprocessing context a concurrent collector's process starts from
    (the runs give the fork server's, so that the collector need not import torch and
    transformers again); None: spawned, a fresh interpreter."""
    reward_fault: str = "none"
    """A fault planted in training (``arms.<arm>.fault.rewards``): "shuffle" permutes each batch's
    rewards across its rows before its advantages are computed (:mod:`.faults`)."""

    @property
    def train_seed(self) -> int:
        """The seed of everything random in training (instances, sampling, batch order, faults):
        ``seed + seed_offset``."""

        return self.seed + self.seed_offset


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
    """A collector or objective with nothing to checkpoint (put it first among the bases:
    ``class PreferencePairs(Stateless, Collector)``)."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class Collector:
    """Base class of every collector (:mod:`.collectors`): where a step's data comes from.

    A subclass defines :meth:`worst_case`, :meth:`collect`, :meth:`state_dict` and
    :meth:`load_state_dict` (:class:`Stateless`: nothing to checkpoint). :meth:`update_bound` and
    :meth:`close` are optional: their defaults are what a collector that runs nothing ahead of the
    step needs. The loop calls every method plainly; the factory (``Trainer(collector=...)``)
    returns an instance of a subclass."""

    def worst_case(self) -> dict[str, float]:
        """The most one ``collect()`` can cost, by ledger counter (tokens, rollouts, calls, steps:
        the counters' own units): every counter it may charge, at least ``launched_tokens`` and
        ``rollouts_launched``. The loop reserves it with the update's bound before the step."""

        raise NotImplementedError(f"{type(self).__name__} defines no worst_case()")

    def collect(self) -> Collected:
        """One step's data, charged to the budget (``nothing_fit``: no room for any of it)."""

        raise NotImplementedError(f"{type(self).__name__} defines no collect()")

    def update_bound(self, worst: dict[str, float]) -> tuple[float, float]:
        """``(rows, tokens)``: the most rollouts and action tokens the next update can accept,
        which the step's admission reserves for. ``worst``: this step's :meth:`worst_case`.

        Default: what the step launches (``worst["rollouts_launched"]``,
        ``worst["launched_tokens"]``). A collector whose worst case no longer counts the rounds
        it launched ahead (a concurrent one) returns what it may still hand the update."""

        return worst["rollouts_launched"], worst["launched_tokens"]

    def close(self, drain: bool = True) -> dict[str, float]:
        """The end of the run (``drain``) or its failure (``drain=False``: stop at once, a resume
        recounts from the checkpoint). Returns metrics for a last record that trained on nothing
        (what draining the work launched ahead cost, counted as launched and discarded); ``{}``:
        no such record.

        Default: nothing to stop, ``{}``. A collector that runs ahead of the step (a concurrent
        one: a worker process, spooled rounds) finishes or kills it here."""

        return {}

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly (RNG states, counters, queued work)."""

        raise NotImplementedError(f"{type(self).__name__} defines no state_dict()")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise NotImplementedError(f"{type(self).__name__} defines no load_state_dict()")


class Objective:
    """Base class of every objective (:mod:`.objectives`): a collected batch into an update.

    A subclass defines :meth:`prepare`, :meth:`update`, :meth:`state_dict` and
    :meth:`load_state_dict` (:class:`Stateless`: nothing to checkpoint); :meth:`worst_extra` is
    optional (default: the update charges nothing beyond the loop's own counters)."""

    def prepare(self, collected: Collected) -> Prepared:
        """The no-grad passes over ``collected.batch`` (pi_old, reference, advantages, the trained
        mask ``[B, T]``); no optimizer step."""

        raise NotImplementedError(f"{type(self).__name__} defines no prepare()")

    def update(self, prepared: Prepared) -> dict[str, Any]:
        """Optimizer steps on the prepared batch; returns metrics with ``optimizer_steps``."""

        raise NotImplementedError(f"{type(self).__name__} defines no update()")

    def worst_extra(self, rows: int) -> dict[str, float]:
        """The most the update of ``rows`` rollouts can charge to counters besides the loop's own
        (``optimizer_steps``, ``accepted_tokens``, ``rollouts_accepted``), by ledger counter in its
        own units: a second model's calls (a user PRM's ``judge_calls``). The step's admission
        checks it fits before collecting; the objective reserves and charges it itself.

        Default: ``{}``, nothing beyond the loop's counters."""

        return {}

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly (a second model's weights and optimizer)."""

        raise NotImplementedError(f"{type(self).__name__} defines no state_dict()")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise NotImplementedError(f"{type(self).__name__} defines no load_state_dict()")
