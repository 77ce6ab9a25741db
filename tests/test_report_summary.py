"""Who won, said plainly: the per-arm summary (mean final score with a Student t interval over the
seeds), one sentence per pair of arms with its direction in words, P(improvement) with the seeds
behind it, compute-curve fits only where they stand, and no estimate printed outside its own
interval anywhere in the report.

The planted store: one task, 40 held-out instances, three arms. grpo and dapo have 5 seeds, rloo 2.
Every evaluation solves the first k instances (so arms that solve more pair up instance by
instance), k following a compute curve R(C) = 0.2 + (A - 0.2) / (1 + (200 / C)^2) with A = 0.5
for grpo and 0.8 for dapo, plus a seed's offset. rloo ends close to grpo.
"""

import json
import os
import re

import numpy as np
import pytest
from scipy import stats as sps

from sixblanks.harness.store.database import append_rows
from sixblanks.reports import stats
from sixblanks.reports.build import build_report, load, summary_of

INSTANCES = 40
WARM = 0.2
STEPS = 7  # evaluations at launched tokens 0, 100, ..., 600
SEEDS = {"grpo": [0, 1, 2, 3, 4], "dapo": [0, 1, 2, 3, 4], "rloo": [0, 1]}
ASYMPTOTE = {"grpo": 0.5, "dapo": 0.8, "rloo": 0.5}
OFFSET = {0: -0.05, 1: 0.025, 2: 0.0, 3: 0.05, 4: -0.025}  # a seed's shift of its whole curve
OFFSET_RLOO = {0: 0.05, 1: 0.075}

pytestmark = pytest.mark.xdist_group("report_summary")


def solved(arm: str, seed: int, step: int) -> int:
    """How many of the INSTANCES the (arm, seed) run solves at evaluation ``step``."""

    c = 100.0 * step
    r = WARM if c == 0 else WARM + (ASYMPTOTE[arm] - WARM) / (1 + (200.0 / c) ** 2)
    shift = (OFFSET_RLOO if arm == "rloo" else OFFSET)[seed] if step else 0.0
    return int(round((r + shift) * INSTANCES))


def finals(arm: str) -> np.ndarray:
    """``[seeds]`` final scores of ``arm``, in seed order: the truth the report is checked on."""

    return np.array([solved(arm, s, STEPS - 1) / INSTANCES for s in SEEDS[arm]])


def plant(out):
    """Write the planted store into ``out`` (an experiment directory); returns ``out``."""

    cfg = {
        "name": "summary",
        "arms": {a: {"preset": a} for a in SEEDS},
        "tasks": [{"name": "t"}],
        "seeds": [0, 1, 2, 3, 4],
        "budget": {"launched_tokens": 600},
    }
    t: dict[str, list] = {k: [] for k in ("runs", "evals", "budgets", "ledger")}
    for arm, seeds in SEEDS.items():
        for seed in seeds:
            rid = f"{arm}-{seed}"
            final = solved(arm, seed, STEPS - 1) / INSTANCES
            t["runs"].append(
                {
                    "run_id": rid,
                    "experiment_id": "summary",
                    "arm": arm,
                    "preset": arm,
                    "task": "t",
                    "seed": seed,
                    "status": "finished",
                    "blanks": "{}",
                    "steps": STEPS - 1,
                    "final_score": final,
                }
            )
            t["budgets"].append(
                {
                    "run_id": rid,
                    "counter": "launched_tokens",
                    "limit_value": 600.0,
                    "consumed": 600.0,
                }
            )
            for step in range(STEPS):
                k = solved(arm, seed, step)
                pos = {"launched_tokens": 100.0 * step, "env_steps": step, "wall_seconds": step}
                t["evals"].append(
                    {
                        "run_id": rid,
                        "step": step,
                        "split": "test",
                        "score": k / INSTANCES,
                        "n": INSTANCES,
                        "launched_tokens": 100.0 * step,
                        "accepted_tokens": 100.0 * step,
                        "device_seconds": float(step),
                        "verifier_calls": 40.0 * step,
                        "env_steps": float(step),
                        "wall_seconds": float(step),
                        "position": json.dumps(pos),
                        # the first k instances solved: per-instance outcomes for the paired table
                        "detail": json.dumps({"t": [1.0] * k + [0.0] * (INSTANCES - k)}),
                    }
                )
                if step:
                    t["ledger"].append(
                        {
                            "run_id": rid,
                            "step": step,
                            "launched_tokens": 100.0 * step,
                            "accepted_tokens": 100.0 * step,
                            "device_seconds": float(step),
                            "env_steps": float(step),
                            "wall_seconds": float(step),
                        }
                    )
    t["experiments"] = [{"experiment_id": "summary", "name": "summary", "config": json.dumps(cfg)}]
    append_rows(out, t)
    return out


