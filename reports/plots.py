"""The report's figures (PNG bytes), every one against the ledger's cost counters.

A learning curve averaged over runs is drawn solid only where every run has reached (from the
latest start to the end of the shortest run); past that the mean is over the runs that remain, and
it is drawn dotted. A cross marks the arm's final score (the mean over its runs at their ends), so a
curve never suggests an end that the final scores do not have.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from . import stats
from .curves import Curve, curve, draw, fewer_runs_note, fig_png, runs_of

if TYPE_CHECKING:
    from .data import Data


def plots(
    d: Data, rows: list[dict[str, Any]], scores: pl.DataFrame
) -> dict[str, tuple[str, bytes]]:
    """{file name: (title, png)}."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from . import aside, cost_figure

    arms = [r["arm"] for r in rows]
    colors = {a: plt.cm.tab10(i % 10) for i, a in enumerate(arms)}
    evals = _statistics_evals(d, scores)
    last_evals = evals.sort("step").group_by("run_id").last()
    ylabel = f"score ({d.score_label}{', normalized per task' if d.ranges else ''})"
    cost = cost_figure.cost_figure(d, evals, last_evals, arms, colors, ylabel)
    # the costliest figure, drawn in a child on the other core while this process draws the rest
    pending = aside.Aside(cost_figure.draw_cost_figure, cost) if cost else None
    try:
        others = _other_plots(d, rows, evals, last_evals, arms, colors, ylabel)
        out = {"score_vs_cost.png": ("Score against cost", pending.result())} if pending else {}
    finally:
        if pending:
            pending.close()
    return out | others


def _other_plots(
    d: Data,
    rows: list[dict[str, Any]],
    evals: pl.DataFrame,
    last_evals: pl.DataFrame,
    arms: list[str],
    colors: dict[str, Any],
    ylabel: str,
) -> dict[str, tuple[str, bytes]]:
    """{file name: (title, png)} of the figures other than score against cost."""

    out: dict[str, tuple[str, bytes]] = {}
    task_png = _task_curves_png(d, evals, last_evals, arms, colors)
    if task_png:
        out["task_curves.png"] = ("Per task: score against launched tokens", task_png)
    census = sampling_census_png(d, arms)
    if census:
        out["sampling_census.png"] = ("Dynamic sampling over training", census)
    out["census.png"] = ("Budget census", _budget_census_png(d, arms))
    out["training_curves.png"] = ("Training", _training_curves_png(d, arms, colors))
    out["final_scores.png"] = (
        "Final scores",
        _final_scores_png(d, rows, last_evals, colors, ylabel),
    )
    return out


def _statistics_evals(data: Data, scores: pl.DataFrame) -> pl.DataFrame:
    """The scored evaluations, device hours added, of the finished runs (all if an arm has none)."""

    finished = set(scores.filter(pl.col("status") == "finished")["run_id"].to_list())
    evals = data.scored.with_columns((pl.col("device_seconds") / 3600).alias("device_hours"))
    if not evals.height:
        return evals
    return pl.concat(
        [
            arm_evals.filter(pl.col("run_id").is_in(finished))
            if arm_evals.filter(pl.col("run_id").is_in(finished)).height
            else arm_evals
            for _, arm_evals in evals.group_by("arm", maintain_order=True)
        ]
    )


def _curve_and_final(ax, mean_curve: Curve, final: pl.DataFrame, x: str, y: str, color, arm: str):
    """Whether a dotted part was drawn, drawing an arm's mean curve and its final-score cross."""

    partial = draw(ax, mean_curve, color, arm)
    ax.scatter([final[x].mean()], [final[y].mean()], marker="x", color=color, zorder=4)
    return partial


def _task_panel(
    ax,
    data: Data,
    evals: pl.DataFrame,
    last_evals: pl.DataFrame,
    arms: list[str],
    colors,
    task: str,
) -> bool:
    """Whether a dotted part was drawn, drawing each arm's raw score on ``task``."""

    partial = False
    for arm in arms:
        of_arm_task = (pl.col("arm") == arm) & (pl.col("task") == task)
        mean_curve = curve(runs_of(evals.filter(of_arm_task), "launched_tokens", "score")[0])
        if mean_curve is None:
            continue
        final = last_evals.filter(of_arm_task)
        partial |= _curve_and_final(
            ax, mean_curve, final, "launched_tokens", "score", colors[arm], arm
        )
    if task in data.warm_by_task:
        ax.axhline(data.warm_by_task[task], color="gray", ls="--", lw=1, label="warm start")
    return partial


