"""Compute curves: score against a budget axis fitted per arm with ScaleRL's sigmoid (Khatri et al.
2025)

    R(C) = R0 + (A - R0) / (1 + (C_mid / C) ** B)

R0 is the score at C = 0 (the warm-start policy every arm starts from, held fixed), A the
asymptote, B the efficiency exponent and C_mid the compute at which half of the gain A - R0 is
reached. Two arms can differ in the asymptote (what they reach) or only in the efficiency (how fast
they get there); a difference at one budget cannot tell which. Intervals resample an arm's runs
(seeds) with replacement and refit.

Shapes: ``c`` and ``r`` are ``[points]``; a run is one ``(c, r)`` pair, an arm a list of runs.
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import optimize

DIFFERS_ASYMPTOTE, DIFFERS_EFFICIENCY, NO_DIFFERENCE, TOO_FEW, NOT_IDENTIFIED = (
    "differs in asymptote",
    "differs in efficiency",
    "no difference",
    "too few seeds for a verdict",
    "not identified",
)
# a percentile bootstrap over fewer runs is too narrow to decide on (three runs have ten distinct
# resamples): below this many runs per arm a fit has no interval and a pair no verdict
MIN_RUNS = 5


def sigmoid(c: np.ndarray, a: float, b: float, c_mid: float, r0: float) -> np.ndarray:
    """R(C) for ``c`` ``[points]`` (C > 0)."""

    c = np.asarray(c, dtype=float)
    return r0 + (a - r0) / (1.0 + (c_mid / c) ** b)


@dataclass(frozen=True)
class Fit:
    a: float
    b: float
    c_mid: float
    r0: float
    rmse: float
    points: int

    def predict(self, c) -> np.ndarray:
        return sigmoid(c, self.a, self.b, self.c_mid, self.r0)


# the efficiency parameters are searched on a grid (A is then a closed-form least-squares value),
# then the best point is refined; bootstrap refits reuse the grid with resampling weights, which
# makes a few hundred refits one matrix product
B_GRID = np.geomspace(0.1, 10.0, 96)
MID_STEPS = 128


def _grid(c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``[combos]`` B and log C_mid values and ``[combos, points]`` the shape g(C) = 1 / (1 +
    (C_mid / C)^B) at each."""

    lo, hi = np.log(c.min()) - 3.0, np.log(c.max()) + 4.0
    b, m = np.meshgrid(B_GRID, np.linspace(lo, hi, MID_STEPS), indexing="ij")
    b, m = b.ravel(), m.ravel()
    g = 1.0 / (1.0 + np.exp(b[:, None] * (m[:, None] - np.log(c)[None, :])))
    return b, m, g


