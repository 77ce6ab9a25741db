"""Whether the testbed (``experiments/testbed.yaml``) is a setting where algorithms can differ: its
four properties measured at 5 seeds, each with a 95% t interval over the seeds, side by side.

Runs the testbed's own arms (``grpo``: the default, symmetric clipping and 4 updates per batch;
``constant``: the same with a constant loss denominator instead of per-response length
normalization; ``shuffled``: the same with rewards shuffled within each training batch) at seeds
0..4, one run at a time so that each run's training time is its own, then prints:

1. the default arm's held-out score rise from the warm start (target: at least 0.35);
2. its mean token entropy's relative fall over the run, first steps against last (target: at
   least 30%), and the largest token clip fraction of each run (target: above 5% at some step,
   on average over the seeds);
3. the mean length of incorrect responses at the end of the run, per-response normalization
   against constant normalization, paired by seed (target: the two differ by at least 2 tokens);
4. the default arm's final held-out score against the shuffled arm's, paired by seed (target: at
   least 0.2 apart);

and the training time of a run, median over the runs (target: at most 2 minutes). The scores are
the held-out evaluations at the start (the warm start) and at the end of each run; the entropy
curve's start and end are the means of its first and last ``--window`` steps (one step is noisy),
the incorrect length at the end its mean over the last quarter of the steps (at least ``--window``).

    .venv/bin/python benchmarks/testbed.py [--seeds 5] [--out DIR] [--window 5]

The warm start is trained once (or taken from the machine's cache) and shared by every run.

Measured 2026-12-06 at da802bd (15 runs, 115.8 s of training each, median): score 0.327 ->
0.809, rise 0.482 [0.378, 0.587] (met); entropy fall 0.858 (met); largest clip fraction 0.062
[0.040, 0.084] (met); incorrect-length difference 2.02 [-0.42, 4.45] tokens (met by the mean);
shuffled gap 0.678 (met).
More in docs/guide/testbed.md.
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TESTBED = ROOT / "experiments" / "testbed.yaml"
TARGETS = {"rise": 0.35, "entropy_fall": 0.30, "clip": 0.05, "length": 2.0, "shuffled": 0.2}
MAX_TRAIN_SECONDS = 120.0


def t_interval(xs: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the 95% Student t interval of the mean of ``xs``."""

    from scipy import stats

    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, math.nan, math.nan
    half = stats.t.ppf(0.975, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, m - half, m + half


def experiment(seeds: int) -> dict:
    """The testbed's file with its three arms and ``seeds`` seeds, run one at a time, no MLflow."""

    cfg = yaml.safe_load(TESTBED.read_text())
    missing = {"grpo", "constant", "shuffled"} - set(cfg["arms"])
    if missing:
        raise SystemExit(
            f"{TESTBED}: the arms {sorted(missing)} this benchmark measures are missing"
        )
    cfg["seeds"] = list(range(seeds))
    cfg["tracking"] = {"mlflow": False}
    cfg["executor"] = {"kind": "local", "workers": 1}
    return cfg


def curves(db: Path) -> tuple[dict, dict]:
    """({(arm, seed): {metric: [value by step]}}, {(arm, seed): (start score, final score)}) from
    the experiment's store."""

    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    names = ("entropy_token_mean", "clip_frac", "response_length_incorrect")
    rows = con.execute(
        "select r.arm, r.seed, m.name, m.step, m.value from metrics m join runs r using (run_id) "
        f"where m.name in {names} and m.value is not null order by m.step"
    ).fetchall()
    per: dict = {}
    for arm, seed, name, _, value in rows:
        per.setdefault((arm, seed), {}).setdefault(name, []).append(value)
    scores = {}
    for arm, seed, score in con.execute(
        "select r.arm, r.seed, e.score from evals e join runs r using (run_id) "
        "where e.split = 'test' order by e.step"
    ).fetchall():
        start, _ = scores.get((arm, seed), (score, None))
        scores[(arm, seed)] = (start, score)
    return per, scores


def line(label: str, xs: list[float], target: str, met: bool) -> str:
    m, lo, hi = t_interval(xs)
    verdict = "met" if met else "NOT MET"
    return f"  {label:<52} {m:8.3f} [{lo:.3f}, {hi:.3f}]  target {target:<10} {verdict}"


def properties(per: dict, scores: dict, seeds: range, w: int) -> dict[str, list[float]]:
    """Each property's value per seed: the default arm's score rise, its entropy's relative fall
    (first ``w`` steps against last ``w``), its largest clip fraction, the incorrect length of
    per-response minus constant normalization over the last quarter of the steps, and the default
    arm's final score minus the shuffled arm's."""

    def start(xs):
        return statistics.fmean(xs[:w])

    def end(xs):
        return statistics.fmean(xs[-w:])

    def end_quarter(xs):
        # once most answers are right, a step's incorrect responses are a handful (about 6 of 64
        # at 90% accuracy), so one step's mean length rests on a few answers: the last quarter
        # of the run's steps averages enough of them
        return statistics.fmean(xs[-max(w, len(xs) // 4) :])

    def grpo(s, metric):
        return per[("grpo", s)][metric]

    return {
        "rise": [scores[("grpo", s)][1] - scores[("grpo", s)][0] for s in seeds],
        "entropy_fall": [
            1 - end(grpo(s, "entropy_token_mean")) / start(grpo(s, "entropy_token_mean"))
            for s in seeds
        ],
        "clip": [max(grpo(s, "clip_frac")) for s in seeds],
        "length": [
            end_quarter(grpo(s, "response_length_incorrect"))
            - end_quarter(per[("constant", s)]["response_length_incorrect"])
            for s in seeds
        ],
        "shuffled": [scores[("grpo", s)][1] - scores[("shuffled", s)][1] for s in seeds],
    }


# (property, label, target as printed, whether the mean over seeds meets it)
ROWS = (
    ("rise", "1. held-out score rise, default arm", ">= 0.35", lambda m: m >= TARGETS["rise"]),
    ("entropy_fall", "2. entropy relative fall, default arm", ">= 0.30",
     lambda m: m >= TARGETS["entropy_fall"]),
    ("clip", "   largest token clip fraction, default arm", "> 0.05",
     lambda m: m > TARGETS["clip"]),
    ("length", "3. incorrect length, per-response - constant (tokens)", "|d| >= 2",
     lambda m: abs(m) >= TARGETS["length"]),
    ("shuffled", "4. final score, default - shuffled", ">= 0.2",
     lambda m: m >= TARGETS["shuffled"]),
)  # fmt: skip


LOW_NAMES = (("rise", "rise"), ("entropy_fall", "entropy"), ("shuffled", "gap"))


def report(out: Path, seeds: int, w: int) -> None:
    """Print the four properties of the experiment in ``out`` run at ``seeds`` seeds."""

    import json

    per, scores = curves(out / "results.duckdb")
    found = properties(per, scores, range(seeds), w)
    warm = statistics.fmean(scores[("grpo", s)][0] for s in range(seeds))
    final = statistics.fmean(scores[("grpo", s)][1] for s in range(seeds))
    where = TESTBED.relative_to(ROOT)
    print(f"\ntestbed: {where}, {seeds} seeds, mean [95% t interval over seeds]")
    print(
        f"  held-out score of the default arm: {warm:.3f} at the warm start, {final:.3f} at the end"
    )
    for key, label, target, met in ROWS:
        print(line(label, found[key], target, met(statistics.fmean(found[key]))))
    lows = {key: t_interval(found[key])[1] for key, _ in LOW_NAMES}
    said = ", ".join(f"{name} {lows[key]:.3f}" for key, name in LOW_NAMES)
    print(f"  each interval's lower bound: {said}")
    train = [json.loads(p.read_text())["train_seconds"] for p in out.glob("runs/*/result.json")]
    print(
        f"  training time of a run: median {statistics.median(train):.1f} s over {len(train)} runs "
        f"(max {max(train):.1f} s; target <= {MAX_TRAIN_SECONDS:.0f} s)"
    )
    print(f"  experiment directory: {out}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument(
        "--window", type=int, default=5, help="steps averaged at a curve's start and end"
    )
    ap.add_argument(
        "--out", type=Path, default=None, help="experiment directory (default: a temp one)"
    )
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="sixblanks-testbed-")) / "out"
    if out.exists():
        raise SystemExit(f"{out} exists: give a new --out (its runs would mix with this one's)")
    out.parent.mkdir(parents=True, exist_ok=True)
    cfg_file = out.parent / "testbed-benchmark.yaml"
    cfg_file.write_text(yaml.safe_dump(experiment(args.seeds), sort_keys=False))
    cli = Path(sys.executable).parent / "sixblanks"
    done = subprocess.run([str(cli), "run", str(cfg_file), "--out", str(out)])
    if done.returncode != 0:
        return done.returncode
    report(out, args.seeds, args.window)
    return 0


if __name__ == "__main__":
    sys.exit(main())
