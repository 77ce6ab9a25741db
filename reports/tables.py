"""The report's score statistics and tables: per arm and per arm x task scores at the matched
budget, with the formatting every table shares (``fmt``, ``estimate_interval``, ``ci``). What the
runs cost is in cost_tables.py. Each ``*_blocks`` function returns render blocks (see render.py)."""

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
    base = _by_task(finished, d.tasks, d.baseline) if d.baseline else {}
    rows, task_rows = [], []
    for arm in d.arms:
        runs = scores.filter(pl.col("arm") == arm)
        f = finished.filter(pl.col("arm") == arm)
        mine = _by_task(finished, d.tasks, arm)
        p_avg, p_task = (
            stats.probability_of_improvement_by_task(mine, base)
            if arm != d.baseline and base
            else (None, {})
        )
        rows.append(
            _arm_row(d, arm, runs, f, (mine, base, p_avg, p_task), pass_cols, resamples, seed)
        )
        if len(d.tasks) < 2:
            continue
        for t in d.tasks:
            seeds = [len(mine[t]), len(base[t])] if t in p_task else None
            task_rows.append(
                _task_row(d, arm, t, runs, f, (p_task.get(t), seeds), pass_cols, resamples, seed)
            )
    return rows, task_rows, scores


def _by_task(finished: pl.DataFrame, tasks: list[str], arm: str) -> dict[str, np.ndarray]:
    """{task: the final scores ``[n]`` of ``arm``'s finished runs on it}."""

    f = finished.filter(pl.col("arm") == arm)
    return {t: f.filter(pl.col("task") == t)["final_score"].drop_nulls().to_numpy() for t in tasks}


def _arm_row(
    d: Data,
    arm: str,
    runs: pl.DataFrame,
    f: pl.DataFrame,
    improvement: tuple[dict, dict, float | None, dict[str, float]],
    pass_cols: list[str],
    resamples: int,
    seed: int,
) -> dict[str, Any]:
    """One arm's row over runs x tasks: its runs (``runs``; ``f`` the finished ones), normalized
    scores and gains with their intervals, P(improvement) over the baseline with the seeds behind
    it (``improvement``: the arm's and the baseline's scores by task, the average P and P by task),
    AUC and pass@k."""

    row: dict[str, Any] = {
        "arm": arm,
        "preset": runs["preset"][0],
        "runs": runs.height,
        "finished": f.height,
        "split": d.split,
    }
    if not f.height:
        return row
    mine, base, p_avg, p_task = improvement
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
        [min(len(mine[t]) for t in p_task), min(len(base[t]) for t in p_task)] if p_task else None
    )
    row["auc_launched"] = float(f["auc_launched"].mean())
    row["seeds"] = f.height
    row.update({c: f[c].mean() for c in pass_cols})
    return row


def _task_row(
    d: Data,
    arm: str,
    task: str,
    runs: pl.DataFrame,
    f: pl.DataFrame,
    improvement: tuple[float | None, list[int] | None],
    pass_cols: list[str],
    resamples: int,
    seed: int,
) -> dict[str, Any]:
    """One arm's row on one task, raw scores: its runs and finished runs there (``runs``, ``f``:
    the arm's), final score and gain with their intervals, P(improvement) within the task and the
    seeds behind it (``improvement``), pass@k."""

    ft = f.filter(pl.col("task") == task)
    trow: dict[str, Any] = {
        "arm": arm,
        "task": task,
        "runs": runs.filter(pl.col("task") == task).height,
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
        trow["p_improve"], trow["p_improve_seeds"] = improvement
        trow.update({c: ft[c].mean() for c in pass_cols})
    return trow


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
    blocks: list[Block] = [
        Heading("Arms at the matched budget"),
        _arms_table(d, rows),
        *eval_mode_blocks(d, rows),
    ]
    if len(d.tasks) > 1:
        blocks += _per_task_blocks(d, task_rows)
    return blocks


def _arms_table(d: Data, rows: list[dict[str, Any]]) -> Table:
    """One row per arm: scores at the matched budget with their intervals, gain, P(improvement),
    AUC, and what the training cost beside the policy."""

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

    return Table(
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


def _per_task_blocks(d: Data, task_rows: list[dict[str, Any]]) -> list[Block]:
    """Each arm on each task, raw scores, with P(improvement) within the task."""

    sl = d.score_label
    return [
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
