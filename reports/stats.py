"""Honest statistics for few seeds: IQM, stratified bootstrap intervals, probability of improvement,
area under the learning curve. Vectorised numpy/scipy (rliable's definitions, without rliable)."""

from __future__ import annotations

import numpy as np
from scipy import stats


def iqm(x: np.ndarray, axis: int | None = None) -> np.ndarray | float:
    """Interquartile mean: the mean of the middle 50% (25% trimmed from each end)."""

    x = np.asarray(x, dtype=float)
    if axis is None:
        x = x.ravel()
        axis = 0
    return stats.trim_mean(x, 0.25, axis=axis)


STATISTICS = {
    "mean": lambda a: a.mean(axis=1),
    "median": lambda a: np.median(a, axis=1),
    "iqm": lambda a: iqm(a, axis=1),
}


def stratified_bootstrap_ci(
    scores: np.ndarray,
    statistic: str = "mean",
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(point estimate, low, high) of ``statistic`` with a percentile stratified bootstrap.

    Args:
        scores: ``[runs, tasks]`` one score per seed (row) and task (column). Seeds are resampled
            with replacement independently within each task (the strata).
        statistic: "mean", "median" or "iqm", computed over all resampled (seed, task) scores.

    With one run per task there is no interval: low = high = nan.
    """

    s = np.asarray(scores, dtype=float)
    if s.ndim == 1:
        s = s[:, None]
    n, k = s.shape
    fn = STATISTICS[statistic]
    point = float(fn(s.reshape(1, -1))[0])
    if n < 2:
        return point, float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n, k))
    resampled = s[idx, np.arange(k)[None, None, :]]  # [R, n, k]
    dist = fn(resampled.reshape(resamples, n * k))
    alpha = (1 - confidence) / 2
    low, high = np.quantile(dist, [alpha, 1 - alpha])
    return point, float(low), float(high)


def stratified_bootstrap_ci_loop(scores, statistic="mean", resamples=2000, confidence=0.95, seed=0):
    """The same estimator written as a plain loop (a second method to check the vectorised one)."""

    s = np.asarray(scores, dtype=float)
    if s.ndim == 1:
        s = s[:, None]
    n, k = s.shape
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n, k))
    vals = []
    for r in range(resamples):
        sample = np.array([[s[idx[r, i, j], j] for j in range(k)] for i in range(n)]).ravel()
        vals.append({"mean": np.mean, "median": np.median, "iqm": iqm}[statistic](sample))
    alpha = (1 - confidence) / 2
    return float(np.quantile(vals, alpha)), float(np.quantile(vals, 1 - alpha))


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y) + 1/2 P(X = Y) over all pairs: the Mann-Whitney U statistic of X divided by n·m."""

    x, y = np.asarray(x, dtype=float).ravel(), np.asarray(y, dtype=float).ravel()
    if not len(x) or not len(y):
        return float("nan")
    u = stats.mannwhitneyu(x, y, alternative="two-sided").statistic
    return float(u / (len(x) * len(y)))


def curve_auc(xs: np.ndarray, ys: np.ndarray) -> float:
    """Area under a learning curve (score vs a budget counter), normalised by the x-range: the
    average score over the budget spent. A single point gives that point's score."""

    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    if len(xs) == 0:
        return float("nan")
    if len(xs) == 1 or xs.max() == xs.min():
        return float(ys.mean())
    order = np.argsort(xs)
    xs, ys = xs[order], ys[order]
    return float(np.sum((xs[1:] - xs[:-1]) * (ys[1:] + ys[:-1]) / 2) / (xs[-1] - xs[0]))


def band(
    curves: list[tuple[np.ndarray, np.ndarray]],
    grid: np.ndarray,
    resamples: int = 500,
    seed: int = 0,
):
    """Mean and 95% bootstrap band across seeds of curves interpolated on ``grid`` (NaN past a curve's end)."""

    if not curves:
        nan = np.full(len(grid), np.nan)
        return nan, nan, nan
    mat = np.full((len(curves), len(grid)), np.nan)
    for i, (x, y) in enumerate(curves):
        if len(x):
            order = np.argsort(x)
            x, y = np.asarray(x)[order], np.asarray(y)[order]
            inside = (grid >= x[0]) & (grid <= x[-1])
            mat[i, inside] = np.interp(grid[inside], x, y)
    import warnings

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(mat, axis=0)
    if len(curves) < 2:
        return mean, mean * np.nan, mean * np.nan
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(curves), size=(resamples, len(curves)))
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        boots = np.nanmean(mat[idx], axis=1)
        lo, hi = np.nanquantile(boots, [0.025, 0.975], axis=0)
    return mean, lo, hi
