"""The report over planted stores whose answers are known: two tasks, two arms, three seeds.

Final test-split scores (warm start 0.4 on t1, 0.5 on t2):

    task t1:  A = 0.7, 0.9, 1.0    B = 0.1, 0.2, 0.3    A beats B in every pair: P = 1
    task t2:  A = 0.4, 0.5, 0.6    B = 0.4, 0.5, 0.6    a tie in distribution:   P = 1/2

so P(A improves over B) averaged over tasks is 0.75, whereas pooling the six scores of each arm
would give 31.5 / 36 = 0.875. A validation evaluation of 0 at the end of every run must not touch
any of these numbers.
"""

import json
import re

import duckdb
import numpy as np
import pytest

from sixblanks.harness.store.database import append_rows
from sixblanks.reports import curves, plots, stats
from sixblanks.reports.build import build_report, load

FINAL = {
    ("A", "t1"): [0.7, 0.9, 1.0],
    ("B", "t1"): [0.1, 0.2, 0.3],
    ("A", "t2"): [0.4, 0.5, 0.6],
    ("B", "t2"): [0.4, 0.5, 0.6],
}
WARM = {"t1": 0.4, "t2": 0.5}
BLANKS = {
    "A": {
        "weight": {"ratio": "token", "clip_high": 0.28},
        "data": {"dynamic_sampling": {"enabled": True, "rounds": 3}},
    },
    "B": {
        "weight": {"ratio": "token", "clip_high": 0.2},
        "data": {"dynamic_sampling": {"enabled": False, "rounds": 3}},
    },
}
CLIP_NOTE = "never acted: clip fraction 0 and every ratio 1"
DS_NOTE = "no group was ever dropped"
R = 200  # bootstrap resamples: few, the tests compare against the same draws


# one worker builds the module-scoped fixtures once (split across two, each built its own)
pytestmark = pytest.mark.xdist_group("report_planted")


