"""The report's statistics and tables: per arm and per arm x task scores, the dynamic-sampling
census, evaluation cost, the six blanks (with inert differences), the fairness audit, budgets and
search effort. Each ``*_blocks`` function returns render blocks (see render.py)."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from . import stats
from .credit import extra_cost
from .evalmodes import eval_mode_blocks
from .render import Block, Heading, Para, Table

if TYPE_CHECKING:
    from .data import Data

STATS = ("mean", "median", "iqm")


def fmt(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def estimate_interval(
    est: Any, lo: Any, hi: Any, digits: int = 3, none: str = "no interval", g: bool = False
) -> str:
    """``est [lo, hi]``, or ``est (none)`` where there is no interval. Every "estimate [low, high]"
    the report prints goes through here, and an interval that does not contain its estimate is
    never printed: it would say the estimate is implausible by its own measure (a resampled fit
    that disagrees with the fit it resamples is not identified, and callers say so first).
    ``g``: three significant digits (for values of any scale) instead of ``digits`` decimals."""

    def f(x: Any) -> str:
        return f"{x:.3g}" if g else fmt(x, digits)

    finite = [x is not None and isinstance(x, (int, float)) and math.isfinite(x) for x in (lo, hi)]
    if est is None or not all(finite):
        return f"{f(est)} ({none})" if est is not None else "—"
    if not lo <= est <= hi:
        return f"{f(est)} (no interval: its resamples exclude the estimate)"
    return f"{f(est)} [{f(lo)}, {f(hi)}]"


def ci(r: dict[str, Any], key: str) -> str:
    if key not in r:
        return "no finished run"
    return estimate_interval(
        r[key], r.get(f"{key}_lo"), r.get(f"{key}_hi"), none=r.get(f"{key}_why") or "no interval"
    )


# ----------------------------------------------------------------------------- scores


def _pass_at(pass_json: str | None) -> dict[int, float]:
    try:
        return {int(k): float(v) for k, v in json.loads(pass_json or "{}").items()}
    except (ValueError, TypeError, AttributeError):
        return {}


def run_scores(d: Data) -> pl.DataFrame:
    """One row per run: first and last evaluation of the score split (raw and, where tasks are
    normalized, normalized), area under its curve against launched tokens, pass@k of the last."""

    ev = d.scored.sort("run_id", "step")
    start = ev.filter(pl.col("step") == 0).select(
        "run_id", pl.col("score").alias("start_score"), pl.col("nscore").alias("start_norm")
    )
    last = ev.group_by("run_id").last()
    auc = [
        (rid, stats.curve_auc(g["launched_tokens"].to_numpy(), g["nscore"].to_numpy()))
        for (rid,), g in ev.group_by(["run_id"])
    ]
    ks = sorted({k for p in last["pass_at"].to_list() for k in _pass_at(p)})
    pass_cols = {
        f"pass@{k}": [_pass_at(p).get(k) for p in last["pass_at"].to_list()] for k in ks if k > 1
    }
    if pass_cols:
        pass_cols = {
            "pass@1": [
                _pass_at(p).get(1, s) for p, s in last.select("pass_at", "score").iter_rows()
            ]
        } | pass_cols
    last = last.select(
        "run_id",
        pl.col("score").alias("final_score"),
        pl.col("nscore").alias("final_norm"),
        pl.col("step").alias("final_step"),
    ).with_columns(**{k: pl.Series(v, dtype=pl.Float64) for k, v in pass_cols.items()})
    return (
        d.runs.select("run_id", "arm", "preset", "task", "seed", "status")
        .with_columns(pl.lit(d.split).alias("split"))
        .join(start, on="run_id", how="left")
        .join(last, on="run_id", how="left")
        .join(
            pl.DataFrame(auc, schema={"run_id": pl.Utf8, "auc_launched": pl.Float64}, orient="row"),
            on="run_id",
            how="left",
        )
        .sort("arm", "task", "seed")
    )


# median and IQM have no t interval; a percentile bootstrap over fewer runs than this is too narrow
# to print (at 2 seeds it spans just the two values, at 3 it covers well under 95%)
MIN_BOOTSTRAP_RUNS = 5
# P(improvement) below this many seeds per arm is not shown: with 2 against 2, a complete ordering
# (P = 1) happens by chance one time in six, with 3 against 3 one time in twenty
MIN_P_SEEDS = 3


def _no_interval(sizes: list[int]) -> str:
    """Why a t interval over strata of these ``sizes`` has none: a stratum with one seed."""

    if len(sizes) == 1:
        return "one seed: no interval"
    return "a task with one seed: no interval"


def _interval_stats(
    row: dict[str, Any],
    strata: list[np.ndarray],
    gains: list[np.ndarray],
    resamples: int,
    seed: int,
) -> None:
    """``row``'s mean and gain with their t intervals over seeds, median and IQM with stratified
    percentile bootstrap intervals from MIN_BOOTSTRAP_RUNS runs on (a ``*_why`` says why not)."""

    sizes = [len(s) for s in strata if len(s)]
    for key, values in (("mean", strata), ("gain", gains)):
        p, lo, hi, _ = stats.stratified_t_interval(values)
        row[key], row[f"{key}_lo"], row[f"{key}_hi"] = p, lo, hi
        if math.isnan(lo):
            row[f"{key}_why"] = _no_interval([len(v) for v in values if len(v)] or [0])
    enough = sum(sizes) >= MIN_BOOTSTRAP_RUNS and min(sizes, default=0) >= 2
    for stat in STATS[1:]:
        if enough:
            p, lo, hi = stats.stratified_bootstrap_ci_strata(strata, stat, resamples, seed=seed)
        else:
            pooled = np.concatenate([np.asarray(s, dtype=float) for s in strata])
            p, lo, hi = float(stats.STATISTICS[stat](pooled[None, :])[0]), math.nan, math.nan
            row[f"{stat}_why"] = (
                _no_interval(sizes)
                if min(sizes, default=0) < 2
                else f"{sum(sizes)} runs: no interval below {MIN_BOOTSTRAP_RUNS}"
            )
        row[stat], row[f"{stat}_lo"], row[f"{stat}_hi"] = p, lo, hi


def p_improve_cell(r: dict[str, Any], per_task: bool = False) -> str:
    """P(improvement) with the seeds behind it (each arm's fewest seeds on a task), or why it is
    not shown: below MIN_P_SEEDS seeds on either side it is too coarse to read."""

    p, n = r.get("p_improve"), r.get("p_improve_seeds")
    if p is None or not n:
        return "—"
    seeds = f"{n[0]} and {n[1]} seeds" + (" per task" if per_task else "")
    if min(n) < MIN_P_SEEDS:
        return f"— ({seeds}: too few, {MIN_P_SEEDS} needed)"
    return f"{fmt(p)} (from {seeds})"


def arm_table(
    d: Data, resamples: int = 2000, seed: int = 0
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], pl.DataFrame]:
    """Per-arm statistics at the matched budget (over runs x tasks, task-stratified), per arm x
    task statistics (raw scores; only for several tasks), and the per-run scores table."""

    scores = run_scores(d)
    finished = scores.filter((pl.col("status") == "finished") & pl.col("final_score").is_not_null())
    pass_cols = [c for c in scores.columns if c.startswith("pass@")]

    def by_task(arm: str, col: str = "final_score") -> dict[str, np.ndarray]:
        f = finished.filter(pl.col("arm") == arm)
        return {t: f.filter(pl.col("task") == t)[col].drop_nulls().to_numpy() for t in d.tasks}

    base = by_task(d.baseline) if d.baseline else {}
    rows, task_rows = [], []
    for arm in d.arms:
        all_runs = scores.filter(pl.col("arm") == arm)
        f = finished.filter(pl.col("arm") == arm)
        row: dict[str, Any] = {
            "arm": arm,
            "preset": all_runs["preset"][0],
            "runs": all_runs.height,
            "finished": f.height,
            "split": d.split,
        }
        mine = by_task(arm)
        p_avg, p_task = (
            stats.probability_of_improvement_by_task(mine, base)
            if arm != d.baseline and base
            else (None, {})
        )
        if f.height:
            gain = f.filter(pl.col("start_norm").is_not_null())
            _interval_stats(
                row,
                [f.filter(pl.col("task") == t)["final_norm"].to_numpy() for t in d.tasks],
                [
                    (g["final_norm"] - g["start_norm"]).to_numpy()
                    for t in d.tasks
                    for g in [gain.filter(pl.col("task") == t)]
                ],
                resamples,
                seed,
            )
            row["p_improve"] = None if p_avg is None or math.isnan(p_avg) else p_avg
            row["p_improve_by_task"] = p_task
            # the seeds behind P: each arm's fewest on a task both were scored on
            row["p_improve_seeds"] = (
                [min(len(mine[t]) for t in p_task), min(len(base[t]) for t in p_task)]
                if p_task
                else None
            )
            row["auc_launched"] = float(f["auc_launched"].mean())
            row["seeds"] = f.height
            row.update({c: f[c].mean() for c in pass_cols})
        rows.append(row)
        if len(d.tasks) < 2:
            continue
        for t in d.tasks:
            ft = f.filter(pl.col("task") == t)
            trow: dict[str, Any] = {
                "arm": arm,
                "task": t,
                "runs": all_runs.filter(pl.col("task") == t).height,
                "finished": ft.height,
                "split": d.split,
            }
            if ft.height:
                g = ft.filter(pl.col("start_score").is_not_null())
                _interval_stats(
                    trow,
                    [ft["final_score"].to_numpy()],
                    [(g["final_score"] - g["start_score"]).to_numpy()],
                    resamples,
                    seed,
                )
                trow["p_improve"] = p_task.get(t)
                trow["p_improve_seeds"] = [len(mine[t]), len(base[t])] if t in p_task else None
                trow.update({c: ft[c].mean() for c in pass_cols})
            task_rows.append(trow)
    return rows, task_rows, scores


def train_device_seconds(d: Data) -> dict[str, float]:
    """Each arm's mean training device-seconds per run (the ledger's last row): what its credit
    scheme, critic or collector cost beside the policy, at the matched token budget."""

    if d.ledger_last.height == 0:
        return {}
    last = d.ledger_last.join(d.runs.select("run_id", "arm"), on="run_id")
    means = last.group_by("arm").agg(pl.col("device_seconds").mean())
    return {a: float(v) for a, v in means.iter_rows() if v is not None}


def search_tokens(d: Data) -> dict[str, float]:
    """Each arm's mean search tokens per run (the ledger's last row; part of launched tokens)."""

    if d.ledger_last.height == 0 or "search_tokens" not in d.ledger_last.columns:
        return {}
    last = d.ledger_last.join(d.runs.select("run_id", "arm"), on="run_id")
    means = last.group_by("arm").agg(pl.col("search_tokens").mean())
    return {a: float(v) for a, v in means.iter_rows() if v}


def scores_blocks(
    d: Data, rows: list[dict[str, Any]], task_rows: list[dict[str, Any]]
) -> list[Block]:
    sl = d.score_label
    several = len(d.tasks) > 1
    unit = " (normalized per task)" if d.ranges else ""
    header = [
        "arm",
        "preset",
        "finished/runs",
        f"final score{unit}, mean [95% CI] ({sl})",
        "median",
        "IQM" + (" over runs x tasks" if several else ""),
        f"gain over warm start ({sl})",
        f"P(improve over {d.baseline})" + (" averaged over tasks" if several else ""),
        f"AUC vs launched tokens ({sl})",
        "training device-seconds per run (every model: policy, critic, collector)",
        "of which the credit scheme's extra model; its branch tokens; search tokens (per run)",
    ]
    cost = train_device_seconds(d)
    extra = extra_cost(d)
    search = search_tokens(d)

    def credit_cell(arm: str) -> str:
        seconds, tokens = extra.get(arm, (0.0, 0.0))
        parts = [f"{seconds:.1f} s"] if arm in extra and (seconds or not tokens) else []
        parts += [f"{tokens:.0f} branch tokens"] if tokens else []
        parts += [f"{search[arm]:.0f} search tokens"] if search.get(arm) else []
        return "; ".join(parts) or "—"

    table = Table(
        header,
        [
            [
                r["arm"],
                r["preset"],
                f"{r['finished']}/{r['runs']}",
                *[ci(r, k) for k in (*STATS, "gain")],
                p_improve_cell(r, per_task=several),
                fmt(r.get("auc_launched")),
                fmt(cost.get(r["arm"]), 1) if r["arm"] in cost else "—",
                credit_cell(r["arm"]),
            ]
            for r in rows
        ],
    )
    blocks: list[Block] = [Heading("Arms at the matched budget"), table, *eval_mode_blocks(d, rows)]
    if several:
        blocks += [
            Heading("Per task"),
            Para(
                f"Each arm on each task, raw scores of the {sl}; P(improvement) over "
                f"{d.baseline} within the task (the arm table averages these).",
                "caption",
            ),
            Table(
                [
                    "arm",
                    "task",
                    "finished/runs",
                    f"final score, mean [95% CI] ({sl})",
                    "IQM",
                    f"gain over warm start ({sl})",
                    f"P(improve over {d.baseline}) on this task",
                ],
                [
                    [
                        r["arm"],
                        r["task"],
                        f"{r['finished']}/{r['runs']}",
                        ci(r, "mean"),
                        ci(r, "iqm"),
                        ci(r, "gain"),
                        p_improve_cell(r),
                    ]
                    for r in task_rows
                ],
            ),
        ]
    return blocks


# ----------------------------------------------------------------------------- diagnostics

VERDICTS = ("all_correct", "all_wrong", "zero_variance", "accuracy", "surplus")


def census_blocks(d: Data) -> list[Block]:
    """Per arm: groups launched over training and the share kept or dropped by each verdict."""

    if d.census.height == 0:
        return []
    c = d.census.join(d.runs.select("run_id", "arm"), on="run_id")
    agg = c.group_by("arm").agg(
        pl.col("run_id").n_unique().alias("runs"),
        pl.col("groups_launched").sum(),
        pl.col("groups_kept").sum(),
        *[pl.col(f"dropped_{v}").sum() for v in VERDICTS],
    )
    by_arm = {r["arm"]: r for r in agg.iter_rows(named=True)}

    def share(n: Any, total: Any) -> str:
        n = n or 0  # a store written before a verdict existed has no count for it
        return f"{n} ({100 * n / total:.0f}%)" if total else str(n)

    return [
        Heading("Dynamic-sampling census"),
        Para(
            "Training groups launched per arm (all seeds) and what became of them: kept for the "
            "gradient, or dropped as all correct, all wrong, zero variance, outside the accuracy "
            "band (data.accuracy_filter, PRIME) or surplus beyond the step's quota. An arm "
            "without dynamic sampling keeps every group.",
            "caption",
        ),
        Table(
            ["arm", "runs", "groups launched", "kept", *[f"dropped: {v}" for v in VERDICTS]],
            [
                [
                    a,
                    str(r["runs"]),
                    str(r["groups_launched"]),
                    *[
                        share(r[k], r["groups_launched"])
                        for k in ("groups_kept", *[f"dropped_{v}" for v in VERDICTS])
                    ],
                ]
                for a in d.arms
                if (r := by_arm.get(a))
            ],
        ),
    ]


EVAL_COST = (
    ("eval_generated_tokens", "generated tokens", 0),
    ("eval_verifier_calls", "verifier calls", 0),
    ("eval_device_seconds", "device-seconds", 2),
    ("eval_wall_seconds", "wall-seconds", 2),
)


def eval_cost_blocks(d: Data) -> list[Block]:
    if d.evals.height == 0:
        return []
    ev = d.evals.join(d.runs.select("run_id", "arm"), on="run_id")
    train = d.ledger_last.join(d.runs.select("run_id", "arm"), on="run_id")
    rows = []
    for arm in d.arms:
        e = ev.filter(pl.col("arm") == arm)
        runs = max(e["run_id"].n_unique(), 1)
        splits = ", ".join(
            f"{n} {s}" for s, n in e.group_by("split").len().sort("split").iter_rows()
        )
        cells = [arm, splits or "0"]
        for col, _, digits in EVAL_COST:
            v = e[col]
            cells.append(
                "—"
                if v.null_count() == v.len()
                else f"{fmt(float(v.sum()), digits)} ({fmt(float(v.sum()) / runs, digits)})"
            )
        lt = train.filter(pl.col("arm") == arm)["launched_tokens"]
        cells.append(fmt(float(lt.sum()), 0) if lt.len() else "—")
        rows.append(cells)
    return [
        Heading("Evaluation cost"),
        Para(
            "What the evaluations themselves cost, all runs of the arm together (per run in "
            "parentheses), by split. Evaluation is counted apart from the training budget; the "
            "training launched tokens are shown for scale.",
            "caption",
        ),
        Table(
            [
                "arm",
                "evaluations",
                *[f"eval {label}" for _, label, _ in EVAL_COST],
                "training launched tokens",
            ],
            rows,
        ),
    ]


# ----------------------------------------------------------------------------- budgets, search


def budget_blocks(d: Data) -> list[Block]:
    b = d.budgets.join(d.runs.select("run_id", "arm", "task", "seed", "status"), on="run_id").sort(
        "arm", "task", "seed"
    )
    rows = [
        [
            rid,
            arm,
            str(task),
            str(seed),
            status,
            counter,
            f"{limit:g}",
            f"{consumed:g} ({100 * consumed / limit:.0f}%)" if limit else f"{consumed:g}",
        ]
        for rid, counter, limit, consumed, arm, task, seed, status in b.select(
            "run_id", "counter", "limit_value", "consumed", "arm", "task", "seed", "status"
        ).iter_rows()
    ]
    return [
        Heading("Planned vs consumed budget per run"),
        Table(["run", "arm", "task", "seed", "status", "counter", "planned", "consumed"], rows),
    ]


def search_blocks(d: Data) -> list[Block]:
    if d.trials.height == 0:
        return []
    eff = d.trials.group_by("arm", maintain_order=True).agg(
        pl.len().alias("n"),
        (pl.col("state") == "COMPLETE").sum().alias("c"),
        (pl.col("state") == "PRUNED").sum().alias("p"),
        (pl.col("state") == "FAIL").sum().alias("f"),
        pl.col("launched_tokens").sum().alias("tok"),
        (pl.col("device_seconds").sum() / 3600).alias("dh"),
        pl.col("value").max().alias("best"),
    )
    return [
        Heading("Hyperparameter search: effort per arm"),
        Para(
            "Arms named ARM.tuned above run the best trial's configuration, ARM the defaults, both "
            "on fresh seeds under the matched budget and scored on the test split; trials were "
            "chosen on the validation split.",
            "caption",
        ),
        Table(
            [
                "arm",
                "trials",
                "complete",
                "pruned",
                "failed",
                "launched tokens",
                "device-hours",
                "best value (validation split)",
            ],
            [
                [arm, str(n), str(c), str(p), str(f), fmt(tok, 0), fmt(dh, 4), fmt(best)]
                for arm, n, c, p, f, tok, dh, best in eff.iter_rows()
            ],
        ),
    ]
