"""What both sides of ``benchmarks/vs_trl.py`` share: the batch, device and precision
(:class:`Setup`), the tiny policy and task, the device clock, and the timer of a step's parts."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import torch

PROMPTS, GROUP, NEW_TOKENS, LR = 8, 8, 32, 1e-6


@dataclass(frozen=True)
class Setup:
    """What both sides run: the batch (``prompts`` x ``group`` samples of ``new_tokens`` each),
    the learning rate, the device and the precision (``bf16``: the model's weights are bfloat16
    and TRL computes in bfloat16 too). The defaults are the comparison above: fp32 on the CPU.

    sixblanks' alone: ``group_seeds`` (each group sampled with a generator of its own, as the
    ranks of a data-parallel run sample), ``shared_prefix`` (each prompt's forward computed once
    for its group; off under data parallelism) and ``parallel`` (``model.parallel``: backend and
    world size, inside a process group the caller joined)."""

    prompts: int = PROMPTS
    group: int = GROUP
    new_tokens: int = NEW_TOKENS
    lr: float = LR
    device: str = "cpu"
    bf16: bool = False
    group_seeds: bool = False
    shared_prefix: bool = True
    parallel: dict[str, Any] | None = None


SETUP = Setup()


def synchronize(setup: Setup) -> None:
    """Wait for the device's queued work, so that a step's clock stops when its work is done."""

    if setup.device.startswith("cuda"):
        torch.cuda.synchronize()


def policy():
    """The project's default tiny policy and tokenizer, and the arithmetic task."""

    from sixblanks.harness.config import ModelConfig
    from sixblanks.harness.models import load_policy
    from sixblanks.harness.tasks import make_task

    task = make_task("arithmetic")
    model, tok = load_policy(ModelConfig(), [task])
    return task, model, tok


class Parts:
    """Wall time of a sixblanks step's parts, by patching the calls that make them."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.on = False

    def wrap(self, owner, name: str, part, pick=None):
        real = getattr(owner, name)
        parts = self

        def timed(*args, **kwargs):
            if not parts.on:
                return real(*args, **kwargs)
            t0 = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                label = pick(args, kwargs) if pick else part
                parts.seconds[label] += time.perf_counter() - t0

        setattr(owner, name, timed)
        return real