def plant(out, scale=None, inert=True, old=False):
    """Write the planted store into ``out``. ``scale`` multiplies a task's scores (tasks of
    different scale); ``old`` drops what a store of an earlier version lacks."""

    scale = scale or {}
    cfg = {
        "name": "planted",
        "arms": {"B": {"preset": "grpo"}, "A": {"preset": "dapo"}},
        "tasks": [{"name": "t1"}, {"name": "t2"}],
        "seeds": [0, 1, 2],
        "budget": {"launched_tokens": 100},
    }
    t: dict[str, list] = {
        k: [] for k in ("runs", "evals", "budgets", "ledger", "metrics", "census")
    }
    for (arm, task), finals in FINAL.items():
        k = scale.get(task, 1.0)
        for seed, final in enumerate(finals):
            rid = f"{arm}-{task}-{seed}"
            t["runs"].append(
                {
                    "run_id": rid,
                    "experiment_id": "planted",
                    "arm": arm,
                    "preset": cfg["arms"][arm]["preset"],
                    "task": task,
                    "seed": seed,
                    "status": "finished",
                    "blanks": json.dumps(BLANKS[arm]),
                    "steps": 10,
                    "final_score": final * k,
                }
            )
            t["budgets"].append(
                {
                    "run_id": rid,
                    "counter": "launched_tokens",
                    "limit_value": 100.0,
                    "consumed": 100.0,
                }
            )
            mid = (WARM[task] + final) / 2
            for step, score, split in (
                (0, WARM[task], "test"),
                (5, mid, "test"),
                (10, final, "test"),
                (10, 0.0, "validation"),
            ):
                pos = {"launched_tokens": 10.0 * step, "env_steps": step, "wall_seconds": step / 10}
                t["evals"].append(
                    {
                        "run_id": rid,
                        "step": step,
                        "split": split,
                        "score": score * k,
                        "n": 8,
                        "launched_tokens": 10.0 * step,
                        "accepted_tokens": 10.0 * step,
                        "device_seconds": step / 100,
                        "verifier_calls": 8.0 * step,
                        "env_steps": float(step),
                        "wall_seconds": step / 10,
                        "position": json.dumps(pos),
                        "pass_at": json.dumps({"1": score, "4": score + 0.1}),
                        "eval_generated_tokens": 10.0,
                        # A's evaluations also ran an inference-time beam search (eval.beam)
                        **(
                            {
                                "search_mode": "beam 2x2",
                                "search_score": score + 0.2,
                                "search_generated_tokens": 40.0,
                            }
                            if arm == "A"
                            else {}
                        ),
                        "eval_verifier_calls": 8.0,
                        "eval_device_seconds": 0.5,
                        "eval_wall_seconds": 1.0,
                    }
                )
            for step in range(10):
                t["ledger"].append(
                    {
                        "run_id": rid,
                        "step": step,
                        "launched_tokens": 10.0 * (step + 1),
                        "accepted_tokens": 10.0 * (step + 1),
                        "env_steps": step + 1.0,
                        "wall_seconds": (step + 1) / 10,
                        # A's credit costs twice the device time: 20 s a run against 10 s
                        "device_seconds": (step + 1) * (2.0 if arm == "A" else 1.0),
                    }
                )
                t["metrics"].append(
                    {"run_id": rid, "step": step, "name": "trainable_group_frac", "value": 0.5}
                )
                if arm == "A":  # GiGPO's anchor-group share, only A's credit has one
                    t["metrics"].append(
                        {"run_id": rid, "step": step, "name": "gigpo.anchor_frac", "value": 0.75}
                    )
                # A drops half its groups: 2 all correct, 1 all wrong, 1 surplus of 8; B keeps all 4
                drops = (2, 1, 0, 1) if arm == "A" else (0, 0, 0, 0)
                t["census"].append(
                    {
                        "run_id": rid,
                        "step": step,
                        "groups_launched": 8 if arm == "A" else 4,
                        "groups_kept": 4,
                        "dropped_all_correct": drops[0],
                        "dropped_all_wrong": drops[1],
                        "dropped_zero_variance": drops[2],
                        "dropped_surplus": drops[3],
                        "tokens_launched": 10,
                    }
                )
    reward_a = {"verifier": "t1", "shaping": {"overlong": {"cache": 4, "factor": 1.0}}}
    fair = []
    for arm in ("B", "A"):
        for item, value in (
            ("initial_policy", "e558509167"),
            ("chat_template", "9f3c2a"),
            ("reward", reward_a if arm == "A" else {"verifier": "t1", "shaping": None}),
            ("sampling", {"temperature": 1.0, "top_p": 1.0}),
        ):
            flagged = arm == "A" and item == "reward"
            fair.append(
                {
                    "experiment_id": "planted",
                    "arm": arm,
                    "item": item,
                    "flagged": flagged,
                    "reason": "differs from the experiment's held-constant value"
                    if flagged
                    else None,
                    "value": json.dumps(value),
                    "reference": json.dumps({"verifier": "t1", "shaping": None})
                    if flagged
                    else None,
                    "run_id": None,
                }
            )
    fair.append(
        {
            "experiment_id": "planted",
            "arm": "A",
            "item": "consumption",
            "flagged": True,
            "reason": "consumed 80 of 100 launched_tokens (< 90% of the matched budget)",
            "run_id": "A-t1-0",
        }
    )
    t["fairness"] = fair
    t["experiments"] = [{"experiment_id": "planted", "name": "planted", "config": json.dumps(cfg)}]
    if inert:
        t["inert"] = [
            {"experiment_id": "planted", "arm": "A", "blank": b, "note": n}
            for b, n in (("weight.clip_high", CLIP_NOTE), ("data.dynamic_sampling", DS_NOTE))
        ]
    append_rows(out, t)
    con = duckdb.connect(str(out / "results.duckdb"))
    if old:
        con.execute("DROP TABLE inert")  # a store from before the inert table
    if old:  # a store written before the split, positions, pass@k, costs and census existed
        con.execute("UPDATE evals SET split = 'heldout' WHERE split = 'test'")
        con.execute("DELETE FROM evals WHERE split = 'validation'")
        for c in (
            "env_steps",
            "wall_seconds",
            "pass_at",
            "eval_generated_tokens",
            "eval_verifier_calls",
            "eval_device_seconds",
            "eval_wall_seconds",
            "search_mode",
            "search_score",
            "search_generated_tokens",
            "search_env_steps",
            "search_verifier_calls",
        ):
            con.execute(f"ALTER TABLE evals DROP COLUMN {c}")
        con.execute("DROP TABLE census")
    con.close()
    return out


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    out = plant(tmp_path_factory.mktemp("planted"))
    index = build_report(out, baseline="B", resamples=R)
    rep = index.parent
    return {
        "out": out,
        "html": index.read_text(),
        "md": (rep / "report.md").read_text(),
        "arms": {r["arm"]: r for r in json.loads((rep / "arms.json").read_text())},
        "tasks": {(r["arm"], r["task"]): r for r in json.loads((rep / "tasks.json").read_text())},
    }


