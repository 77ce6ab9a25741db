"""Held-out evaluation on each task's deterministic evaluation set."""

from __future__ import annotations

import math
from typing import Any

import torch

from .rollout.agent import run_episodes
from .rollout.engine import RolloutEngine, SamplingParams
from .seeds import eval_seeds
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
    split: str = "test",
) -> dict[str, Any]:
    """Mean outcome reward over ``n`` held-out instances of ``split`` (greedy when temperature is 0).

    Returns ``{"score", "n", "split", "seed_range", "success_rate", "pass_at", "failed", "verifier_calls", "judge_calls",
    "generated_tokens", "per_instance"}``; ``score`` is the mean reward of one sample (pass@1 for a
    0/1 reward, averaged over ``samples``), ``pass_at`` maps k to the unbiased pass@k estimate
    (success: reward > 0) for k = 1 and k = ``samples``. Evaluation cost is reported here so
    callers can count it apart from the training budget.
    """

    gate = VerifierGate(task)
    judged0 = gate.counts()[1]  # the task's judge counts across training and evaluation
    instances = task.eval_instances(n, split)
    seeds = eval_seeds(n, split)
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
    rewards = batch.reward.view(len(instances), samples)
    per = rewards.mean(-1)
    correct = (rewards > 0).sum(-1).tolist()
    return {
        "score": float(per.mean()),
        "n": len(instances),
        "split": split,
        "seed_range": [seeds[0], seeds[-1] + 1] if seeds else [],
        "success_rate": float((batch.reward > 0).float().mean()),
        "pass_at": {
            str(k): float(sum(pass_at_k(samples, c, k) for c in correct) / len(correct))
            for k in sorted({1, samples})
        },
        "failed": int(batch.failed.sum()),
        "verifier_calls": gate.stats.calls,
        "judge_calls": gate.counts()[1] - judged0,
        "generated_tokens": batch.launched_tokens(),
        "per_instance": per.tolist(),
    }


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one instance from ``n`` samples of which ``c`` succeeded (Chen et al.
    2021): 1 - C(n-c, k) / C(n, k), the chance that k samples drawn without replacement contain a
    success."""

    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n (k={k}, n={n})")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)