def _weighted_best(
    w: np.ndarray, y: np.ndarray, g: np.ndarray, r0: float, bounds: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each weight row of ``w`` ``[resamples, points]``: the best grid combo, its asymptote A
    and its weighted sum of squares. With y = R - R0, the model is y = (A - R0) g, linear in A."""

    num = (w * y) @ g.T  # [resamples, combos]
    den = w @ (g * g).T
    with np.errstate(all="ignore"):
        gain = np.clip(num / den, bounds[0] - r0, bounds[1] - r0)
    sse = (w @ (y * y))[:, None] - 2 * gain * num + gain * gain * den
    best = np.argmin(sse, axis=1)
    rows = np.arange(len(w))
    return best, gain[rows, best] + r0, sse[rows, best]


def fit_curve(
    c: np.ndarray, r: np.ndarray, r0: float, bounds: tuple[float, float] = (0.0, 1.0)
) -> Fit | None:
    """Least-squares fit of A, B, C_mid to the points with C > 0; ``bounds`` is the range the
    scores can take (A is kept inside it). None with fewer than three distinct C."""

    c, r = np.asarray(c, dtype=float), np.asarray(r, dtype=float)
    keep = (c > 0) & np.isfinite(r)
    c, r = c[keep], r[keep]
    if len(np.unique(c)) < 3:
        return None
    b, m, g = _grid(c)
    k, a, _ = _weighted_best(np.ones((1, len(c))), r - r0, g, r0, bounds)
    p0 = (float(a[0]), float(b[k[0]]), float(m[k[0]]))
    lo = [bounds[0], B_GRID[0], m.min() - 1]
    hi = [bounds[1], B_GRID[-1], m.max() + 1]

    def resid(p):
        return sigmoid(c, p[0], p[1], np.exp(p[2]), r0) - r

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            x0 = np.clip(p0, np.array(lo) + 1e-9, np.array(hi) - 1e-9)
            p = optimize.least_squares(resid, x0, bounds=(lo, hi)).x
    except (ValueError, np.linalg.LinAlgError):
        p = np.array(p0)
    if np.mean(resid(p) ** 2) > np.mean(resid(np.array(p0)) ** 2):
        p = np.array(p0)
    err = float(np.sqrt(np.mean(resid(p) ** 2)))
    return Fit(float(p[0]), float(p[1]), float(np.exp(p[2])), float(r0), err, int(len(c)))


def _pooled(runs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    return (
        np.concatenate([np.asarray(c, dtype=float) for c, _ in runs]),
        np.concatenate([np.asarray(r, dtype=float) for _, r in runs]),
    )


@dataclass(frozen=True)
class ArmFit:
    """An arm's fit: ``fit`` the least-squares refinement (for prediction), ``estimate`` the grid
    fit to every run once (A, B, log C_mid) and ``boots`` ``[resamples, 3]`` the same grid fit to
    runs resampled with replacement. Estimates and intervals come from one procedure, so an interval
    that excludes its estimate means the data do not determine the curve (``problem`` says so)."""

    fit: Fit | None
    boots: np.ndarray  # [resamples, 3]: A, B, log C_mid of the refits

    runs: int = 0
    estimate: tuple[float, float, float] | None = None
    rmse: float = float("nan")  # of ``estimate`` on the pooled points
    mid_range: tuple[float, float] = (float("nan"), float("nan"))  # log C_mid's search range

    def interval(self, k: int) -> tuple[float, float]:
        if len(self.boots) < 10:
            return float("nan"), float("nan")
        lo, hi = np.quantile(self.boots[:, k], [0.025, 0.975])
        return float(lo), float(hi)

    def problem(self) -> str | None:
        """Why the fit is shown without numbers, or None where its estimate and intervals stand."""

        if self.fit is None or self.estimate is None:
            return "too few positions to fit"
        if self.runs < MIN_RUNS:
            return f"{self.runs} finished run(s): no fit shown below {MIN_RUNS} runs"
        if len(self.boots) < 10:
            return "too few refits for an interval"
        a, b, m = self.estimate
        # a parameter on the edge of its search range is not estimated but cut off: the curve
        # has not bent within the budget (C_mid past the end, B a step) or bent before it began
        if b <= B_GRID[0] or b >= B_GRID[-1]:
            return "not identified: B at the edge of its search range (no bend in the data)"
        if m <= self.mid_range[0] or m >= self.mid_range[1]:
            return "not identified: C_mid at the edge of its search range (no bend in the data)"
        for k, name in enumerate(("A", "B", "C_mid")):
            lo, hi = self.interval(k)
            if not lo <= self.estimate[k] <= hi:
                return f"not identified: the refits' interval of {name} excludes the fit's value"
        return None


def _run_key(run: tuple[np.ndarray, np.ndarray]) -> bytes:
    c, r = run
    data = np.asarray(c, dtype=float).tobytes() + b"|" + np.asarray(r, dtype=float).tobytes()
    return hashlib.sha256(data).digest()


def _arm_rng(arm: str, seed: int) -> np.random.Generator:
    # a stable hash (Python's own hash of a string changes between processes) of the arm's name
    # with the seed: each arm draws its own resamples, so two arms' refits paired row by row in
    # compare_fits are independent, as the comparison assumes
    name = int.from_bytes(hashlib.sha256(arm.encode()).digest()[:8], "little")
    return np.random.default_rng([seed, name])


def fit_arm(
    runs: list[tuple[np.ndarray, np.ndarray]],
    r0: float,
    bounds: tuple[float, float] = (0.0, 1.0),
    resamples: int = 200,
    seed: int = 0,
    arm: str = "",
) -> ArmFit:
    """The fit to every run's points pooled, and refits to runs resampled with replacement (a
    resample weighs each run's points by how often the run was drawn; refits are on the grid).
    The estimate is the same grid fit with every run drawn once.

    The resamples are drawn from a stream of the arm's own (``arm``, its name, with ``seed``), over
    its runs put in an order of their content: the fit and its intervals do not depend on the order
    the runs or the arms are listed in, and arms of different names draw independently (arms that
    all pass the same name, or none, share one stream and are not independent)."""

    # in an order of their content, so that the run a draw picks does not depend on the listing
    runs = sorted(runs, key=_run_key)
    fit = fit_curve(*_pooled(runs), r0, bounds) if runs else None
    if fit is None:
        return ArmFit(fit, np.zeros((0, 3)), len(runs))
    c, r = _pooled(runs)
    keep = (c > 0) & np.isfinite(r)
    run_of = np.concatenate([np.full(len(cc), i) for i, (cc, _) in enumerate(runs)])[keep]
    c, r = c[keep], r[keep]
    rng = _arm_rng(arm, seed)
    draws = rng.integers(0, len(runs), size=(resamples if len(runs) > 1 else 0, len(runs)))
    counts = [np.bincount(d, minlength=len(runs)) for d in draws]  # [resamples][runs]
    weights = np.vstack([np.ones((1, len(runs))), *counts])  # row 0: every run once
    b, m, g = _grid(c)
    k, a, _ = _weighted_best(weights[:, run_of], r - r0, g, r0, bounds)
    est = (float(a[0]), float(b[k[0]]), float(m[k[0]]))
    rmse = float(np.sqrt(np.mean((sigmoid(c, est[0], est[1], np.exp(est[2]), r0) - r) ** 2)))
    boots = np.column_stack([a[1:], b[k[1:]], m[k[1:]]])
    return ArmFit(fit, boots, len(runs), est, rmse, (float(m.min()), float(m.max())))


@dataclass(frozen=True)
class CurveComparison:
    verdict: str
    d_a: tuple[float, float, float]  # difference of asymptotes: point, low, high
    d_b: tuple[float, float, float]  # difference of efficiency exponents
    d_log_mid: tuple[float, float, float]  # difference of log C_mid


def compare_fits(x: ArmFit, y: ArmFit, alpha: float = 0.05) -> CurveComparison | None:
    """Arm x minus arm y: intervals of each parameter's difference from the two arms' independent
    refits. Three parameters are tested, so each interval is at level alpha / 3 (Bonferroni), and
    a percentile bootstrap over n runs is widened by sqrt(n / (n - 1)) around the estimate (it
    is too narrow by about that factor with few runs). "differs in asymptote" where A's interval
    excludes 0; else "differs in efficiency" where B's or log C_mid's does; else "no difference".
    Below MIN_RUNS runs on either side: "too few seeds"; where either arm's fit is not identified
    (``ArmFit.problem``) or a difference's interval excludes its own estimate: "not identified".
    None where either arm has no fit or too few refits."""

    if x.estimate is None or y.estimate is None or min(len(x.boots), len(y.boots)) < 10:
        return None
    n = min(len(x.boots), len(y.boots))
    diff = x.boots[:n] - y.boots[:n]
    # the estimates come from the same grid fit as the refits (a least-squares refinement of one
    # and the grid of the other would put the estimate outside its own interval)
    points = np.asarray(x.estimate) - np.asarray(y.estimate)

    runs = max(2, min(x.runs, y.runs))
    widen = np.sqrt(runs / (runs - 1))
    tail = alpha / 3 / 2

    def ci(k: int) -> tuple[float, float, float]:
        lo, hi = np.quantile(diff[:, k], [tail, 1 - tail])
        p = float(points[k])
        return p, float(p - (p - lo) * widen), float(p + (hi - p) * widen)

    d_a, d_b, d_mid = ci(0), ci(1), ci(2)
    if min(x.runs, y.runs) < MIN_RUNS:
        return CurveComparison(TOO_FEW, d_a, d_b, d_mid)
    if x.problem() or y.problem() or not all(t[1] <= t[0] <= t[2] for t in (d_a, d_b, d_mid)):
        return CurveComparison(NOT_IDENTIFIED, d_a, d_b, d_mid)

    def excludes_zero(t):
        return t[1] > 0 or t[2] < 0

    verdict = (
        DIFFERS_ASYMPTOTE
        if excludes_zero(d_a)
        else DIFFERS_EFFICIENCY
        if excludes_zero(d_b) or excludes_zero(d_mid)
        else NO_DIFFERENCE
    )
    return CurveComparison(verdict, d_a, d_b, d_mid)


def extrapolation_check(
    runs: list[tuple[np.ndarray, np.ndarray]], r0: float, bounds=(0.0, 1.0)
) -> dict[str, float] | None:
    """Fit on the first half of the budget axis and predict the score at its end: the prediction,
    the observed mean of the last points and their difference. None where the first half holds
    fewer than three distinct positions."""

    c, r = _pooled(runs)
    end = float(c.max()) if len(c) else 0.0
    first = c <= end / 2
    fit = fit_curve(c[first], r[first], r0, bounds)
    if fit is None:
        return None
    last = np.array([np.asarray(rr, dtype=float)[np.argmax(cc)] for cc, rr in runs if len(cc)])
    at = np.array([np.max(cc) for cc, _ in runs if len(cc)])
    predicted = float(np.mean(fit.predict(at)))
    observed = float(last.mean())
    return {
        "predicted": predicted,
        "observed": observed,
        "error": predicted - observed,
        "at": float(at.mean()),
    }
