"""Statistics of the report and the trainer's diagnostics, each checked against a second
computation: the curve bootstrap draws per arm, whatever order runs and arms are listed in; the
paired table's intervals agree with Holm's decisions; the gradient noise-to-signal ratio does not
saturate at the number of steps; the two-way bootstrap's variance is the one its formula says."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy import stats

from sixblanks.harness.training.diagnostics import GradNoiseProbe
from sixblanks.reports import curve_fits, curvefit, paired, pairs

# ----------------------------------------------------------------------------- curve bootstrap

C = np.array([1000, 2000, 4000, 6000, 8000, 12000, 16000, 24000, 32000, 40000.0])


def _runs(a=0.75, b=1.6, mid=5000.0, r0=0.2, n=6, noise=0.03, seed=0):
    rng = np.random.default_rng(seed)
    return [
        (C, curvefit.sigmoid(C, a, b, mid, r0) + rng.normal(0, noise, len(C))) for _ in range(n)
    ]


def test_an_arms_curve_intervals_do_not_depend_on_the_order_of_its_runs():
    runs = _runs(seed=11)
    listed = curvefit.fit_arm(runs, 0.2, resamples=100)
    for order in ([5, 4, 3, 2, 1, 0], [2, 0, 5, 1, 4, 3]):
        again = curvefit.fit_arm([runs[k] for k in order], 0.2, resamples=100)
        assert np.array_equal(again.boots, listed.boots)
        assert [again.interval(k) for k in range(3)] == [listed.interval(k) for k in range(3)]
        assert again.estimate == listed.estimate


def test_arms_draw_their_own_resamples():
    """Two arms with the same runs: the same fit, but the refits come from independent draws, so
    compare_fits, which pairs the arms' refits row by row, pairs independent ones (one shared
    stream would pair each resample with its copy: a correlation of 1)."""

    runs = _runs(seed=12)
    x = curvefit.fit_arm(runs, 0.2, resamples=400, arm="x")
    y = curvefit.fit_arm(runs, 0.2, resamples=400, arm="y")
    assert x.estimate == y.estimate and not np.array_equal(x.boots, y.boots)
    corr = np.corrcoef(x.boots[:, 0], y.boots[:, 0])[0, 1]
    assert abs(corr) < 0.2  # 400 independent pairs: its standard error is 0.05
    # the same name and seed: the same draws; another seed: others
    assert np.array_equal(curvefit.fit_arm(runs, 0.2, resamples=400, arm="x").boots, x.boots)
    other = curvefit.fit_arm(runs, 0.2, resamples=400, seed=1, arm="x")
    assert not np.array_equal(other.boots, x.boots)


def test_the_reports_curve_fits_do_not_depend_on_how_arms_and_runs_are_listed(monkeypatch):
    curves = {"x": _runs(seed=13), "y": _runs(a=0.6, seed=14)}

    def fits(arms, flip):
        listed = {a: (r[::-1] if flip else r) for a, r in curves.items()}
        monkeypatch.setattr(curve_fits, "arm_curves", lambda d, axis: listed)
        d = SimpleNamespace(warm_start_score=0.2, arms=arms)
        return curve_fits.curve_rows(d, resamples=50)

    (f1, p1), (f2, p2) = fits(["x", "y"], False), fits(["y", "x"], True)
    for axis in curve_fits.AXES:
        for arm in ("x", "y"):
            assert np.array_equal(f1[axis][arm].boots, f2[axis][arm].boots)
        assert not np.array_equal(f1[axis]["x"].boots, f1[axis]["y"].boots)
    assert [p1[0][axis] for axis in curve_fits.AXES] == [p2[0][axis] for axis in curve_fits.AXES]


# ----------------------------------------------------------------------------- Holm and intervals


def _pair_rows(monkeypatch, values: dict[str, list[float]]):
    """pairs.pair_rows on per-seed values (one instance each: a paired t-test over seeds)."""

    scores = {a: {s: np.array([v]) for s, v in enumerate(vs)} for a, vs in values.items()}
    monkeypatch.setattr(pairs, "instance_scores", lambda d: scores)
    return {(r["a"], r["b"]): r for r in pairs.pair_rows(SimpleNamespace(arms=list(values)))}


def _by_hand(x, y, level):
    """The paired t-test's p-value and the t interval at ``level`` of the per-seed differences."""

    d = np.asarray(x) - np.asarray(y)
    half = stats.t.ppf(1 - level / 2, len(d) - 1) * stats.sem(d)
    return stats.ttest_rel(x, y).pvalue, d.mean() - half, d.mean() + half


