"""Honest statistics for few seeds: IQM, Student t intervals of means over seeds (per task,
combined by Welch-Satterthwaite), stratified bootstrap intervals (tasks are the strata),
probability of improvement within each task and averaged over tasks, per-task min-max
normalization, area under the learning curve, and mean curves with the number of runs behind each
point. Vectorised numpy/scipy (rliable's definitions, without rliable)."""

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


def stratified_bootstrap_ci_strata(
    strata: list[np.ndarray],
    statistic: str = "mean",
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``stratified_bootstrap_ci`` over per-task score lists that may differ in length (a run
    failed on one task): each task's scores are resampled with replacement within that task, and
    the statistic is computed over all resampled scores together.

    With equal lengths this is exactly ``stratified_bootstrap_ci`` on the ``[runs, tasks]`` matrix
    (same draws). Empty strata are left out; with one score in every stratum there is no interval.
    """

    parts = [np.asarray(s, dtype=float).ravel() for s in strata]
    parts = [s for s in parts if len(s)]
    if not parts:
        return float("nan"), float("nan"), float("nan")
    if len({len(s) for s in parts}) == 1:
        return stratified_bootstrap_ci(
            np.column_stack(parts), statistic, resamples, confidence, seed
        )
    fn = STATISTICS[statistic]
    point = float(fn(np.concatenate(parts)[None, :])[0])
    if max(len(s) for s in parts) < 2:
        return point, float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    resampled = np.concatenate(
        [s[rng.integers(0, len(s), size=(resamples, len(s)))] for s in parts], axis=1
    )
    alpha = (1 - confidence) / 2
    low, high = np.quantile(fn(resampled), [alpha, 1 - alpha])
    return point, float(low), float(high)


def stratified_t_interval(
    strata: list[np.ndarray], confidence: float = 0.95
) -> tuple[float, float, float, float]:
    """(mean, low, high, degrees of freedom) of the mean over every run of every stratum (task),
    with a Student t interval over the seeds.

    The mean is sum(x) / N over all N runs. Seeds are independent within each task and a task's
    level is fixed, so Var(mean) = sum_t n_t * s_t^2 / N^2 (s_t the task's sample standard
    deviation over its n_t seeds), with Welch-Satterthwaite's degrees of freedom; one task is the
    ordinary t interval, n - 1 degrees of freedom. A percentile bootstrap over two seeds can only
    return the two values themselves (it covers the true mean half the time): the t interval is
    exact for normal scores at any n >= 2, and wide where the seeds say little.

    Any task with fewer than two seeds leaves its spread unknown: no interval (low = high = nan).
    Seeds that all agree give a zero-width interval at the mean."""

    parts = [np.asarray(s, dtype=float).ravel() for s in strata]
    parts = [s[np.isfinite(s)] for s in parts]
    parts = [s for s in parts if len(s)]
    nan = float("nan")
    if not parts:
        return nan, nan, nan, nan
    n_all = sum(len(s) for s in parts)
    mean = float(np.concatenate(parts).sum() / n_all)
    if min(len(s) for s in parts) < 2:
        return mean, nan, nan, nan
    # each task's contribution to Var(mean): (n_t / N)^2 * s_t^2 / n_t
    terms = np.array([len(s) * s.var(ddof=1) / n_all**2 for s in parts])
    dofs = np.array([len(s) - 1 for s in parts], dtype=float)
    var = float(terms.sum())
    if var <= 0:
        return mean, mean, mean, float(dofs.sum())
    df = float(var**2 / np.sum(terms**2 / dofs))
    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * np.sqrt(var)
    return mean, mean - half, mean + half, df


def welch_t_interval(
    a: np.ndarray, b: np.ndarray, confidence: float = 0.95
) -> tuple[float, float, float]:
    """(mean(b) - mean(a), low, high): Welch's t interval for the difference of two means from
    independent seeds (two experiments: different runs, not paired), Welch-Satterthwaite degrees
    of freedom. Fewer than two seeds on a side: no interval; no spread on either: zero width."""

    a, b = np.asarray(a, dtype=float).ravel(), np.asarray(b, dtype=float).ravel()
    diff = float(b.mean() - a.mean()) if len(a) and len(b) else float("nan")
    if len(a) < 2 or len(b) < 2:
        return diff, float("nan"), float("nan")
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    if va + vb <= 0:
        return diff, diff, diff
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2, df) * np.sqrt(va + vb))
    return diff, diff - half, diff + half


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


def probability_of_improvement_by_task(
    x: dict[str, np.ndarray], y: dict[str, np.ndarray]
) -> tuple[float, dict[str, float]]:
    """rliable's P(X > Y) over tasks: computed within each task, then averaged over the tasks that
    both X and Y have scores on (never pooled across tasks, where a task's scale would decide).

    Returns (the average, {task: P within that task}); nan where no task is shared."""

    per = {
        t: probability_of_improvement(x[t], y[t])
        for t in x
        if t in y and np.size(x[t]) and np.size(y[t])
    }
    return (float(np.mean(list(per.values()))) if per else float("nan")), per


def task_ranges(scores: dict[str, np.ndarray]) -> dict[str, tuple[float, float]] | None:
    """Per-task (min, max) for min-max normalization, or None where every task's scores already lie
    in [0, 1] (built-in task rewards do: their raw scores are comparable across tasks)."""

    arrays = {t: np.asarray(v, dtype=float).ravel() for t, v in scores.items()}
    arrays = {t: v[~np.isnan(v)] for t, v in arrays.items()}
    if all(len(v) == 0 or (v.min() >= 0 and v.max() <= 1) for v in arrays.values()):
        return None
    return {
        t: (float(v.min()), float(v.max())) if len(v) else (0.0, 1.0) for t, v in arrays.items()
    }


def normalize(x: np.ndarray | float, lo: float, hi: float) -> np.ndarray | float:
    """(x - lo) / (hi - lo); 0 where the task's scores do not vary (hi == lo)."""

    x = np.asarray(x, dtype=float)
    out = np.zeros_like(x) if hi == lo else (x - lo) / (hi - lo)
    return float(out) if out.ndim == 0 else out


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


def curve_matrix(curves: list[tuple[np.ndarray, np.ndarray]], grid: np.ndarray) -> np.ndarray:
    """``[curves, grid]``: each curve interpolated on ``grid``, NaN outside its own x-range."""

    mat = np.full((len(curves), len(grid)), np.nan)
    for i, (x, y) in enumerate(curves):
        if len(x):
            order = np.argsort(x)
            x, y = np.asarray(x, dtype=float)[order], np.asarray(y, dtype=float)[order]
            inside = (grid >= x[0]) & (grid <= x[-1])
            mat[i, inside] = np.interp(grid[inside], x, y)
    return mat


def band(
    curves: list[tuple[np.ndarray, np.ndarray]],
    grid: np.ndarray,
    resamples: int = 500,
    seed: int = 0,
    strata: list[str] | None = None,
):
    """Mean and 95% band across seeds of curves interpolated on ``grid`` (NaN past a curve's end).

    The band at each grid point is the t interval of the mean over the curves there
    (``stratified_t_interval``, ``strata`` one label per curve, e.g. its task), as the arm table's
    interval of the final score: a percentile bootstrap over two curves would only span the two.
    ``resamples`` < 1: no band (the name is kept from the bootstrap band it replaced; ``seed`` is
    unused). Past the end of the shortest curve the mean is over fewer curves: callers draw only
    where ``runs_covering`` counts all of them, or mark the rest."""

    del seed  # a t band draws nothing
    if not curves:
        nan = np.full(len(grid), np.nan)
        return nan, nan, nan
    mat = curve_matrix(curves, grid)
    import warnings

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(mat, axis=0)
    lo, hi = np.full(len(grid), np.nan), np.full(len(grid), np.nan)
    if len(curves) < 2 or resamples < 1:
        return mean, lo, hi
    labels = np.asarray(strata if strata is not None else [""] * len(curves))
    groups = [labels == t for t in dict.fromkeys(labels.tolist())]
    for j in range(len(grid)):
        col = mat[:, j]
        _, lo[j], hi[j], _ = stratified_t_interval([col[g & ~np.isnan(col)] for g in groups])
    return mean, lo, hi


def runs_covering(curves: list[tuple[np.ndarray, np.ndarray]], grid: np.ndarray) -> np.ndarray:
    """How many curves reach each grid point (a curve covers [its first x, its last x])."""

    return (~np.isnan(curve_matrix(curves, grid))).sum(axis=0)
