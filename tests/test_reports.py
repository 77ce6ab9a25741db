"""Comparison reports: statistics against hand-computed values, and the report itself."""

import json
import math
import re
import shutil

import numpy as np
import pytest
from scipy import stats as sps

from sixblanks.harness.config import validate_mapping
from sixblanks.harness.orchestration.orchestrator import Orchestrator
from sixblanks.harness.tasks import make_task
from sixblanks.reports import stats
from sixblanks.reports.build import build_report

from .conftest import screenshot

# one worker builds the module-scoped fixtures once (split across two, each built its own)
pytestmark = pytest.mark.xdist_group("reports")


def test_iqm_by_hand():
    assert stats.iqm(np.arange(1, 9)) == pytest.approx(4.5)  # mean of 3, 4, 5, 6
    assert stats.iqm([1, 2, 3, 4, 100, 200, 300, 400]) == pytest.approx((3 + 4 + 100 + 200) / 4)


def test_bootstrap_vectorised_equals_a_plain_loop():
    rng = np.random.default_rng(3)
    scores = rng.random((5, 3))
    for stat in ("mean", "median", "iqm"):
        _, lo, hi = stats.stratified_bootstrap_ci(scores, stat, resamples=300, seed=7)
        lo2, hi2 = stats.stratified_bootstrap_ci_loop(scores, stat, resamples=300, seed=7)
        assert (lo, hi) == pytest.approx((lo2, hi2))


def test_bootstrap_by_hand():
    # two seeds scoring 0 and 1: resampled means are 0, 1/2, 1 with probabilities 1/4, 1/2, 1/4
    p, lo, hi = stats.stratified_bootstrap_ci(np.array([0.0, 1.0]), "mean", resamples=20000, seed=0)
    assert (p, lo, hi) == (0.5, 0.0, 1.0)
    p, lo, hi = stats.stratified_bootstrap_ci(np.full((4, 2), 0.3), "iqm")
    assert (p, lo, hi) == pytest.approx((0.3, 0.3, 0.3))
    # stratified: seeds are resampled within each task, so task A (all 0) and B (all 10) always
    # contribute equally and the interval collapses to 5
    p, lo, hi = stats.stratified_bootstrap_ci(
        np.array([[0.0, 10.0], [0.0, 10.0], [0.0, 10.0]]), "mean"
    )
    assert (p, lo, hi) == (5.0, 5.0, 5.0)
    p, lo, hi = stats.stratified_bootstrap_ci(np.array([0.7]), "mean")
    assert p == 0.7 and math.isnan(lo) and math.isnan(hi)  # one seed: no interval


def test_probability_of_improvement_by_hand():
    x, y = [1, 2, 3], [0, 2]
    # pairs: (1,0) win, (1,2) loss, (2,0) win, (2,2) tie, (3,0) win, (3,2) win -> (4 + 0.5) / 6
    assert stats.probability_of_improvement(x, y) == pytest.approx(0.75)
    assert stats.probability_of_improvement(x, y) == pytest.approx(
        sps.mannwhitneyu(x, y).statistic / 6
    )
    assert stats.probability_of_improvement([5, 6], [1, 2]) == 1.0


def test_curve_auc_by_hand():
    assert stats.curve_auc([0, 10, 20], [0, 1, 1]) == pytest.approx((10 * 0.5 + 10 * 1) / 20)
    assert stats.curve_auc([20, 0, 10], [1, 0, 1]) == pytest.approx(0.75)  # order does not matter
    assert stats.curve_auc([5], [0.4]) == 0.4


def test_stratified_bootstrap_over_strata_of_unequal_size():
    # a run failed on task B: 3 scores on A, 2 on B. Each task's scores are resampled within the
    # task
    strata = [np.array([0.1, 0.5, 0.9]), np.array([2.0, 3.0])]
    p, lo, hi = stats.stratified_bootstrap_ci_strata(strata, "mean", resamples=300, seed=5)
    assert p == pytest.approx((0.1 + 0.5 + 0.9 + 2.0 + 3.0) / 5)
    # the same draws as a plain loop
    rng = np.random.default_rng(5)
    idx = [rng.integers(0, len(s), size=(300, len(s))) for s in strata]
    vals = [np.mean(np.concatenate([s[i[r]] for s, i in zip(strata, idx)])) for r in range(300)]
    assert (lo, hi) == pytest.approx(tuple(np.quantile(vals, [0.025, 0.975])))
    # constant within each task: every resample holds three 0s and two 10s, so no spread at all
    assert stats.stratified_bootstrap_ci_strata([np.zeros(3), np.full(2, 10.0)]) == (4.0, 4.0, 4.0)
    # equal sizes: exactly the [runs, tasks] matrix estimator
    rng = np.random.default_rng(1)
    mat = rng.random((4, 3))
    for stat in ("mean", "iqm"):
        assert stats.stratified_bootstrap_ci_strata(
            list(mat.T), stat, 200, seed=2
        ) == stats.stratified_bootstrap_ci(mat, stat, 200, seed=2)
    assert math.isnan(stats.stratified_bootstrap_ci_strata([[0.3], [0.5]])[1])  # one seed per task


