"""The group-sequential sign-flip test of a mean difference (reports.sequential): exact p-values,
the error under equal means with skewed differences, the coverage of the interval at the stopping
look, the per-look allocation, and the detectable effect of the procedure that decides."""

import itertools

import numpy as np
import pytest

from sixblanks.reports import sequential as seq

GAMMA = lambda r, size: r.gamma(0.5, size=size) - 0.5  # noqa: E731  mean 0, skew 2.8
LOGNORMAL = lambda r, size: r.lognormal(0, 1, size=size) - np.exp(0.5)  # noqa: E731  skew 6.2


def brute_p(d):
    """Two-sided sign-flip p-value by listing every sign pattern."""
    d = np.asarray(d, float)
    obs = abs(d.sum())
    hits = sum(
        abs(np.dot(e, np.abs(d))) >= obs - 1e-9 for e in itertools.product([-1, 1], repeat=len(d))
    )
    return hits / 2 ** len(d)


def run(design, d):
    t = seq.SequentialTest(["a", "b"], design)
    while not t.finished:
        n = t.next_seeds
        t.update({"a": d[:n], "b": np.zeros(n)})
    return t


def test_exact_p_value_is_a_count_over_sign_patterns():
    assert seq.p_value([1.0, 2, 3, 4, 5]) == 2 / 32  # all positive, distinct: the extreme pair
    rng = np.random.default_rng(1)
    for n in (2, 3, 5, 8, 10):
        for _ in range(5):
            d = rng.normal(0.3, 1, n)
            assert seq.p_value(d) == pytest.approx(brute_p(d), abs=1e-12)
    d = np.array([1.0, -1, 2, -2, 3])  # ties in |d|: tied patterns count
    assert seq.p_value(d) == pytest.approx(brute_p(d))
    assert seq.p_value(np.zeros(6)) == 1.0  # no difference never separates
    assert seq.p_value(np.full(6, 0.5)) == 2 / 64  # sd 0: every seed agrees


def test_equal_means_with_skewed_differences_keep_the_error():
    design = seq.Design()
    sims = 4000
    bound = design.alpha + 2 * np.sqrt(design.alpha * (1 - design.alpha) / sims)
    for sampler in (GAMMA, LOGNORMAL):
        sim = seq.simulate(design, sampler, sims=sims, seed=21)
        assert np.mean(sim.decision != seq.NO_DIFFERENCE) <= bound


def test_interval_at_the_stopping_look_covers_the_effect():
    design = seq.Design()
    for sampler, effect in ((None, 1.0), (GAMMA, 0.5)):
        sim = seq.simulate(design, sampler, sims=4000, effect=effect, seed=5)
        covered = (sim.low <= effect) & (effect <= sim.high)
        assert covered.mean() >= 0.94
        if sampler is None:
            assert len(set(sim.seeds)) > 1  # some stopped early


def test_every_look_of_the_default_design_can_stop():
    assert seq.Design().problems() == []
    assert seq.Design().interims == [10, 12, 14]
    assert sum(seq.Design().spend) == pytest.approx(0.05)
    family = seq.Design.for_level(0.05 / 3)
    assert family.problems(0.05 / 3) == [] and family.cap <= 14
    # the old design: 3 seeds can never reach p below 2 / 8
    old = seq.Design(pilot=3, batch=2, cap=10, skew=1.0)
    probs = old.problems()
    assert probs and probs[0].startswith("look 1 (3 seeds) can never stop")
    assert seq.Design(skew=1.0).problems(0.05 / 50)  # a family of 50 at this cap


def test_each_look_spends_only_its_share():
    design = seq.Design()
    levels = design.levels()
    # p-values 28/1024, 28/4096, 28/16384 at 10, 12, 14 seeds: each between its look's level and
    # alpha, so each look continues (a first look spending all of alpha would stop at once)
    d = np.array([-1.0, -2, -3, *range(4, 15)])
    for n, lv in zip(design.interims, levels):
        assert lv < brute_p(d[:n]) < design.alpha
    t = run(design, d)
    assert [look["decision"] for look in t.looks] == [
        seq.CONTINUE,
        seq.CONTINUE,
        seq.NO_DIFFERENCE,
    ]
    assert [look["p"] for look in t.looks] == pytest.approx([28 / 1024, 28 / 4096, 28 / 16384])
    # fewer flipped seeds: 10/1024 at the first look is still above its level 0.0046
    t = run(design, np.array([-1.0, -2, *range(3, 15)]))
    assert t.looks[0]["decision"] == seq.CONTINUE
    # 4/1024 is below it: the first look stops
    t = run(design, np.array([-1.0, *range(2, 15)]))
    assert t.decisions[("a", "b")] == seq.LARGER and t.decided_at[("a", "b")] == 10


