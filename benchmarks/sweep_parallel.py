"""Parallel sweep trials (``sweep.parallel``) against one at a time, side by side in one run.

The same search (one arm, ``--trials`` trials of ``--trial-tokens`` launched tokens each, a random
sampler with a fixed seed, no pruning, so both searches try the same configurations under the same
budgets) runs with ``parallel: 1`` and with ``parallel: --parallel`` on the local executor, each in
a fresh output directory with the warm start already cached (copied in), confirmation runs
excluded from the timing. Each trial gets cores / parallel torch threads. Prints the wall seconds
of each search, the speed-up, and checks that both ran the same trials with the same search
spending, never above the total.

Measured here (2 cores, 2026-12-01, one invocation each): 4 trials of 600 launched tokens 1.05x
(8.3 -> 7.9 s: each trial is ~2 s, and the second worker's start-up is most of it); of 2400 tokens
1.30x (12.8 -> 9.8 s); of 6000 tokens 1.42x (22.1 -> 15.6 s). Parallel trials run one torch
thread each where the sequential one runs two, so on two cores the gain is what one thread per
core wins over two threads on one piece of work; it grows with the trials' length and with cores.

    .venv/bin/python benchmarks/sweep_parallel.py [--trials 4] [--parallel 2] [--trial-tokens 2400]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from sixblanks.harness.config import validate_mapping
from sixblanks.harness.orchestration.orchestrator import Orchestrator
from sixblanks.harness.studies.sweep import Sweep


def experiment(args, parallel: int) -> dict:
    return {
        "name": "sweep-bench",
        "task": {"name": "arithmetic", "eval_size": 32},
        "rollout": {"max_new_tokens": 6, "prompts_per_step": 4, "group_size": 4},
        "warm_start": {"steps": 60, "num_demos": 400},
        "budget": {"launched_tokens": args.trial_tokens},
        "seeds": [0],
        "arms": {"grpo": {"preset": "grpo"}},
        "tracking": {"mlflow": False},
        "sweep": {
            "n_trials": args.trials,
            "parallel": parallel,
            "sampler": "random",
            "seed": 0,
            "pruner": "none",
            "trial_budget": {"launched_tokens": args.trial_tokens},
            "total_budget": {"launched_tokens": args.trial_tokens * args.trials},
            "space": {"grpo": {"optimizer.lr": {"type": "float", "low": 1e-4, "high": 1e-3}}},
            "confirm_seeds": [7],
        },
    }


class Timed(Sweep):
    """The search only: the confirmation runs are left out of the timing (and not run)."""

    def confirm(self, summary):
        return {"failures": {}, "runs": 0}

    def _store_trials(self, summary):
        pass


def search(args, parallel: int, warm: Path, root: Path) -> tuple[float, dict]:
    out = root / f"parallel-{parallel}"
    (out / "sweep").mkdir(parents=True)
    shutil.copytree(warm, out / "sweep" / "warm_start")  # the same cached warm start
    sw = Timed(validate_mapping(experiment(args, parallel)), out)
    t0 = time.perf_counter()
    summary = sw.run()
    return time.perf_counter() - t0, summary["arms"]["grpo"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--trial-tokens", type=float, default=2400)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sixblanks-sweep-bench-"))
    try:
        # the warm start, once, where both searches find it cached
        orch = Orchestrator(validate_mapping(experiment(args, 1)), root / "warm", progress=False)
        orch.prepare()
        warm = root / "warm" / "warm_start"
        t1, one = search(args, 1, warm, root)
        tn, many = search(args, args.parallel, warm, root)
        same = [t["params"] for t in one["trials_detail"]] == [
            t["params"] for t in many["trials_detail"]
        ]
        print(json.dumps({"trials": args.trials, "parallel": args.parallel}))
        print(
            f"parallel 1: {t1:7.1f} s  ({one['complete']} complete, spent "
            f"{one['spent']['launched_tokens']:g} launched tokens)"
        )
        print(
            f"parallel {args.parallel}: {tn:7.1f} s  ({many['complete']} complete, spent "
            f"{many['spent']['launched_tokens']:g} launched tokens)"
        )
        print(
            f"speed-up: {t1 / tn:.2f}x   same configurations tried: {same}   "
            f"total never exceeded: "
            f"""{
                max(one["spent"]["launched_tokens"], many["spent"]["launched_tokens"])
                <= args.trial_tokens * args.trials
            }"""
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
