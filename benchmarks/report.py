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
from typing import Any

import numpy as np
import pyarrow as pa

from sixblanks.budgets.counters import COUNTERS, DISCARD_REASONS
from sixblanks.harness.store.database import append_rows


def synth(out: Path, n_runs: int, arms: int = 10, steps: int = 50) -> None:
    """Writes ``n_runs`` synthetic finished runs of ``arms`` arms into ``out``'s results store."""

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
        runs.append(run_row(rid, arm, i // arms, i % arms, steps))
        budgets.append(
            {
                "run_id": rid,
                "counter": "launched_tokens",
                "limit_value": 30000.0,
                "consumed": 29700.0,
            }
        )
        evals += eval_rows(rid, rng, steps)
        for step in range(steps):
            ledger.append(ledger_row(rid, step))
            metrics += metric_rows(rid, step, rng)
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


def run_row(rid: str, arm: str, seed: int, arm_index: int, steps: int) -> dict[str, Any]:
    """A finished run's ``runs`` row (its blanks: eps_high 0.2 + 0.01 per arm index)."""

    return {
        "run_id": rid,
        "experiment_id": "bench",
        "arm": arm,
        "preset": "grpo",
        "task": "arithmetic",
        "seed": seed,
        "status": "finished",
        "blanks": json.dumps({"weight": {"eps_high": 0.2 + 0.01 * arm_index}}),
        "steps": steps,
        "final_score": 0.3,
    }


def eval_rows(rid: str, rng: np.random.Generator, steps: int) -> list[dict[str, Any]]:
    """Six held-out evaluations spread over the run, the score rising from 0.2 at random."""

    positions = np.linspace(0, 29700, 6)
    scores = 0.2 + np.cumsum(rng.random(6) * 0.03)
    scores[0] = 0.2
    return [
        {
            "run_id": rid,
            "step": int(k * steps / 5),
            "split": "heldout",
            "score": float(scores[k]),
            "n": 128,
            "success_rate": float(scores[k]),
            "launched_tokens": float(positions[k]),
            "accepted_tokens": float(positions[k]),
            "device_seconds": float(positions[k] / 3000),
            "verifier_calls": float(positions[k] / 3),
        }
        for k in range(6)
    ]


def ledger_row(rid: str, step: int) -> dict[str, Any]:
    """The ledger after ``step``: every counter at 600 per step, nothing discarded."""

    row = {"run_id": rid, "step": step, **{c: float(step * 600) for c in COUNTERS}}
    row.update({f"discarded_{r}": 0.0 for r in DISCARD_REASONS})
    return row


def metric_rows(rid: str, step: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    """The step's trainable-group fraction and response length, at random."""

    return [
        {
            "run_id": rid,
            "step": step,
            "name": "trainable_group_frac",
            "value": float(rng.random()),
        },
        {
            "run_id": rid,
            "step": step,
            "name": "response_length",
            "value": float(3 + rng.random()),
        },
    ]


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