def _pairs_loop(x, y):
    """P(X > Y) + 1/2 P(X = Y) as a plain double loop."""
    return sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in x for b in y) / (len(x) * len(y))


def test_probability_of_improvement_is_per_task_then_averaged(planted):
    a = planted["arms"]["A"]
    assert a["p_improve_by_task"] == pytest.approx({"t1": 1.0, "t2": 0.5})
    assert a["p_improve"] == pytest.approx(0.75)
    pooled = _pairs_loop(FINAL["A", "t1"] + FINAL["A", "t2"], FINAL["B", "t1"] + FINAL["B", "t2"])
    assert pooled == pytest.approx(31.5 / 36) and a["p_improve"] != pytest.approx(pooled)
    assert planted["arms"]["B"]["p_improve"] is None  # the baseline
    assert planted["tasks"]["A", "t1"]["p_improve"] == pytest.approx(1.0)
    assert planted["tasks"]["A", "t2"]["p_improve"] == pytest.approx(0.5)


def test_aggregate_point_estimates_by_hand(planted):
    a = planted["arms"]["A"]
    scores = FINAL["A", "t1"] + FINAL["A", "t2"]
    assert a["mean"] == pytest.approx(sum(scores) / 6)  # 4.1 / 6
    # IQM of 6 scores drops one from each end: (0.5 + 0.6 + 0.7 + 0.9) / 4
    assert a["iqm"] == pytest.approx(0.675)
    gains = [s - WARM["t1"] for s in FINAL["A", "t1"]] + [s - WARM["t2"] for s in FINAL["A", "t2"]]
    assert a["gain"] == pytest.approx(sum(gains) / 6)
    assert a["pass@4"] == pytest.approx(sum(scores) / 6 + 0.1)  # final pass@4 = score + 0.1
    assert a["split"] == "test" and a["finished"] == 6 and a["runs"] == 6


