"""A finite pool of training prompts (``data.prompt_pool``): a dataset of N instances visited in
epochs, instead of a fresh procedurally generated instance every time; and ScaleRL's
no-positive-resampling over it (``data.retire_pass_rate``): a prompt whose pass rate over all its
samples so far reaches the threshold is never drawn again."""

from __future__ import annotations

import random
from typing import Any

import torch

from ...seeds import train_seeds
from ..base import TrainingError


class PromptPool:
    """N instance seeds, drawn in shuffled passes (every live prompt once per pass).

    The seeds come from the run's seed alone, so every arm of a seed trains on the same pool;
    the order of the passes comes from the run's RNG. ``retire_at``: a prompt with passes /
    samples >= this (reward >= 1 is a pass) is retired after the step that reached it.
    """

    def __init__(self, size: int, seed: int, rng: random.Random, retire_at: float | None):
        self.seeds = train_seeds(random.Random(f"prompt-pool-{seed}"), size)
        self.rng, self.retire_at = rng, retire_at
        self.order: list[int] = []
        self.passes: dict[int, int] = {}
        self.samples: dict[int, int] = {}
        self.retired: set[int] = set()
        self.epochs = 0

    def draw(self, n: int) -> list[int]:
        """``n`` distinct live seeds (fewer if fewer are live), continuing the current pass: every
        live prompt is drawn once a pass. A pass that ends within a draw is followed by a fresh
        shuffle whose prompts already in this draw go to its end (drawn later in that pass)."""

        live = [s for s in self.seeds if s not in self.retired]
        if not live:
            raise TrainingError(
                f"every prompt of the pool ({len(self.seeds)}) has been retired by "
                f"data.retire_pass_rate {self.retire_at}: nothing is left to sample"
            )
        out: list[int] = []
        while len(out) < min(n, len(live)):
            self.order = [s for s in self.order if s not in self.retired]
            if not self.order:
                fresh = list(live)
                self.rng.shuffle(fresh)
                self.order = [s for s in fresh if s not in out] + [s for s in fresh if s in out]
                self.epochs += 1
            out.append(self.order.pop(0))
        return out

    def record(self, seeds: list[int], rewards: torch.Tensor, group_ids: torch.Tensor) -> int:
        """Add one round's outcomes (``seeds[i]`` is the instance of the i-th group id in order of
        first appearance, ``rewards``/``group_ids`` ``[B]``); returns how many prompts it retired."""

        groups = list(dict.fromkeys(group_ids.tolist()))
        if len(groups) != len(seeds):
            raise TrainingError(
                f"prompt pool: {len(groups)} groups came back for {len(seeds)} prompts drawn"
            )
        newly = 0
        for g, seed in zip(groups, seeds):
            r = rewards[group_ids == g]
            self.passes[seed] = self.passes.get(seed, 0) + int((r >= 1).sum())
            self.samples[seed] = self.samples.get(seed, 0) + int(r.numel())
            rate = self.passes[seed] / self.samples[seed]
            if self.retire_at is not None and rate >= self.retire_at and seed not in self.retired:
                self.retired.add(seed)
                newly += 1
        return newly

    def state_dict(self) -> dict[str, Any]:
        return {
            "order": list(self.order),
            "passes": dict(self.passes),
            "samples": dict(self.samples),
            "retired": sorted(self.retired),
            "epochs": self.epochs,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.order = list(state["order"])
        self.passes = {int(k): v for k, v in state["passes"].items()}
        self.samples = {int(k): v for k, v in state["samples"].items()}
        self.retired = set(state["retired"])
        self.epochs = state["epochs"]
