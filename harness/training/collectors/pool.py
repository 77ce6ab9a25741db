"""A finite pool of training prompts (``data.prompt_pool``): a dataset of N instances visited in
epochs, instead of a fresh procedurally generated instance every time; ScaleRL's
no-positive-resampling over it (``data.retire_pass_rate``): a prompt whose pass rate over all its
samples so far reaches the threshold is never drawn again; and a pass-rate curriculum
(``data.curriculum``): a drawn prompt whose latest groups all passed or all failed may be skipped
before it is launched."""

from __future__ import annotations

import random
from typing import Any

import torch

from sixblanks.algorithms.data import CURRICULUM_VERDICTS, PassRateCurriculum
from sixblanks.algorithms.data_specs import CurriculumSpec

from ...seeds import train_seeds
from ..base import TrainingError


class PromptPool:
    """N instance seeds, drawn in shuffled passes (every live prompt once per pass).

    The seeds come from the run's seed alone, so every arm of a seed trains on the same pool;
    the order of the passes comes from the run's RNG. ``retire_at``: a prompt with passes /
    samples >= this (reward >= 1 is a pass) is retired after the step that reached it.
    ``curriculum``: each prompt drawn in a pass is launched or skipped by its streak of solved or
    unsolved groups; its random draws come from a stream of their own, seeded by the run's seed
    (the passes' order, from the run's RNG, is the same with and without it).
    """

    def __init__(
        self,
        size: int,
        seed: int,
        rng: random.Random,
        retire_at: float | None,
        curriculum: CurriculumSpec | None = None,
        task=None,
    ):
        # the pool's prompts are training problems of ``task`` (None: any training-range seed)
        self.seeds = train_seeds(random.Random(f"prompt-pool-{seed}"), size, task)
        self.rng, self.retire_at = rng, retire_at
        self.order: list[int] = []
        self.passes: dict[int, int] = {}
        self.samples: dict[int, int] = {}
        self.retired: set[int] = set()
        self.epochs = 0
        self.curriculum: PassRateCurriculum | None = None
        self.skipped = dict.fromkeys(CURRICULUM_VERDICTS, 0)  # by reason, over the whole run
        if curriculum is not None:
            self.skip_rng = random.Random(f"curriculum-{seed}")
            self.curriculum = PassRateCurriculum(
                curriculum.explore_solved,
                curriculum.explore_unsolved,
                curriculum.floor,
                self.skip_rng.random,
            )

    def draw(self, n: int) -> list[int]:
        """``n`` distinct live seeds (fewer if fewer are live), continuing the current pass: every
        live prompt is drawn once a pass. A pass that ends within a draw is followed by a fresh
        shuffle whose prompts already in this draw go to its end (drawn later in that pass).

        With a curriculum, a drawn prompt may be skipped (counted in ``skipped`` by reason) and
        the draw goes on down the pass. Once as many prompts in a row were skipped as there are
        candidates left, the next one is launched whatever its streak, so a draw always ends. A
        pass whose every other prompt this draw took or skipped is cut short: its remaining
        prompts, all already in this draw, give up their slot to a fresh pass."""

        live = [s for s in self.seeds if s not in self.retired]
        if not live:
            raise TrainingError(
                f"every prompt of the pool ({len(self.seeds)}) has been retired by "
                f"data.retire_pass_rate {self.retire_at}: nothing is left to sample"
            )
        out: list[int] = []
        run = 0  # prompts skipped in a row
        while len(out) < min(n, len(live)):
            self.order = [s for s in self.order if s not in self.retired]
            # (without a curriculum a draw ends before it reaches the prompts it already took)
            if not self.order or self.order[0] in out:
                fresh = list(live)
                self.rng.shuffle(fresh)
                self.order = [s for s in fresh if s not in out] + [s for s in fresh if s in out]
                self.epochs += 1
            seed = self.order.pop(0)
            if self.curriculum is not None and run < len(live) - len(out):
                reason = self.curriculum.skip(seed)
                if reason is not None:
                    self.skipped[reason] += 1
                    run += 1
                    continue
            out.append(seed)
            run = 0
        return out

    def record(self, seeds: list[int], rewards: torch.Tensor, group_ids: torch.Tensor) -> int:
        """Add one round's outcomes (``seeds[i]`` is the instance of the i-th group id in order of
        first appearance, ``rewards``/``group_ids`` ``[B]``); returns how many prompts it
        retired."""

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
            if self.curriculum is not None:  # this group's pass rate extends or ends its streak
                self.curriculum.record(seed, int((r >= 1).sum()) / int(r.numel()))
            rate = self.passes[seed] / self.samples[seed]
            if self.retire_at is not None and rate >= self.retire_at and seed not in self.retired:
                self.retired.add(seed)
                newly += 1
        return newly

    def state_dict(self) -> dict[str, Any]:
        state = {
            "order": list(self.order),
            "passes": dict(self.passes),
            "samples": dict(self.samples),
            "retired": sorted(self.retired),
            "epochs": self.epochs,
        }
        if self.curriculum is not None:
            state["curriculum"] = {
                **self.curriculum.state_dict(),
                "skipped": dict(self.skipped),
                "rng": self.skip_rng.getstate(),
            }
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.order = list(state["order"])
        self.passes = {int(k): v for k, v in state["passes"].items()}
        self.samples = {int(k): v for k, v in state["samples"].items()}
        self.retired = set(state["retired"])
        self.epochs = state["epochs"]
        if self.curriculum is not None:
            c = state["curriculum"]
            self.curriculum.load_state_dict(c)
            self.skipped = dict(c["skipped"])
            self.skip_rng.setstate(c["rng"])