def test_intervals_t_for_means_bootstrap_within_tasks_for_iqm(planted):
    """A mean's interval (final score, gain) is a Student t interval over seeds, tasks as strata
    (written out here); the IQM's a percentile bootstrap resampling seeds within tasks, shown from
    5 runs: the arm's 6, not a task's 3."""

    from scipy import stats as sps

    from .test_report_summary import assert_estimates_inside

    def t_over_tasks(columns):
        """Mean of every run, Var = sum n_t s_t^2 / N^2, Welch-Satterthwaite degrees of freedom."""

        n = sum(len(c) for c in columns)
        terms = [len(c) * np.var(c, ddof=1) / n**2 for c in columns]
        df = sum(terms) ** 2 / sum(v**2 / (len(c) - 1) for v, c in zip(terms, columns))
        mean = sum(np.sum(c) for c in columns) / n
        half = sps.t.ppf(0.975, df) * np.sqrt(sum(terms))
        return mean - half, mean + half

    a = planted["arms"]["A"]
    assert (a["mean_lo"], a["mean_hi"]) == pytest.approx(
        t_over_tasks([FINAL["A", "t1"], FINAL["A", "t2"]])
    )
    gains = [np.array(FINAL["A", t]) - WARM[t] for t in ("t1", "t2")]
    assert (a["gain_lo"], a["gain_hi"]) == pytest.approx(t_over_tasks(gains))
    mat = np.column_stack([FINAL["A", "t1"], FINAL["A", "t2"]])  # [seeds, tasks]
    lo, hi = stats.stratified_bootstrap_ci_loop(mat, "iqm", resamples=R, seed=0)
    assert (a["iqm_lo"], a["iqm_hi"]) == pytest.approx((lo, hi))
    # per task rows: one stratum, raw scores, the t interval with 2 degrees of freedom
    t1 = planted["tasks"]["A", "t1"]
    assert t1["mean"] == pytest.approx(2.6 / 3)
    by_scipy = sps.t.interval(0.95, 2, loc=2.6 / 3, scale=sps.sem(FINAL["A", "t1"]))
    assert (t1["mean_lo"], t1["mean_hi"]) == pytest.approx(by_scipy)
    assert t1["iqm_why"] == "3 runs: no interval below 5" and np.isnan(t1["iqm_lo"])
    # P(improvement) printed with its seeds: 3 against 3 per task
    assert "| 0.750 (from 3 and 3 seeds per task) |" in planted["md"]
    for text in (planted["md"], planted["html"]):
        assert assert_estimates_inside(text) >= 10


def test_report_shows_per_task_rows_splits_and_pass_at_k(planted):
    html, md = planted["html"], planted["md"]
    assert set(planted["tasks"]) == {("A", "t1"), ("A", "t2"), ("B", "t1"), ("B", "t2")}
    assert "Per task" in html and "| A | t1 | 3/3 |" in md and "| B | t2 | 3/3 |" in md
    for text in (html, md):
        assert "final score, mean [95% CI] (test split)" in text
        assert "gain over warm start (test split)" in text
        assert "Evaluation modes: single sample and inference-time search" in text
        assert "P(improve over B) averaged over tasks" in text
        assert "in [0, 1]: raw scores, not normalized" in text
    assert "| A | dapo | 6/6 | 0.683 [" in md  # arm order: the config's (B first), then stats
    # search-time (best-of-4) and single-sample scores never share a row: the arm table has no
    # pass@k column, and each evaluation mode is a row naming its inference-time compute
    head = next(ln for ln in md.splitlines() if "final score, mean [95% CI]" in ln)
    assert "pass@" not in head
    a = planted["arms"]["A"]
    # 10 generated tokens per evaluation of 8 instances x 4 samples: 1.25 per instance for
    # best-of-4, a quarter of it for one sample
    assert "| A | pass@1: one sample | 1 sample; 0.3 generated tokens |" in md
    best = next(
        ln for ln in md.splitlines() if ln.startswith("| A | best-of-4 chosen by the verifier")
    )
    assert "4 samples; 1.2 generated tokens" in best and best.rstrip(" |").endswith(
        f"{a['pass@4']:.3f}"
    )
    # A's beam search at evaluation: a row of its own, with its own compute (40 tokens / 8
    # instances) and its last evaluation's search score averaged over A's six runs
    finals = FINAL["A", "t1"] + FINAL["A", "t2"]
    want = sum(f + 0.2 for f in finals) / len(finals)
    assert (
        f"| A | beam 2x2 search over turns, leaf chosen by the verifier | 5.0 generated tokens | "
        f"{want:.3f} |" in md
    )
    assert not any(ln.startswith("| B | beam") for ln in md.splitlines())
    # what each arm's training cost, beside its score: the ledger's last device-seconds, per run
    assert "training device-seconds per run" in html
    rows: dict[str, str] = {}
    for ln in md.splitlines():  # the arm table's rows: arm, preset, finished/runs 6/6, ...
        if ln.split("|")[3:4] == [" 6/6 "]:
            rows.setdefault(ln.split("|")[1].strip(), ln)
    # then the credit scheme's extra cost: none here
    assert rows["A"].rstrip().endswith("| 20.0 | — |")
    assert rows["B"].rstrip().endswith("| 10.0 | — |")
    # the training diagnostics: GiGPO's anchor-group share where an arm has one, a dash elsewhere
    head = next(ln for ln in md.splitlines() if "GiGPO: steps with an anchor group of 2+" in ln)
    col = [c.strip() for c in head.split("|")].index("GiGPO: steps with an anchor group of 2+")
    diag = md.splitlines()[md.splitlines().index(head) + 2 :][:2]  # after the separator: B, A
    cells = {ln.split("|")[1].strip(): ln.split("|")[col].strip() for ln in diag}
    assert cells == {"A": "0.750", "B": "—"}


