"""The sign-flip test's looks with every sign pattern against half of them, side by side.

A sign pattern and its negation give one segment of shifts (``reports/signflip.py``), so up to
``EXACT_UP_TO`` seeds the test keeps the patterns whose first sign is + and counts each twice. This
script runs the looks of the default design (10, 12 and 14 seeds) over ``--sims`` simulated
experiments both ways, alternating, ``--rounds`` times: the whole set (each pattern and its
negation, each counted once) and the half, then prints seconds per round, the ratio of their
medians and the largest difference of the p-values and of the interval ends.

    .venv/bin/python benchmarks/signflip.py [--sims 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import numpy as np

from sixblanks.reports import signflip


@contextlib.contextmanager
def every_pattern():
    """``signflip._patterns`` returning each exact pattern and its negation, each counted once."""

    half = signflip._patterns

    def whole(n: int, draws: int, seed: int):
        signs, base, total, mult = half(n, draws, seed)
        if mult == 1:
            return signs, base, total, mult
        return np.concatenate([signs, -signs]), base, total, 1

    signflip._patterns = whole
    try:
        yield
    finally:
        signflip._patterns = half


def looks(d: np.ndarray, design: signflip.Design) -> list[tuple[np.ndarray, ...]]:
    """Every look of ``design`` on ``d`` ``[sims, cap]``: (p, low, high) per look."""

    levels = design.levels()
    return [
        signflip.sign_flip_look(d[:, :n], levels[k], design) for k, n in enumerate(design.interims)
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    design = signflip.Design()
    d = np.random.default_rng(0).normal(0.3, 1, size=(args.sims, design.cap))
    times: dict[str, list[float]] = {"every pattern": [], "half": []}
    out = {}
    for r in range(args.rounds):
        order = ["every pattern", "half"] if r % 2 == 0 else ["half", "every pattern"]
        for mode in order:
            ctx = every_pattern() if mode == "every pattern" else contextlib.nullcontext()
            with ctx:
                t = time.perf_counter()
                out[mode] = looks(d, design)
                times[mode].append(time.perf_counter() - t)
        print(f"round {r + 1}: " + ", ".join(f"{m} {times[m][-1]:.3f} s" for m in times))
    ratio = statistics.median(times["every pattern"]) / statistics.median(times["half"])
    print(f"looks at {design.interims} seeds, {args.sims} experiments: half {ratio:.2f}x faster")
    for i, name in enumerate(("p-value", "interval low", "interval high")):
        diff = max(
            float(np.max(np.abs(a[i] - b[i]))) for a, b in zip(out["every pattern"], out["half"])
        )
        print(f"largest |difference| of the {name}: {diff:.3g}")


if __name__ == "__main__":
    main()
