"""Lag in the report: the final score against each arm's lag (``data.lag``, or measured for a
concurrent collector), and how far the
behaviour policy was from the trained one over training (versions behind; the per-sample k3 KL's
median and 90th percentile), for experiments whose arms sample from older weights."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

if TYPE_CHECKING:
    from .data import Data

NAMES = (
    "lag.versions_behind",
    "lag.inflight_behind",
    "lag.queue_behind",
    "lag.inflight_behind_max",
    "lag.queue_behind_max",
    "lag.version_span",
    "lag.version_span_max",
    "lag.kl_p50",
    "lag.kl_p90",
)
STYLES = {
    "lag.versions_behind": ("-", ""),
    "lag.inflight_behind": (":", " in flight"),
    "lag.queue_behind": ("-.", " in the queue"),
    "lag.version_span": ("-", ""),
    "lag.version_span_max": (":", " max"),
    "lag.kl_p50": ("-", " p50"),
    "lag.kl_p90": ("--", " p90"),
}
"""Each curve's line style and label suffix: a concurrent arm's versions behind, split by where
they passed, beside the total."""


def query(con) -> pl.DataFrame:
    """Per run and step: the lag metrics and the launched tokens at that step."""

    names = ", ".join(f"'{n}'" for n in NAMES)
    return con.sql(
        "SELECT m.run_id, m.step, m.name, m.value, l.launched_tokens FROM metrics m JOIN ledger l "
        f"ON m.run_id = l.run_id AND m.step = l.step WHERE m.name IN ({names})"
    ).pl()


def off_policy_label(blanks: dict[str, Any]) -> str:
    """How an arm's data is off-policy, in words ("" for single-use synchronous data)."""

    data, weight = blanks.get("data") or {}, blanks.get("weight") or {}
    parts = []
    if data.get("lag"):
        parts.append(f"lag {data['lag']}")
    if data.get("concurrent") is not None:
        c = data["concurrent"]
        how = f"queue {c.get('queue')}, {c.get('backend')}"
        if c.get("consume") == "episode":
            how += f", each group as it finishes, partial: {c.get('partial')}"
        parts.append(f"concurrent collector ({how})")
    if data.get("replay"):
        r = data["replay"]
        parts.append(f"replay (capacity {r.get('capacity')}, reuse {r.get('reuse')})")
    if data.get("staleness") is not None:
        parts.append(f"staleness <= {data['staleness']}")
    if (data.get("epochs") or 1) * (data.get("minibatches") or 1) > 1:
        parts.append(
            f"{data.get('epochs') or 1} x {data.get('minibatches') or 1} updates per batch"
        )
    if parts and weight.get("tis_cap") is not None:
        parts.append(f"TIS C={weight['tis_cap']} ({weight.get('tis_form', 'token')})")
    return "; ".join(parts)


def arm_labels(d: Data) -> dict[str, str]:
    """Each arm's off-policy label, from its runs' resolved blanks."""

    out: dict[str, str] = {}
    for arm, blanks in d.runs.select("arm", "blanks").iter_rows():
        out.setdefault(
            arm, off_policy_label(json.loads(blanks) if isinstance(blanks, str) else blanks or {})
        )
    return out


def arm_lags(d: Data) -> dict[str, float]:
    """Each arm's lag: its data.lag (0 where absent), or for an arm with a concurrent collector,
    whose lag the scheduler decides, the mean versions behind measured over its runs' steps."""

    out: dict[str, float] = {}
    measured = d.lag.filter(pl.col("name") == "lag.versions_behind").join(
        d.runs.select("run_id", "arm"), on="run_id"
    )
    for arm, blanks in d.runs.select("arm", "blanks").iter_rows():
        data = (json.loads(blanks) if isinstance(blanks, str) else blanks or {}).get("data", {})
        if data.get("concurrent") is not None:
            sub = measured.filter(pl.col("arm") == arm)["value"]
            out.setdefault(arm, float(sub.mean()) if len(sub) else 0.0)
        else:
            out.setdefault(arm, float(data.get("lag") or 0))
    return out


def lag_figure(d: Data, rows: list[dict[str, Any]]) -> tuple[str, bytes] | None:
    """(title, PNG) of score vs lag and the divergence over training; None without lagged arms."""

    lags = arm_lags(d)
    if not any(lags.values()) and d.lag.height == 0:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .curves import fig_png

    spans = d.lag.height and bool((d.lag["name"] == "lag.version_span").any())
    fig, axes = plt.subplots(1, 4 if spans else 3, figsize=(20 if spans else 15, 4))
    _score_against_lag(axes[0], rows, lags, d.score_label)
    ev = d.lag.join(d.runs.select("run_id", "arm"), on="run_id")
    for ax, names, label in (
        (
            axes[1],
            ("lag.versions_behind", "lag.inflight_behind", "lag.queue_behind"),
            "versions behind (concurrent arms: in flight, in the queue)",
        ),
        (axes[2], ("lag.kl_p50", "lag.kl_p90"), "per-sample KL(behaviour || current)"),
        *(
            [(axes[3], ("lag.version_span", "lag.version_span_max"), "versions a sample spans")]
            if spans
            else []
        ),
    ):
        _over_training(ax, ev, d.arms, names, label)
    return "Lag: score against lag, and the behaviour policy's distance over training", fig_png(fig)


