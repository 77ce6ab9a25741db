"""Compare two recordings of the golden fixture (tests/golden/presets.json), before a re-record is
committed: what a deliberate change of arithmetic, or another machine's rounding, moved.

Per preset it prints the largest relative difference of the first trained step's loss and gradient
norm (the bar for a re-record: at most 1e-5), whether the ledger counters, the discards by reason
and every held-out evaluation are identical, the largest relative difference of any logged number
over the whole run (rounding grows through training) and the first step whose sampled batch
differs, and how far the final held-out score moved against the seed-to-seed spread of that score
(measured here: the golden grpo run at ``--seeds`` seeds from the same initial policy).

    .venv/bin/python benchmarks/golden_compare.py OLD.json [NEW.json] [--seeds 5]

OLD may be ``git:REV`` (the fixture as committed at REV); NEW defaults to the working tree's.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FIXTURE = "tests/golden/presets.json"


def load(source: str) -> dict:
    if source.startswith("git:"):
        rev = source[4:]
        text = subprocess.run(
            ["git", "show", f"{rev}:{FIXTURE}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return json.loads(text)
    return json.loads(Path(source).read_text())


def rel(a: float, b: float) -> float:
    """|a - b| relative to the larger magnitude (0 where both are 0)."""

    scale = max(abs(a), abs(b))
    return 0.0 if scale == 0 else abs(a - b) / scale


def step_diffs(old: list[dict], new: list[dict]) -> dict[str, float]:
    """The largest difference of each metric over every step both runs logged, relative to its
    magnitude or to 1e-3 where it is smaller (a KL of 1e-6 moved by 1e-7 is not 10% off); the
    sampler-trainer gaps ``mismatch.*``, rounding itself, are left out."""

    out: dict[str, float] = {}
    for a, b in zip(old, new):
        for k in a.keys() & b.keys():
            if not k.startswith("mismatch."):
                d = abs(a[k] - b[k]) / max(abs(a[k]), abs(b[k]), 1e-3)
                out[k] = max(out.get(k, 0.0), d)
    return out


def diverged_at(old: list[dict], new: list[dict]) -> int | None:
    """The first step whose sampled batch differs (its mean reward or response lengths)."""

    keys = ("reward_mean", "response_length_correct", "response_length_incorrect")
    for i, (a, b) in enumerate(zip(old, new)):
        if any(a.get(k) != b.get(k) for k in keys):
            return i
    return None


def first_trained(steps: list[dict]) -> dict:
    return next((m for m in steps if not m.get("skipped") and "loss" in m), {})


def seed_spread(seeds: int) -> float:
    """The standard deviation over ``seeds`` seeds of the golden grpo run's final held-out score."""

    from dataclasses import replace

    import torch

    from tests.golden.record import golden_trainer

    torch.set_num_threads(1)
    finals = []
    for seed in range(seeds):
        tr = golden_trainer("grpo")
        tr.ctx.settings = replace(tr.ctx.settings, seed=seed)
        finals.append(tr.train().evals[-1]["score"])
        print(f"  grpo seed {seed}: final score {finals[-1]:.4f}", flush=True)
    return statistics.stdev(finals) if len(finals) > 1 else float("nan")


def compare(old: dict, new: dict) -> list[dict]:
    rows = []
    for preset in sorted(old["presets"].keys() & new["presets"].keys()):
        a, b = old["presets"][preset], new["presets"][preset]
        fa, fb = first_trained(a["steps"]), first_trained(b["steps"])
        diffs = step_diffs(a["steps"], b["steps"])
        shared = [k for k in a["counters"] if k in b["counters"]]
        rows.append(
            {
                "preset": preset,
                "first_loss": rel(fa.get("loss", 0.0), fb.get("loss", 0.0)),
                "first_grad_norm": rel(fa.get("grad_norm", 0.0), fb.get("grad_norm", 0.0)),
                "counters_same": all(a["counters"][k] == b["counters"][k] for k in shared),
                "discards_same": a["discarded_tokens"] == b["discarded_tokens"]
                and a["discarded_rollouts"] == b["discarded_rollouts"],
                "evals_same": a["evals"] == b["evals"],
                "steps_same": len(a["steps"]) == len(b["steps"]),
                "run_max": max(diffs.values(), default=0.0),
                "worst": max(diffs, key=diffs.get) if diffs else "",
                "diverged": diverged_at(a["steps"], b["steps"]),
                "score_moved": b["evals"][-1]["score"] - a["evals"][-1]["score"],
                "hash_same": a["policy_hash"] == b["policy_hash"],
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", help="the earlier recording: a file, or git:REV")
    parser.add_argument("new", nargs="?", default=str(ROOT / FIXTURE))
    parser.add_argument("--seeds", type=int, default=5, help="seeds for the score's spread")
    args = parser.parse_args(argv)
    old, new = load(args.old), load(args.new)
    for name, rec in (("old", old), ("new", new)):
        print(f"{name}: machine {rec.get('machine', 'not recorded')}")
    rows = compare(old, new)
    print(
        f"{'preset':<22} {'1st loss':>9} {'1st gnorm':>9} counters discards evals "
        f"{'run max':>8}  worst metric            samples differ  score moved"
    )
    for r in rows:
        when = "never" if r["diverged"] is None else f"step {r['diverged']}"
        print(
            f"{r['preset']:<22} {r['first_loss']:>9.1e} {r['first_grad_norm']:>9.1e} "
            f"{'same' if r['counters_same'] else 'DIFFER':>8} "
            f"{'same' if r['discards_same'] else 'DIFFER':>8} "
            f"{'same' if r['evals_same'] else 'DIFFER':>5} {r['run_max']:>8.1e}  "
            f"{r['worst']:<24} {when:>13}  {r['score_moved']:+.4f}"
        )
    first = max(max(r["first_loss"], r["first_grad_norm"]) for r in rows)
    exact = all(r["counters_same"] and r["discards_same"] for r in rows)
    moved = max(abs(r["score_moved"]) for r in rows)
    ws = rel(old["warm_start"]["losses"][-1], new["warm_start"]["losses"][-1])
    print(f"warm start: last SFT loss moved {ws:.1e} relative")
    print(
        f"largest first-step relative difference: {first:.1e} (bar: 1e-5) -> "
        f"{'within' if first <= 1e-5 else 'OVER'}"
    )
    print(f"ledger counters and discards identical in every preset: {'yes' if exact else 'NO'}")
    spread = seed_spread(args.seeds) if args.seeds > 1 else float("nan")
    print(
        f"largest move of a final held-out score: {moved:.4f}; seed-to-seed spread of grpo's final "
        f"score (sd over {args.seeds} seeds): {spread:.4f}"
        + (f" ({moved / spread:.2f} of it)" if spread and not math.isnan(spread) else "")
    )
    return 0 if first <= 1e-5 and exact else 1


if __name__ == "__main__":
    raise SystemExit(main())