STOPS = {  # p-values: A-C 0.0029, B-C 0.031, A-B 0.043
    "A": [0.61, 0.62, 0.57, 0.58, 0.63],
    "B": [0.52, 0.51, 0.53, 0.59, 0.52],
    "C": [0.48, 0.47, 0.50, 0.45, 0.43],
}
STEPS = {  # p-values: B-C 0.0067, A-C 0.0216, A-B 0.044
    "A": [0.63, 0.66, 0.54, 0.62, 0.55],
    "B": [0.49, 0.51, 0.49, 0.57, 0.54],
    "C": [0.40, 0.43, 0.43, 0.51, 0.52],
}


def test_a_pair_holm_keeps_shows_an_interval_that_holds_0(monkeypatch):
    """Three pairs at 5%: A-C (p 0.003) passes alpha/3; B-C (p 0.031) fails alpha/2 = 0.025 and the
    step-down stops: B-C and A-B (p 0.043) are kept, though both unadjusted 95% intervals exclude
    0. Shown at the stopping level 0.025 (97.5%), both hold 0; A-C's, at 1/60 (98.3%), excludes
    it."""

    v = {a: np.array(x) for a, x in STOPS.items()}
    rows = _pair_rows(monkeypatch, STOPS)
    assert {k: r["separated"] for k, r in rows.items()} == {
        ("A", "B"): False,
        ("A", "C"): True,
        ("B", "C"): False,
    }
    for a, b in (("A", "B"), ("B", "C")):
        p, lo95, _ = _by_hand(v[a], v[b], 0.05)
        assert 0.025 < p < 0.05 and lo95 > 0  # unadjusted: the interval excludes 0
        _, lo, hi = _by_hand(v[a], v[b], 0.025)
        r = rows[a, b]
        assert r["low"] < 0 < r["high"]
        assert (r["low"], r["high"]) == (pytest.approx(lo), pytest.approx(hi))
        assert r["level"] == pytest.approx(0.025)
        assert r["p"] == pytest.approx(p)  # the p-value shown stays unadjusted
        # the detectable difference at the same level: above the one at 5%
        se, df = r["se"], r["df"]
        assert r["mde"] == pytest.approx(paired.minimum_detectable_effect(se, df, 0.025))
        assert r["mde"] > paired.minimum_detectable_effect(se, df, 0.05)
    _, lo, hi = _by_hand(v["A"], v["C"], 0.05 / 3)
    r = rows["A", "C"]
    assert r["level"] == pytest.approx(0.05 / 3) and 0 < r["low"] == pytest.approx(lo)
    assert r["high"] == pytest.approx(hi)


def test_a_pair_holm_rejects_late_shows_an_interval_that_excludes_0(monkeypatch):
    """B-C (p 0.0067) passes 1/60, A-C (p 0.0216) passes alpha/2, A-B (p 0.044) passes alpha: all
    separated. A-C's Bonferroni interval (alpha/3) would hold 0; at Holm's 0.025 it excludes it."""

    v = {a: np.array(x) for a, x in STEPS.items()}
    rows = _pair_rows(monkeypatch, STEPS)
    assert all(r["separated"] for r in rows.values())
    levels = {("B", "C"): 0.05 / 3, ("A", "C"): 0.025, ("A", "B"): 0.05}
    for (a, b), level in levels.items():
        _, lo, hi = _by_hand(v[a], v[b], level)
        r = rows[a, b]
        assert r["level"] == pytest.approx(level)
        assert (r["low"], r["high"]) == (pytest.approx(lo), pytest.approx(hi))
        assert r["low"] > 0
    assert _by_hand(v["A"], v["C"], 0.05 / 3)[1] < 0  # Bonferroni's would contradict


