"""Seeds added in batches until the arms separate: a group-sequential randomization test over every
compared pair, with the family-wise error controlled across pairs and interims.

The design is AdaStop's (Mathieu et al., TMLR 2024): at interim k the level spent so far may reach
alpha * k / K; the boundary is a quantile of the permutation distribution of the largest
|mean difference| over the pairs still undecided, among the permutations that crossed no earlier
boundary; pairs are rejected step-down (the largest first, then the boundary of those left). Two
changes make it fit a harness whose arms share seeds: the arms of one seed are a block (they
share the seed's first batches and its evaluation instances), so the null permutes arm labels
within each seed (a sign flip for two arms) instead of pooling every run, which keeps the pairing
and its smaller variance; and the permutations are vectorised (numpy), so a thousand simulated
experiments take seconds. The package ``adastop`` pools runs unpaired and loops over permutations
in Python.

Shapes: ``values[arm]`` is ``[n]`` one metric value per seed, seeds in the same order for every arm.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

LARGER, SMALLER, CONTINUE, NO_DIFFERENCE = "larger", "smaller", "continue", "no difference"


@dataclass(frozen=True)
class Design:
    """Seeds per arm at each interim: a pilot of ``pilot``, then ``batch`` more at a time, up to
    ``cap``; ``alpha`` is the family-wise error over every pair and interim."""

    alpha: float = 0.05
    pilot: int = 3
    batch: int = 2
    cap: int = 10
    permutations: int = 2000
    seed: int = 0

    def __post_init__(self):
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha {self.alpha}: must be in (0, 1)")
        if self.pilot < 2 or self.batch < 1 or self.cap < self.pilot:
            raise ValueError(
                f"seeds: pilot {self.pilot} (>= 2), batch {self.batch} (>= 1), cap {self.cap} "
                "(>= pilot)"
            )

    @property
    def interims(self) -> list[int]:
        """Seeds per arm at each look, e.g. pilot 3, batch 2, cap 10: [3, 5, 7, 9, 10]."""

        out = list(range(self.pilot, self.cap, self.batch))
        return out + [self.cap]


@dataclass
class SequentialTest:
    """One experiment's sequential comparison of ``arms`` over ``pairs`` (default: every pair).

    Call ``update(values)`` after each batch of seeds with every seed so far; it returns the
    decision per pair: ``larger`` / ``smaller`` (the first arm's metric is larger / smaller, the
    family-wise error held at alpha), ``continue`` (run the next batch), or, after the last
    interim, ``no difference`` (the arms did not separate within the cap)."""

    arms: list[str]
    design: Design = Design()
    pairs: list[tuple[str, str]] | None = None
    decisions: dict[tuple[str, str], str] = field(init=False)
    decided_at: dict[tuple[str, str], int] = field(init=False)
    spent: float = field(init=False, default=0.0)
    look: int = field(init=False, default=0)

    def __post_init__(self):
        if len(self.arms) < 2:
            raise ValueError(f"a comparison needs two arms or more, got {self.arms}")
        m = len(self.arms)
        self.pairs = self.pairs or [
            (self.arms[i], self.arms[j]) for i in range(m) for j in range(i + 1, m)
        ]
        unknown = sorted({a for p in self.pairs for a in p} - set(self.arms))
        if unknown:
            raise ValueError(f"pairs name unknown arms {unknown} (arms: {', '.join(self.arms)})")
        self.decisions = {p: CONTINUE for p in self.pairs}
        self.decided_at = {}
        d = self.design
        rng = np.random.default_rng(d.seed)
        # [B, cap, m]: a permutation of the arms within each seed; the first is the identity (the
        # data as observed belongs to its own null distribution)
        perms = np.argsort(rng.random((d.permutations, d.cap, m)), axis=-1)
        perms[0] = np.arange(m)
        self._perms = perms
        self._alive = np.ones(d.permutations, dtype=bool)
        self._index = [(self.arms.index(a), self.arms.index(b)) for a, b in self.pairs]

    @property
    def finished(self) -> bool:
        return CONTINUE not in self.decisions.values()

    @property
    def next_seeds(self) -> int | None:
        """Seeds per arm the next look needs, or None when finished."""

        return None if self.finished else self.design.interims[self.look]

    def update(self, values: dict[str, np.ndarray]) -> dict[tuple[str, str], str]:
        d = self.design
        if self.finished:
            return dict(self.decisions)
        n = d.interims[self.look]
        y = np.column_stack([np.asarray(values[a], dtype=float)[:n] for a in self.arms])
        if y.shape[0] < n or not np.isfinite(y).all():
            raise ValueError(
                f"look {self.look + 1} needs {n} finite values per arm, got "
                + ", ".join(f"{a}: {len(values[a])}" for a in self.arms)
            )
        stat = self._statistics(y)  # [B, pairs] signed mean differences
        # the identity permutation: computed as the others are, so that a tie with a permutation
        # is a tie and not a rounding difference
        observed = stat[0]
        level = d.alpha * (self.look + 1) / len(d.interims)
        active = [k for k, p in enumerate(self.pairs) if self.decisions[p] == CONTINUE]
        bound, added = np.inf, 0.0
        while active:
            top = np.abs(stat[:, active]).max(axis=1)  # [B]
            bound, added = self._boundary(top, level)
            k = active[int(np.argmax(np.abs(observed[active])))]
            if abs(observed[k]) <= _slack(bound):
                break
            self.decisions[self.pairs[k]] = LARGER if observed[k] > 0 else SMALLER
            self.decided_at[self.pairs[k]] = n
            active.remove(k)
        if active:
            # permutations that would have stopped here leave the distribution of later looks
            self._alive &= np.abs(stat[:, active]).max(axis=1) <= _slack(bound)
        self.spent += added
        self.look += 1
        if self.look == len(d.interims):
            for k in active:
                self.decisions[self.pairs[k]] = NO_DIFFERENCE
                self.decided_at[self.pairs[k]] = n
        return dict(self.decisions)

    def _statistics(self, y: np.ndarray) -> np.ndarray:
        n = y.shape[0]
        perms = self._perms[:, :n, :]  # [B, n, m]
        permuted = np.take_along_axis(np.broadcast_to(y, perms.shape), perms, axis=-1)
        return np.stack(
            [(permuted[:, :, i] - permuted[:, :, j]).mean(axis=1) for i, j in self._index], 1
        )

    def _boundary(self, top: np.ndarray, level: float) -> tuple[float, float]:
        """The smallest boundary whose crossing probability among the surviving permutations keeps
        the level spent within ``level``; and the probability it adds."""

        b = len(top)
        allowed = int(np.floor((level - self.spent) * b + 1e-9))
        alive = np.sort(top[self._alive])[::-1]
        if allowed < 1:
            return np.inf, 0.0
        if allowed >= len(alive):
            return -np.inf, len(alive) / b
        bound = float(alive[allowed])  # at most `allowed` values lie strictly above it
        return bound, float((alive > bound).sum()) / b


def _slack(bound: float) -> float:
    """The boundary with room for rounding: two permutations that give the same sum in a
    different order are a tie, not a crossing."""

    return bound + 1e-12 * (1.0 + abs(bound))


def simulate(
    effect: float, sd: float, design: Design, arms: int = 2, seed: int = 0
) -> tuple[dict[tuple[str, str], str], int]:
    """One simulated experiment: per-seed values with normal noise ``sd`` (a shared seed effect plus
    independent arm noise), the first arm shifted by ``effect``. Returns the decisions and the
    seeds per arm used."""

    rng = np.random.default_rng(seed)
    names = [f"arm{i}" for i in range(arms)]
    block = rng.normal(0, sd, size=(design.cap, 1))
    y = block + rng.normal(0, sd, size=(design.cap, arms))
    y[:, 0] += effect
    test = SequentialTest(names, Design(**{**design.__dict__, "seed": seed}))
    used = design.pilot
    while not test.finished:
        used = test.next_seeds
        test.update({a: y[:used, i] for i, a in enumerate(names)})
    return test.decisions, used


def sequential_mde(design: Design, arms: int = 2, power: float = 0.8, sims: int = 400) -> float:
    """The smallest effect, in units of the standard deviation of one seed's difference between two
    arms, that this design declares with probability ``power`` (normal per-seed values; found by
    bisection over simulated experiments with common random numbers, so the estimated power is
    monotone in the effect). Multiply by a measured standard deviation to get the effect."""

    return _sequential_mde(design, arms, power, sims)


@functools.lru_cache(maxsize=32)
def _sequential_mde(design: Design, arms: int, power: float, sims: int) -> float:
    # simulate() draws noise sd per arm on top of a shared seed effect: one seed's difference
    # between two arms then has standard deviation sd * sqrt(2)
    def found(effect: float) -> float:
        hits = 0
        for i in range(sims):
            dec, _ = simulate(effect * np.sqrt(2), 1.0, design, arms, seed=1_000_003 + i)
            hits += dec[("arm0", "arm1")] == LARGER
        return hits / sims

    lo, hi = 0.0, 1.0
    while found(hi) < power:
        lo, hi = hi, hi * 2
        if hi > 64:
            return float("inf")
    for _ in range(8):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if found(mid) < power else (lo, mid)
    return hi
