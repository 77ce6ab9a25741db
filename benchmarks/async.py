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
The asynchronous mode's first step includes starting the collector, forked from the fork server
as a run's is; the steady state is what a long run sees. Its speed-up is bounded by the share of
the synchronous run spent on rollouts (its idle fraction f: at most 1 / (1 - f)). A second table
sets the asynchronous mode with a spawned collector (a fresh interpreter importing torch and
transformers: where a trainer is given no process context) beside the forked one.

Measured here (2 cores, defaults): steady state 1.30x launched tokens/s (711 -> 921), trainer idle
fraction 0.25 -> 0.00; whole run of 7 steps 0.89x (the collector's start-up, spawned). On
2026-12-07 (an AVX2 AMD EPYC, 2 cores), the collector forked: whole run 1.06x the synchronous one
(steady state 1.12x); spawned beside forked, the first step 5.55 s -> 1.58 s and the whole run
11.9 s -> 8.0 s (1.48x launched tokens/s).

    .venv/bin/python benchmarks/async.py [--budget 12000] [--queue 2] [--new 32] [--threads 1]
                                         [--hidden 256] [--layers 4] [--prompts 16]
"""

from __future__ import annotations

import argparse
import time

import torch
from sidebyside import print_side_by_side

from sixblanks.algorithms.presets import resolve
from sixblanks.harness.config import ModelConfig, validate_mapping
from sixblanks.harness.models import load_policy
from sixblanks.harness.orchestration.spawning import helper_context
from sixblanks.harness.tasks import make_task
from sixblanks.harness.training import RunSettings, Trainer


def _trainer(args, concurrent: bool, spawn: bool = False) -> Trainer:
    """The benchmark's trainer: a tiny policy's GRPO arm on 3-digit arithmetic under the
    launched-token budget, with a concurrent collector ``--queue`` rounds ahead where
    ``concurrent``, forked from the fork server (``spawn``: spawned)."""

    torch.manual_seed(0)
    task = make_task("arithmetic", {"digits": 3})
    tiny = {
        "hidden_size": args.hidden,
        "num_layers": args.layers,
        "num_heads": 4,
        "intermediate_size": 4 * args.hidden,
    }
    model, tok = load_policy(ModelConfig(tiny=tiny), [task])
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
        process_context=None if spawn else helper_context,
    )
    return Trainer(settings, task, model, tok)


def run(args, concurrent: bool, spawn: bool = False) -> dict[str, float]:
    """One training of the mode: its steps, launched tokens, wall seconds, launched tokens per
    second (whole run and steady state after the first step), the trainer's idle fraction (whole
    and steady) and the mean versions the trained rollouts were behind."""

    tr = _trainer(args, concurrent, spawn)
    ends: list[float] = []  # when each step ended
    idle: list[float] = []  # the trainer's wait for rollouts in each step
    seen = [0.0]

    def on_step(t, m):
        ends.append(time.perf_counter())
        if concurrent:
            idle.append(m.get("async.wait_seconds", 0.0))
        else:  # the rollout rounds the trainer ran itself
            total = t.ctx.meter.time_by_kind["rollouts"]["wall_seconds"]
            idle.append(total - seen[0])
            seen[0] = total

    t0 = time.perf_counter()
    tr.train(on_step=on_step)
    wall = time.perf_counter() - t0
    steps = tr.result.steps
    launched = tr.ledger.counters["launched_tokens"]
    after_first = launched - steps[0]["ledger.launched_tokens"]
    steady = ends[-1] - ends[0]
    return {
        "steps": len(steps),
        "launched": launched,
        "wall": wall,
        "first": ends[0] - t0,
        "tok_s": launched / wall,
        "steady_tok_s": after_first / steady,
        "idle": sum(idle) / (ends[-1] - t0),
        "steady_idle": sum(idle[1:]) / steady,
        "behind": sum(m.get("lag.versions_behind", 0.0) for m in steps) / len(steps),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=int, default=12000, help="launched tokens per mode")
    ap.add_argument("--queue", type=int, default=2, help="rounds the collector samples ahead")
    ap.add_argument("--new", type=int, default=32, help="max new tokens per answer")
    ap.add_argument("--prompts", type=int, default=16, help="prompts per step (x4 samples)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--hidden", type=int, default=256, help="the tiny policy's hidden size")
    ap.add_argument("--layers", type=int, default=4, help="the tiny policy's layers")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    # a run's collector forks from the server that forked the run, its imports made before the run
    # began: so here, the server is started and its imports made before any mode is timed
    warm = helper_context().Process(target=time.sleep, args=(0,))
    warm.start()
    warm.join()
    sync, asyn, spawned = run(args, False), run(args, True), run(args, True, spawn=True)
    print(
        f"GRPO on arithmetic, tiny Llama {args.layers}x{args.hidden}, {args.prompts}x4 samples of "
        f"<= {args.new} tokens a step, {args.budget} launched tokens, queue {args.queue}, "
        f"{args.threads} torch thread(s) a process"
    )
    rows = [
        ("steps", "steps", "{:.0f}"),
        ("launched tokens", "launched", "{:.0f}"),
        ("wall seconds", "wall", "{:.1f}"),
        ("launched tokens/s", "tok_s", "{:.1f}"),
        ("  after the first step", "steady_tok_s", "{:.1f}"),
        ("trainer idle fraction", "idle", "{:.2f}"),
        ("  after the first step", "steady_idle", "{:.2f}"),
        ("mean versions behind", "behind", "{:.2f}"),
    ]
    ratios = ("tok_s", "steady_tok_s", "wall")
    print_side_by_side(("synchronous", "asynchronous"), sync, asyn, rows, ratios, 28)
    print("\nthe asynchronous mode's collector spawned, then forked from the fork server")
    rows = [("first step seconds", "first", "{:.2f}"), *rows[2:4]]
    ratios = ("first", "wall", "tok_s")
    print_side_by_side(("spawned", "forked"), spawned, asyn, rows, ratios, 28)


if __name__ == "__main__":
    main()