def test_report_images_include_per_task_curves_and_the_sampling_census(planted):
    rep = planted["out"] / "report"
    for name in ("task_curves.png", "sampling_census.png", "score_vs_cost.png"):
        assert (rep / name).exists(), name
        assert f"]({name})" in planted["md"]
    assert planted["html"].count("data:image/png;base64,") == 6


def test_census_table_and_fractions(planted):
    md = planted["md"]
    # A: 6 runs x 10 steps x 8 groups launched; half kept, a quarter all correct, ...
    assert "| A | 6 | 480 | 240 (50%) | 120 (25%) | 60 (12%) | 0 (0%) | 0 (0%) | 60 (12%) |" in md
    assert "| B | 6 | 240 | 240 (100%) | 0 (0%) |" in md
    d = load(planted["out"], "B")
    a = d.census.join(d.runs.select("run_id", "arm"), on="run_id")
    grid, fr = plots.census_fractions(a.filter(a["arm"] == "A"))
    assert grid[0] == 10 and grid[-1] == 100  # launched tokens after the first and last step
    assert fr["kept"] == pytest.approx(np.full(len(grid), 0.5))
    assert fr["dropped: all correct"] == pytest.approx(np.full(len(grid), 0.25))


def test_evaluation_cost_per_arm_counted_apart(planted):
    # per run: 3 test and 1 validation evaluation, each 10 tokens, 8 calls, 0.5 device-s, 1 wall-s
    assert (
        "| A | 18 test, 6 validation | 240 (40) | 192 (32) | 12.00 (2.00) | 24.00 (4.00) | 600 |"
        in (planted["md"])
    )


def test_fairness_audit_as_an_item_by_arm_table(planted):
    md, html = planted["md"], planted["html"]
    assert "| item | B | A | experiment's value (where flagged) |" in md
    assert "| initial_policy | e558509167 | e558509167 |  |" in md  # hash prefixes as they are
    assert "| chat_template | 9f3c2a | 9f3c2a |  |" in md  # a new item renders without code
    assert (
        "| reward | verifier=t1, shaping=— | ⚠ verifier=t1, shaping.overlong.cache=4, "
        "shaping.overlong.factor=1 — differs from the experiment's held-constant value | "
        "verifier=t1, shaping=— |" in md
    )
    row = re.search(r"<tr class='diff'><td>reward</td>(.*?)</tr>", html).group(1)
    cells = re.findall(r"<td( class='flag')?>(.*?)</td>", row)
    assert [bool(c[0]) for c in cells] == [False, True, False]  # only the arm that differs
    assert "differs from the experiment" in cells[1][1]
    assert "<tr><td>sampling</td>" in html  # equal rows are not highlighted
    assert "| A | consumption | A-t1-0 | ⚠ consumed 80 of 100" in md