def _task_curves_png(
    data: Data, evals: pl.DataFrame, last_evals: pl.DataFrame, arms: list[str], colors
) -> bytes | None:
    """Per task, the raw score against launched tokens (None: one task, or no evaluation)."""

    if not (len(data.tasks) > 1 and evals.height):
        return None
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(data.tasks), figsize=(5 * len(data.tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], data.tasks):
        fewer_runs_note(ax, _task_panel(ax, data, evals, last_evals, arms, colors, task))
        ax.set_title(task)
        ax.set_xlabel("launched tokens")
        ax.set_ylabel(f"score ({data.score_label}, raw)")
        ax.grid(alpha=0.3)
    return fig_png(fig)


def _arm_means(ledger: pl.DataFrame, arms: list[str], column: str) -> np.ndarray:
    """Each arm's mean of ``column`` over its runs' last ledger rows (0 where there is none)."""

    return np.array([ledger.filter(pl.col("arm") == a)[column].mean() or 0.0 for a in arms])


def _budget_census_png(data: Data, arms: list[str]) -> bytes:
    """Tokens per run by arm: accepted, discarded by reason (stacked), launched (a mark)."""

    import matplotlib.pyplot as plt

    ledger = data.ledger_last.join(data.runs.select("run_id", "arm"), on="run_id")
    reasons = [c for c in ledger.columns if c.startswith("discarded_") and c != "discarded_tokens"]
    fig, ax = plt.subplots(figsize=(max(6, len(arms) * 1.1), 4))
    bottom = np.zeros(len(arms))
    accepted = _arm_means(ledger, arms, "accepted_tokens")
    ax.bar(arms, accepted, label="accepted", color="#4c72b0")
    bottom += accepted
    for i, reason in enumerate(reasons):
        discarded = _arm_means(ledger, arms, reason)
        if discarded.sum() > 0:
            ax.bar(
                arms,
                discarded,
                bottom=bottom,
                label=f"discarded: {reason[len('discarded_') :]}",
                color=plt.cm.Set2(i),
            )
            bottom += discarded
    launched = _arm_means(ledger, arms, "launched_tokens")
    ax.scatter(arms, launched, marker="_", s=400, color="black", label="launched", zorder=3)
    ax.set_ylabel("tokens per run (mean over runs)")
    ax.set_title("budget census: launched = accepted + discarded (by reason)")
    ax.legend(fontsize=8)
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    return fig_png(fig)


def _training_curves_png(data: Data, arms: list[str], colors) -> bytes:
    """The trainable-group fraction and the response length against launched tokens, per arm."""

    import matplotlib.pyplot as plt

    metrics = data.curves.join(data.runs.select("run_id", "arm"), on="run_id")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ax, name, label in (
        (axes[0], "trainable_group_frac", "trainable-group fraction"),
        (axes[1], "response_length", "response length (tokens)"),
    ):
        partial = False
        for arm in arms:
            arm_metric = metrics.filter((pl.col("arm") == arm) & (pl.col("name") == name))
            curves = [
                (g["launched_tokens"].to_numpy(), g["value"].to_numpy())
                for _, g in arm_metric.sort("step").group_by("run_id")
            ]
            mean_curve = curve(curves, resamples=0)
            if mean_curve is not None:
                partial |= draw(ax, mean_curve, colors[arm], arm, band=False)
        fewer_runs_note(ax, partial)
        ax.set_xlabel("launched tokens")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    return fig_png(fig)