def test_holm_levels_by_hand():
    # m = 4 at 0.05: 0.001 <= 0.0125, 0.01 <= 0.0167, 0.03 > 0.025 stops; 0.04 kept at 0.025
    got = pairs.holm_levels([0.03, 0.001, 0.04, 0.01])
    assert [r for r, _ in got] == [False, True, False, True]
    assert [lv for _, lv in got] == pytest.approx([0.025, 0.0125, 0.025, 0.05 / 3])
    assert pairs.holm([0.03, 0.001, 0.04, 0.01]) == [False, True, False, True]
    assert pairs.holm_levels([0.2]) == [(False, 0.05)] and pairs.holm_levels([]) == []


def test_the_paired_table_says_its_intervals_are_holm_adjusted(monkeypatch):
    from sixblanks.reports.render import to_markdown

    rows = _pair_rows(monkeypatch, STOPS)
    d = SimpleNamespace(score_label="score")
    md = to_markdown("t", pairs.paired_blocks(d, list(rows.values())))
    assert "A − B, paired, mean [Holm-adjusted CI] (score)" in md and "95% CI" not in md
    assert "| CI level (Holm) |" in md and "| 97.5% |" in md and "| 98.3% |" in md


# ----------------------------------------------------------------------------- gradient noise


D = 50
SPREAD = np.linspace(0.2, 1.0, D) * np.sqrt(20.0 / (np.linspace(0.2, 1.0, D) ** 2).sum())
MEAN = np.r_[np.full(5, np.sqrt(1 / 5)), np.zeros(D - 5)]  # |mu|^2 = 1, tr(Cov) = 20: ratio 20


def _probe_ratio(mean: np.ndarray, steps: int, seed: int) -> float:
    """The last grad.noise_to_signal of a probe fed ``steps`` draws of N(mean, diag(SPREAD^2));
    inf where it reports none."""

    rng = np.random.default_rng(seed)
    probe, out = GradNoiseProbe(), {}
    for _ in range(steps):
        out = probe.add(torch.tensor(mean + SPREAD * rng.normal(size=len(mean))))
    return out.get("grad.noise_to_signal", float("inf"))


def test_noise_to_signal_estimates_the_true_ratio():
    assert (SPREAD**2).sum() == pytest.approx(20.0) and MEAN @ MEAN == pytest.approx(1.0)
    # many steps: close to tr(Cov) / |mu|^2 = 20
    assert _probe_ratio(MEAN, 2000, 1) == pytest.approx(20.0, rel=0.05)
    # 20 steps: the plug-in |mean|^2 is 1 + 20 / 20 = 2 in expectation, which halved the ratio to
    # about 10; taken off, the median over probes is near 20
    few = [_probe_ratio(MEAN, 20, s) for s in range(300)]
    assert np.median(few) == pytest.approx(20.0, rel=0.15)


def test_noise_to_signal_of_a_zero_mean_gradient_does_not_saturate_at_the_steps():
    """With mu = 0 the plug-in ratio tends to n (|mean|^2 ~ tr(Cov) / n): a pure-noise estimator
    would read as a finite ratio near the number of steps. The unbiased signal is <= 0 about half
    the time (the ratio absent) and small otherwise (the ratio far above n)."""

    n = 50
    ratios = np.array([_probe_ratio(np.zeros(D), n, s) for s in range(200)])
    absent = np.mean(np.isinf(ratios))
    assert 0.3 < absent < 0.7
    assert np.median(ratios) > 5 * n


# ----------------------------------------------------------------------------- two-way bootstrap


