"""The seed ranges of task instances, and the partition of each task's problems, in one place, so
that training, demonstrations and held-out evaluation never draw the same problem.

Seeds:

    [0, TRAIN_SEED_RANGE)                        training instances (drawn from each run's RNG)
    [DEMO_SEED_BASE, + tasks * DEMO_SEEDS_PER_TASK)  warm-start demonstrations, one block per task
    [EVAL_SEED_OFFSET, ...)                      walked in order for the held-out TEST set: reports
    [VALIDATION_SEED_OFFSET, ...)                walked in order for the held-out VALIDATION set:
                                                 what the sweep and the ladder select on, never
                                                 what a report scores

Disjoint seeds are not enough: two seeds can make the same problem (``3+4=`` from a training seed
and from a test seed), and a small task space repeats its problems within the held-out set too.
So each task partitions its PROBLEMS (``Task.problem_key``, harness/tasks/base.py): a problem's
identity decides, by a stable hash (:func:`stable_unit`), whether it is a train, validation or
test problem, with the fractions of :data:`HELDOUT_FRACTIONS`. Training and demonstration draws
redraw (from the same RNG, so deterministically) any seed whose problem is held out; a held-out set
walks its split's seeds in order and keeps each new problem of its split.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Hashable
from typing import Protocol

TRAIN_SEED_RANGE = 400_000_000
DEMO_SEED_BASE = 500_000_000
DEMO_SEEDS_PER_TASK = 10_000_000
EVAL_SEED_OFFSET = 1_000_000_007
VALIDATION_SEED_OFFSET = 1_500_000_007
SPLITS = ("test", "validation")
SPLIT_OFFSETS = {"test": EVAL_SEED_OFFSET, "validation": VALIDATION_SEED_OFFSET}

HELDOUT_FRACTIONS = {"test": 1 / 8, "validation": 1 / 8}
"""The share of a task's problems held out for each split; the other 3/4 are training problems.
An eighth each keeps most of a space for training while the test split of a few hundred problems
(1-digit arithmetic: 200) still holds a few dozen distinct ones; a small space is split by rank, so
that each split gets at least one problem (harness/tasks/base.py)."""

MAX_REDRAWS = 100_000
"""The most seeds one training or demonstration draw tries before it gives up: a task whose
training problems are that rare is misconfigured (its partition left it nothing to train on)."""


class Partitioned(Protocol):
    """What a draw needs of a task: whether a seed's problem is a training problem."""

    def trains_on(self, seed: int) -> bool: ...


def stable_unit(key: Hashable) -> float:
    """A number in [0, 1) fixed by ``repr(key)``: the same in every process and Python version
    (unlike ``hash()``, salted per process), so a problem's split never moves between runs."""

    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def _draw(rng: random.Random, base: int, span: int, task: Partitioned | None) -> int:
    for _ in range(MAX_REDRAWS):
        seed = base + rng.randrange(span)
        if task is None or task.trains_on(seed):
            return seed
    raise RuntimeError(
        f"no training problem in {MAX_REDRAWS} seeds of task '{getattr(task, 'name', task)}': its "
        "held-out splits took (almost) every problem it makes"
    )


def train_seeds(rng: random.Random, n: int, task: Partitioned | None) -> list[int]:
    """``n`` training instance seeds from a run's RNG, each of a training problem of ``task``
    (a seed of a held-out problem is redrawn from the same RNG, so the draw replays exactly);
    ``task`` None: any seed of the training range."""

    return [_draw(rng, 0, TRAIN_SEED_RANGE, task) for _ in range(n)]


def demo_seeds(
    rng: random.Random, task_index: int, n: int, task: Partitioned | None = None
) -> list[int]:
    """``n`` demonstration seeds in the block of the ``task_index``-th task, each of a training
    problem of ``task`` (as :func:`train_seeds`)."""

    base = DEMO_SEED_BASE + task_index * DEMO_SEEDS_PER_TASK
    return [_draw(rng, base, DEMO_SEEDS_PER_TASK, task) for _ in range(n)]


def eval_seeds(n: int, split: str = "test") -> list[int]:
    """The first ``n`` seeds of ``split``'s range ("test" or "validation"; disjoint), in the order
    a held-out set walks them."""

    if split not in SPLIT_OFFSETS:
        raise ValueError(f"unknown held-out split '{split}' (valid: {', '.join(SPLITS)})")
    return [SPLIT_OFFSETS[split] + i for i in range(n)]
