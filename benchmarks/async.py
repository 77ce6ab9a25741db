"""Synchronous against asynchronous training of the same arm, side by side in one run.

The same GRPO arm, the same initial policy, task and launched-token budget, trained twice:
synchronously (rollouts in the trainer's process, between updates) and with a concurrent collector
(``data.concurrent``: a process of its own samples up to ``--queue`` rounds ahead while the trainer
updates). Prints, for each mode, launched tokens per second of wall time (the whole run, and the
steady state after the first step, which includes starting the collector) and the trainer's idle
fraction: the share of the run's wall time the trainer spent not updating but waiting for rollouts
(synchronous: the rollout rounds it ran itself; asynchronous: ``async.wait_seconds``).

Each process gets ``--threads`` torch threads (the trainer, and in the asynchronous mode also the
collector), so on a 2-core machine the asynchronous mode uses both cores, the synchronous one.

    .venv/bin/python benchmarks/async.py [--budget 6000] [--queue 2] [--new 16] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import torch

from sixblanks.algorithms.presets import resolve
from sixblanks.harness.config import ModelConfig, validate_mapping
from sixblanks.harness.models import load_policy
from sixblanks.harness.tasks import make_task
from sixblanks.harness.training import RunSettings, Trainer


def run(args, concurrent: bool) -> dict[str, float]:
    torch.manual_seed(0)
    task = make_task("arithmetic", {"digits": 3})
    model, tok = load_policy(ModelConfig(), [task])
    cfg = validate_mapping(
        {
            "task": {"name": "arithmetic"},
            "arms": {"a": {"preset": "grpo"}},
            "rollout": {
                "max_new_tokens": args.new,
                "prompts_per_step": args.prompts,
                "group_size": 4,
            },
        }
    )
    over = {"data": {"concurrent": {"queue": args.queue}}} if concurrent else {}
    settings = RunSettings(
        blanks=resolve("grpo", over),
        rollout=cfg.rollout,
        optimizer=cfg.optimizer,
        budget={"launched_tokens": float(args.budget)},
        seed=0,
        evaluate=False,
        name="async" if concurrent else "sync",
    )
    tr = Trainer(settings, task, model, tok)
    t0 = time.perf_counter()
    firsts: list[float] = []
    tr.train(on_step=lambda t, m: firsts.append(time.perf_counter()) if not firsts else None)
    wall = time.perf_counter() - t0
    steps = tr.result.steps
    launched = tr.ledger.counters["launched_tokens"]
    after_first = launched - steps[0]["ledger.launched_tokens"]
    if concurrent:
        idle = sum(m.get("async.wait_seconds", 0.0) for m in steps)
    else:
        idle = tr.ctx.meter.time_by_kind["rollouts"]["wall_seconds"]
    return {
        "steps": len(steps),
        "launched": launched,
        "wall": wall,
        "tok_s": launched / wall,
        "steady_tok_s": after_first / max(1e-9, t0 + wall - firsts[0]),
        "idle": idle / wall,
        "behind": sum(m.get("lag.versions_behind", 0.0) for m in steps) / len(steps),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=int, default=6000, help="launched tokens per mode")
    ap.add_argument("--queue", type=int, default=2, help="rounds the collector samples ahead")
    ap.add_argument("--new", type=int, default=16, help="max new tokens per answer")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per step (x4 samples)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sync, asyn = run(args, False), run(args, True)
    print(f"GRPO on arithmetic, {args.budget} launched tokens, {args.threads} thread(s) a process")
    print(f"{'':28}{'synchronous':>14}{'asynchronous':>14}{'ratio':>9}")
    rows = [
        ("steps", "steps", "{:.0f}"),
        ("launched tokens", "launched", "{:.0f}"),
        ("wall seconds", "wall", "{:.1f}"),
        ("launched tokens/s", "tok_s", "{:.1f}"),
        ("  after the first step", "steady_tok_s", "{:.1f}"),
        ("trainer idle fraction", "idle", "{:.2f}"),
        ("mean versions behind", "behind", "{:.2f}"),
    ]
    for label, key, fmt in rows:
        ratio = asyn[key] / sync[key] if sync[key] else float("nan")
        print(
            f"{label:28}{fmt.format(sync[key]):>14}{fmt.format(asyn[key]):>14}"
            + (f"{ratio:>8.2f}x" if key in ("tok_s", "steady_tok_s", "wall") else "")
        )


if __name__ == "__main__":
    main()
