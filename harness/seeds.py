"""The seed ranges of task instances, in one place, so that training, demonstrations and held-out
evaluation never draw the same instance.

    [0, TRAIN_SEED_RANGE)                        training instances (drawn from each run's RNG)
    [DEMO_SEED_BASE, + tasks * DEMO_SEEDS_PER_TASK)  warm-start demonstrations, one block per task
    [EVAL_SEED_OFFSET, + eval_size)              held-out evaluation instances (fixed, in order)
"""

from __future__ import annotations

import random

TRAIN_SEED_RANGE = 400_000_000
DEMO_SEED_BASE = 500_000_000
DEMO_SEEDS_PER_TASK = 10_000_000
EVAL_SEED_OFFSET = 1_000_000_007


def train_seeds(rng: random.Random, n: int) -> list[int]:
    """``n`` training instance seeds from a run's RNG."""

    return [rng.randrange(TRAIN_SEED_RANGE) for _ in range(n)]


def demo_seeds(rng: random.Random, task_index: int, n: int) -> list[int]:
    """``n`` demonstration seeds in the block of the ``task_index``-th task."""

    base = DEMO_SEED_BASE + task_index * DEMO_SEEDS_PER_TASK
    return [base + rng.randrange(DEMO_SEEDS_PER_TASK) for _ in range(n)]


def eval_seeds(n: int) -> list[int]:
    """The first ``n`` held-out instance seeds."""

    return [EVAL_SEED_OFFSET + i for i in range(n)]
