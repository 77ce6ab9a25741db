"""Where an experiment's time goes, phase by phase, and what one run costs beyond its training.

Runs an experiment file (default: the default experiment, ``experiments.yaml``, i.e. ``make run``)
into a fresh directory as ``sixblanks run`` does, timing each phase in this process: the warm start,
the runs (the executor, its workers in parallel), the fairness audit and summary, the store (DuckDB
ingest), and the report with MLflow sending the runs beside it (its own process, when the file
enables MLflow). Printed: each phase, the total against ``make run``'s 150-second target, runs per
hour, and a run's fixed cost inside the experiment: in its worker, the seconds beyond its training
(setup, the start evaluation, the final checkpoint and result; the first run of each worker also
pays the worker's imports), plus its share of the store, MLflow and the report. Then MLflow alone:
the same runs sent again into a fresh store, per run (target 0.2 s).

``--config`` may name a findings claim (``experiments/findings/<claim>.yaml``): its experiment at
its first budget axis, 2 seeds per arm unless ``--seeds`` says otherwise; runs per hour is then
the findings family's rate.

Separately, in fresh interpreters: the time to import the command line, ``sixblanks validate`` of
the file (median of 3; it imports no torch), and one run of one arm and one seed through the
``sixblanks run`` command (warm start cached, MLflow off), whose wall time minus its training is the
fixed cost of a command: from the command's start to the run's first step, and from its last step to
the command's exit. Most of it is the price of a fresh interpreter (torch and transformers imported
in the command's fork server), which the runs of an experiment share; the one run is timed twice,
with the command's own fork server and with one kept by an earlier ``--keep-warm`` command (whose
imports were made before the command started). 2026-12-07: 11.8 s and 5.2 s beyond training;
later that day 6.9 s and 2.3 s.

    .venv/bin/python benchmarks/phases.py [--config experiments.yaml] [--budget N]
                                              [--seeds K] [--out DIR]

Measured 2026-12-03 (``--budget 1500 --seeds 1``: 8 runs, before MLflow's bulk inserts): 39.8 s, of
which the warm start 7.1 s, the runs 10.1 s, the store 1.3 s, MLflow 6.0 s and the report 15.2 s;
one full run of the default experiment through the command 30.0 s, of which training 14.6 s: a fixed
cost of 15.5 s. After the bulk inserts, MLflow's process and the early workers (the default
experiment, 24 runs): 256 s, of which the runs 222 s; a run's fixed cost in the experiment 1.1 s;
MLflow 0.05 s a run beyond the report (0.23 s a run alone); one run through the command 12.7 s
beyond its training. Later that day (AdamW with foreach, the store a table at a time): 202.6 s, the
runs 184.2 s; a run's fixed cost 0.47 s; MLflow 0.073 s a run; one run through the command 10.3 s
beyond its training. More in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 150.0  # make run, from a fresh output directory
TARGET_FIXED = 3.0  # a run's fixed cost, in the experiment and through the command
TARGET_MLFLOW = 0.2  # MLflow, a run


def timed(phases: dict[str, float], name: str, fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    phases[name] = time.perf_counter() - t0
    return out


def experiment(cfg, out: Path) -> tuple[dict[str, float], list[dict], int]:
    """Each phase's seconds, each run's result.json (with its status' start and end) and the
    number of workers, for ``cfg`` run into ``out`` as ``sixblanks run`` runs it: the
    orchestrator's own ``run`` (its workers start during the warm start), each of its phases timed
    where it calls them; MLflow's process started first, sending the runs while the report is built
    (the wait for it after the report is what it adds)."""

    from sixblanks.harness.orchestration.command import build_report_checked
    from sixblanks.harness.orchestration.orchestrator import Orchestrator, default_workers

    phases: dict[str, float] = {}
    orch = Orchestrator(cfg, out, progress=False)
    names = {
        "prepare": "warm start and plan",
        "fairness": "fairness audit and summary",
        "summary": "fairness audit and summary",
        "ingest": "store (DuckDB ingest)",
    }
    for method, name in names.items():

        def wrapped(*a, _fn=getattr(orch, method), _name=name, **k):
            t0 = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                phases[_name] = phases.get(_name, 0.0) + time.perf_counter() - t0

        setattr(orch, method, wrapped)
    with orch.tracking_beside() as tracking:  # as the command: MLflow's process starts now
        t0 = time.perf_counter()
        result = orch.run(track=False)
        runs = time.perf_counter() - t0 - sum(phases.values())
        if result["failures"]:
            raise SystemExit(f"{len(result['failures'])} run(s) failed: {result['failures']}")
        specs = orch.plan.specs
        tracking.send([s.run_id for s in specs], result["fairness"])
        timed(phases, "report (MLflow sending the runs beside it)", build_report_checked, out)
        tracking.artifacts([orch.dir.report])
        t0 = time.perf_counter()
    if cfg.tracking.mlflow:
        phases["MLflow, after the report"] = time.perf_counter() - t0
    ex = cfg.executor
    workers = default_workers(len(specs), ex.workers) if ex.kind == "local" else len(specs)
    phases = {
        "warm start and plan": phases.pop("warm start and plan"),
        f"runs ({len(specs)}, {workers} at a time)": runs,
        **phases,
    }
    results = []
    for s in specs:
        rd = orch.dir.run(s.run_id)
        status = rd.read_status()
        results.append(
            json.loads((rd.path / "result.json").read_text())
            | {"started": status["started"], "finished": status["finished"]}
        )
    return phases, results, workers


def mlflow_alone(out: Path, run_ids: list[str]) -> tuple[float, float]:
    """(seconds to start MLflow's client on a fresh store, seconds a run to send ``run_ids`` of
    ``out`` into it)."""

    from sixblanks.harness.orchestration.tracking import Tracker, tracking_uri

    with tempfile.TemporaryDirectory(prefix="sixblanks-mlflow-") as tmp:
        for name in ("runs", "experiment.json"):
            src, dst = out / name, Path(tmp) / name
            shutil.copytree(src, dst) if src.is_dir() else shutil.copy(src, dst)
        tracker = Tracker(tmp, tracking_uri(None, Path(tmp)), "bench")
        t0 = time.perf_counter()
        tracker.client()  # MLflow imported, the store created (its tables migrated)
        start = time.perf_counter() - t0
        t0 = time.perf_counter()
        state = tracker.sync(run_ids)
        seconds = time.perf_counter() - t0
    if state.get("last_error"):
        raise SystemExit(f"MLflow: {state['last_error']}")
    return start, seconds / len(run_ids)


def one_run(cfg, tmp: Path) -> dict[str, tuple[float, float, float, float, float]]:
    """One arm, one seed of ``cfg`` (its base files resolved) through the command, warm start
    cached, MLflow off, twice: with the command's own fork server (``"own"``) and with a server kept
    by an earlier command (``"kept"``, ``--keep-warm``). Each: (import seconds, command seconds, its
    run's training seconds, command start to the first step, last step to the command's exit)."""

    import yaml

    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import sixblanks.harness.cli.app"], check=True)
    imports = time.perf_counter() - t0
    data = cfg.model_dump(mode="json", exclude_unset=True)
    first = next(iter(data["arms"]))
    data |= {"arms": {first: data["arms"][first]}, "seeds": data.get("seeds", [0])[:1]}
    data["tracking"] = {"mlflow": False}
    one = tmp / "one.yaml"
    one.write_text(yaml.safe_dump(data))
    out = tmp / "one"
    cli = [sys.executable, "-m", "sixblanks.harness.cli", "--quiet", "run", str(one), "--out"]
    # the warm start, cached; and the kept server started (idle 10 minutes), stopped at the end
    subprocess.run([*cli, str(out), "--keep-warm", "10"], check=True, capture_output=True)
    times = {}
    try:
        for mode, keep in (("own", "0"), ("kept", "10")):
            for d in (out / "runs").iterdir():
                shutil.rmtree(d)  # the run again, not skipped (its warm start stays cached)
            env = {**os.environ, "SIXBLANKS_KEEP_WARM": keep}  # 0: neither used nor stopped
            start = time.time()
            t0 = time.perf_counter()
            subprocess.run([*cli, str(out)], check=True, capture_output=True, env=env)
            command = time.perf_counter() - t0
            (d,) = list((out / "runs").iterdir())
            result = json.loads((d / "result.json").read_text())
            finished = json.loads((d / "status.json").read_text())["finished"]
            train = float(result["train_seconds"])
            end = start + command
            times[mode] = (imports, command, train, finished - train - start, end - finished)
    finally:
        stop = "from sixblanks.harness.orchestration import kept_server; kept_server.stop()"
        subprocess.run([sys.executable, "-c", stop], check=True)
    return times


def validate_seconds(config: Path, repeats: int = 3) -> float:
    """The median wall time of ``sixblanks validate config`` in a fresh interpreter (reading and
    checking an experiment file imports no torch)."""

    cli = [sys.executable, "-m", "sixblanks.harness.cli", "--quiet", "validate", str(config)]
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(cli, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def parse_args() -> argparse.Namespace:
    """The command line's options: the experiment file, a budget and seeds in place of its own,
    and the output directory."""

    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(ROOT / "experiments.yaml"))
    ap.add_argument("--budget", type=int, help="launched tokens per run (default: the file's)")
    ap.add_argument("--seeds", type=int, help="seeds per arm (default: the file's)")
    ap.add_argument("--out", help="output directory (default: a temporary one)")
    return ap.parse_args()


def configured(config: Path, budget: int | None, seeds: int | None):
    """The experiment file ``config``, with ``budget`` launched tokens per run and ``seeds`` seeds
    per arm in place of its own where given."""

    from sixblanks.harness.config import load_config, validate_mapping

    cfg = finding_experiment(config, seeds) or load_config(config)
    if budget or seeds:
        data = cfg.model_dump(mode="json", exclude_unset=True)
        if budget:
            data["budget"] = {"launched_tokens": budget}
        if seeds:
            data["seeds"] = list(range(seeds))
        cfg = validate_mapping(data)
    return cfg


def finding_experiment(config: Path, seeds: int | None):
    """The experiment a findings claim runs at its first budget axis (its arms, on the base it
    builds on), at ``seeds`` seeds per arm (default 2); None where ``config`` is not a finding
    file."""

    import yaml

    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.studies.findings.claim import checked_finding
    from sixblanks.harness.studies.findings.runs import experiment_mapping

    if "finding" not in (yaml.safe_load(Path(config).read_text()) or {}):
        return None
    f, _ = checked_finding(config)
    budgets = f.finding.budgets or {"budget": dict(f.experiment.get("budget") or {})}
    axis, budget = next(iter(budgets.items()))
    return validate_mapping(experiment_mapping(f, axis, dict(budget), seeds or 2))


def print_experiment(config: Path, cfg, phases: dict[str, float], results: list[dict]) -> None:
    """The experiment's phases against make run's target, runs per hour, a run's training and
    fixed cost, and what MLflow adds to it."""

    n = len(results)
    total = sum(phases.values())  # the command's phases: the report built once, MLflow beside it
    print(
        f"{config.name}: {n} runs, {total:.1f} s in all (make run's target: "
        f"{TARGET_SECONDS:.0f} s, {'met' if total <= TARGET_SECONDS else 'not met'})"
    )
    for name, seconds in phases.items():
        print(f"  {name:38}{seconds:8.1f} s {100 * seconds / total:5.1f}%")
    print(f"runs per hour: {3600 * n / total:.0f}")
    trains = [r["train_seconds"] for r in results]
    print(f"a run's training (evaluations included): mean {statistics.mean(trains):.1f} s")
    beyond = sorted(r["finished"] - r["started"] - r["train_seconds"] for r in results)
    shared = sum(
        v for k, v in phases.items() if k.startswith(("store", "report", "fairness", "MLflow"))
    )
    fixed = statistics.median(beyond) + shared / n
    print(
        f"a run's fixed cost in the experiment: {fixed:.2f} s (target {TARGET_FIXED:.0f} s, "
        f"{'met' if fixed <= TARGET_FIXED else 'not met'}): in its worker "
        f"{statistics.median(beyond):.2f} s beyond training (median; at most {max(beyond):.1f} s), "
        f"and its share of the store, audit and report {shared / n:.2f} s"
    )
    if cfg.tracking.mlflow:
        added = phases["MLflow, after the report"] / n
        print(
            f"MLflow: what it adds to the experiment (its process sends the runs while the report "
            f"is built, its imports during the runs): {added:.3f} s a run (target "
            f"{TARGET_MLFLOW} s, {'met' if added <= TARGET_MLFLOW else 'not met'})"
        )


def print_apart(mlflow: tuple[float, float], runs: dict, validate: float) -> None:
    """What was measured apart from the experiment: MLflow alone (``mlflow_alone``), the command
    line's imports, ``sixblanks validate`` (``validate_seconds``) and one run through the command
    (``one_run``), with the command's own fork server and with a kept one."""

    start_mlflow, per_run_mlflow = mlflow
    print(
        f"MLflow alone, the same runs into a fresh store: {per_run_mlflow:.2f} s a run, after "
        f"{start_mlflow:.1f} s to start its client"
    )
    print(f"importing the command line (a fresh interpreter): {runs['own'][0]:.1f} s")
    print(f"`sixblanks validate` of the file (a fresh interpreter, median of 3): {validate:.1f} s")
    for mode, how in (
        ("own", "its workers forked from a fork server of its own"),
        ("kept", "its workers forked from the server an earlier `--keep-warm` command kept"),
    ):
        _, command, train, before, after = runs[mode]
        fixed = command - train
        print(
            f"one run of one arm and one seed through `sixblanks run` (warm start cached, MLflow "
            f"off; {how}): {command:.1f} s, of which training {train:.1f} s: a command's fixed "
            f"cost {fixed:.1f} s (target {TARGET_FIXED:.0f} s, "
            f"{'met' if fixed <= TARGET_FIXED else 'not met'}; {before:.1f} s from its start "
            f"to the first step, {after:.1f} s from the last step to its exit)"
        )


def main() -> None:
    args = parse_args()
    config = Path(args.config)
    cfg = configured(config, args.budget, args.seeds)
    with tempfile.TemporaryDirectory(prefix="sixblanks-bench-") as tmp:
        out = Path(args.out) if args.out else Path(tmp) / "exp"
        phases, results, workers = experiment(cfg, out)
        mlflow = mlflow_alone(out, [r["run_id"] for r in results])
        run = one_run(cfg, Path(tmp))
    validate = validate_seconds(config)
    print_experiment(config, cfg, phases, results)
    print_apart(mlflow, run, validate)


if __name__ == "__main__":
    main()
