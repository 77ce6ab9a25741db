"""Paired differences between two arms evaluated on the same instances, with the evaluation's own
sampling noise counted.

Every arm of an experiment is evaluated on the same held-out instances, and arms pair up by seed,
so a comparison has a crossed design: ``d[s, i] = y_a[s, i] - y_b[s, i]`` for seeds ``s`` and
instances ``i``. Its mean has the variance of a two-way random-effects model

    Var(mean d) = var_seed / S + var_instance / I + var_cell / (S * I)

estimated without bias from the ANOVA mean squares (each component truncated at zero), with
Satterthwaite's degrees of freedom and Student-t quantiles:
(MS_seed + MS_instance - MS_cell) / (S I).

A bootstrap that resamples seeds and instances, each with replacement and independently
(``twoway_bootstrap``), estimates another variance, not this one corrected for few seeds. With the
table's two-way decomposition d = mean + r_s + c_i + e_si (row effects, column effects and
residuals, each summing to 0 along rows and columns), the variance of its resampled mean is

    Var* = mean_s(r^2) / S + mean_i(c^2) / I + mean_si(e^2) / (S I)
         = ((S-1)/S MS_seed + (I-1)/I MS_instance + (S-1)(I-1)/(S I) MS_cell) / (S I)

(the cross terms vanish because each effect sums to 0). Each resampled row mean carries the cells'
noise, and so does each column mean: in expectation Var* = (S-1)/S var_seed / S + (I-1)/I
var_instance / I + (3 S I - 2 S - 2 I + 1) / (S I) var_cell / (S I), the cell term about three
times over where the mean's variance holds it once (the unbiased estimate subtracts MS_cell where
the bootstrap adds it), and the seed term shrunk by (S - 1) / S. So the bootstrap is too wide where
the cells' noise dominates and too narrow where few seeds' spread does (a percentile bootstrap over
three seeds is known to be), and one over seeds alone leaves out the evaluation's own noise (128
instances at a score of 0.3 have a binomial standard error of about 0.04). The tests check the
formula for Var* against the bootstrap.

Shapes: ``y_a``, ``y_b`` and ``d`` are ``[S, I]`` (seeds x instances); a per-seed metric (an
entropy, a clip fraction) is ``[S, 1]``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy import optimize, stats


@dataclass(frozen=True)
class MeanSquares:
    """Two-way ANOVA of an ``[S, I]`` table: rows (seeds), columns (instances), residual."""

    mean: float
    seeds: int
    instances: int
    ms_seed: float
    ms_instance: float
    ms_cell: float


def mean_squares(d: np.ndarray) -> MeanSquares:
    """Mean squares of ``d`` ``[S, I]``: MS_seed = I * sum(row effect^2) / (S - 1), MS_instance =
    S * sum(column effect^2) / (I - 1), MS_cell = sum(residual^2) / ((S - 1)(I - 1)); a term whose
    degrees of freedom are 0 is NaN."""

    d = np.asarray(d, dtype=float)
    if d.ndim == 1:
        d = d[:, None]
    s, i = d.shape
    mu = float(d.mean())
    rows, cols = d.mean(axis=1) - mu, d.mean(axis=0) - mu
    resid = d - mu - rows[:, None] - cols[None, :]
    nan = float("nan")
    return MeanSquares(
        mu,
        s,
        i,
        float(i * (rows**2).sum() / (s - 1)) if s > 1 else nan,
        float(s * (cols**2).sum() / (i - 1)) if i > 1 else nan,
        float((resid**2).sum() / ((s - 1) * (i - 1))) if s > 1 and i > 1 else nan,
    )


def twoway_se(d: np.ndarray) -> tuple[float, float, float]:
    """(mean, standard error, degrees of freedom) of the mean of ``d`` ``[S, I]``.

    S >= 2 and I >= 2: Var = (max(MS_seed, MS_cell) + max(MS_instance, MS_cell) - MS_cell) / (S I),
    the variance components var_seed = (MS_seed - MS_cell) / I and var_instance = (MS_instance -
    MS_cell) / S truncated at zero; degrees of freedom by Satterthwaite over the terms kept.
    One instance (a per-seed metric): the standard error of a mean over seeds, S - 1 degrees of
    freedom. One seed: over instances, I - 1. One of each: NaN.
    """

    ms = mean_squares(d)
    s, i = ms.seeds, ms.instances
    if s < 2 and i < 2:
        return ms.mean, float("nan"), float("nan")
    if i < 2 or s < 2:
        var, df = (ms.ms_seed if i < 2 else ms.ms_instance), (s - 1 if i < 2 else i - 1)
        return ms.mean, float(np.sqrt(var / (s * i))), float(df)
    e = ms.ms_cell
    # a component estimated at or below zero is truncated: its mean square is replaced by MS_cell,
    # which then cancels against the -MS_cell term
    if ms.ms_seed > e and ms.ms_instance > e:
        terms = [(ms.ms_seed, s - 1), (ms.ms_instance, i - 1), (-e, (s - 1) * (i - 1))]
    elif ms.ms_seed > e:
        terms = [(ms.ms_seed, s - 1)]
    elif ms.ms_instance > e:
        terms = [(ms.ms_instance, i - 1)]
    else:
        terms = [(e, (s - 1) * (i - 1))]
    total = sum(c for c, _ in terms)
    if total <= 0:
        return ms.mean, 0.0, float(s - 1)
    df = total**2 / sum(c * c / f for c, f in terms)
    return ms.mean, float(np.sqrt(total / (s * i))), float(df)


def twoway_bootstrap(d: np.ndarray, resamples: int = 2000, seed: int = 0) -> np.ndarray:
    """``[resamples]`` means of ``d`` ``[S, I]`` with seeds and instances resampled together (each
    with replacement, independently). Over resamples, its variance is mean(r^2) / S + mean(c^2) / I
    + mean(e^2) / (S I) with r, c, e the table's row effects, column effects and residuals (divide-
    by-n averages): not the ANOVA estimate of :func:`twoway_se` (the module's docstring compares
    them)."""

    d = np.asarray(d, dtype=float)
    if d.ndim == 1:
        d = d[:, None]
    s, i = d.shape
    rng = np.random.default_rng(seed)
    rs = rng.integers(0, s, size=(resamples, s))
    cs = rng.integers(0, i, size=(resamples, i))
    # mean over the resampled table = weights of rows . d . weights of columns
    wr = np.stack([np.bincount(r, minlength=s) for r in rs]) / s
    wc = np.stack([np.bincount(c, minlength=i) for c in cs]) / i
    return np.einsum("rs,si,ri->r", wr, d, wc)


@dataclass(frozen=True)
class PairedDifference:
    """Arm a minus arm b on their shared seeds and instances."""

    diff: float
    low: float
    high: float
    se: float
    df: float
    se_unpaired: float
    correlation: float
    seeds: int
    instances: int
    mde: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    @property
    def separated(self) -> bool:
        """The interval excludes 0."""

        return bool(self.low > 0 or self.high < 0)


def paired_difference(
    y_a: np.ndarray,
    y_b: np.ndarray,
    confidence: float = 0.95,
    alpha: float | None = None,
    power: float = 0.8,
) -> PairedDifference:
    """Mean of ``y_a - y_b`` (both ``[S, I]``, the same seeds in the same order and the same
    instances) with its two-way interval, the standard error the same arms would have unpaired
    (each arm's own two-way error, added in quadrature), the correlation of the two arms' outcomes
    across cells, and the minimum detectable effect at ``power`` for a two-sided test at level
    ``alpha`` (default 1 - confidence)."""

    a, b = np.asarray(y_a, dtype=float), np.asarray(y_b, dtype=float)
    if a.ndim == 1:
        a, b = a[:, None], b[:, None]
    if a.shape != b.shape:
        raise ValueError(
            f"paired arms need the same seeds x instances, got {a.shape} and {b.shape}"
        )
    mean, se, df = twoway_se(a - b)
    se_a, se_b = twoway_se(a)[1], twoway_se(b)[1]
    if np.isfinite(se) and np.isfinite(df) and df > 0:
        half = float(stats.t.ppf(0.5 + confidence / 2, df)) * se
        low, high = mean - half, mean + half
    else:
        low = high = float("nan")
    with np.errstate(all="ignore"):
        corr = np.corrcoef(a.ravel(), b.ravel())[0, 1] if a.size > 1 else float("nan")
    return PairedDifference(
        diff=mean,
        low=low,
        high=high,
        se=se,
        df=df,
        se_unpaired=float(np.hypot(se_a, se_b)),
        correlation=float(corr),
        seeds=a.shape[0],
        instances=a.shape[1],
        mde=minimum_detectable_effect(se, df, 1 - confidence if alpha is None else alpha, power),
    )


def minimum_detectable_effect(
    se: float, df: float, alpha: float = 0.05, power: float = 0.8
) -> float:
    """The smallest true difference a two-sided t-test at level ``alpha`` with this standard error
    and these degrees of freedom detects with probability ``power``: the delta with
    P(|T| > t_{1-alpha/2, df}) = power for T noncentral t with noncentrality delta / se.
    NaN where the standard error is not finite."""

    if not (np.isfinite(se) and np.isfinite(df)) or df <= 0:
        return float("nan")
    if se == 0:
        return 0.0
    crit = stats.t.ppf(1 - alpha / 2, df)

    def shortfall(nc: float) -> float:
        with np.errstate(all="ignore"):
            p = float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))
        if not np.isfinite(p):  # scipy's noncentral t fails far in its tails: the normal limit
            p = float(stats.norm.sf(crit - nc) + stats.norm.cdf(-crit - nc))
        return p - power

    hi = crit + 10.0
    while shortfall(hi) < 0:
        hi *= 2
    return float(optimize.brentq(shortfall, 0.0, hi, xtol=1e-10) * se)
