"""Where an experiment's time goes, phase by phase, and what one run costs beyond its training.

Runs an experiment file (default: the default experiment, ``experiments.yaml``) into a fresh
directory as ``sixblanks run`` does, timing each phase in this process: the warm start, the runs
(the executor, its workers in parallel), the fairness audit and summary, the store (DuckDB
ingest), MLflow (when the file enables it) and the report. Then, from each run's own records, the
part of a run that is training (``train_seconds``, evaluations included) against its elapsed time,
and the runs per hour the experiment achieved. Separately, in fresh interpreters: the time to
import the command line, and one run of one arm and one seed through the ``sixblanks run`` command,
whose wall time minus its training is a run's fixed cost.

    .venv/bin/python benchmarks/experiment.py [--config experiments.yaml] [--budget N]
                                              [--seeds K] [--out DIR]

Measured 2026-12-03 (``--budget 1500 --seeds 1``: 8 runs): 39.8 s, of which the warm start 7.1 s,
the runs 10.1 s, the store 1.3 s, MLflow 6.0 s and the report 15.2 s; one full run of the default
experiment through the command 30.0 s, of which training 14.6 s: a fixed cost of 15.5 s.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(phases: dict[str, float], name: str, fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    phases[name] = time.perf_counter() - t0
    return out


def experiment(cfg, out: Path) -> tuple[dict[str, float], list[dict]]:
    """Each phase's seconds, and each run's result.json, for ``cfg`` run into ``out``."""

    import os

    from sixblanks.harness.orchestration.executors import make_executor
    from sixblanks.harness.orchestration.experiment import build_report_checked
    from sixblanks.harness.orchestration.orchestrator import Orchestrator, default_workers

    phases: dict[str, float] = {}
    orch = Orchestrator(cfg, out, progress=False)
    specs = timed(phases, "warm start and plan", orch.prepare)
    ex = cfg.executor
    workers = default_workers(len(specs), ex.workers) if ex.kind == "local" else len(specs)
    threads = max(1, (os.cpu_count() or 1) // max(1, min(workers, os.cpu_count() or 1)))
    executor = make_executor(ex, workers, threads)
    jobs = [(s, str(orch.dir.run(s["run_id"]).path), str(orch.warm_dir)) for s in specs]
    failures = timed(
        phases, f"runs ({len(jobs)}, {workers} at a time)", executor.run, jobs, lambda *a, **k: None
    )
    if failures:
        raise SystemExit(f"{len(failures)} run(s) failed: {failures}")
    audit = timed(phases, "fairness audit", orch.fairness)
    timed(phases, "summary", orch.summary, {})
    timed(phases, "store (DuckDB ingest)", orch.ingest, audit)
    timed(phases, "MLflow", orch.track, audit)
    timed(phases, "report", build_report_checked, out)
    results = [
        json.loads((orch.dir.run(s["run_id"]).path / "result.json").read_text()) for s in specs
    ]
    return phases, results


def one_run(config: Path, tmp: Path) -> tuple[float, float, float]:
    """(import seconds, command seconds, its run's training seconds): one arm, one seed."""

    import yaml

    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import sixblanks.harness.cli.app"], check=True)
    imports = time.perf_counter() - t0
    data = yaml.safe_load(config.read_text())
    first = next(iter(data["arms"]))
    data |= {"arms": {first: data["arms"][first]}, "seeds": data.get("seeds", [0])[:1]}
    data["tracking"] = {"mlflow": False}
    one = tmp / "one.yaml"
    one.write_text(yaml.safe_dump(data))
    out = tmp / "one"
    cli = [sys.executable, "-m", "sixblanks.harness.cli", "--quiet", "run", str(one), "--out"]
    subprocess.run([*cli, str(out)], check=True, capture_output=True)  # the warm start, cached
    for d in (out / "runs").iterdir():
        shutil.rmtree(d)  # the run again, not skipped (its warm start stays cached)
    t0 = time.perf_counter()
    subprocess.run([*cli, str(out)], check=True, capture_output=True)
    command = time.perf_counter() - t0
    (result,) = [json.loads((d / "result.json").read_text()) for d in (out / "runs").iterdir()]
    return imports, command, float(result["train_seconds"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(ROOT / "experiments.yaml"))
    ap.add_argument("--budget", type=int, help="launched tokens per run (default: the file's)")
    ap.add_argument("--seeds", type=int, help="seeds per arm (default: the file's)")
    ap.add_argument("--out", help="output directory (default: a temporary one)")
    args = ap.parse_args()

    from sixblanks.harness.config import load_config, validate_mapping

    config = Path(args.config)
    cfg = load_config(config)
    if args.budget or args.seeds:
        data = cfg.model_dump(mode="json", exclude_unset=True)
        if args.budget:
            data["budget"] = {"launched_tokens": args.budget}
        if args.seeds:
            data["seeds"] = list(range(args.seeds))
        cfg = validate_mapping(data)
    with tempfile.TemporaryDirectory(prefix="sixblanks-bench-") as tmp:
        out = Path(args.out) if args.out else Path(tmp) / "exp"
        t0 = time.perf_counter()
        phases, results = experiment(cfg, out)
        total = time.perf_counter() - t0
        imports, command, train = one_run(config, Path(tmp))
    print(f"{config.name}: {len(results)} runs, {total:.1f} s in all (this process)")
    for name, seconds in phases.items():
        print(f"  {name:38}{seconds:8.1f} s {100 * seconds / total:5.1f}%")
    elapsed = [r["train_seconds"] for r in results]
    print(f"runs per hour: {3600 * len(results) / total:.0f}")
    print(f"a run's training (evaluations included): mean {sum(elapsed) / len(elapsed):.1f} s")
    print(f"importing the command line (a fresh interpreter): {imports:.1f} s")
    print(
        f"one run of one arm and one seed through `sixblanks run` (warm start cached, MLflow off): "
        f"{command:.1f} s, of which training {train:.1f} s: fixed cost {command - train:.1f} s"
    )


if __name__ == "__main__":
    main()
