"""`sixblanks report DIR1 DIR2`: two experiments side by side, checked against planted stores.

The first directory is the planted store of test_report_planted (two arms, two tasks, three seeds;
A's final test scores on t1 are 0.7, 0.9, 1.0). The second is a copy in which the rollout backend
changed (the experiment's config and every arm's audited sampling item), A's final scores on t1
dropped to 0.5, 0.6, 0.8, and arm B never ran on t2.
"""

import json
import shutil

import duckdb
import numpy as np
import pytest

from sixblanks.reports.build import ReportError
from sixblanks.reports.compare import build_comparison, diff_ci, labels

from .test_report_planted import FINAL, plant

A_T1_SECOND = [0.5, 0.6, 0.8]
R = 200


def _sampling(backend: str) -> str:
    return json.dumps({"backend": backend, "temperature": 1.0, "top_p": 1.0})


def _set_backend(out, backend: str) -> None:
    con = duckdb.connect(str(out / "results.duckdb"))
    con.execute("UPDATE fairness SET value = ? WHERE item = 'sampling'", [_sampling(backend)])
    cfg = json.loads(con.execute("SELECT config FROM experiments").fetchall()[0][0])
    cfg["rollout"] = {"backend": backend, "temperature": 1.0}
    con.execute("UPDATE experiments SET config = ?", [json.dumps(cfg)])
    con.close()


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    (root / "hf_run").mkdir()
    first = plant(root / "hf_run")
    _set_backend(first, "hf")
    second = root / "vllm_run"
    shutil.copytree(first, second)
    _set_backend(second, "vllm")
    con = duckdb.connect(str(second / "results.duckdb"))
    for seed, score in enumerate(A_T1_SECOND):
        rid = f"A-t1-{seed}"
        con.execute(
            "UPDATE evals SET score = ? WHERE run_id = ? AND step = 10 AND split = 'test'",
            [score, rid],
        )
        con.execute("UPDATE runs SET final_score = ? WHERE run_id = ?", [score, rid])
    for table in ("runs", "evals", "budgets", "ledger", "metrics", "census"):
        con.execute(f"DELETE FROM {table} WHERE run_id LIKE 'B-t2-%'")
    con.close()
    index = build_comparison([first, second], root / "cmp", resamples=R)
    return {
        "first": first,
        "second": second,
        "index": index,
        "md": (index.parent / "compare.md").read_text(),
        "json": json.loads((index.parent / "compare.json").read_text()),
    }


def test_difference_of_means_by_hand(pair):
    diffs = {(x["arm"], x["task"]): x for x in pair["json"]["differences"]}
    a = diffs[("A", "t1")]
    assert (a["first"], a["second"]) == ("hf_run", "vllm_run")
    # second minus first: (0.5 + 0.6 + 0.8) / 3 - (0.7 + 0.9 + 1.0) / 3
    assert a["diff"] == pytest.approx((1.9 - 2.6) / 3)
    # three seeds a side: Welch's interval reaches past 0 (a percentile bootstrap's did not: over
    # so few seeds it is too narrow)
    assert a["diff_lo"] <= a["diff"] < 0 < a["diff_hi"]
    # identical scores in both: a difference of 0; B on t2 ran only in the first: no difference row
    assert diffs[("B", "t1")]["diff"] == pytest.approx(0.0)
    assert ("B", "t2") not in diffs and len(diffs) == 3
    row = next(r for r in pair["json"]["rows"] if (r["arm"], r["task"]) == ("A", "t1"))
    assert row["hf_run"]["mean"] == pytest.approx(np.mean(FINAL[("A", "t1")]))
    assert row["vllm_run"]["mean"] == pytest.approx(np.mean(A_T1_SECOND))
    assert row["vllm_run"]["finished"] == 3 and row["vllm_run"]["launched_tokens"] == 100.0
    assert "| A | t1 | vllm_run − hf_run | -0.233 [" in pair["md"]
    assert (a["diff_lo"], a["diff_hi"]) == pytest.approx(
        diff_ci(np.array(FINAL[("A", "t1")]), np.array(A_T1_SECOND))[1:]
    )
    from .test_report_summary import assert_estimates_inside

    assert assert_estimates_inside(pair["md"]) >= 10
    assert "different runs, not paired" in pair["md"]


