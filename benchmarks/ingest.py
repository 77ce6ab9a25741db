"""Ingest throughput: 1M metric rows into results.duckdb (target: at most 2 seconds on this
machine).

Builds a synthetic experiment directory (runs with events.jsonl written like real runs), then times
`sixblanks.harness.store.database.ingest` end to end (parse events, Arrow tables, one transaction)
and prints the figure.

    .venv/bin/python benchmarks/ingest.py [--rows 1000000] [--runs 8]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from sixblanks.budgets.counters import COUNTERS, DISCARD_REASONS
from sixblanks.harness.layout import ExperimentDir
from sixblanks.harness.store.database import connect, ingest


def synth(out: Path, rows: int, runs: int, metrics_per_step: int = 40) -> list[str]:
    rng = random.Random(0)
    steps_per_run = rows // (runs * metrics_per_step)
    exp_dir = ExperimentDir(out)
    ids = []
    for r in range(runs):
        rid = f"run{r:04d}"
        rd = exp_dir.run(rid)
        rd.path.mkdir(parents=True)
        spec = {
            "arm": f"arm{r % 4}",
            "preset": "grpo",
            "seed": r,
            "task": {"name": "arithmetic", "eval_size": 64},
            "blanks": {},
            "budget": {"launched_tokens": 1e9},
        }
        rd.spec.write_text(json.dumps(spec))
        rd.status.write_text(json.dumps({"state": "finished"}))
        with open(rd.events, "w") as f:
            for s in range(steps_per_run):
                ev = {"type": "step", "step": s}
                ev.update({f"m{i}": rng.random() for i in range(metrics_per_step)})
                ev.update({f"ledger.{c}": float(s * 100) for c in COUNTERS})
                ev.update({f"ledger.discarded_tokens.{x}": 0.0 for x in DISCARD_REASONS})
                f.write(json.dumps(ev) + "\n")
        ids.append(rid)
    exp_dir.experiment.write_text(
        json.dumps({"config": {"name": "bench"}, "runs": ids, "warm_start": {}})
    )
    return ids


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        synth(out, args.rows, args.runs)
        t0 = time.perf_counter()
        counts = ingest(out)
        dt = time.perf_counter() - t0
        t1 = time.perf_counter()
        ingest(out)  # idempotent: same counts again
        dt2 = time.perf_counter() - t1
        con = connect(out, read_only=True)
        n = con.execute("SELECT count(*) FROM metrics").fetchone()[0]
        con.close()
        print(
            f"ingested {n:,} metric rows ({counts['ledger']:,} ledger rows) from {args.runs} runs "
            f"in {dt:.2f} s ({n / dt / 1e6:.2f} M rows/s; target: 1M rows in <= 2 s)"
        )
        print(
            f"re-ingest (idempotent, replaces the same rows): {dt2:.2f} s, rows unchanged: "
            f"{counts == ingest(out)}"
        )


if __name__ == "__main__":
    main()