def _final_scores_png(
    data: Data, rows: list[dict[str, Any]], last_evals: pl.DataFrame, colors, ylabel: str
) -> bytes:
    """Each arm's final score: mean and 95% interval, the runs' own final scores as dots."""

    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.5 * len(rows) + 1.5))
    for i, row in enumerate(rows):
        if "mean" not in row:
            continue
        finals = last_evals.filter(pl.col("arm") == row["arm"])
        ax.scatter(
            finals["nscore"].to_numpy(),
            np.full(finals.height, i) + 0.15,
            s=12,
            color="gray",
            alpha=0.7,
        )
        if not math.isnan(row["mean_lo"]):
            ax.plot([row["mean_lo"], row["mean_hi"]], [i, i], color=colors[row["arm"]], lw=3)
        ax.scatter([row["mean"]], [i], color=colors[row["arm"]], zorder=3)
    if data.warm_start_score is not None:
        ax.axvline(data.warm_start_score, color="gray", ls=":", label="warm start")
        ax.legend(fontsize=8)
    ax.set_yticks(range(len(rows)), [r["arm"] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel(f"final {ylabel}: mean, 95% t interval over seeds; dots: runs")
    ax.grid(alpha=0.3, axis="x")
    return fig_png(fig)


VERDICT_COLUMNS = (
    ("groups_kept", "kept"),
    ("dropped_all_correct", "dropped: all correct"),
    ("dropped_all_wrong", "dropped: all wrong"),
    ("dropped_zero_variance", "dropped: zero variance"),
    ("dropped_accuracy", "dropped: outside the accuracy band"),
    ("dropped_surplus", "dropped: surplus"),
)


def census_fractions(
    census: pl.DataFrame, points: int = 40
) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
    """Per verdict, the fraction of launched groups over training against launched tokens,
    averaged over runs where every run is present. ``census`` holds one arm's rows."""

    c = census.filter(pl.col("groups_launched") > 0).sort("run_id", "step")
    if c.height == 0:
        return None
    c = c.with_columns(
        pl.col("launched_tokens").fill_null(
            pl.col("tokens_launched").cast(pl.Float64).cum_sum().over("run_id")
        )
    )
    runs = [g for _, g in c.group_by("run_id", maintain_order=True)]
    lo = max(float(g["launched_tokens"].min()) for g in runs)
    hi = min(float(g["launched_tokens"].max()) for g in runs)
    grid = np.linspace(lo, hi, points) if hi > lo else np.array([lo])
    out = {}
    for col, label in VERDICT_COLUMNS:
        mat = stats.curve_matrix(
            [
                (g["launched_tokens"].to_numpy(), (g[col] / g["groups_launched"]).to_numpy())
                for g in runs
            ],
            grid,
        )
        out[label] = mat.mean(axis=0)
    return grid, out


def sampling_census_png(d: Data, arms: list[str]) -> bytes | None:
    if d.census.height == 0:
        return None
    import matplotlib.pyplot as plt

    c = d.census.join(d.runs.select("run_id", "arm"), on="run_id")
    per_arm = {a: census_fractions(c.filter(pl.col("arm") == a)) for a in arms}
    per_arm = {a: v for a, v in per_arm.items() if v is not None}
    if not per_arm:
        return None
    ncol = min(3, len(per_arm))
    nrow = math.ceil(len(per_arm) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(5 * ncol, 3.5 * nrow), squeeze=False)
    colors = ["#4c72b0", "#55a868", "#c44e52", "#8172b2", "#ccb974"]
    for ax, (arm, (grid, fr)) in zip(axes.ravel(), per_arm.items()):
        if len(grid) > 1:
            ax.stackplot(grid, *fr.values(), labels=list(fr), colors=colors, alpha=0.85)
        else:
            bottom = 0.0
            for (label, v), color in zip(fr.items(), colors):
                ax.bar([grid[0]], [v[0]], bottom=bottom, color=color, label=label)
                bottom += v[0]
        ax.set_title(arm)
        ax.set_ylim(0, 1)
        ax.set_xlabel("launched tokens")
        ax.set_ylabel("fraction of launched groups")
    for ax in axes.ravel()[len(per_arm) :]:
        ax.axis("off")
    handles, labels = axes.ravel()[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=5, bbox_to_anchor=(0.5, -0.08))
    fig.suptitle(
        "dynamic-sampling census: what became of each step's launched groups (mean over runs)",
        y=1.03,
    )
    return fig_png(fig)
