"""Held-out evaluation on each task's deterministic evaluation set."""

from __future__ import annotations

from typing import Any

import torch

from .rollout.agent import run_episodes
from .rollout.engine import RolloutEngine, SamplingParams
from .tasks.base import Task
from .tasks.verify import VerifierGate


def evaluate(
    engine: RolloutEngine,
    tokenizer,
    task: Task,
    n: int,
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    samples: int = 1,
    seed: int = 0,
    max_context_tokens: int = 512,
) -> dict[str, Any]:
    """Mean outcome reward over ``n`` held-out instances (greedy when temperature is 0).

    Returns ``{"score", "n", "success_rate", "failed", "verifier_calls", "generated_tokens", "per_instance"}``;
    evaluation cost is reported here so callers can count it apart from the training budget.
    """

    gate = VerifierGate(task)
    instances = task.eval_instances(n)
    params = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens)
    gen = torch.Generator().manual_seed(seed)
    batch = run_episodes(
        engine,
        tokenizer,
        task,
        instances,
        samples,
        params,
        gate,
        max_context_tokens=max_context_tokens,
        generator=gen,
    )
    per = batch.reward.view(len(instances), samples).mean(-1)
    return {
        "score": float(per.mean()),
        "n": len(instances),
        "success_rate": float((batch.reward > 0).float().mean()),
        "failed": int(batch.failed.sum()),
        "verifier_calls": gate.stats.calls,
        "generated_tokens": batch.launched_tokens(),
        "per_instance": per.tolist(),
    }
