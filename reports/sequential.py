"""Seeds added in batches until two arms separate: a group-sequential exact sign-flip test of the
MEAN per-seed difference, with repeated confidence intervals from the same test.

Each look runs the exact sign-flip test of :mod:`sixblanks.reports.signflip` at its share of alpha
(:class:`Design`, ``skew``); a look whose repeated confidence interval excludes 0 stops the
experiment with a direction. Re-exported here: ``Design``, ``SKEW`` and ``p_value``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from .signflip import SKEW, Design, p_value, sign_flip_look

__all__ = [
    "CONTINUE",
    "LARGER",
    "NO_DIFFERENCE",
    "SKEW",
    "SMALLER",
    "Design",
    "SequentialTest",
    "Simulation",
    "margin_power",
    "median_unbiased",
    "p_value",
    "sequential_mde",
    "simulate",
]

LARGER, SMALLER, CONTINUE, NO_DIFFERENCE = "larger", "smaller", "continue", "no difference"


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
        p, low, high = (float(v[0]) for v in sign_flip_look(diff[None], level, d))
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
        _, low, high = sign_flip_look(self._d[None], self.design.levels(level)[k], self.design)
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
    res = [sign_flip_look(d[:, :n], lv[k], design) for k, n in enumerate(ks)]
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
