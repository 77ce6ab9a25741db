"""The drawing pieces every figure of the report shares: a mean learning curve over runs with
its band (``curve``), drawn solid where every run is present and dotted past (``draw``), a
figure's PNG bytes (``fig_png``). NumPy and Matplotlib only, apart from ``runs_of``, which reads
a Polars frame (so the rest can be used in a forked child: ``aside.py``)."""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import polars as pl

from . import stats


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


def runs_of(ev: pl.DataFrame, col: str, y: str = "nscore") -> tuple[list, list[str]]:
    curves, tasks = [], []
    for (_, task), g in ev.sort("step").group_by(["run_id", "task"], maintain_order=True):
        g = g.filter(pl.col(col).is_not_null())
        curves.append((g[col].to_numpy(), g[y].to_numpy()))
        tasks.append(str(task))
    return curves, tasks


def fewer_runs_note(ax, any_partial: bool) -> None:
    if any_partial:
        ax.plot([], [], color="gray", ls=":", lw=1, label="dotted: fewer runs remain")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