def test_probability_of_improvement_by_task_by_hand():
    x = {"t1": [5.0, 6.0], "t2": [0.0, 1.0], "t3": [9.0]}
    y = {"t1": [1.0, 2.0], "t2": [0.0, 1.0]}  # t3 has no baseline score: left out
    avg, per = stats.probability_of_improvement_by_task(x, y)
    # t2: pairs (0,0) tie, (0,1) loss, (1,0) win, (1,1) tie -> (1 + 2 * 0.5) / 4
    assert per == {"t1": 1.0, "t2": 0.5} and avg == 0.75
    assert math.isnan(stats.probability_of_improvement_by_task({"a": [1.0]}, {"b": [1.0]})[0])


def test_task_ranges_and_normalize():
    assert stats.task_ranges({"a": [0.0, 1.0], "b": [0.2, 0.4]}) is None  # all in [0, 1]: raw
    r = stats.task_ranges({"a": [0.0, 1.0], "b": [20.0, 40.0, 30.0]})
    assert r == {"a": (0.0, 1.0), "b": (20.0, 40.0)}
    assert stats.normalize(np.array([20.0, 30.0, 40.0]), *r["b"]) == pytest.approx([0, 0.5, 1])
    assert stats.normalize(7.0, 7.0, 7.0) == 0.0  # a task whose scores do not vary


def test_band_with_strata_and_runs_covering():
    grid = np.array([0.0, 1.0, 2.0])
    curves = [
        (np.array([0.0, 2.0]), np.array([0.0, 0.0])),
        (np.array([0.0, 1.0]), np.array([10.0, 10.0])),
    ]
    assert stats.runs_covering(curves, grid).tolist() == [2, 2, 1]
    # one curve per task: no task's spread over seeds is known, so there is no band
    mean, lo, hi = stats.band(curves, grid, resamples=50, strata=["a", "b"])
    assert mean.tolist() == [5.0, 5.0, 0.0] and np.isnan(lo).all() and np.isnan(hi).all()
    # one stratum: at each point the t interval of the two curves' mean (1 degree of freedom)
    mean, lo, hi = stats.band(curves, grid)
    half = sps.t.ppf(0.975, 1) * np.std([0.0, 10.0], ddof=1) / np.sqrt(2)
    assert lo[:2] == pytest.approx([5.0 - half] * 2) and hi[:2] == pytest.approx([5.0 + half] * 2)
    assert np.isnan(lo[2])  # one curve reaches x = 2


SPEC = {
    "name": "<script>alert('x')</script> & co",
    "task": {"name": "arithmetic", "eval_size": 16},
    "rollout": {"max_new_tokens": 6, "prompts_per_step": 4, "group_size": 4},
    "warm_start": {"steps": 60, "num_demos": 300},
    "budget": {"launched_tokens": 700},
    "seeds": [0, 1],
    "arms": {"grpo": {"preset": "grpo"}, "rloo": {"preset": "rloo"}},
    "tracking": {"mlflow": False},
}


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    out = tmp_path_factory.mktemp("rep")
    Orchestrator(validate_mapping(SPEC), out, progress=False).run()
    return out


LATE_IMPORTS = """
import json, shutil, sys
from pathlib import Path
from sixblanks.harness.orchestration import prefetch
prefetch._import_all(prefetch.AFTER_RUNS)
before = set(sys.modules)
from sixblanks.harness.layout import ExperimentDir
from sixblanks.harness.store.database import ingest
from sixblanks.reports.build import build_report
out = Path(sys.argv[1])
where = ExperimentDir(out)
ingest(out, where.read_experiment(), json.loads(where.fairness.read_text()))
build_report(out, resamples=200)
heavy = ("pandas", "pyarrow", "polars", "duckdb", "matplotlib", "scipy", "numpy", "sixblanks")
print(json.dumps(sorted(m for m in set(sys.modules) - before if m.split(".")[0] in heavy)))
"""


