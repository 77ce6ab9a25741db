"""Seeds added in batches until two arms separate: a group-sequential exact sign-flip test of the
MEAN per-seed difference, with repeated confidence intervals from the same test.

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
from dataclasses import dataclass, field

import numpy as np

LARGER, SMALLER, CONTINUE, NO_DIFFERENCE = "larger", "smaller", "continue", "no difference"

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
def _patterns(n: int, draws: int, seed: int) -> tuple[np.ndarray, int, int]:
    """The sign patterns other than all-plus and all-minus, ``[P, n]`` (+-1), with the count of
    patterns that always tie the observed statistic (``base``) and the total count (``total``):
    every pattern up to ``EXACT_UP_TO`` seeds, else ``draws`` random ones plus the identity."""

    if n <= EXACT_UP_TO:
        bits = (np.arange(2**n)[:, None] >> np.arange(n)) & 1
        signs = 1.0 - 2.0 * bits
        keep = np.abs(signs.sum(1)) < n
        return signs[keep], 2, 2**n
    rng = np.random.default_rng([seed, n])
    signs = rng.choice([-1.0, 1.0], size=(draws, n))
    keep = np.abs(signs.sum(1)) < n
    # an all-plus or all-minus draw always ties, as the identity does
    return signs[keep], 1 + int((~keep).sum()), draws + 1


def _segments(d: np.ndarray, signs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``d`` ``[m, n]``: per pattern the segment of shifts ``delta`` for which the pattern's
    statistic on ``d - delta`` reaches the observed one; ends ``[m, P]``, widened a little so that
    patterns tied in exact arithmetic count as ties."""

    n = d.shape[1]
    a = d @ signs.T  # [m, P]
    b = signs.sum(1)  # [P]
    s = d.sum(1, keepdims=True)
    one = (a - s) / (b - n)
    two = (a + s) / (b + n)
    tol = 1e-9 * (np.abs(d).max(1, keepdims=True) + 1e-300)
    return np.minimum(one, two) - tol, np.maximum(one, two) + tol