# "0.219 [-0.178, 0.616]", "2.7e+03 [100, 2.7e+03]": an estimate and its interval as printed
NUMBER = r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?"
ESTIMATE = re.compile(rf"({NUMBER}) \[({NUMBER}), ({NUMBER})\]")


def assert_estimates_inside(text: str) -> int:
    """Every "estimate [low, high]" in ``text`` has low <= estimate <= high; returns how many."""

    found = ESTIMATE.findall(text)
    outside = [m for m in found if not float(m[1]) <= float(m[0]) <= float(m[2])]
    assert not outside, f"estimates outside their own intervals: {outside}"
    return len(found)


def t_by_hand(x) -> tuple[float, float, float]:
    """(mean, low, high): the 95% Student t interval of the mean of ``x``, n - 1 degrees of
    freedom, from its textbook formula."""

    x = np.asarray(x, dtype=float)
    n, m = len(x), float(np.mean(x))
    half = sps.t.ppf(0.975, n - 1) * np.std(x, ddof=1) / np.sqrt(n)
    return m, m - half, m + half


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    out = plant(tmp_path_factory.mktemp("summary"))
    index = build_report(out, baseline="grpo", resamples=200, with_plots=False)
    return {
        "out": out,
        "md": (index.parent / "report.md").read_text(),
        "html": index.read_text(),
        "arms": {r["arm"]: r for r in json.loads((index.parent / "arms.json").read_text())},
    }


# ----------------------------------------------------------------------------- the t interval


def test_t_interval_by_hand_at_two_and_three_seeds():
    # the two seeds: a percentile bootstrap gives back [0.180, 0.227], the two values
    two = [0.227, 0.180]
    mean, lo, hi, df = stats.stratified_t_interval([np.array(two)])
    half = 12.706204736 * np.std(two, ddof=1) / np.sqrt(2)  # t(0.975, 1 dof) from a table
    assert (mean, lo, hi, df) == pytest.approx((0.2035, 0.2035 - half, 0.2035 + half, 1.0))
    assert lo < 0.180 and hi > 0.227  # wider than the two values: it covers
    # three seeds: 2 degrees of freedom, scipy's own t interval as the second method
    three = [0.31, 0.25, 0.22]
    mean, lo, hi, df = stats.stratified_t_interval([np.array(three)])
    by_scipy = sps.t.interval(0.95, 2, loc=np.mean(three), scale=sps.sem(three))
    assert (lo, hi) == pytest.approx(by_scipy) and df == 2
    assert (mean, lo, hi) == pytest.approx(t_by_hand(three))
    # one seed: no interval; seeds that agree: a zero-width interval at the mean
    assert np.isnan(stats.stratified_t_interval([np.array([0.3])])[1])
    assert stats.stratified_t_interval([np.array([0.25, 0.25])])[:3] == (0.25, 0.25, 0.25)


def test_t_interval_over_tasks_by_hand():
    """Two tasks of 2 and 3 seeds: the mean over all 5 runs, Var = sum n_t s_t^2 / N^2, and
    Welch-Satterthwaite's degrees of freedom, written out."""

    t1, t2 = np.array([0.2, 0.4]), np.array([0.5, 0.6, 0.9])
    n = 5
    v1, v2 = 2 * t1.var(ddof=1) / n**2, 3 * t2.var(ddof=1) / n**2
    df = (v1 + v2) ** 2 / (v1**2 / 1 + v2**2 / 2)
    mean = (t1.sum() + t2.sum()) / n
    half = sps.t.ppf(0.975, df) * np.sqrt(v1 + v2)
    got = stats.stratified_t_interval([t1, t2])
    assert got == pytest.approx((mean, mean - half, mean + half, df))
    # a task with one seed leaves that task's spread unknown: no interval at all
    assert np.isnan(stats.stratified_t_interval([t1, np.array([0.5])])[1])


# ----------------------------------------------------------------------------- the summary