def test_inert_notes_beside_differing_blanks(planted):
    md, html = planted["md"], planted["html"]
    assert f"| ≠ weight.clip_high | 0.2 | 0.28 — inert: {CLIP_NOTE} |" in md
    # the note's blank is a prefix of the field
    assert f"| ≠ data.dynamic_sampling.enabled | false | true — inert: {DS_NOTE} |" in md
    assert "| data.dynamic_sampling.rounds | 3 | 3 |" in md  # equal fields carry no note
    assert f"<td class='inert'>0.28<span class='note'>inert: {CLIP_NOTE}</span></td>" in html


def test_scores_normalized_per_task_when_tasks_differ_in_scale(tmp_path):
    out = plant(tmp_path, scale={"t2": 100.0})
    build_report(out, baseline="B", resamples=R, with_plots=False)
    arms = {r["arm"]: r for r in json.loads((out / "report" / "arms.json").read_text())}
    tasks = {
        (r["arm"], r["task"]): r for r in json.loads((out / "report" / "tasks.json").read_text())
    }
    # min-max over every test-split evaluation of the task's runs: t1 [0.1, 1.0], t2 [40, 60]
    norm = [(s - 0.1) / 0.9 for s in FINAL["A", "t1"]] + [
        (100 * s - 40) / 20 for s in FINAL["A", "t2"]
    ]
    assert arms["A"]["mean"] == pytest.approx(sum(norm) / 6)
    assert arms["A"]["p_improve"] == pytest.approx(0.75)  # within-task order is unchanged
    assert tasks["A", "t2"]["mean"] == pytest.approx(50.0)  # per-task rows stay raw
    md = (out / "report" / "report.md").read_text()
    assert "min-max normalized" in md and "t2: [40, 60]" in md and "(normalized per task)" in md


def test_older_store_heldout_split_without_new_tables_or_columns(tmp_path):
    out = plant(tmp_path, inert=False, old=True)
    d = load(out, "B")
    assert d.split == "heldout"
    # positions on the env-steps and wall-clock axes come from the counters recorded with each eval
    last = d.evals.filter(d.evals["step"] == 10)
    assert set(last["env_steps"].to_list()) == {10.0} and set(last["wall_seconds"]) == {1.0}
    md = (build_report(out, baseline="B", resamples=R).parent / "report.md").read_text()
    assert "final score, mean [95% CI] (heldout split)" in md
    assert "pass@" not in md and "inert" not in md.replace("inert note", "")
    assert "| A | 18 heldout | — | — | — | — | 600 |" in md
    assert "Dynamic-sampling census" not in md


def test_curves_end_where_the_shortest_run_ends():
    # two runs of one arm: the first ends at 100, the second goes on to 200 and jumps to 1.0.
    # Averaging whatever runs remain would end the curve at 1.0 while the final mean is 0.6.
    runs = [
        (np.array([0.0, 50.0, 100.0]), np.array([0.2, 0.2, 0.2])),
        (np.array([0.0, 50.0, 100.0, 200.0]), np.array([0.2, 0.2, 0.2, 1.0])),
    ]
    c = curves.curve(runs, resamples=50)
    assert c.grid[c.full].max() == 100.0 and 100.0 in c.grid
    assert c.mean[c.full][-1] == pytest.approx(0.2)  # both runs at 100
    assert (c.covering[c.grid > 100] == 1).all()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    assert curves.draw(ax, c, "C0", "A")  # a dotted part exists
    solid = next(ln for ln in ax.lines if ln.get_label() == "A (2 runs)")
    x, y = solid.get_xdata(), solid.get_ydata()
    assert x[~np.isnan(y)].max() == 100.0 and y[~np.isnan(y)][-1] == pytest.approx(0.2)
    dotted = next(ln for ln in ax.lines if ln.get_linestyle() == ":")
    assert np.nanmax(dotted.get_xdata()[~np.isnan(dotted.get_ydata())]) == 200.0
    plt.close(fig)


