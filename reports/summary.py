"""The plain answer: per arm its mean final score with a 95% t interval over its seeds, and one
sentence per compared pair with the direction in words ("dapo > grpo: paired difference 0.086
[0.028, 0.144] (2 seeds × 64 instances), separated.").

Computed here once, from the report's data (``build.load``; ``build.summary_of`` reads a directory):
the report's first section, the end of `sixblanks run`, the output of `sixblanks report` and
``sixblanks.load(out).summary()`` / ``.verdicts()`` all show this. The mean and its interval are the
arm table's (the same function, ``stats.stratified_t_interval``, on the same scores); the sentences
are the paired table's rows (``pairs.pair_rows``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from . import stats
from .pairs import pair_rows, pair_sentence
from .render import Block, Heading, Para, Table
from .tables import estimate_interval, run_scores

if TYPE_CHECKING:
    from .data import Data

SCHEMA = {
    "arm": pl.Utf8,
    "mean": pl.Float64,
    "low": pl.Float64,
    "high": pl.Float64,
    "seeds": pl.Int64,
    "finished": pl.Int64,
    "runs": pl.Int64,
    "split": pl.Utf8,
}


@dataclass(frozen=True)
class Summary:
    """``arms``: one row per arm (``SCHEMA``): the mean final score of its finished runs (over runs
    x tasks, normalized per task where the tasks differ in scale), its 95% t interval over the seeds
    (null below two seeds), the seeds, finished runs and runs behind it, the split scored.
    ``sentences``: one per pair of arms with shared seeds, the higher-scoring arm first."""

    arms: pl.DataFrame
    sentences: list[str]
    split: str | None
    normalized: bool

    def lines(self) -> list[str]:
        """The summary as plain text lines (a terminal, a log): a line per arm, then the
        sentences."""

        unit = ", normalized per task" if self.normalized else ""
        split = f"{self.split} split" if self.split else "no evaluation"
        out = [f"final score ({split}{unit}), mean [95% t interval over seeds]:"]
        width = max((len(a) for a in self.arms["arm"]), default=0)
        for r in self.arms.iter_rows(named=True):
            out.append(f"  {r['arm']:<{width}}  {_estimate(r)}  {_seeds(r)}")
        return out + self.sentences


def _estimate(r: dict[str, Any]) -> str:
    if r["mean"] is None:
        return "no finished run with a score"
    return estimate_interval(r["mean"], r["low"], r["high"], none="no interval")


def _seeds(r: dict[str, Any]) -> str:
    seeds = f"{r['seeds']} seed{'s' if r['seeds'] != 1 else ''}"
    # runs that did not finish are left out of the mean: say how many there were
    return seeds if r["finished"] == r["runs"] else f"{seeds} ({r['finished']}/{r['runs']} runs)"


def summarize(
    d: Data, scores: pl.DataFrame | None = None, pairs: list[dict[str, Any]] | None = None
) -> Summary:
    """The summary of the report's data ``d``; ``scores`` (``tables.run_scores``) and ``pairs``
    (``pairs.pair_rows``) where the caller has them already."""

    scores = run_scores(d) if scores is None else scores
    pairs = pair_rows(d) if pairs is None else pairs
    finished = scores.filter((pl.col("status") == "finished") & pl.col("final_score").is_not_null())
    rows = []
    for arm in d.arms:
        f = finished.filter(pl.col("arm") == arm)
        # the arm table's mean: every finished run, tasks as strata (stats.stratified_t_interval)
        mean, low, high, _ = stats.stratified_t_interval(
            [f.filter(pl.col("task") == t)["final_norm"].to_numpy() for t in d.tasks]
        )
        rows.append(
            {
                "arm": arm,
                "mean": None if f.height == 0 else mean,
                "low": None if low != low else low,  # NaN -> null: no interval
                "high": None if high != high else high,
                "seeds": f["seed"].n_unique(),
                "finished": f.height,
                "runs": scores.filter(pl.col("arm") == arm).height,
                "split": d.split,
            }
        )
    return Summary(
        arms=pl.DataFrame(rows, schema=SCHEMA),
        sentences=[pair_sentence(r, len(pairs)) for r in pairs],
        split=d.split,
        normalized=bool(d.ranges),
    )


def summary_blocks(s: Summary) -> list[Block]:
    """The report's first section: the per-arm table and the pair sentences."""

    unit = " (normalized per task)" if s.normalized else ""
    split = f"{s.split} split" if s.split else "no evaluation"
    return [
        Heading("Summary"),
        Table(
            ["arm", f"final score{unit}, mean [95% CI] ({split})", "seeds", "finished/runs"],
            [
                [r["arm"], _estimate(r), str(r["seeds"]), f"{r['finished']}/{r['runs']}"]
                for r in s.arms.iter_rows(named=True)
            ],
        ),
        *[Para(t) for t in s.sentences],
        *(
            []
            if s.sentences or s.arms.height < 2
            else [Para("No pair of arms shares a finished seed with per-instance outcomes.")]
        ),
    ]
