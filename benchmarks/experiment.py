"""Runs per hour of a findings claim, the padded computation against the unpadded, side by side.

Runs one claim's experiment (its arms at its first budget axis, on the base it builds on,
``--seeds`` seeds per arm) twice into fresh directories, as ``sixblanks findings`` runs it (two
workers of one thread each, start evaluations shared): once with ``rollout.skip_padding: false``
(every row padded to the batch's longest in the training forward and in decoding, the computation
before 2026-12-06) and once with the default ``true``. Prints, per mode, the runs, the seconds of
the experiment without its warm start (made once per family, cached by content), runs per hour and a
run's median training; then the ratio of the two rates (the issue's target: 1.5x) and how far the
runs' final scores moved (float rounding: the runs are the same runs up to it).

    .venv/bin/python benchmarks/experiment.py [--config experiments/findings/<claim>.yaml]
                                              [--seeds K] [--rounds R]

``--rounds`` repeats the pair, the order alternating (padded first in odd rounds), and prints the
ratio of each round and their median. Measured 2026-12-06 here (AVX2 AMD EPYC, 2 cores): in
docs/benchmarks.md, "No work on padding".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from phases import experiment, finding_experiment  # noqa: E402

TARGET = 1.5  # findings per hour, against the padded computation
MODES = {"padded": False, "unpadded": True}


def with_padding(cfg, skip: bool):
    """``cfg`` with ``rollout.skip_padding`` set to ``skip``."""

    from sixblanks.harness.config import validate_mapping

    data = cfg.model_dump(mode="json", exclude_unset=True)
    data["rollout"] = {**data.get("rollout", {}), "skip_padding": skip}
    return validate_mapping(data)


def measure(cfg, out: Path) -> dict[str, float]:
    """One experiment into ``out``: its runs, seconds without the warm start, runs per hour, the
    median training seconds of a run and each run's final score by (arm, seed)."""

    phases, results, _ = experiment(cfg, out)
    seconds = sum(v for k, v in phases.items() if k != "warm start and plan")
    return {
        "runs": len(results),
        "seconds": seconds,
        "per_hour": 3600 * len(results) / seconds,
        "train": statistics.median(r["train_seconds"] for r in results),
        "scores": {(r["arm"], r["seed"]): r["final_score"] for r in results},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=str(ROOT / "experiments/findings/gspo_no_worse.yaml"))
    ap.add_argument("--seeds", type=int, default=2, help="seeds per arm (default 2)")
    ap.add_argument("--rounds", type=int, default=1, help="pairs of experiments (default 1)")
    args = ap.parse_args()
    cfg = finding_experiment(Path(args.config), args.seeds)
    if cfg is None:
        raise SystemExit(f"{args.config} is not a findings claim (it has no `finding:` section)")
    ratios = []
    with tempfile.TemporaryDirectory(prefix="sixblanks-experiment-") as tmp:
        for r in range(args.rounds):
            order = list(MODES) if r % 2 == 0 else list(reversed(MODES))
            got = {}
            for name in order:
                print(f"round {r + 1}: {name} ...", file=sys.stderr, flush=True)
                got[name] = measure(with_padding(cfg, MODES[name]), Path(tmp) / f"{r}-{name}")
            print(f"{Path(args.config).name}, round {r + 1} ({' first, '.join(order)} second):")
            print(f"{'':28}{'runs':>6}{'seconds':>10}{'runs/hour':>11}{'training':>10}")
            for name in MODES:
                g = got[name]
                print(
                    f"  {name:26}{g['runs']:>6}{g['seconds']:>10.1f}{g['per_hour']:>11.0f}"
                    f"{g['train']:>9.1f}s"
                )
            ratios.append(got["unpadded"]["per_hour"] / got["padded"]["per_hour"])
            a, b = got["padded"]["scores"], got["unpadded"]["scores"]
            moved = max(abs(a[k] - b[k]) for k in a)
            same = sum(a[k] == b[k] for k in a)
            print(
                f"  runs per hour, unpadded / padded: {ratios[-1]:.2f}x; final scores: {same} of "
                f"{len(a)} runs identical, the largest move {moved:.4f}"
            )
    ratio = statistics.median(ratios)
    print(
        f"findings per hour, unpadded / padded: {ratio:.2f}x (median of {len(ratios)}; target "
        f"{TARGET}x, {'met' if ratio >= TARGET else 'not met'})"
    )


if __name__ == "__main__":
    main()
