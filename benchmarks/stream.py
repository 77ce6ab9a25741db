"""Round-based against episode-level consumption on a long-tailed multi-turn task, side by side.

The same GRPO arm, initial policy, task and launched-token budget, trained twice with a concurrent
collector (``data.concurrent``, queue ``--queue``): once consuming whole rounds (``consume:
round``: a round is ready when its longest episode ends), once consuming each group as it finishes
(``consume: episode``: every launched group in flight at once, one generation call per turn over
all of them, the trainer updating at a batch's worth of finished groups). The task is a chain of
arithmetic steps whose length is drawn from P(k) ~ k^-1.5 on 1..``--steps`` (most episodes short, a
few long), each environment step taking ``--latency`` seconds (a tool call; ``rollout.env_workers``
of them wait at once, as agentic frameworks run environments). Prints, per mode, the
launched tokens, wall time, and after the first step (which includes starting the collector) the
launched tokens per second, the trainer's idle time (waiting for rollouts: ``async.wait_seconds``)
in all and per 1000 launched tokens and its idle fraction; and how many versions behind the trained
samples were.

Measured here (2 cores, defaults, 2026-12-03): launched tokens/s after the first step 580 -> 1016
(1.75x); trainer idle 0.90 -> 0.32 s per 1000 launched tokens (0.36x), idle fraction 0.52 -> 0.33;
wall time 38.7 -> 26.5 s for 18521 and 19821 launched tokens (the round collector reserves whole
rounds' worst cases, so it stops further from the budget); samples 1.08 -> 2.05 versions behind (the
price: more of them finish after an update). Where the trainer, not the collector, is the
bottleneck (no environment latency), neither mode idles and the difference vanishes.

    .venv/bin/python benchmarks/stream.py [--budget 20000] [--queue 4] [--steps 12]
                                          [--latency 0.05] [--env-workers 128] [--prompts 8]
                                          [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import torch
from sidebyside import print_side_by_side

from sixblanks.algorithms.presets import resolve
from sixblanks.harness.config import ModelConfig, validate_mapping
from sixblanks.harness.models import load_policy
from sixblanks.harness.tasks import make_task
from sixblanks.harness.training import RunSettings, Trainer


def run(args, consume: str) -> dict[str, float]:
    torch.manual_seed(0)
    params = {"steps": args.steps, "tail": 1.5, "step_seconds": args.latency}
    task = make_task("chain_arithmetic", params)
    tiny = {"hidden_size": 128, "num_layers": 2, "num_heads": 4, "intermediate_size": 512}
    model, tok = load_policy(ModelConfig(tiny=tiny), [task])
    cfg = validate_mapping(
        {
            "task": {"name": "chain_arithmetic", "params": params},
            "arms": {"a": {"preset": "grpo"}},
            "rollout": {
                "max_new_tokens": 4,
                "prompts_per_step": args.prompts,
                "group_size": 4,
                "env_workers": args.env_workers,
            },
        }
    )
    over = {"data": {"concurrent": {"queue": args.queue, "consume": consume}}}
    settings = RunSettings(
        blanks=resolve("grpo", over),
        rollout=cfg.rollout,
        optimizer=cfg.optimizer,
        budget={"launched_tokens": float(args.budget)},
        seed=0,
        evaluate=False,
        name=consume,
    )
    tr = Trainer(settings, task, model, tok)
    ends: list[float] = []  # when each step ended
    t0 = time.perf_counter()
    tr.train(on_step=lambda t, m: ends.append(time.perf_counter()))
    wall = time.perf_counter() - t0
    steps = tr.result.steps
    launched = tr.ledger.counters["launched_tokens"]
    # after the first step, which includes starting the collector (a fresh interpreter)
    after = launched - steps[0]["ledger.launched_tokens"]
    idle = sum(m.get("async.wait_seconds", 0.0) for m in steps[1:])
    steady = ends[-1] - ends[0]
    trained = [m for m in steps if "lag.versions_behind" in m]
    return {
        "steps": len(steps),
        "launched": launched,
        "wall": wall,
        "tok_s": after / steady,
        "idle": idle,
        "idle_per_k": 1000 * idle / after,
        "idle_frac": idle / steady,
        "behind": sum(m["lag.versions_behind"] for m in trained) / max(1, len(trained)),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=int, default=20000, help="launched tokens per mode")
    ap.add_argument("--queue", type=int, default=4, help="rounds' worth launched ahead")
    ap.add_argument("--steps", type=int, default=12, help="the longest chain (turns)")
    ap.add_argument("--latency", type=float, default=0.05, help="seconds per environment step")
    ap.add_argument("--env-workers", type=int, default=128, help="environment steps at once")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per step (x4 samples)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rnd, ep = run(args, "round"), run(args, "episode")
    print(
        f"GRPO on chain_arithmetic (1..{args.steps} steps, P(k) ~ k^-1.5, {args.latency:g} s a "
        f"step, {args.env_workers} at once), {args.prompts}x4 samples a step, {args.budget} "
        f"launched tokens, queue {args.queue}, {args.threads} torch thread(s) a process"
    )
    rows = [
        ("steps", "steps", "{:.0f}"),
        ("launched tokens", "launched", "{:.0f}"),
        ("wall seconds", "wall", "{:.1f}"),
        ("launched tokens/s (*)", "tok_s", "{:.1f}"),
        ("trainer idle seconds (*)", "idle", "{:.2f}"),
        ("  per 1000 launched tokens", "idle_per_k", "{:.2f}"),
        ("trainer idle fraction", "idle_frac", "{:.2f}"),
        ("mean versions behind", "behind", "{:.2f}"),
    ]
    ratios = ("wall", "tok_s", "idle_per_k", "idle_frac")
    print_side_by_side(("round", "episode"), rnd, ep, rows, ratios, 30, 12)
    print("(*) after the first step, which includes starting the collector process")


if __name__ == "__main__":
    main()