def test_diff_ci_is_welchs_t_interval():
    """Two experiments' seeds are different runs: Welch's t interval, written out, and scipy's."""

    from scipy import stats as sps

    a, b = np.array([0.1, 0.5, 0.9]), np.array([2.0, 3.0])
    p, lo, hi = diff_ci(a, b)
    va, vb = np.var(a, ddof=1) / 3, np.var(b, ddof=1) / 2
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 1)
    half = sps.t.ppf(0.975, df) * np.sqrt(va + vb)
    assert (p, lo, hi) == pytest.approx((2.0, 2.0 - half, 2.0 + half))
    welch = sps.ttest_ind(b, a, equal_var=False).confidence_interval(0.95)
    assert (lo, hi) == pytest.approx((welch.low, welch.high))
    assert diff_ci(np.full(3, 0.2), np.full(4, 0.7)) == pytest.approx((0.5, 0.5, 0.5))
    assert np.isnan(diff_ci(np.array([0.2]), np.array([0.1, 0.3]))[1])  # one seed: no interval


def test_only_the_changed_audit_items_differ_with_both_values(pair):
    got = {(d["item"], d["arm"]): d["values"] for d in pair["json"]["audit_differences"]}
    expected = {"hf_run": "hf", "vllm_run": "vllm"}
    assert got == {
        ("config.rollout.backend", "(experiment)"): expected,
        ("sampling.backend", "A"): expected,
        ("sampling.backend", "B"): expected,
    }
    assert "| sampling.backend | A | hf | vllm |" in pair["md"]
    assert "| config.rollout.backend | (experiment) | hf | vllm |" in pair["md"]
    agree = pair["json"]["audit_agree"]
    # every other planted item agrees, e.g. both arms' initial_policy, chat_template, reward leaves
    assert agree["fairness"] > 0 and f"{sum(agree.values())} audit items agree" in pair["md"]
    assert "3 audit item(s) differ" in pair["md"]


def test_a_missing_arm_is_shown_as_missing(pair):
    md = pair["md"]
    assert "| B | t2 | 0.500 [" in md
    line = next(x for x in md.splitlines() if x.startswith("| B | t2 |"))
    assert line.endswith("| 3/3 | 100 | ✗ missing | — | — |")
    row = next(r for r in pair["json"]["rows"] if (r["arm"], r["task"]) == ("B", "t2"))
    assert "hf_run" in row and "vllm_run" not in row
    assert pair["index"].exists() and (pair["index"].parent / "score_vs_launched.png").exists()


def test_cli_with_two_directories_writes_the_comparison(cli, pair, tmp_path):
    out = tmp_path / "side_by_side"
    code, stdout, err = cli(
        "report", str(pair["first"]), str(pair["second"]), "--out", str(out), "--resamples", "200"
    )
    assert code == 0, err
    assert "comparison:" in stdout and str(out / "index.html") in stdout.replace("\n", "")
    html = (out / "index.html").read_text()
    assert "Audit differences" in html and "sampling.backend" in html
    assert (out / "compare.md").exists()
    code, _, _ = cli("report", str(pair["first"]), str(pair["second"]), "--resamples", "200")
    default = pair["first"] / "compare"
    assert code == 0 and (default / "index.html").exists() and (default / "compare.md").exists()
    code, _, err = cli("report", str(pair["first"]), "--out", str(out))
    assert code == 2 and "--out" in err  # one directory: its own report, no comparison


def test_errors_name_the_directory(cli, pair, tmp_path):
    empty = tmp_path / "never_ran"
    empty.mkdir()
    code, _, err = cli("report", str(pair["first"]), str(empty), "--resamples", "200")
    assert code == 2 and str(empty / "results.duckdb") in err and "no results store" in err
    other = tmp_path / "other_arms"
    shutil.copytree(pair["first"], other)
    con = duckdb.connect(str(other / "results.duckdb"))
    con.execute("UPDATE runs SET arm = 'C' || arm")  # the config names the same arms
    cfg = json.loads(con.execute("SELECT config FROM experiments").fetchall()[0][0])
    cfg["arms"] = {f"C{a}": v for a, v in cfg["arms"].items()}
    con.execute("UPDATE experiments SET config = ?", [json.dumps(cfg)])
    con.close()
    with pytest.raises(ReportError, match="share no arm and task") as exc:
        build_comparison([pair["first"], other], tmp_path / "x", resamples=R)
    msg = str(exc.value)
    assert (
        f"{other}: arms CB, CA on t1, t2" in msg and f"{pair['first']}: arms B, A on t1, t2" in msg
    )


def test_labels_disambiguate_repeated_directory_names(tmp_path):
    dirs = [tmp_path / "a" / "out", tmp_path / "b" / "out", tmp_path / "c" / "solo"]
    assert labels(dirs) == ["a/out", "b/out", "solo"]
    assert labels([tmp_path / "x", tmp_path / "x"]) == ["x#1", "x#2"]