def test_lagged_arms_get_the_lag_figure(tmp_path):
    """An arm sampling from older weights (data.lag) puts score-against-lag and the behaviour
    policy's distance over training in the report; without lag there is no such figure."""

    import duckdb

    from sixblanks.reports import lag

    out = plant(tmp_path)
    con = duckdb.connect(str(out / "results.duckdb"))
    con.execute(
        "UPDATE runs SET blanks = ? WHERE arm = 'A'",
        [json.dumps({**BLANKS["A"], "data": {**BLANKS["A"]["data"], "lag": 2}})],
    )
    rows = con.execute(
        "SELECT run_id, step FROM ledger JOIN runs USING (run_id) WHERE arm = 'A'"
    ).fetchall()
    con.executemany(
        "INSERT INTO metrics VALUES (?, ?, ?, ?)",
        [
            [rid, step, name, v]
            for rid, step in rows
            for name, v in (
                ("lag.versions_behind", min(step, 2)),
                ("lag.kl_p50", 0.01),
                ("lag.kl_p90", 0.03),
            )
        ],
    )
    con.close()
    d = load(out, baseline="B")
    assert lag.arm_lags(d) == {"A": 2, "B": 0}
    assert lag.arm_labels(d) == {"A": "lag 2", "B": ""}
    label = lag.off_policy_label(
        {
            "data": {"replay": {"capacity": 6, "reuse": 1}, "minibatches": 4},
            "weight": {"tis_cap": 2.0},
        }
    )
    assert label == "replay (capacity 6, reuse 1); 1 x 4 updates per batch; TIS C=2.0 (token)"
    assert set(d.lag["name"].unique()) == {"lag.versions_behind", "lag.kl_p50", "lag.kl_p90"}
    html = build_report(out, baseline="B", resamples=R).read_text()
    assert "score against lag" in html and (out / "report" / "lag.png").exists()
    (tmp_path / "plain").mkdir()
    build_report(plant(tmp_path / "plain"), baseline="B", resamples=R)
    assert not (tmp_path / "plain" / "report" / "lag.png").exists()


def test_the_report_shows_rollout_trainer_mismatch_over_training(tmp_path):
    """Planted mismatch metrics (as a vLLM engine's): the section's table by hand; none where the
    mismatch is float noise (the HF engine's)."""

    import duckdb

    from sixblanks.harness.store.database import append_rows
    from sixblanks.reports.build import build_report

    out = plant(tmp_path)
    con = duckdb.connect(str(out / "results.duckdb"))
    runs = dict(con.sql("SELECT run_id, arm FROM runs").fetchall())
    con.close()
    rows = []
    for rid, arm in runs.items():
        for step in range(3):
            kl = (1e-3 * (step + 1)) if arm == "A" else 1e-14
            rows += [
                {"run_id": rid, "step": step, "name": "mismatch.kl", "value": kl},
                {"run_id": rid, "step": step, "name": "mismatch.ratio_out_frac", "value": 0.0},
            ]
            if arm == "A":  # the ratios' ESS and an IcePop-style gate's drops
                rows += [
                    {
                        "run_id": rid,
                        "step": step,
                        "name": "mismatch.ess",
                        "value": 0.9 - 0.1 * step,
                    },
                    {"run_id": rid, "step": step, "name": "dropped.masking_frac", "value": 0.1},
                ]
    append_rows(out, {"metrics": rows})
    text = (build_report(out, baseline="B", resamples=100).parent / "report.md").read_text()
    assert "Rollout/trainer mismatch over training" in text
    assert "| A | 2.00e-03 | 3.00e-03 | 0.00e+00 | 0.00e+00 |" in text  # mean of 1, 2, 3 e-3
    assert "| B | 1.00e-14 | 1.00e-14 |" in text
    assert "| arm | ESS, tokens | masked (IS/gate) |" in text  # only the columns an arm logs
    assert "| A | 8.00e-01 | 1.00e-01 |" in text and "| B | — | — |" in text
    assert (out / "report" / "mismatch.png").exists()