def test_summary_per_arm_by_hand(planted):
    s = summary_of(planted["out"])
    rows = {r["arm"]: r for r in s.arms.iter_rows(named=True)}
    assert list(rows) == ["grpo", "dapo", "rloo"]  # the experiment's order
    for arm, seeds in SEEDS.items():
        mean, lo, hi = t_by_hand(finals(arm))
        r = rows[arm]
        assert (r["mean"], r["low"], r["high"]) == pytest.approx((mean, lo, hi))
        assert r["seeds"] == r["finished"] == r["runs"] == len(seeds) and r["split"] == "test"
        # the arm table shows the same mean and interval
        a = planted["arms"][arm]
        assert (a["mean"], a["mean_lo"], a["mean_hi"]) == pytest.approx((mean, lo, hi))
    # the report opens with it: a row per arm, then the sentences
    part = planted["md"].split("## Summary", 1)[1].split("\n## ", 1)[0]
    mean, lo, hi = t_by_hand(finals("rloo"))
    assert f"| rloo | {mean:.3f} [{lo:.3f}, {hi:.3f}] | 2 | 2/2 |" in part
    for sentence in s.sentences:
        assert sentence in part
    # as text, for a terminal: a line per arm with its seeds
    lines = s.lines()
    assert lines[0] == "final score (test split), mean [95% t interval over seeds]:"
    assert lines[3] == f"  rloo  {mean:.3f} [{lo:.3f}, {hi:.3f}]  2 seeds"
    assert lines[4:] == s.sentences


def test_one_sentence_per_pair_with_its_direction_in_words(planted):
    s = summary_of(planted["out"])
    assert len(s.sentences) == 3  # grpo-dapo, grpo-rloo, dapo-rloo

    def diff(a: str, b: str) -> float:
        """Mean over shared seeds and instances of a's outcome minus b's, from the planted k."""

        shared = sorted(set(SEEDS[a]) & set(SEEDS[b]))
        return np.mean(
            [(solved(a, x, STEPS - 1) - solved(b, x, STEPS - 1)) / INSTANCES for x in shared]
        )

    # dapo solves about 0.29 more on every seed: separated, dapo named first
    (dapo_grpo,) = [x for x in s.sentences if "dapo" in x and "grpo" in x]
    assert dapo_grpo.startswith(f"dapo > grpo: paired difference {diff('dapo', 'grpo'):.3f} [")
    assert dapo_grpo.endswith("(5 seeds × 40 instances), separated (Holm over 3 pairs).")
    # rloo against grpo on their 2 shared seeds: rloo is ahead by a little, and not separated
    (rloo_grpo,) = [x for x in s.sentences if "rloo" in x and "grpo" in x]
    d = diff("rloo", "grpo")
    assert d > 0 and rloo_grpo.startswith("rloo vs grpo: no separation (Holm over 3 pairs); ")
    assert f"rloo scored {d:.3f} higher than grpo, paired difference {d:.3f} [" in rloo_grpo
    assert "(2 seeds × 40 instances)" in rloo_grpo
    # the paired table: the higher-scoring arm first, so every difference is >= 0
    part = planted["md"].split("## Paired differences", 1)[1].split("\n## ", 1)[0]
    assert f"| dapo | grpo | {diff('dapo', 'grpo'):.3f} [" in part
    assert f"| dapo | rloo | {diff('dapo', 'rloo'):.3f} [" in part
    assert "| grpo | dapo |" not in part and " -0." not in part.split("|---|", 1)[1]


def test_an_interval_wider_than_the_scores_allow_is_said_plainly(planted):
    """Outcomes in [0, 1]: two arms' means differ by at most 1. With 3 seeds and 28 pairs the
    Holm-adjusted t interval (2 degrees of freedom) can run past both ends of [-1, 1]: the
    sentence then says it holds every possible difference instead of quoting it as an estimate,
    and a detectable difference beyond 1 is "even the largest"."""

    from sixblanks.reports.pairs import pair_rows, pair_sentence

    row = {"a": "ppo", "b": "rloo", "diff": 0.053, "seeds": 3, "instances": 25}
    row |= {"separated": False, "range": (0.0, 1.0)}
    # 3 seeds' paired means by hand, t quantile at 0.05 / 28 with 2 degrees of freedom
    means = np.array([0.9, -0.7, -0.041])
    half = sps.t.ppf(1 - 0.05 / 28 / 2, 2) * np.std(means, ddof=1) / np.sqrt(3)
    assert half > 1 + abs(means.mean())  # past both ends
    low, high = means.mean() - half, means.mean() + half
    wide = pair_sentence(row | {"low": low, "high": high, "mde": 2 * half}, 28)
    assert wide == (
        "ppo vs rloo: no separation (Holm over 28 pairs); ppo scored 0.053 higher than rloo "
        f"(3 seeds × 25 instances), but the interval at this level, [{low:.3f}, {high:.3f}], "
        "holds every difference two arms could show (the scores seen range over [0.000, 1.000]): "
        "with 3 seeds no difference can be told apart."
    )
    # inside the range, the interval is quoted; a detectable difference past 1 is "the largest"
    narrow = pair_sentence(row | {"low": -0.3, "high": 0.4, "mde": 1.2}, 28)
    assert "paired difference 0.053 [-0.300, 0.400]" in narrow
    assert narrow.endswith(
        "; even the largest possible difference would often go unseen (the "
        "scores seen range over [0.000, 1.000])."
    )
    usual = pair_sentence(row | {"low": -0.3, "high": 0.4, "mde": 0.35}, 28)
    assert usual.endswith("; a true difference below 0.350 would often go unseen.")
    # the range is the pair's outcomes' own: the planted instances are solved (1) or not (0)
    d = load(planted["out"])
    assert {r["range"] for r in pair_rows(d)} == {(0.0, 1.0)}


