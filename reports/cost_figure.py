"""The score-against-cost figure: a panel per ledger cost counter that moved, each arm's mean
learning curve against it with its 95% band and its final-score cross.

It is made in two steps: ``cost_figure`` reads the report's tables (Polars) into plain arrays, and
``draw_cost_figure`` draws those with NumPy and Matplotlib only. The figure is the report's
costliest (six panels of tick and text layout), and the second step, touching no Polars, can be
drawn in a forked child on the other core while the report draws its other figures
(``aside.py``): Polars' thread pool does not survive a fork, NumPy and Matplotlib do.

Counters that are equal at every evaluation of every run share one panel, its x label naming each
("launched tokens = accepted tokens" where nothing was discarded; "verifier calls = environment
steps" for single-turn tasks): the same curves twice would say nothing more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from .curves import curve, draw, fewer_runs_note, fig_png, runs_of

if TYPE_CHECKING:
    from .data import Data


@dataclass
class ArmSeries:
    """One arm's runs against one counter: ``curves`` [(x [evaluations], score [evaluations])] a
    run (x task), ``tasks`` their tasks (the band's strata), ``final`` the mean (x, score) over
    the runs' last evaluations."""

    arm: str
    color: tuple
    curves: list[tuple[np.ndarray, np.ndarray]]
    tasks: list[str]
    final: tuple[float, float]


@dataclass
class Panel:
    columns: list[str]  # the counters this panel's x stands for (equal at every evaluation)
    label: str
    series: list[ArmSeries]


@dataclass
class CostFigure:
    panels: list[Panel]
    warm_start: float | None  # the mean score at step 0: a dashed line
    ylabel: str
    title: str


def counters(evals: pl.DataFrame, axes: list[tuple[str, str]]) -> list[tuple[list[str], str]]:
    """[(columns, x label)] of the counters in ``axes`` [(column, label)] that moved in ``evals``,
    a counter equal to an earlier one at every row joined to that one's entry."""

    moved = [(c, label) for c, label in axes if (evals[c].drop_nulls().max() or 0) > 0]
    groups: list[tuple[list[str], list[str]]] = []
    for column, label in moved:
        same = next((g for g in groups if evals[g[0][0]].equals(evals[column])), None)
        if same is None:
            groups.append(([column], [label]))
        else:
            same[0].append(column)
            same[1].append(label)
    return [(columns, " = ".join(labels)) for columns, labels in groups]


def cost_figure(
    data: Data,
    evals: pl.DataFrame,
    last_evals: pl.DataFrame,
    arms: list[str],
    colors: dict[str, tuple],
    ylabel: str,
) -> CostFigure | None:
    """The figure's arrays from the scored evaluations ``evals`` (device hours added) and each
    run's last one ``last_evals``; None where no counter moved."""

    from .data import COST_AXES

    if not evals.height:
        return None
    panels = []
    for columns, label in counters(evals, COST_AXES):
        column, series = columns[0], []
        for arm in arms:
            curves, tasks = runs_of(evals.filter(pl.col("arm") == arm), column)
            final = last_evals.filter(pl.col("arm") == arm)
            xy = tuple(_mean(final[c]) for c in (column, "nscore"))
            series.append(ArmSeries(arm, colors[arm], curves, tasks, xy))
        panels.append(Panel(columns, label, series))
    if not panels:
        return None
    title = (
        f"{data.score_label} score against cost: mean over runs"
        f"{' x tasks' if len(data.tasks) > 1 else ''}, 95% "
        "t band over seeds; x: final score (mean over runs at their ends)"
    )
    return CostFigure(panels, data.warm_start_score, ylabel, title)


def _mean(values: pl.Series) -> float:
    mean = values.mean()
    return math.nan if mean is None else float(mean)


def draw_cost_figure(spec: CostFigure) -> bytes:
    """The figure as PNG bytes, drawn from ``spec`` with NumPy and Matplotlib only."""

    import matplotlib.pyplot as plt

    nrow = math.ceil(len(spec.panels) / 2)
    fig, axes = plt.subplots(nrow, 2, figsize=(12, 4 * nrow), squeeze=False)
    for ax, panel in zip(axes.ravel(), spec.panels):
        partial = False
        for s in panel.series:
            mean_curve = curve(s.curves, s.tasks)
            if mean_curve is None:
                continue
            partial |= draw(ax, mean_curve, s.color, s.arm)
            ax.scatter([s.final[0]], [s.final[1]], marker="x", color=s.color, zorder=4)
        if spec.warm_start is not None:
            ax.axhline(spec.warm_start, color="gray", ls="--", lw=1, label="warm start")
        fewer_runs_note(ax, partial)
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 5))
        ax.set_xlabel(panel.label)
        ax.set_ylabel(spec.ylabel)
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[len(spec.panels) :]:
        ax.axis("off")
    fig.suptitle(spec.title)
    fig.tight_layout()
    return fig_png(fig)
