"""The report's figures (PNG bytes), every one against the ledger's cost counters.

A learning curve averaged over runs is drawn solid only where every run has reached (from the
latest start to the end of the shortest run); past that the mean is over the runs that remain, and
it is drawn dotted. A cross marks the arm's final score (the mean over its runs at their ends), so a
curve never suggests an end that the final scores do not have.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from . import stats

if TYPE_CHECKING:
    from .data import Data


@dataclass
class Curve:
    grid: np.ndarray
    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    covering: np.ndarray  # runs that reach each grid point
    n: int  # runs

    @property
    def full(self) -> np.ndarray:
        return self.covering == self.n


def curve(
    curves: list[tuple[np.ndarray, np.ndarray]],
    strata: list[str] | None = None,
    points: int = 60,
    resamples: int = 300,
    seed: int = 0,
) -> Curve | None:
    """Mean curve and band over runs on a grid that contains the start of the latest-starting run
    and the end of the shortest one (where the full-coverage part begins and ends)."""

    keep = [i for i, (x, _) in enumerate(curves) if len(x)]
    if not keep:
        return None
    curves = [curves[i] for i in keep]
    strata = [strata[i] for i in keep] if strata is not None else None
    starts = [float(np.min(x)) for x, _ in curves]
    ends = [float(np.max(x)) for x, _ in curves]
    grid = np.unique(np.r_[np.linspace(min(starts), max(ends), points), max(starts), min(ends)])
    mean, lo, hi = stats.band(curves, grid, resamples=resamples, seed=seed, strata=strata)
    return Curve(grid, mean, lo, hi, stats.runs_covering(curves, grid), len(curves))


def draw(ax, c: Curve, color, label: str, band: bool = True) -> bool:
    """Solid where every run is present, dotted where fewer remain; returns whether a dotted part
    was drawn."""

    full = c.full
    partial = (c.covering > 0) & ~full
    if partial.any():
        ax.plot(c.grid, np.where(c.covering > 0, c.mean, np.nan), color=color, ls=":", lw=1)
    ax.plot(c.grid, np.where(full, c.mean, np.nan), color=color, label=f"{label} ({c.n} runs)")
    if band and not np.all(np.isnan(c.lo)):
        ax.fill_between(c.grid, c.lo, c.hi, where=full, alpha=0.15, color=color)
    return bool(partial.any())


def fig_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def _runs_of(ev: pl.DataFrame, col: str, y: str = "nscore") -> tuple[list, list[str]]:
    curves, tasks = [], []
    for (_, task), g in ev.sort("step").group_by(["run_id", "task"], maintain_order=True):
        g = g.filter(pl.col(col).is_not_null())
        curves.append((g[col].to_numpy(), g[y].to_numpy()))
        tasks.append(str(task))
    return curves, tasks


def _fewer_runs_note(ax, any_partial: bool) -> None:
    if any_partial:
        ax.plot([], [], color="gray", ls=":", lw=1, label="dotted: fewer runs remain")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def plots(
    d: Data, rows: list[dict[str, Any]], scores: pl.DataFrame
) -> dict[str, tuple[str, bytes]]:
    """{file name: (title, png)}."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .data import COST_AXES

    out: dict[str, tuple[str, bytes]] = {}
    arms = [r["arm"] for r in rows]
    colors = {a: plt.cm.tab10(i % 10) for i, a in enumerate(arms)}
    finished = set(scores.filter(pl.col("status") == "finished")["run_id"].to_list())
    ev = d.scored.with_columns((pl.col("device_seconds") / 3600).alias("device_hours"))
    # the runs behind the statistics: finished ones (all, for an arm with none finished yet)
    ev = (
        pl.concat(
            [
                g.filter(pl.col("run_id").is_in(finished))
                if g.filter(pl.col("run_id").is_in(finished)).height
                else g
                for _, g in ev.group_by("arm", maintain_order=True)
            ]
        )
        if ev.height
        else ev
    )
    last = ev.sort("step").group_by("run_id").last()
    sl = d.score_label
    ylabel = f"score ({sl}{', normalized per task' if d.ranges else ''})"

    axes_cols = [
        (c, lab) for c, lab in COST_AXES if ev.height and (ev[c].drop_nulls().max() or 0) > 0
    ]
    if axes_cols:
        nrow = math.ceil(len(axes_cols) / 2)
        fig, axes = plt.subplots(nrow, 2, figsize=(12, 4 * nrow), squeeze=False)
        for ax, (col, label) in zip(axes.ravel(), axes_cols):
            partial = False
            for arm in arms:
                sub = ev.filter(pl.col("arm") == arm)
                curves, tasks = _runs_of(sub, col)
                c = curve(curves, tasks)
                if c is None:
                    continue
                partial |= draw(ax, c, colors[arm], arm)
                fin = last.filter(pl.col("arm") == arm)
                ax.scatter(
                    [fin[col].mean()],
                    [fin["nscore"].mean()],
                    marker="x",
                    color=colors[arm],
                    zorder=4,
                )
            if d.warm_start_score is not None:
                ax.axhline(d.warm_start_score, color="gray", ls="--", lw=1, label="warm start")
            _fewer_runs_note(ax, partial)
            ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 5))
            ax.set_xlabel(label)
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
        for ax in axes.ravel()[len(axes_cols) :]:
            ax.axis("off")
        fig.suptitle(
            f"{sl} score against cost: mean over runs{' x tasks' if len(d.tasks) > 1 else ''}, 95% "
            "stratified bootstrap band; x: final score (mean over runs at their ends)"
        )
        fig.tight_layout()
        out["score_vs_cost.png"] = ("Score against cost", fig_png(fig))

    if len(d.tasks) > 1 and ev.height:
        fig, axes = plt.subplots(1, len(d.tasks), figsize=(5 * len(d.tasks), 4), squeeze=False)
        for ax, task in zip(axes[0], d.tasks):
            partial = False
            for arm in arms:
                sub = ev.filter((pl.col("arm") == arm) & (pl.col("task") == task))
                c = curve(_runs_of(sub, "launched_tokens", "score")[0])
                if c is None:
                    continue
                partial |= draw(ax, c, colors[arm], arm)
                fin = last.filter((pl.col("arm") == arm) & (pl.col("task") == task))
                ax.scatter(
                    [fin["launched_tokens"].mean()],
                    [fin["score"].mean()],
                    marker="x",
                    color=colors[arm],
                    zorder=4,
                )
            if task in d.warm_by_task:
                ax.axhline(d.warm_by_task[task], color="gray", ls="--", lw=1, label="warm start")
            _fewer_runs_note(ax, partial)
            ax.set_title(task)
            ax.set_xlabel("launched tokens")
            ax.set_ylabel(f"score ({sl}, raw)")
            ax.grid(alpha=0.3)
        out["task_curves.png"] = ("Per task: score against launched tokens", fig_png(fig))

    census = sampling_census_png(d, arms)
    if census:
        out["sampling_census.png"] = ("Dynamic sampling over training", census)

    led = d.ledger_last.join(d.runs.select("run_id", "arm"), on="run_id")
    reasons = [c for c in led.columns if c.startswith("discarded_") and c != "discarded_tokens"]
    fig, ax = plt.subplots(figsize=(max(6, len(arms) * 1.1), 4))
    bottom = np.zeros(len(arms))
    acc = np.array([led.filter(pl.col("arm") == a)["accepted_tokens"].mean() or 0.0 for a in arms])
    ax.bar(arms, acc, label="accepted", color="#4c72b0")
    bottom += acc
    for i, r in enumerate(reasons):
        vals = np.array([led.filter(pl.col("arm") == a)[r].mean() or 0.0 for a in arms])
        if vals.sum() > 0:
            ax.bar(
                arms,
                vals,
                bottom=bottom,
                label=f"discarded: {r[len('discarded_') :]}",
                color=plt.cm.Set2(i),
            )
            bottom += vals
    launched = np.array(
        [led.filter(pl.col("arm") == a)["launched_tokens"].mean() or 0.0 for a in arms]
    )
    ax.scatter(arms, launched, marker="_", s=400, color="black", label="launched", zorder=3)
    ax.set_ylabel("tokens per run (mean over runs)")
    ax.set_title("budget census: launched = accepted + discarded (by reason)")
    ax.legend(fontsize=8)
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    out["census.png"] = ("Budget census", fig_png(fig))

    cur = d.curves.join(d.runs.select("run_id", "arm"), on="run_id")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ax, name, label in (
        (axes[0], "trainable_group_frac", "trainable-group fraction"),
        (axes[1], "response_length", "response length (tokens)"),
    ):
        partial = False
        for arm in arms:
            sub = cur.filter((pl.col("arm") == arm) & (pl.col("name") == name)).sort("step")
            curves = [
                (g["launched_tokens"].to_numpy(), g["value"].to_numpy())
                for _, g in sub.group_by("run_id")
            ]
            c = curve(curves, resamples=0)
            if c is not None:
                partial |= draw(ax, c, colors[arm], arm, band=False)
        _fewer_runs_note(ax, partial)
        ax.set_xlabel("launched tokens")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    out["training_curves.png"] = ("Training", fig_png(fig))

    fig, ax = plt.subplots(figsize=(7, 0.5 * len(arms) + 1.5))
    for i, r in enumerate(rows):
        if "mean" not in r:
            continue
        f = last.filter(pl.col("arm") == r["arm"])
        ax.scatter(
            f["nscore"].to_numpy(), np.full(f.height, i) + 0.15, s=12, color="gray", alpha=0.7
        )
        if not math.isnan(r["mean_lo"]):
            ax.plot([r["mean_lo"], r["mean_hi"]], [i, i], color=colors[r["arm"]], lw=3)
        ax.scatter([r["mean"]], [i], color=colors[r["arm"]], zorder=3)
    if d.warm_start_score is not None:
        ax.axvline(d.warm_start_score, color="gray", ls=":", label="warm start")
        ax.legend(fontsize=8)
    ax.set_yticks(range(len(rows)), [r["arm"] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel(f"final {ylabel}: mean, 95% stratified bootstrap CI; dots: runs")
    ax.grid(alpha=0.3, axis="x")
    out["final_scores.png"] = ("Final scores", fig_png(fig))
    return out


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