@pytest.mark.slow
def test_after_the_runs_the_store_and_the_report_import_nothing_the_prefetch_could(
    experiment, tmp_path
):
    """The command imports what follows its runs in a background thread while they train
    (``prefetch.AFTER_RUNS``). A module of the libraries the store and the report use that is
    imported only after the prefetch (DuckDB's pandas check, say: half a second) lies on
    the path between the last step and the exit: none is, in a fresh interpreter."""

    import subprocess
    import sys

    out = tmp_path / "copy"
    shutil.copytree(experiment, out)
    (out / "results.duckdb").unlink()
    done = subprocess.run(
        [sys.executable, "-c", LATE_IMPORTS, str(out)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == []
    assert (out / "results.duckdb").exists() and (out / "report" / "index.html").exists()


def test_report_files_self_contained_and_escaped(experiment):
    index = build_report(experiment, resamples=500)
    text = index.read_text()
    assert (
        "<script>alert" not in text
        and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; co" in text
    )
    assert text.count("data:image/png;base64,") == 5  # one task: no per-task curves
    assert "http://" not in text and "https://" not in text  # nothing to fetch
    rep = index.parent
    for f in (
        "report.md",
        "scores.csv",
        "scores.parquet",
        "score_vs_cost.png",
        "census.png",
        "final_scores.png",
        "sampling_census.png",
    ):
        assert (rep / f).exists(), f
    import polars as pl

    scores = pl.read_parquet(rep / "scores.parquet")
    assert scores.height == 4 and set(scores["arm"]) == {"grpo", "rloo"}
    arms = {r["arm"]: r for r in json.loads((rep / "arms.json").read_text())}
    assert arms["grpo"]["p_improve"] is None and 0 <= arms["rloo"]["p_improve"] <= 1
    assert arms["grpo"]["mean_lo"] <= arms["grpo"]["mean"] <= arms["grpo"]["mean_hi"]
    md = (rep / "report.md").read_text()
    assert "warm-start score" in md and "| grpo | grpo | 2/2 |" in md
    # the effective number of instances: the distinct test problems each evaluation held
    task = make_task("arithmetic")
    distinct = {task.problem_key(i) for i in task.eval_instances(16)}
    assert f"Scores: the test split, over {len(distinct)} distinct problems" in md


def test_the_held_out_size_per_task_and_as_a_range():
    from types import SimpleNamespace

    import polars as pl

    from sixblanks.reports.build import heldout_size

    scored = pl.DataFrame(
        {"task": ["b", "a", "a", "b", "a"], "n": [128, 25, 25, 128, 20]},
        schema={"task": pl.String, "n": pl.Int64},
    )
    assert heldout_size(SimpleNamespace(scored=scored)) == (
        ", over distinct problems (a: 20-25, b: 128)"
    )
    one = scored.filter(pl.col("task") == "b")
    assert heldout_size(SimpleNamespace(scored=one)) == ", over 128 distinct problems"
    none = scored.with_columns(pl.lit(None, pl.Int64).alias("n"))
    assert heldout_size(SimpleNamespace(scored=none)) == ""


def _copy(experiment, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(experiment, dst)
    return dst


def test_report_with_one_seed_missing_evaluations_and_a_running_experiment(experiment, tmp_path):
    import duckdb

    out = _copy(experiment, tmp_path)
    con = duckdb.connect(str(out / "results.duckdb"))
    rloo_ids = [
        r[0]
        for r in con.execute("SELECT run_id FROM runs WHERE arm = 'rloo' ORDER BY seed").fetchall()
    ]
    con.execute(
        f"UPDATE runs SET status = 'partial' WHERE run_id = '{rloo_ids[1]}'"
    )  # still running
    grpo_ids = [
        r[0]
        for r in con.execute("SELECT run_id FROM runs WHERE arm = 'grpo' ORDER BY seed").fetchall()
    ]
    con.execute(f"DELETE FROM evals WHERE run_id = '{grpo_ids[1]}'")  # no evaluation recorded
    con.close()
    text = build_report(out, resamples=200).read_text()
    assert "one seed: no interval" in text
    assert "1 run(s) are not finished" in text and rloo_ids[1] in text
    arms = {r["arm"]: r for r in json.loads((out / "report" / "arms.json").read_text())}
    assert arms["rloo"]["finished"] == 1 and arms["rloo"]["runs"] == 2


def test_report_cli_errors(cli, tmp_path, experiment):
    code, _, err = cli("report", str(tmp_path))
    assert code == 2 and "no results store" in err
    code, _, err = cli("report", str(experiment), "--baseline", "nope")
    assert code == 2 and "unknown arm 'nope'" in err


def test_report_renders_in_headless_chromium(experiment, tmp_path):
    img = screenshot(build_report(experiment, resamples=200), tmp_path)
    assert img.shape[0] >= 2000
    # the embedded plots put many distinct colours on the page (a blank or broken page has few)
    colours = {tuple(p) for p in img[::7, ::7].reshape(-1, 3)}
    assert len(colours) > 200


def test_report_compares_every_pair_paired_with_its_detectable_effect_and_curve_fits(experiment):
    """Two arms x two seeds: the paired table's difference is the per-seed-and-instance mean of the
    stored per-instance outcomes, and the curve tables cover every arm and axis."""

    from sixblanks.reports import pairs
    from sixblanks.reports.build import load

    d = load(experiment)
    (row,) = pairs.pair_rows(d)
    scores = pairs.instance_scores(d)
    a, b = row["a"], row["b"]
    seeds = sorted(set(scores[a]) & set(scores[b]))
    by_hand = np.mean([scores[a][s] - scores[b][s] for s in seeds])
    assert row["diff"] == pytest.approx(by_hand)
    assert row["seeds"] == len(seeds) and row["instances"] == len(scores[a][seeds[0]])
    assert row["mde"] >= 0 and row["low"] <= row["diff"] <= row["high"]
    assert row["diff"] >= 0  # the arm that scored higher first
    md = (build_report(experiment, resamples=200).parent / "report.md").read_text()
    paired_part = md.split("## Paired differences", 1)[1].split("\n## ", 1)[0]
    assert f"| {a} | {b} |" in paired_part and "smallest detectable difference" in paired_part
    # two runs per arm: no compute-curve fit is shown (its intervals would be too narrow to read)
    curves = md.split("## Compute curves: asymptote or efficiency", 1)[1].split("\n## ", 1)[0]
    assert "Not fitted: every arm has fewer than 5 finished runs (at most 2)" in curves
    assert "[" not in curves


def test_no_estimate_outside_its_interval_at_two_seeds(experiment):
    """The report of two arms x two seeds: every "estimate [low, high]" it prints holds its
    estimate; the arm table's mean interval is the t interval over the two seeds (by hand)."""

    import polars as pl

    from .test_report_summary import assert_estimates_inside

    index = build_report(experiment, resamples=200, with_plots=False)
    for text in (index.read_text(), (index.parent / "report.md").read_text()):
        assert assert_estimates_inside(text) >= 6
    scores = pl.read_csv(index.parent / "scores.csv")
    arms = {r["arm"]: r for r in json.loads((index.parent / "arms.json").read_text())}
    for arm, row in arms.items():
        x = scores.filter(pl.col("arm") == arm)["final_score"].to_numpy()
        half = sps.t.ppf(0.975, 1) * np.std(x, ddof=1) / np.sqrt(2)
        assert (row["mean_lo"], row["mean_hi"]) == pytest.approx((x.mean() - half, x.mean() + half))


def test_run_ends_with_the_per_arm_summary_and_a_sentence_per_pair(
    cli, write_yaml, experiment, tmp_path
):
    """`sixblanks run` on the experiment again (its finished runs skipped where the code is the
    same): after the table per run, per arm the mean final score with its t interval over the
    seeds (by hand from the store's per-run scores), then one sentence per pair of arms."""

    import polars as pl

    import sixblanks

    out = _copy(experiment, tmp_path)
    code, stdout, err = cli("run", write_yaml(json.dumps(SPEC)), "--out", str(out), "--no-progress")
    assert code == 0, err
    tail = stdout[stdout.index("report: ") :]
    assert stdout.index("runs") < stdout.index("report: ")  # the table per run comes first
    assert "final score (test split), mean [95% t interval over seeds]:" in tail
    scores = sixblanks.load(out).scores
    for arm in ("grpo", "rloo"):
        x = scores.filter(pl.col("arm") == arm)["final_score"].to_numpy()
        half = sps.t.ppf(0.975, 1) * np.std(x, ddof=1) / np.sqrt(2)
        m = x.mean()
        assert f"\n  {arm}  {m:.3f} [{m - half:.3f}, {m + half:.3f}]  2 seeds\n" in tail
    (sentence,) = [ln for ln in tail.splitlines() if "grpo" in ln and "rloo" in ln]
    assert re.match(r"(grpo|rloo) (>|vs) (grpo|rloo): ", sentence)
    assert "separated" in sentence or "no separation" in sentence
