"""The most a step can cost, counter by counter, from one place: what the training loop reserves
before it launches a batch of episodes and updates on it, and what ``sixblanks validate`` compares
a budget with before anything runs. Both call these functions, so the two cannot drift apart.

    episodes_worst(64, turns=1, max_new_tokens=36, max_prompt_tokens=256, judge_calls_per_verify=0)
    # {"launched_tokens": 2304.0, "prompt_tokens": 16384.0, "rollouts_launched": 64.0, ...}
"""

from __future__ import annotations


def episodes_worst(
    n: int,
    turns: int,
    max_new_tokens: int,
    max_prompt_tokens: int,
    judge_calls_per_verify: int,
    tool_calls_per_episode: int = 0,
    tool_seconds_per_call: float = 0.0,
) -> dict[str, float]:
    """The most ``n`` episodes can cost: every one of its ``turns`` at the generation limit
    (``max_new_tokens``) and the context limit (``max_prompt_tokens``), a verifier call per turn
    with ``judge_calls_per_verify`` judge calls each, and, where a code tool is offered, every
    program it may run (``tool_calls_per_episode``) taking its longest (``tool_seconds_per_call``:
    the timeout and the sandbox's set-up allowance)."""

    out = {
        "launched_tokens": float(n * turns * max_new_tokens),
        "prompt_tokens": float(n * turns * max_prompt_tokens),
        "rollouts_launched": float(n),
        "env_steps": float(n * turns),
        "verifier_calls": float(n * turns),
        "judge_calls": float(n * turns * judge_calls_per_verify),
    }
    if tool_calls_per_episode:
        calls = float(n * tool_calls_per_episode)
        out["tool_calls"] = calls
        out["tool_seconds"] = calls * tool_seconds_per_call
    return out


def update_worst(epochs: int, minibatches: int, rows: int, tokens: float) -> dict[str, float]:
    """The most one update on a batch can cost: ``epochs x minibatches`` optimizer steps, and at
    most the ``rows`` episodes and ``tokens`` tokens it launched accepted."""

    return {
        "optimizer_steps": float(epochs * minibatches),
        "accepted_tokens": float(tokens),
        "rollouts_accepted": float(rows),
    }
