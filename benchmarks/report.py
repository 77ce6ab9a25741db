"""Report build time over 1000 synthetic runs (target: at most 10 seconds).

Writes a synthetic results.duckdb (10 arms x 100 seeds, 6 evaluations and 50 ledger steps per run)
with the real schema, then times `sixblanks.reports.build.build_report` and prints the figure.

    .venv/bin/python benchmarks/report.py [--runs 1000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from sixblanks.budgets.counters import COUNTERS, DISCARD_REASONS
from sixblanks.harness.store.database import append_rows


def synth(out: Path, n_runs: int, arms: int = 10, steps: int = 50) -> None:
    rng = np.random.default_rng(0)
    arm_names = [f"arm{i}" for i in range(arms)]
    cfg = {
        "name": "bench",
        "arms": {a: {"preset": "grpo"} for a in arm_names},
        "budget": {"launched_tokens": 30000},
        "seeds": list(range(n_runs // arms)),
    }
    experiments = [{"experiment_id": "bench", "name": "bench", "config": json.dumps(cfg)}]
    runs, evals, budgets, ledger, metrics = [], [], [], [], []
    for i in range(n_runs):
        rid, arm = f"r{i:05d}", arm_names[i % arms]
        runs.append(
            {
                "run_id": rid,
                "experiment_id": "bench",
                "arm": arm,
                "preset": "grpo",
                "task": "arithmetic",
                "seed": i // arms,
                "status": "finished",
                "blanks": json.dumps({"weight": {"eps_high": 0.2 + 0.01 * (i % arms)}}),
                "steps": steps,
                "final_score": 0.3,
            }
        )
        budgets.append(
            {
                "run_id": rid,
                "counter": "launched_tokens",
                "limit_value": 30000.0,
                "consumed": 29700.0,
            }
        )
        pos = np.linspace(0, 29700, 6)
        sc = 0.2 + np.cumsum(rng.random(6) * 0.03)
        sc[0] = 0.2
        for k in range(6):
            evals.append(
                {
                    "run_id": rid,
                    "step": int(k * steps / 5),
                    "split": "heldout",
                    "score": float(sc[k]),
                    "n": 128,
                    "success_rate": float(sc[k]),
                    "launched_tokens": float(pos[k]),
                    "accepted_tokens": float(pos[k]),
                    "device_seconds": float(pos[k] / 3000),
                    "verifier_calls": float(pos[k] / 3),
                }
            )
        for s in range(steps):
            row = {"run_id": rid, "step": s, **{c: float(s * 600) for c in COUNTERS}}
            row.update({f"discarded_{r}": 0.0 for r in DISCARD_REASONS})
            ledger.append(row)
            metrics.append(
                {
                    "run_id": rid,
                    "step": s,
                    "name": "trainable_group_frac",
                    "value": float(rng.random()),
                }
            )
            metrics.append(
                {
                    "run_id": rid,
                    "step": s,
                    "name": "response_length",
                    "value": float(3 + rng.random()),
                }
            )
    append_rows(
        out,
        {
            "experiments": experiments,
            "runs": pa.Table.from_pylist(runs),
            "evals": pa.Table.from_pylist(evals),
            "budgets": pa.Table.from_pylist(budgets),
            "ledger": pa.Table.from_pylist(ledger),
            "metrics": pa.Table.from_pylist(metrics),
        },
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1000)
    args = ap.parse_args()
    from sixblanks.reports.build import build_report

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        synth(out, args.runs)
        t0 = time.perf_counter()
        path = build_report(out)
        dt = time.perf_counter() - t0
        print(
            f"report over {args.runs} runs built in {dt:.2f} s (target <= 10 s): {path.name}, "
            f"{path.stat().st_size / 1e6:.1f} MB self-contained HTML"
        )


if __name__ == "__main__":
    main()