def test_decision_and_interval_agree():
    rng = np.random.default_rng(3)
    designs = [seq.Design(), seq.Design(pilot=4, batch=3, cap=10, skew=1.0)]
    for i in range(300):
        design = designs[i % 2]
        kind = i % 3
        d = rng.normal(rng.normal(0, 1), 1, design.cap)
        if kind == 1:
            d = np.round(d)  # ties and zeros
        elif kind == 2:
            d = LOGNORMAL(rng, design.cap) + rng.normal(0, 1)
        t = run(design, d)
        for look in t.looks:
            low, high = look["interval"]
            assert low <= d[: look["seeds"]].mean() <= high
            rejected = look["decision"] in (seq.LARGER, seq.SMALLER)
            assert rejected == (not low <= 0 <= high)
            assert rejected == (look["p"] <= look["level"] * (1 + 1e-9))
        assert (t.p_value() <= design.alpha) == (t.decisions[("a", "b")] != seq.NO_DIFFERENCE)
        # the interval is the set of shifts the look does not reject
        low, high = t.interval()
        look = t.looks[-1]
        x = d[: look["seeds"]]
        if np.isfinite(low) and high > low + 1e-6:
            assert seq.p_value(x - (low + high) / 2) > look["level"]
            assert seq.p_value(x - (low - 1e-6 * (1 + abs(low)))) <= look["level"]


def test_detectable_effect_is_the_deciding_procedure_s():
    design = seq.Design()
    mde = seq.sequential_mde(design)
    sims = 4000
    sim = seq.simulate(design, sims=sims, effect=mde, seed=777)
    power = np.mean(sim.decision == seq.LARGER)
    assert power == pytest.approx(0.8, abs=3 * np.sqrt(0.8 * 0.2 / sims) + 0.01)
    assert seq.sequential_mde(design, level=0.05 / 3) > mde
    assert 0 < seq.margin_power(design, 2.0) <= seq.margin_power(design, 2.0, kind="not smaller")


def test_accessors_and_refusals():
    with pytest.raises(ValueError, match="two arms"):
        seq.SequentialTest(["a", "b", "c"])
    with pytest.raises(ValueError, match="sums to"):
        seq.Design(spend=(0.01, 0.01, 0.01))
    t = seq.SequentialTest(["a", "b"])
    with pytest.raises(ValueError, match="needs 10 finite values"):
        t.update({"a": [1.0, 2.0], "b": [1.0, 2.0]})
    t.update({"a": np.zeros(10), "b": np.zeros(10)})
    assert t.decisions[("a", "b")] == seq.CONTINUE and t.interval() == pytest.approx((0, 0))
    assert t.p_value() == 1.0 and t.next_seeds == 12
    d = np.arange(1.0, 15.0)
    t = run(seq.Design(), d)
    assert t.decided_at[("a", "b")] == 10 and t.mean() == pytest.approx(5.5)
    wide = t.interval(0.05 / 3)
    assert wide[0] <= t.interval()[0] and wide[1] >= t.interval()[1]
    assert t.estimate() == pytest.approx(5.5, rel=0.05)


def test_the_median_unbiased_estimate_removes_the_early_stop_bias_of_the_mean():
    """A design that stops early about half the time at a true effect of 0.6 sd: over 300
    experiments (each run look by look through SequentialTest), the naive mean at the stopping
    look is biased upwards in median (an early stop needs a large mean), and the median-unbiased
    estimate under stage-wise ordering much less so. Both medians are taken here from the
    simulated experiments, against the true effect."""

    design = seq.Design(alpha=0.2, pilot=6, batch=4, cap=14, skew=1.0)
    effect, rng = 0.6, np.random.default_rng(3)
    naive, mue, early = [], [], []
    for _ in range(300):
        d = rng.normal(effect, 1.0, design.cap)
        t = run(design, d)
        naive.append(t.mean())
        mue.append(t.estimate())
        early.append(len(t.looks) < len(design.interims))
        assert t.mean() == pytest.approx(d[: t.looks[-1]["seeds"]].mean())
    assert 0.3 < np.mean(early) < 0.7
    naive_bias, mue_bias = np.median(naive) - effect, np.median(mue) - effect
    assert naive_bias > 0.06
    assert abs(mue_bias) < 0.6 * naive_bias


def test_interval_ends_are_where_the_brute_force_p_value_crosses_the_level():
    # each end of a look's interval is a shift at which the p-value, counted over every sign
    # pattern by brute force, steps across the look's level: just outside it rejects, just inside
    # it does not (odd and even seed counts: patterns are paired with their negations)
    from sixblanks.reports.signflip import sign_flip_look

    rng = np.random.default_rng(8)
    for n, level in ((5, 0.1), (6, 0.15), (7, 0.05)):
        for _ in range(4):
            x = rng.normal(0.4, 1, n)
            _, (low,), (high,) = sign_flip_look(x[None], level, seq.Design())
            eps = 1e-7 * (1 + abs(low) + abs(high))
            assert brute_p(x - (low - eps)) <= level < brute_p(x - (low + eps))
            assert brute_p(x - (high + eps)) <= level < brute_p(x - (high - eps))