def _score_against_lag(ax: Any, rows: list[dict[str, Any]], lags: dict, score_label: str) -> None:
    """Each arm's final score (mean with its interval) at its lag, on matplotlib axes ``ax``."""

    for r in rows:
        lag = lags.get(r["arm"], 0)
        if r.get("mean") is None:
            continue
        lo, hi = r.get("mean_lo"), r.get("mean_hi")
        err = None
        if lo is not None and hi is not None and np.isfinite(lo) and np.isfinite(hi):
            err = [[r["mean"] - lo], [hi - r["mean"]]]
        ax.errorbar([lag], [r["mean"]], yerr=err, fmt="o", capsize=3)
        ax.annotate(
            r["arm"], (lag, r["mean"]), textcoords="offset points", xytext=(5, 3), fontsize=8
        )
    ax.set_xlabel("lag (versions behind: data.lag; measured mean for concurrent arms)")
    ax.set_ylabel(f"final score ({score_label})")
    ax.set_title("score against lag")


def _over_training(
    ax: Any, ev: pl.DataFrame, arms: list[str], names: tuple[str, ...], label: str
) -> None:
    """The lag metrics ``names`` of each arm against launched tokens (mean over runs per step), on
    matplotlib axes ``ax``; ``ev`` holds the metrics with each run's arm."""

    for arm in arms:
        for name in names:
            sub = ev.filter((pl.col("arm") == arm) & (pl.col("name") == name))
            if sub.height == 0:
                continue
            by_step = sub.group_by("step").agg(
                pl.col("value").mean(), pl.col("launched_tokens").mean()
            )
            by_step = by_step.sort("step")
            style, tag = STYLES[name]
            ax.plot(by_step["launched_tokens"], by_step["value"], style, label=f"{arm}{tag}")
    ax.set_xlabel("launched tokens")
    ax.set_title(label)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6, ncol=2 if len(ax.get_lines()) > 8 else 1)


DROPS = ("stale_inflight", "stale_queue", "staleness", "aborted", "unconsumed")
"""Discard reasons of asynchronous training: past a bound in flight, in the queue, in total;
aborted by a weight update (regenerated); launched and never consumed."""


def async_blocks(d: Data) -> list:
    """Per concurrent arm: its staleness split (in flight, in the queue: mean and max versions over
    its steps), the versions its samples span, and the share of launched tokens each asynchronous
    discard reason took (the bounds' drops, regenerated partial rollouts, rounds never consumed)."""

    from .render import Heading, Para, Table

    arms = _concurrent_arms(d)
    if not arms or d.lag.height == 0:
        return []
    ev = d.lag.join(d.runs.select("run_id", "arm"), on="run_id")
    last = d.ledger_last.join(d.runs.select("run_id", "arm"), on="run_id")
    rows = [_async_row(arm, ev, last) for arm in order_arms(d, arms)]
    return [
        Heading("Asynchrony: staleness by where it passed, version spans, and what was dropped"),
        Para(
            "Per concurrent arm (all seeds): versions behind that passed while a sample was "
            "generated (in flight) and while it waited to be consumed (in the queue), each as the "
            "mean over steps / the largest of any step; the versions a sample's tokens span (a "
            "partial rollout resumed on new weights spans more than one); and the launched tokens "
            "discarded past the in-flight, queue and total staleness bounds, aborted by a weight "
            "update (partial: regenerate, then launched again) and launched but never consumed.",
            "caption",
        ),
        Table(
            [
                "arm",
                "in flight (mean / max)",
                "in the queue (mean / max)",
                "version span (mean / max)",
                *[f"dropped: {r}" for r in DROPS],
            ],
            rows,
        ),
    ]


def _concurrent_arms(d: Data) -> list[str]:
    """The arms whose blanks set ``data.concurrent``, in the order their runs come."""

    arms = []
    for arm, blanks in d.runs.select("arm", "blanks").iter_rows():
        data = (json.loads(blanks) if isinstance(blanks, str) else blanks or {}).get("data", {})
        if data.get("concurrent") is not None and arm not in arms:
            arms.append(arm)
    return arms


def _async_row(arm: str, ev: pl.DataFrame, last: pl.DataFrame) -> list[str]:
    """One concurrent arm's row: staleness in flight, in the queue and version span (mean over its
    steps / max), then the launched tokens each asynchronous discard reason took. ``ev``: the lag
    metrics, ``last``: each run's last ledger row, both with the run's arm."""

    def stat(name: str, agg: str) -> str:
        sub = ev.filter((pl.col("arm") == arm) & (pl.col("name") == name))["value"]
        if len(sub) == 0:
            return "-"
        return f"{(sub.mean() if agg == 'mean' else sub.max()):.2f}"

    mine = last.filter(pl.col("arm") == arm)
    launched = float(mine["launched_tokens"].sum()) if mine.height else 0.0
    drops = []
    for reason in DROPS:
        col = f"discarded_{reason}"
        n = float(mine[col].fill_null(0).sum()) if col in mine.columns and mine.height else 0.0
        drops.append(f"{n:.0f} ({100 * n / launched:.1f}%)" if launched else f"{n:.0f}")
    return [
        arm,
        *[
            f"{stat(f'lag.{k}', 'mean')} / {stat(f'lag.{k}_max', 'max')}"
            for k in ("inflight_behind", "queue_behind", "version_span")
        ],
        *drops,
    ]


def order_arms(d: Data, arms: list[str]) -> list[str]:
    return [a for a in d.arms if a in arms] + [a for a in arms if a not in d.arms]
