"""The seed ranges of task instances, in one place, so that training, demonstrations and held-out
evaluation never draw the same instance.

    [0, TRAIN_SEED_RANGE)                        training instances (drawn from each run's RNG)
    [DEMO_SEED_BASE, + tasks * DEMO_SEEDS_PER_TASK)  warm-start demonstrations, one block per task
    [EVAL_SEED_OFFSET, + eval_size)              held-out TEST instances (fixed, in order): reports
    [VALIDATION_SEED_OFFSET, + eval_size)        held-out VALIDATION instances: what the sweep and the
                                                 ladder select on, never what a report scores
"""

from __future__ import annotations

import random

TRAIN_SEED_RANGE = 400_000_000
DEMO_SEED_BASE = 500_000_000
DEMO_SEEDS_PER_TASK = 10_000_000
EVAL_SEED_OFFSET = 1_000_000_007
VALIDATION_SEED_OFFSET = 1_500_000_007
SPLITS = ("test", "validation")
SPLIT_OFFSETS = {"test": EVAL_SEED_OFFSET, "validation": VALIDATION_SEED_OFFSET}


def train_seeds(rng: random.Random, n: int) -> list[int]:
    """``n`` training instance seeds from a run's RNG."""

    return [rng.randrange(TRAIN_SEED_RANGE) for _ in range(n)]


def demo_seeds(rng: random.Random, task_index: int, n: int) -> list[int]:
    """``n`` demonstration seeds in the block of the ``task_index``-th task."""

    base = DEMO_SEED_BASE + task_index * DEMO_SEEDS_PER_TASK
    return [base + rng.randrange(DEMO_SEEDS_PER_TASK) for _ in range(n)]


def eval_seeds(n: int, split: str = "test") -> list[int]:
    """The first ``n`` held-out instance seeds of ``split`` ("test" or "validation"; disjoint)."""

    if split not in SPLIT_OFFSETS:
        raise ValueError(f"unknown held-out split '{split}' (valid: {', '.join(SPLITS)})")
    return [SPLIT_OFFSETS[split] + i for i in range(n)]
