"""Run workers forked from the fork server against spawned ones, side by side in one process.

A process that runs several experiments (a ladder, a sweep, the findings, a notebook, the test
suite) starts a pool of run workers for each. Spawned, every worker imported torch, transformers'
Llama and the training code again (about 4 s in a fresh interpreter); forked from the fork server
(``harness/orchestration/spawning.py``), they are imported once per process. This script runs the
same small experiment (the default experiment's first arm, ``--seeds`` seeds, ``--tokens``
launched tokens a run, its warm start cached) ``--reps`` times per mode into fresh directories,
the modes alternating (spawned first), and prints each mode's median seconds per experiment, its
first experiment apart (the fork server's start is in the first fork-server one), and the ratio of
the medians.

    .venv/bin/python benchmarks/workers.py [--reps 4] [--seeds 2] [--tokens 800]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def small(seeds: int, tokens: int) -> dict:
    """The default experiment's first arm, ``seeds`` seeds of ``tokens`` launched tokens."""

    cfg = yaml.safe_load((ROOT / "experiments.yaml").read_text())
    first = next(iter(cfg["arms"]))
    cfg["arms"] = {first: cfg["arms"][first]}
    cfg["seeds"] = list(range(seeds))
    cfg["budget"] = {"launched_tokens": tokens}
    cfg["eval"] = {"every": tokens // 2, "size": 16}
    cfg["tracking"] = {"mlflow": False}
    return cfg


def use(mode: str) -> None:
    """The run workers' context from now on: spawned (each worker imports everything) or forked
    from the fork server (the default)."""

    import sixblanks.harness.orchestration.executors as executors
    from sixblanks.harness.orchestration.spawning import SPAWN, worker_context

    executors.worker_context = (lambda: SPAWN) if mode == "spawned" else worker_context


def once(cfg: dict) -> float:
    import sixblanks

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sixblanks-workers-") as d:
        sixblanks.run(cfg, out=d)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=4, help="experiments per mode")
    ap.add_argument("--seeds", type=int, default=2, help="runs per experiment (one arm)")
    ap.add_argument("--tokens", type=int, default=800, help="launched tokens a run")
    args = ap.parse_args()
    if args.reps < 2:
        ap.error("--reps must be at least 2 (the first experiment of each mode is apart)")
    cfg = small(args.seeds, args.tokens)
    use("spawned")
    print(f"warm start (cached for what follows): {once(cfg):.1f} s", flush=True)
    times: dict[str, list[float]] = {"spawned": [], "fork server": []}
    for _ in range(args.reps):
        for mode in times:
            use(mode)
            times[mode].append(once(cfg))
            print(f"{mode}: {times[mode][-1]:.1f} s", flush=True)
    print(f"\n{args.reps} experiments per mode, {args.seeds} run(s) of {args.tokens} tokens each:")
    for mode, ts in times.items():
        rest = statistics.median(ts[1:]) if len(ts) > 1 else float("nan")
        print(f"  {mode:>11}: first {ts[0]:.1f} s, then median {rest:.1f} s an experiment")
    ratio = statistics.median(times["spawned"][1:]) / statistics.median(times["fork server"][1:])
    print(f"experiments after the first: {ratio:.2f}x faster with the fork server")


if __name__ == "__main__":
    sys.exit(main())
