"""Overhead of recording: a run's wall time with ledger persistence and tracking on vs off.

off: the trainer in memory (its ledger still enforces the budget, but nothing is written).
on:  the orchestrated run: events.jsonl and status.json after every step, a checkpoint every 30 s,
     plus its share of the DuckDB ingest and MLflow logging that follow the runs.
Both run the same spec side by side in one process. Target: overhead <= 2%.

    .venv/bin/python benchmarks/overhead.py [--budget 20000] [--runs 4]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from sixblanks.harness.config import validate_mapping
from sixblanks.harness.layout import ExperimentDir
from sixblanks.harness.orchestration.orchestrator import Orchestrator
from sixblanks.harness.orchestration.runner import build_trainer, execute_run
from sixblanks.harness.store.database import ingest


def _config(args):
    """The experiment measured: one GRPO arm, ``--runs`` seeds, each under ``--budget`` launched
    tokens."""

    return validate_mapping(
        {
            "name": "overhead",
            "arms": {"grpo": {"preset": "grpo"}},
            "budget": {"launched_tokens": args.budget},
            "seeds": list(range(args.runs)),
            "rollout": {"max_new_tokens": 6},
            "warm_start": {"steps": 100},
            "eval": {"size": 64},
        }
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=20000)
    ap.add_argument(
        "--runs", type=int, default=4, help="runs over which ingest and MLflow costs are shared"
    )
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        orch = Orchestrator(_config(args), out, progress=False)
        plan = orch.prepare()
        specs, warm = plan.specs, plan.warm_dir

        # off: the same trainer as the run's (same builder), nothing recorded
        trainer = build_trainer(specs[0], warm)
        t0 = time.perf_counter()
        trainer.train(evaluate_start=False)
        off = time.perf_counter() - t0

        # on: the orchestrated runs, then ingest + MLflow for all of them
        exp_dir = ExperimentDir(out)
        results = [
            execute_run(s, exp_dir.run(s.run_id).path, warm, threads=1, checkpoint_seconds=30.0)
            for s in specs
        ]
        t1 = time.perf_counter()
        ingest(out)
        t_ingest = time.perf_counter() - t1
        orch.track()
        store_and_track = time.perf_counter() - t1
        r0 = exp_dir.run(specs[0].run_id).read_result()
        on_train, rec = r0["train_seconds"], r0["recording_seconds"]
        per_run = store_and_track / len(results)
        print(f"one run, {args.budget:g} launched tokens, same spec and seed:")
        print(f"  off: in-memory training loop                      {off:7.2f} s")
        print(
            f"  on:  training loop with events/status/checkpoints  {on_train:7.2f} s "
            f"(recording inside it: {rec:.3f} s)"
        )
        print(
            f"       + DuckDB ingest and MLflow logging per run    {per_run:7.2f} s "
            f"(for {len(results)} runs: ingest {t_ingest:.2f} s, "
            f"MLflow {store_and_track - t_ingest:.2f} s)"
        )
        print(
            f"  recording overhead inside the run: {100 * rec / on_train:.2f}%   "
            f"end to end (on / off - 1): {100 * ((on_train + per_run) / off - 1):+.1f}%   "
            "(target <= 2%)"
        )


if __name__ == "__main__":
    main()
