"""The exact sign-flip test of the mean per-seed difference at one look of a sequential
experiment, its repeated confidence interval, and the design that spreads alpha over the looks
(:class:`Design`); :mod:`sixblanks.reports.sequential` runs the looks.

Input per look: ``d``, shape ``[n]``, one difference per seed (arm minus other arm, seeds paired),
``n`` the seeds so far. Look ``k`` (``n_k`` seeds, see ``Design.interims``) gets its own share
``spend[k]`` of ``alpha`` (the shares sum to ``alpha``: a Bonferroni split over looks). At look
``k`` the test computes the exact two-sided sign-flip p-value of ``d``: the share of the ``2^n``
sign patterns ``e`` whose ``|sum(e * |d|)|`` is at least the observed ``|sum(d)|`` (all patterns up
to 16 seeds, ``draws`` random ones beyond). The studentized statistic ``t = mean / (sd / sqrt(n))``
orders the patterns of one data set exactly as ``|mean|`` does (a sign flip keeps ``sum(d^2)``, so
``sd^2 = (sum(d^2) - n mean^2) / (n - 1)`` and ``|t|`` grows with ``|mean|``), so the two give one
p-value; the code computes with the sum, which has no ``sd = 0`` case (all-zero differences give
p = 1 and never separate). The look rejects, direction the sign of the mean, iff
``p <= spend[k] / skew``; otherwise the experiment continues; after the last look: no difference.

Repeated confidence intervals: at look ``k`` the interval is every ``delta`` for which the same test
applied to ``d - delta`` does not reject at the look's level. For one pattern ``e`` (with
``a = e.d``, ``b = sum(e)``) the condition ``|a - delta b| >= |sum(d) - n delta|`` holds exactly on
the segment between ``(a - sum d)/(b - n)`` and ``(a + sum d)/(b + n)``, a segment that contains the
mean; so the p-value of ``d - delta`` falls monotonically on each side of the mean, the accepted set
is one interval, and its ends are order statistics of the segments' ends (no root search). The
decision is "0 outside the interval" by construction. Since the looks split alpha (Bonferroni), the
intervals of all looks hold together with probability ``1 - alpha`` under symmetric differences: the
interval at the look where the experiment stopped is valid after stopping, which a naive interval is
not.

Skewed differences. A sign-flip test is exact when the per-seed difference is symmetric about its
mean; for a skewed difference with mean 0 its error comes from the signs, not the mean: with
lognormal (sigma 1) differences 69% of the seeds fall below the mean, all 10 seeds of a look do so
with probability 2.5%, and such a sample looks to every test of the mean (sign-flip, t,
bootstrap) like a clear negative effect. Measured, one look at 14 seeds at level 0.05 declares a
direction 12% (gamma shape 0.5) and 14% (lognormal sigma 1) of the time; the paired t-test does
the same or worse. No test of the mean holds its level for every distribution at these seed
counts, so ``skew`` divides every look's level: ``skew = 1`` is the exact test under symmetry
(error <= alpha for symmetric differences, larger for strongly skewed ones); the default
``SKEW`` keeps the family-wise error of the default design at or below alpha for gamma(0.5) and
lognormal(1) differences (simulated; see tests/test_sequential.py), at the price of power under
normal differences (``sequential_mde`` reports the detectable effect of the design as given).

"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

EXACT_UP_TO = 16  # seeds: all 2^n sign patterns up to here, random ones beyond
# measured: the default design (looks at 10, 12, 14 seeds) declares a direction under equal means
# 4.3% (lognormal sigma 1) and 4.1% (gamma shape 0.5) of the time with 8, 14% and 12% with 1
SKEW = 8.0


@dataclass(frozen=True)
class Design:
    """Seeds per arm at each look: a pilot of ``pilot``, then ``batch`` more at a time, up to
    ``cap``. ``alpha``: the error over every look (two-sided). ``spend``: the level of each look,
    ``len(interims)`` numbers summing to ``alpha``; left out, the default rule gives each look the
    least it needs to be able to stop (the smallest attainable p-value at its seeds, ``2 / 2^n``,
    times ``skew``) and splits the rest in proportion to the seeds each look adds. ``skew``: every
    look's level is divided by it (see the module docstring). ``draws``: random sign patterns per
    look beyond ``EXACT_UP_TO`` seeds; ``seed`` seeds them."""

    alpha: float = 0.05
    pilot: int = 10
    batch: int = 2
    cap: int = 14
    spend: tuple[float, ...] | None = None
    skew: float = SKEW
    draws: int = 20000
    seed: int = 0

    def __post_init__(self):
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha {self.alpha}: must be in (0, 1)")
        if self.pilot < 2 or self.batch < 1 or self.cap < self.pilot:
            raise ValueError(
                f"seeds: pilot {self.pilot} (>= 2), batch {self.batch} (>= 1), cap {self.cap} "
                "(>= pilot)"
            )
        if not self.skew >= 1:
            raise ValueError(f"skew {self.skew}: must be >= 1")
        looks = self.interims
        if self.spend is None:
            object.__setattr__(self, "spend", _default_spend(self.alpha, looks, self.skew))
        spend = tuple(float(s) for s in self.spend)
        object.__setattr__(self, "spend", spend)
        if len(spend) != len(looks) or min(spend) <= 0:
            raise ValueError(
                f"spend {spend}: one positive level per look ({len(looks)} looks: {looks})"
            )
        if abs(sum(spend) - self.alpha) > 1e-9 * self.alpha:
            raise ValueError(f"spend {spend} sums to {sum(spend):.6g}, not alpha {self.alpha}")

    @property
    def interims(self) -> list[int]:
        """Seeds per arm at each look, e.g. pilot 3, batch 2, cap 10: [3, 5, 7, 9, 10]."""

        out = list(range(self.pilot, self.cap, self.batch))
        return out + [self.cap]

    @property
    def weights(self) -> list[float]:
        """Each look's share of alpha, ``[K]``, summing to 1."""

        return [s / self.alpha for s in self.spend]

    def levels(self, level: float | None = None) -> list[float]:
        """The level each look's p-value is compared with, ``[K]``: the allocation scaled to an
        overall ``level`` (default alpha), divided by ``skew``."""

        total = self.alpha if level is None else level
        return [total * w / self.skew for w in self.weights]

    def smallest_p(self, n: int) -> float:
        """The smallest p-value the test can give at ``n`` seeds (distinct nonzero ``|d|``)."""

        return 2.0 / 2**n if n <= EXACT_UP_TO else 1.0 / (self.draws + 1)

    def problems(self, level: float | None = None) -> list[str]:
        """One message per look that can never stop: its level (scaled to ``level``, e.g.
        alpha / m for a family of m comparisons) is below the smallest attainable p-value."""

        out = []
        for k, (n, lv) in enumerate(zip(self.interims, self.levels(level)), 1):
            if lv < self.smallest_p(n) * (1 - 1e-9):
                out.append(
                    f"look {k} ({n} seeds) can never stop: its level {lv:.3g} is below the "
                    f"smallest p-value {self.smallest_p(n):.3g} of {n} seeds"
                )
        return out

    @classmethod
    def for_level(
        cls, level: float, cap: int = 14, batch: int = 2, alpha: float | None = None, **kw
    ) -> Design:
        """A design whose every look can stop when its allocation is scaled to ``level`` (e.g.
        alpha / m for m claims tested together): the earliest pilot whose looks' least levels
        take at most half of ``level``, so that half or more is spent in proportion to seeds.
        ``alpha`` (default ``level``) is the design's own overall level."""

        alpha = level if alpha is None else alpha
        skew = kw.get("skew", SKEW)
        for pilot in range(2, cap + 1):
            looks = list(range(pilot, cap, batch)) + [cap]
            need = sum(skew * 2.0 / 2**n for n in looks) * alpha / level
            if need <= alpha / 2 or pilot == cap:
                design = cls(alpha=alpha, pilot=pilot, batch=batch, cap=cap, **kw)
                if design.problems(level) and pilot == cap:
                    raise ValueError(
                        f"no design with cap {cap} can stop at level {level}: "
                        + "; ".join(design.problems(level))
                    )
                return design
        raise AssertionError("unreachable")