def _components(d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    mu = d.mean()
    r, c = d.mean(1) - mu, d.mean(0) - mu
    return r, c, d - mu - r[:, None] - c[None, :]


def _bootstrap_variance(d: np.ndarray) -> float:
    """Var* = mean(r^2) / S + mean(c^2) / I + mean(e^2) / (S I), the module's formula."""

    s, i = d.shape
    r, c, e = _components(d)
    return float((r**2).mean() / s + (c**2).mean() / i + (e**2).mean() / (s * i))


def test_the_two_way_bootstrap_variance_by_enumeration():
    """Two seeds x three instances: all 2^2 * 3^3 = 108 resamples are equally likely; their exact
    variance is the formula, also in its mean-square form."""

    d = np.array([[0.0, 1.0, 3.0], [2.0, 2.0, 7.0]])
    s, i = d.shape
    means = [
        d[np.ix_(rows, cols)].mean()
        for rows in itertools.product(range(s), repeat=s)
        for cols in itertools.product(range(i), repeat=i)
    ]
    assert len(means) == 108
    exact = float(np.var(means))
    assert exact == pytest.approx(_bootstrap_variance(d), rel=1e-12)
    ms = paired.mean_squares(d)
    by_ms = (
        (s - 1) / s * ms.ms_seed
        + (i - 1) / i * ms.ms_instance
        + (s - 1) * (i - 1) / (s * i) * ms.ms_cell
    ) / (s * i)
    assert exact == pytest.approx(by_ms, rel=1e-12)


def test_the_two_way_bootstrap_variance_over_many_resamples_is_not_the_anova_estimate():
    """A fixed table whose cells' noise dominates: twoway_bootstrap's variance over 100,000
    resamples is the formula, and above the unbiased ANOVA estimate (it counts the cells' noise
    in the rows, the columns and the cells; the estimate subtracts MS_cell)."""

    rng = np.random.default_rng(7)
    d = rng.normal(0, 1.0, (3, 12)) + rng.normal(0, 0.1, (3, 1)) + rng.normal(0, 0.1, (1, 12))
    boots = paired.twoway_bootstrap(d, resamples=100_000, seed=3)
    formula = _bootstrap_variance(d)
    assert boots.var() == pytest.approx(formula, rel=0.03)
    anova = paired.twoway_se(d)[1] ** 2
    assert formula > 1.5 * anova


def test_the_two_way_bootstrap_variance_in_expectation():
    """Over tables of the model d = a_s + b_i + e_si (variances 0.3, 0.5, 3.0; S = 3, I = 4), the
    mean of Var* is (S-1)/S var_seed/S + (I-1)/I var_instance/I + (3SI - 2S - 2I + 1)/(SI)
    var_cell/(SI), while the mean's variance is var_seed/S + var_instance/I + var_cell/(SI)."""

    s, i, n = 3, 4, 40_000
    va, vb, ve = 0.3, 0.5, 3.0
    rng = np.random.default_rng(0)
    d = (
        rng.normal(0, np.sqrt(va), (n, s, 1))
        + rng.normal(0, np.sqrt(vb), (n, 1, i))
        + rng.normal(0, np.sqrt(ve), (n, s, i))
    )
    mu = d.mean((1, 2), keepdims=True)
    r, c = d.mean(2, keepdims=True) - mu, d.mean(1, keepdims=True) - mu
    e = d - mu - r - c
    var_star = (r**2).mean((1, 2)) / s + (c**2).mean((1, 2)) / i + (e**2).mean((1, 2)) / (s * i)
    expected = (
        (s - 1) / s * va / s
        + (i - 1) / i * vb / i
        + (3 * s * i - 2 * s - 2 * i + 1) / (s * i) * ve / (s * i)
    )
    assert var_star.mean() == pytest.approx(expected, rel=0.02)
    truth = va / s + vb / i + ve / (s * i)
    assert abs(expected - truth) > 0.1 * truth  # so the bootstrap is not the mean's variance