def test_p_improvement_with_its_seeds_and_not_below_three(planted):
    def p_by_hand(x, y):
        return sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in x for b in y) / (
            len(x) * len(y)
        )

    p = p_by_hand(finals("dapo"), finals("grpo"))
    assert planted["arms"]["dapo"]["p_improve"] == pytest.approx(p)
    rows = {ln.split("|")[1].strip(): ln for ln in planted["md"].splitlines() if "| 5/5 |" in ln}
    assert f"| {p:.3f} (from 5 and 5 seeds) |" in rows["dapo"]
    # rloo: 2 seeds against 5, a complete ordering is too likely by chance to print
    rloo = next(ln for ln in planted["md"].splitlines() if ln.startswith("| rloo | rloo | 2/2 |"))
    assert "| — (2 and 5 seeds: too few, 3 needed) |" in rloo
    # median and IQM: 5 runs have a bootstrap interval, 2 do not
    median = float(np.median(finals("rloo")))
    assert f"| {median:.3f} (2 runs: no interval below 5) |" in rloo
    assert ESTIMATE.search(rows["dapo"].split("|")[5])  # dapo's median: 5 runs, an interval


def test_no_estimate_outside_its_interval_and_fits_below_their_minimum_shown_as_such(planted):
    for text in (planted["md"], planted["html"]):
        assert assert_estimates_inside(text) >= 20
    curves = planted["md"].split("## Compute curves: asymptote or efficiency", 1)[1]
    curves = curves.split("\n## ", 1)[0]
    # 5 runs of a curve that bends within the budget: fitted, with intervals; rloo's 2 runs: not
    for axis in ("launched tokens", "verifier calls", "device-seconds"):
        for arm in ("grpo", "dapo"):
            row = next(ln for ln in curves.splitlines() if ln.startswith(f"| {axis} | {arm} |"))
            assert ESTIMATE.search(row), row
        assert f"| {axis} | rloo | 2 finished run(s): no fit shown below 5 runs |" in curves
    # dapo's asymptote (0.8) against grpo's (0.5): told apart; rloo's pairs get no verdict
    verdicts = curves.split("| arm A (ended higher) | arm B |", 1)[1]
    assert "| dapo | grpo | differs in asymptote — ΔA 0.3" in verdicts
    assert "| rloo | grpo | too few seeds for a verdict (2 and 5 runs; 5 needed) |" in verdicts
    # each fit's estimate is the asymptote planted (the seeds' offsets average to 0)
    a = re.search(r"\| launched tokens \| dapo \| (\S+) \[", curves).group(1)
    assert float(a) == pytest.approx(0.8, abs=0.03)


def test_report_command_prints_the_summary(cli, planted):
    code, out, err = cli("report", str(planted["out"]), "--resamples", "100")
    assert code == 0, err
    lines = summary_of(planted["out"]).lines()
    text = out.replace("\n", " ")
    for line in lines:  # a terminal may fold a long sentence: compare with the folds undone
        assert " ".join(line.split()) in " ".join(text.split())


def test_the_summary_of_a_report_just_built_is_said_without_reading_the_store_again(
    tmp_path, monkeypatch
):
    """`sixblanks run` prints the summary after the report: the report's own, where the store is
    as the report read it; a store changed since, or another baseline, is read again."""

    from sixblanks.reports import build, summary

    out = plant(tmp_path)
    expected = summary.summarize(build.load(out)).lines()
    build_report(out, resamples=200, with_plots=False)

    def no_reading(*a, **k):
        raise AssertionError("the store was read again")

    monkeypatch.setattr(build, "load", no_reading)
    assert summary_of(out).lines() == expected
    with pytest.raises(AssertionError, match="read again"):
        summary_of(out, "dapo")
    store = out / "results.duckdb"
    os.utime(store, ns=(store.stat().st_atime_ns, store.stat().st_mtime_ns + 10**9))
    with pytest.raises(AssertionError, match="read again"):
        summary_of(out)