def _default_spend(alpha: float, looks: list[int], skew: float) -> tuple[float, ...]:
    # each look first gets the least level at which it can stop (a look that can never stop only
    # adds seeds), the rest goes by the seeds each look adds, as a linear spending function would
    least = [skew * 2.0 / 2**n if n <= EXACT_UP_TO else 0.0 for n in looks]
    rest = alpha - sum(least)
    if rest <= 0:
        # no allocation lets every look stop: linear spending, and problems() names the looks
        least, rest = [0.0] * len(looks), alpha
    added = np.diff([0, *looks]) / looks[-1]
    spend = [m + rest * a for m, a in zip(least, added)]
    return tuple(s * alpha / sum(spend) for s in spend)


# ---------------------------------------------------------------------------- the test per look


@functools.lru_cache(maxsize=64)
def _patterns(n: int, draws: int, seed: int) -> tuple[np.ndarray, int, int, int]:
    """The sign patterns other than all-plus and all-minus, ``[P, n]`` (+-1), with the count of
    patterns that always tie the observed statistic (``base``), the total count (``total``) and how
    many patterns each row stands for (``mult``). Up to ``EXACT_UP_TO`` seeds every pattern counts,
    and a pattern ``e`` and its negation ``-e`` have the same segment (``a`` and ``b`` change sign
    together, see ``_segments``), so only the patterns whose first sign is + are kept, each
    standing for two (``mult = 2``): half the work for the same counts and order statistics.
    Beyond, ``draws`` random patterns plus the identity, each standing for itself."""

    if n <= EXACT_UP_TO:
        bits = (np.arange(2 ** (n - 1))[:, None] >> np.arange(n)) & 1
        signs = 1.0 - 2.0 * bits
        keep = np.abs(signs.sum(1)) < n
        return signs[keep], 2, 2**n, 2
    rng = np.random.default_rng([seed, n])
    signs = rng.choice([-1.0, 1.0], size=(draws, n))
    keep = np.abs(signs.sum(1)) < n
    # an all-plus or all-minus draw always ties, as the identity does
    return signs[keep], 1 + int((~keep).sum()), draws + 1, 1