def _look(d: np.ndarray, level: float, design: Design) -> tuple[np.ndarray, ...]:
    """The test at one look for ``m`` data sets ``d`` ``[m, n]`` at ``level``: the exact p-value
    ``[m]`` and the interval ends ``low, high`` ``[m]`` (the shifts the test does not reject)."""

    m, n = d.shape
    signs, base, total = _patterns(n, design.draws, design.seed)
    p = np.empty(m)
    low = np.full(m, -np.inf)
    high = np.full(m, np.inf)
    # the count of patterns (beyond the ones that always tie) an accepted shift needs
    need = int(np.floor(level * total - base + 1e-9)) + 1
    rows = max(1, 4_000_000 // max(len(signs), 1))
    for i in range(0, m, rows):
        lo, hi = _segments(d[i : i + rows], signs)
        p[i : i + rows] = (base + ((lo <= 0) & (hi >= 0)).sum(1)) / total
        if need >= 1 and len(signs):
            low[i : i + rows] = np.partition(lo, need - 1, axis=1)[:, need - 1]
            high[i : i + rows] = -np.partition(-hi, need - 1, axis=1)[:, need - 1]
    return p, low, high


def p_value(d: np.ndarray, design: Design | None = None) -> float:
    """The exact two-sided sign-flip p-value of the mean of ``d`` ``[n]``."""

    d = np.asarray(d, dtype=float)[None]
    return float(_look(d, 0.5, design or Design())[0][0])


# ---------------------------------------------------------------------------- one experiment


@dataclass
class SequentialTest:
    """One experiment's sequential comparison of two arms, ``arms = [a, b]`` (``d`` = a - b).

    Call ``update({a: values, b: values})`` after each batch with every seed so far (``[n]`` per
    arm, seeds in the same order); it returns ``{(a, b): decision}``: ``larger`` / ``smaller``
    (a's mean is larger / smaller, the error over looks held at alpha), ``continue`` (run the next
    batch), or, after the last look, ``no difference``."""

    arms: list[str]
    design: Design = field(default_factory=Design)
    decisions: dict[tuple[str, str], str] = field(init=False)
    decided_at: dict[tuple[str, str], int] = field(init=False)
    looks: list[dict] = field(init=False)

    def __post_init__(self):
        if len(self.arms) != 2 or self.arms[0] == self.arms[1]:
            raise ValueError(
                f"a sequential test compares two arms, got {self.arms}; build more arms from "
                "pairs (Holm on p_value())"
            )
        self.pair = (self.arms[0], self.arms[1])
        self.decisions = {self.pair: CONTINUE}
        self.decided_at = {}
        self.looks = []
        self._d = np.zeros(0)

    @property
    def finished(self) -> bool:
        return self.decisions[self.pair] != CONTINUE

    @property
    def next_seeds(self) -> int | None:
        """Seeds per arm the next look needs, or None when finished."""

        return None if self.finished else self.design.interims[len(self.looks)]

    def update(self, values: dict[str, np.ndarray]) -> dict[tuple[str, str], str]:
        if self.finished:
            return dict(self.decisions)
        k, d = len(self.looks), self.design
        n = d.interims[k]
        a, b = (np.asarray(values[x], dtype=float)[:n] for x in self.arms)
        if len(a) < n or len(b) < n or not (np.isfinite(a).all() and np.isfinite(b).all()):
            raise ValueError(
                f"look {k + 1} needs {n} finite values per arm, got "
                + ", ".join(f"{x}: {len(values[x])}" for x in self.arms)
            )
        diff = a - b
        level = d.levels()[k]
        p, low, high = (float(v[0]) for v in _look(diff[None], level, d))
        if low > 0 or high < 0:
            decision = LARGER if diff.mean() > 0 else SMALLER
        elif k + 1 == len(d.interims):
            decision = NO_DIFFERENCE
        else:
            decision = CONTINUE
        self.looks.append(
            {"seeds": n, "p": p, "level": level, "interval": (low, high), "decision": decision}
        )
        self._d = diff
        self.decisions[self.pair] = decision
        if decision != CONTINUE:
            self.decided_at[self.pair] = n
        return dict(self.decisions)

    def _last(self) -> dict:
        if not self.looks:
            raise ValueError("no look yet: call update() first")
        return self.looks[-1]

    def interval(self, level: float | None = None) -> tuple[float, float]:
        """The repeated confidence interval for the mean difference at the latest look, valid
        after stopping; ``level`` (e.g. alpha / m for a family) rescales the allocation."""

        if level is None:
            return self._last()["interval"]
        k = len(self.looks) - 1
        self._last()
        _, low, high = _look(self._d[None], self.design.levels(level)[k], self.design)
        return float(low[0]), float(high[0])

    def p_value(self) -> float:
        """The sequential p-value: ``min over looks j so far of skew * p_j / w_j`` (``w_j`` the
        share of alpha of look j), capped at 1. The test rejected at some look iff this is at most
        alpha, and under the null ``P(p <= a) <= sum_j a w_j = a`` for every ``a`` (each look's
        ``P(p_j <= a w_j / skew) <= a w_j``), so Holm across claims may use it."""

        self._last()
        w = self.design.weights
        best = min(self.design.skew * look["p"] / w[j] for j, look in enumerate(self.looks))
        return float(min(1.0, best))

    def mean(self) -> float:
        """The naive mean difference at the latest look (biased away from 0 after early stops)."""

        self._last()
        return float(self._d.mean())

    def estimate(self) -> float:
        """The median-unbiased mean difference at the latest look under stage-wise ordering,
        computed under a normal approximation (sd from the latest look's seeds)."""

        self._last()
        return median_unbiased(self.design, len(self.looks) - 1, self._d)


def median_unbiased(
    design: Design, k: int, d: np.ndarray, level: float | None = None, sims: int = 2000
) -> float:
    """The effect ``mu`` at which the outcome observed at look ``k`` (0-based) with data ``d``
    ``[n_k]`` is the median under stage-wise ordering: ``P_mu(stop earlier upwards, or reach look
    k with a mean >= the observed one) = 1/2``. The stopping rule is the test's own (each look's
    exact sign-flip interval at its level, on ``sims`` simulated experiments of normal per-seed
    differences with the sample's sd): a normal approximation of the boundaries instead would
    misplace them badly at a few seeds, where the sign-flip test can only stop when every seed
    agrees. An interval moves with a shift of the data, so each experiment's intervals are
    computed once and ``mu`` only shifts them."""

    d = np.asarray(d, dtype=float)
    sd = float(d.std(ddof=1)) if len(d) > 1 else 0.0
    obs = float(d.mean())
    if sd == 0 or not np.isfinite(sd):
        return obs
    low, high, means = _null_paths(design, level, sims)
    rows = np.arange(len(means))

    def upper_prob(mu: float) -> float:
        s = mu / sd  # the shift in units of the simulated experiments' sd (1)
        reach_up = means[:, k] + s >= obs / sd
        if not k:
            return float(reach_up.mean())
        up, down = low[:, :k] + s > 0, high[:, :k] + s < 0
        crossed = up | down
        stopped = crossed.any(1)
        first_up = stopped & up[rows, crossed.argmax(1)]
        return float((first_up | (~stopped & reach_up)).mean())

    lo, hi = obs - 20 * sd, obs + 20 * sd
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if upper_prob(mid) < 0.5 else (lo, mid)
    return (lo + hi) / 2


# ---------------------------------------------------------------------------- many experiments


@dataclass
class Simulation:
    """``sims`` simulated experiments: ``decision`` ``[sims]`` (LARGER / SMALLER /
    NO_DIFFERENCE), ``seeds`` ``[sims]`` used, ``low``/``high`` ``[sims]`` the interval at the
    stopping look, ``mean`` ``[sims]`` the naive mean there, ``look`` ``[sims]`` (0-based)."""

    decision: np.ndarray
    seeds: np.ndarray
    low: np.ndarray
    high: np.ndarray
    mean: np.ndarray
    look: np.ndarray


def _outcomes(lows: np.ndarray, highs: np.ndarray, shift: float) -> tuple[np.ndarray, np.ndarray]:
    """Per experiment the stopping look ``[m]`` and whether it separated, for data shifted by
    ``shift`` (the interval moves with the data): the first look whose interval excludes 0."""

    out = (lows + shift > 0) | (highs + shift < 0)  # [m, K]
    any_ = out.any(1)
    look = np.where(any_, out.argmax(1), lows.shape[1] - 1)
    return look, any_


def _intervals(design: Design, d: np.ndarray, level: float | None) -> tuple[np.ndarray, ...]:
    """``d`` ``[m, cap]``: every look's interval ends ``[m, K]`` and p-values ``[m, K]``."""

    ks = design.interims
    lv = design.levels(level)
    res = [_look(d[:, :n], lv[k], design) for k, n in enumerate(ks)]
    p, low, high = (np.stack([r[i] for r in res], 1) for i in range(3))
    return low, high, p


def simulate(
    design: Design,
    sampler=None,
    sims: int = 1000,
    effect: float = 0.0,
    seed: int = 0,
    level: float | None = None,
) -> Simulation:
    """``sims`` experiments at once: per-seed differences ``sampler(rng, (sims, cap)) + effect``
    (default standard normal; pass e.g. a centred gamma for skew), each run through the
    sequential test as ``SequentialTest`` would (vectorised over experiments)."""

    rng = np.random.default_rng(seed)
    draw = sampler or (lambda r, size: r.normal(size=size))
    d = np.asarray(draw(rng, (sims, design.cap)), dtype=float) + effect
    low, high, _ = _intervals(design, d, level)
    look, sep = _outcomes(low, high, 0.0)
    ks = np.array(design.interims)
    cum = np.cumsum(d, 1)[:, ks - 1] / ks  # [m, K]
    rows = np.arange(sims)
    mean = cum[rows, look]
    dec = np.where(~sep, NO_DIFFERENCE, np.where(mean > 0, LARGER, SMALLER))
    return Simulation(dec, ks[look], low[rows, look], high[rows, look], mean, look)


# ---------------------------------------------------------------------------- design quantities


@functools.lru_cache(maxsize=32)
def _null_paths(design: Design, level: float | None, sims: int) -> tuple[np.ndarray, ...]:
    """Standard normal per-seed differences, fixed seed (common random numbers for every effect):
    every look's interval ends ``[sims, K]`` and mean ``[sims, K]``."""

    d = np.random.default_rng(2_000_003).normal(size=(sims, design.cap))
    low, high, _ = _intervals(design, d, level)
    ks = np.array(design.interims)
    return low, high, np.cumsum(d, 1)[:, ks - 1] / ks


def _null_intervals(design: Design, level: float | None, sims: int) -> tuple[np.ndarray, ...]:
    return _null_paths(design, level, sims)[:2]


def _power(design: Design, effect: float, level: float | None, sims: int) -> float:
    low, high = _null_intervals(design, level, sims)
    look, sep = _outcomes(low, high, effect)
    rows = np.arange(len(look))
    # separated in the right direction: 0 below the shifted interval
    return float((sep & (low[rows, look] + effect > 0)).mean())


def sequential_mde(
    design: Design, power: float = 0.8, level: float | None = None, sims: int = 2000
) -> float:
    """The smallest mean difference, in units of one seed's difference sd, that this design
    declares (in the right direction) with probability ``power`` at overall ``level`` (default
    alpha): normal per-seed differences, bisection over simulated experiments with common random
    numbers (each experiment's intervals are computed once; a shift moves them). inf when even
    20 sd is not found with that power."""

    return _mde(design, power, level, sims)


@functools.lru_cache(maxsize=64)
def _mde(design: Design, power: float, level: float | None, sims: int) -> float:
    lo, hi = 0.0, 20.0
    if _power(design, hi, level, sims) < power:
        return float("inf")
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _power(design, mid, level, sims) < power else (lo, mid)
    return hi


@functools.lru_cache(maxsize=64)
def margin_power(
    design: Design,
    margin_in_sd: float,
    level: float | None = None,
    kind: str = "equivalence",
    sims: int = 2000,
) -> float:
    """At a true difference of 0 (normal per-seed differences, sd 1), the probability that the
    interval at the stopping look lies within ``(-margin, margin)`` (``kind="equivalence"``) or
    above ``-margin`` (``kind="not smaller"``)."""

    if kind not in ("equivalence", "not smaller"):
        raise ValueError(f"kind {kind!r}: equivalence or not smaller")
    low, high = _null_intervals(design, level, sims)
    look, _ = _outcomes(low, high, 0.0)
    rows = np.arange(len(look))
    lo, hi = low[rows, look], high[rows, look]
    ok = lo > -margin_in_sd
    if kind == "equivalence":
        ok &= hi < margin_in_sd
    return float(ok.mean())
