"""The statistics every comparison gets, on synthetic scores where the truth is known: paired
two-way intervals (by hand and against the bootstrap), the minimum detectable effect, the
group-sequential test's error and power, and the compute-curve fit."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from sixblanks.reports import curvefit, paired, sequential

# ----------------------------------------------------------------------------- paired differences


def test_mean_squares_by_hand():
    # d = [[1, 3], [2, 6]]: mean 3; row effects -1, +1; column effects -1.5, +1.5;
    # residuals: 1-3+1+1.5 = 0.5, 3-3+1-1.5 = -0.5, 2-3-1+1.5 = -0.5, 6-3-1-1.5 = 0.5
    ms = paired.mean_squares(np.array([[1.0, 3.0], [2.0, 6.0]]))
    assert ms.mean == 3.0
    assert ms.ms_seed == pytest.approx(2 * (1 + 1) / 1)  # I * sum(row^2) / (S - 1) = 4
    assert ms.ms_instance == pytest.approx(2 * (2.25 + 2.25) / 1)  # = 9
    assert ms.ms_cell == pytest.approx(4 * 0.25 / 1)  # = 1
    mean, se, df = paired.twoway_se(np.array([[1.0, 3.0], [2.0, 6.0]]))
    # Var = (4 + 9 - 1) / (2 * 2) = 3; Satterthwaite: 12^2 / (16/1 + 81/1 + 1/1) = 144 / 98
    assert (mean, se, df) == (3.0, pytest.approx(np.sqrt(3.0)), pytest.approx(144 / 98))


def test_paired_interval_by_hand_on_a_small_case():
    # two seeds x three instances; the difference a - b is [[1, 0, 1], [0, 0, 1]]
    a = np.array([[1.0, 1.0, 1.0], [1.0, 0.0, 1.0]])
    b = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    d = a - b
    mu = d.mean()  # 0.5
    rows = d.mean(1) - mu  # [1/6, -1/6]
    cols = d.mean(0) - mu  # [0, -0.5, 0.5]
    resid = d - mu - rows[:, None] - cols[None, :]
    ms_s = 3 * (rows**2).sum() / 1  # 1/6
    ms_i = 2 * (cols**2).sum() / 2  # 0.5
    ms_e = (resid**2).sum() / 2  # 1/6
    assert (
        ms_s == pytest.approx(1 / 6) and ms_i == pytest.approx(0.5) and ms_e == pytest.approx(1 / 6)
    )
    # the seed component is estimated at zero (MS_seed = MS_cell): Var = MS_instance / (S I)
    var, df = ms_i / 6, 2.0
    half = stats.t.ppf(0.975, df) * np.sqrt(var)
    got = paired.paired_difference(a, b)
    assert got.diff == pytest.approx(0.5)
    assert got.se == pytest.approx(np.sqrt(var)) and got.df == pytest.approx(df)
    assert (got.low, got.high) == (pytest.approx(0.5 - half), pytest.approx(0.5 + half))
    assert (got.seeds, got.instances) == (2, 3)


def test_per_seed_metric_is_a_paired_t_interval():
    rng = np.random.default_rng(3)
    a, b = rng.normal(1, 1, 6), rng.normal(0, 1, 6)
    got = paired.paired_difference(a, b)
    t = stats.ttest_rel(a, b)
    ci = t.confidence_interval(0.95)
    assert (got.low, got.high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert got.df == 5


def test_twoway_variance_matches_the_bootstrap_that_resamples_seeds_and_instances():
    rng = np.random.default_rng(0)
    d = rng.normal(0, 1, (4, 30)) + rng.normal(0, 0.5, (4, 1)) + rng.normal(0, 0.8, (1, 30))
    s, i = d.shape
    mu = d.mean()
    r, c = d.mean(1) - mu, d.mean(0) - mu
    e = d - mu - r[:, None] - c[None, :]
    # the bootstrap's variance in closed form (plug-in components)
    closed = (r**2).mean() / s + (c**2).mean() / i + (e**2).mean() / (s * i)
    boots = paired.twoway_bootstrap(d, resamples=40000, seed=1)
    assert boots.mean() == pytest.approx(mu, abs=0.01)
    assert boots.var() == pytest.approx(closed, rel=0.05)
    # the unbiased estimate is the same quantity with (n - 1) denominators: never smaller here
    assert paired.twoway_se(d)[1] ** 2 >= closed


def test_pairing_shrinks_the_error_when_arms_share_instance_difficulty():
    rng = np.random.default_rng(5)
    difficulty = rng.normal(0, 1, (1, 200))
    a = difficulty + rng.normal(0, 0.5, (3, 200)) + 0.1
    b = difficulty + rng.normal(0, 0.5, (3, 200))
    got = paired.paired_difference(a, b)
    assert got.se < 0.6 * got.se_unpaired
    assert got.correlation > 0.6


def test_minimum_detectable_effect_has_the_stated_power():
    """A paired t-test on n seeds, true difference = the MDE: found 80% of the time."""

    n, sd = 6, 1.0
    mde = paired.minimum_detectable_effect(sd / np.sqrt(n), n - 1, 0.05, 0.8)
    rng = np.random.default_rng(11)
    sims = 4000
    d = rng.normal(mde, sd, (sims, n))
    p = stats.ttest_1samp(d, 0.0, axis=1).pvalue
    power = float(np.mean((p < 0.05) & (d.mean(1) > 0)))
    assert power == pytest.approx(0.8, abs=3 * np.sqrt(0.8 * 0.2 / sims))
    # by hand, the normal approximation: (z_0.975 + z_0.8) sd / sqrt(n) is a little smaller
    assert mde > (1.96 + 0.8416) / np.sqrt(n)


# ----------------------------------------------------------------------------- sequential test


def test_design_interims():
    assert sequential.Design(pilot=3, batch=2, cap=10).interims == [3, 5, 7, 9, 10]
    assert sequential.Design(pilot=4, batch=4, cap=4).interims == [4]
    with pytest.raises(ValueError, match="cap"):
        sequential.Design(pilot=5, cap=4)


def test_sequential_false_positive_rate_under_aa():
    """Identical arms (normal differences), 2,000 simulated experiments: a false separation at most
    alpha (within three Monte Carlo standard errors), also without the skew allowance."""

    sims = 2000
    for design in (sequential.Design(), sequential.Design(skew=1.0)):
        sim = sequential.simulate(design, sims=sims, seed=1)
        false = np.mean(sim.decision != sequential.NO_DIFFERENCE)
        assert false <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / sims)


def test_sequential_finds_a_planted_effect_with_the_stated_power():
    design = sequential.Design(skew=1.0)
    mde = sequential.sequential_mde(design)  # in units of one seed's difference sd
    sims = 2000
    sim = sequential.simulate(design, sims=sims, effect=mde, seed=50_000)
    found = np.mean(sim.decision == sequential.LARGER)
    assert found == pytest.approx(0.8, abs=3 * np.sqrt(0.8 * 0.2 / sims) + 0.01)
    # it stops early when the arms separate
    assert sim.seeds.mean() < design.cap


def test_sequential_stops_at_once_on_a_large_effect_and_says_no_difference_at_the_cap():
    # 10 seeds all larger: p = 2/1024, below the first look's level
    design = sequential.Design()
    t = sequential.SequentialTest(["a", "b"], design)
    t.update({"a": np.arange(10) + 10.0, "b": np.arange(10) * 1.0})
    assert t.decisions[("a", "b")] == sequential.LARGER and t.finished
    assert t.decided_at[("a", "b")] == 10
    t = sequential.SequentialTest(["a", "b"], design)
    same = np.random.default_rng(0).permutation(14) / 10
    for n in design.interims:
        t.update({"a": same[:n], "b": same[:n][::-1]})
    assert t.decisions[("a", "b")] == sequential.NO_DIFFERENCE and t.finished
    assert t.interval()[0] < 0 < t.interval()[1]


def test_sequential_refuses_bad_input():
    with pytest.raises(ValueError, match="two arms"):
        sequential.SequentialTest(["a", "b", "c"])
    t = sequential.SequentialTest(["a", "b"])
    with pytest.raises(ValueError, match="needs 10 finite values"):
        t.update({"a": [1.0, 2.0], "b": [1.0, 2.0]})


# ----------------------------------------------------------------------------- compute curves


C = np.array([1000, 2000, 4000, 6000, 8000, 12000, 16000, 24000, 32000, 40000.0])


def _runs(a, b, mid, r0=0.2, n=6, noise=0.015, seed=0):
    rng = np.random.default_rng(seed)
    return [
        (C, curvefit.sigmoid(C, a, b, mid, r0) + rng.normal(0, noise, len(C))) for _ in range(n)
    ]


def test_sigmoid_fit_recovers_known_parameters():
    fit = curvefit.fit_arm(_runs(0.75, 1.6, 5000), 0.2, resamples=200).fit
    assert fit.a == pytest.approx(0.75, abs=0.02)
    assert fit.b == pytest.approx(1.6, rel=0.15)
    assert fit.c_mid == pytest.approx(5000, rel=0.1)
    # noiseless: exact
    exact = curvefit.fit_curve(C, curvefit.sigmoid(C, 0.6, 2.0, 3000, 0.1), 0.1)
    assert (exact.a, exact.b, exact.c_mid) == (
        pytest.approx(0.6, abs=1e-4),
        pytest.approx(2.0, rel=1e-3),
        pytest.approx(3000, rel=1e-3),
    )


def test_curve_comparison_tells_asymptote_from_efficiency():
    base = curvefit.fit_arm(_runs(0.75, 1.6, 5000, seed=1), 0.2)
    lower = curvefit.fit_arm(_runs(0.55, 1.6, 5000, seed=2), 0.2)
    slower = curvefit.fit_arm(_runs(0.75, 1.6, 12000, seed=3), 0.2)
    same = curvefit.fit_arm(_runs(0.75, 1.6, 5000, seed=4), 0.2)
    assert curvefit.compare_fits(base, lower).verdict == curvefit.DIFFERS_ASYMPTOTE
    assert curvefit.compare_fits(base, slower).verdict == curvefit.DIFFERS_EFFICIENCY
    assert curvefit.compare_fits(base, same).verdict == curvefit.NO_DIFFERENCE
    # three runs per arm: fits, but no verdict from a bootstrap that narrow
    few = curvefit.fit_arm(_runs(0.55, 1.6, 5000, n=3, seed=7), 0.2)
    assert few.fit is not None and curvefit.compare_fits(base, few).verdict == curvefit.TOO_FEW


def test_first_half_predicts_the_end_of_a_saturating_curve():
    x = curvefit.extrapolation_check(_runs(0.75, 1.6, 5000, seed=6), 0.2)
    assert x["observed"] == pytest.approx(curvefit.sigmoid(40000.0, 0.75, 1.6, 5000, 0.2), abs=0.02)
    assert abs(x["error"]) < 0.03
    assert curvefit.fit_curve(C[:2], C[:2] * 0, 0.0) is None  # fewer than three positions