def _segments(d: np.ndarray, signs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``d`` ``[m, n]``: per pattern the segment of shifts ``delta`` for which the pattern's
    statistic on ``d - delta`` reaches the observed one; ends ``[m, P]``, widened a little so that
    patterns tied in exact arithmetic count as ties. Computed in place: the arrays are the
    look's largest (``m * P`` doubles)."""

    n = d.shape[1]
    b = signs.sum(1)  # [P]
    s = d.sum(1, keepdims=True)
    one = d @ signs.T  # [m, P]: a
    two = one + s
    one -= s
    one /= b - n  # (a - s) / (b - n)
    two /= b + n  # (a + s) / (b + n)
    tol = 1e-9 * (np.abs(d).max(1, keepdims=True) + 1e-300)
    lo = np.minimum(one, two)
    hi = np.maximum(one, two, out=one)
    lo -= tol
    hi += tol
    return lo, hi


def sign_flip_look(d: np.ndarray, level: float, design: Design) -> tuple[np.ndarray, ...]:
    """The test at one look for ``m`` data sets ``d`` ``[m, n]`` at ``level``: the exact p-value
    ``[m]`` and the interval ends ``low, high`` ``[m]`` (the shifts the test does not reject)."""

    m, n = d.shape
    signs, base, total, mult = _patterns(n, design.draws, design.seed)
    P = len(signs)
    p = np.empty(m)
    low = np.full(m, -np.inf)
    high = np.full(m, np.inf)
    # the count of patterns (beyond the ones that always tie) an accepted shift needs; with each
    # row standing for mult patterns, the need-th smallest end is the row order statistic k
    need = int(np.floor(level * total - base + 1e-9)) + 1
    k = (need - 1) // mult
    # chunks of about 2 MiB per array: the look's temporaries stay in the cache
    rows = max(1, (1 << 18) // max(P, 1))
    for i in range(0, m, rows):
        lo, hi = _segments(d[i : i + rows], signs)
        p[i : i + rows] = (base + mult * np.count_nonzero((lo <= 0) & (hi >= 0), axis=1)) / total
        if need >= 1 and P:
            lo.partition(k, axis=1)
            hi.partition(P - 1 - k, axis=1)
            low[i : i + rows] = lo[:, k]
            high[i : i + rows] = hi[:, P - 1 - k]
    return p, low, high


def p_value(d: np.ndarray, design: Design | None = None) -> float:
    """The exact two-sided sign-flip p-value of the mean of ``d`` ``[n]``."""

    d = np.asarray(d, dtype=float)[None]
    return float(sign_flip_look(d, 0.5, design or Design())[0][0])
