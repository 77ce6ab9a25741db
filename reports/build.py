"""The comparison report, built from ``results.duckdb`` only (reports import nothing from harness).

DIR/report/index.html   self-contained (images embedded as base64, no network)
DIR/report/report.md    the same tables in Markdown, plots as PNG files beside it
DIR/report/scores.csv, scores.parquet   per-run scores
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from . import stats

DB_NAME = "results.duckdb"
COST_AXES = [
    ("launched_tokens", "launched tokens"),
    ("accepted_tokens", "accepted tokens"),
    ("device_hours", "device-hours (CPU: process CPU time)"),
    ("verifier_calls", "verifier calls"),
]


class ReportError(Exception):
    exit_code = 2

    def __init__(self, message: str):
        self.problems = [message]
        super().__init__(message)


def _connect(out_dir: Path):
    import duckdb

    path = out_dir / DB_NAME
    if not path.exists():
        raise ReportError(f"{path}: no results store (run `sixblanks run` first)")
    try:
        return duckdb.connect(str(path), read_only=True)
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            raise ReportError(
                f"{path} is being written by the orchestrator; build the report when it is done"
            ) from None
        raise


@dataclass
class Data:
    name: str
    config: dict[str, Any]
    runs: pl.DataFrame
    evals: pl.DataFrame
    budgets: pl.DataFrame
    ledger_last: pl.DataFrame
    curves: pl.DataFrame
    fairness: pl.DataFrame
    baseline: str
    warm_start_score: float | None
    trials: pl.DataFrame = field(default_factory=pl.DataFrame)
    ladder: pl.DataFrame = field(default_factory=pl.DataFrame)


def load(out_dir: Path, baseline: str | None = None) -> Data:
    con = _connect(out_dir)
    try:
        exp = con.sql("SELECT name, config FROM experiments").pl()
        if exp.height == 0:
            raise ReportError(f"{out_dir}: the results store has no experiment")
        name = exp["name"][0]
        config = json.loads(exp["config"][0])
        runs = con.sql(
            "SELECT run_id, arm, preset, task, seed, status, blanks, final_score, error, steps, ended_because "
            "FROM runs"
        ).pl()
        evals = con.sql(
            "SELECT run_id, step, score, n, launched_tokens, accepted_tokens, device_seconds, "
            "verifier_calls FROM evals"
        ).pl()
        budgets = con.sql("SELECT * FROM budgets").pl()
        ledger_last = con.sql(
            "SELECT l.* FROM ledger l JOIN (SELECT run_id, max(step) s FROM ledger GROUP BY run_id) m "
            "ON l.run_id = m.run_id AND l.step = m.s"
        ).pl()
        curves = con.sql(
            "SELECT m.run_id, m.step, m.name, m.value, l.launched_tokens FROM metrics m JOIN ledger l "
            "ON m.run_id = l.run_id AND m.step = l.step WHERE m.name IN ('trainable_group_frac', 'response_length')"
        ).pl()
        fairness = con.sql("SELECT arm, item, flagged, reason, run_id FROM fairness").pl()
        trials = con.sql(
            "SELECT arm, trial, state, params, value, launched_tokens, device_seconds, pruned_at "
            "FROM trials ORDER BY arm, trial"
        ).pl()
        ladder = con.sql(
            "SELECT arm, rung, rung_name, variant, status, evidence FROM ladder ORDER BY arm, rung"
        ).pl()
    finally:
        con.close()
    arms_cfg = list(config.get("arms", {}))
    base = baseline or (arms_cfg[0] if arms_cfg else None)
    if runs.height and base is not None and base not in set(runs["arm"].to_list()):
        raise ReportError(
            f"--baseline: unknown arm '{base}' (arms: {', '.join(sorted(set(runs['arm'].to_list())))})"
        )
    warm = evals.filter(pl.col("step") == 0)["score"]
    return Data(
        name,
        config,
        runs,
        evals,
        budgets,
        ledger_last,
        curves,
        fairness,
        base,
        float(warm.mean()) if warm.len() else None,
        ladder=ladder,
        trials=trials,
    )


# ----------------------------------------------------------------------------- tables


def arm_table(
    d: Data, resamples: int = 2000, seed: int = 0
) -> tuple[list[dict[str, Any]], pl.DataFrame]:
    """Per-arm statistics at the matched budget, and the per-run scores table."""

    ev = d.evals.join(d.runs.select("run_id", "arm", "task", "seed", "status"), on="run_id")
    start = ev.filter(pl.col("step") == 0).select("run_id", pl.col("score").alias("start_score"))
    last = (
        ev.sort("step")
        .group_by("run_id")
        .last()
        .select("run_id", pl.col("score").alias("final_score"), pl.col("step").alias("final_step"))
    )
    auc_rows = []
    for (rid,), g in ev.group_by(["run_id"]):
        auc_rows.append(
            {
                "run_id": rid,
                "auc_launched": stats.curve_auc(
                    g["launched_tokens"].to_numpy(), g["score"].to_numpy()
                ),
            }
        )
    auc = pl.DataFrame(auc_rows, schema={"run_id": pl.Utf8, "auc_launched": pl.Float64})
    scores = (
        d.runs.select("run_id", "arm", "preset", "task", "seed", "status")
        .join(start, on="run_id", how="left")
        .join(last, on="run_id", how="left")
        .join(auc, on="run_id", how="left")
        .sort("arm", "task", "seed")
    )
    finished = scores.filter((pl.col("status") == "finished") & pl.col("final_score").is_not_null())
    base_scores = finished.filter(pl.col("arm") == d.baseline)["final_score"].to_numpy()
    rows = []
    arm_order = [a for a in d.config.get("arms", {}) if a in set(scores["arm"].to_list())]
    arm_order += sorted(set(scores["arm"].to_list()) - set(arm_order))
    for arm in arm_order:
        f = finished.filter(pl.col("arm") == arm)
        all_runs = scores.filter(pl.col("arm") == arm)
        row: dict[str, Any] = {
            "arm": arm,
            "preset": all_runs["preset"][0],
            "runs": all_runs.height,
            "finished": f.height,
        }
        if f.height:
            mat = (
                f.pivot(on="task", index="seed", values="final_score")
                .drop("seed")
                .drop_nulls()
                .to_numpy()
            )
            gain = (f["final_score"] - f["start_score"]).to_numpy()
            for stat in ("mean", "median", "iqm"):
                p, lo, hi = stats.stratified_bootstrap_ci(mat, stat, resamples, seed=seed)
                row[stat], row[f"{stat}_lo"], row[f"{stat}_hi"] = p, lo, hi
            g, glo, ghi = stats.stratified_bootstrap_ci(gain, "mean", resamples, seed=seed)
            row["gain"], row["gain_lo"], row["gain_hi"] = g, glo, ghi
            row["p_improve"] = (
                stats.probability_of_improvement(f["final_score"].to_numpy(), base_scores)
                if arm != d.baseline and len(base_scores)
                else None
            )
            row["auc_launched"] = float(f["auc_launched"].mean())
            row["seeds"] = f.height
        rows.append(row)
    return rows, scores


def flat_blanks(d: Data) -> tuple[list[str], dict[str, dict[str, Any]], set[str]]:
    def flatten(prefix, v, out):
        if isinstance(v, dict):
            for k, x in v.items():
                flatten(f"{prefix}.{k}" if prefix else k, x, out)
        else:
            out[prefix] = v

    cols: dict[str, dict[str, Any]] = {}
    for arm, blanks in d.runs.group_by("arm").agg(pl.col("blanks").first()).iter_rows():
        out: dict[str, Any] = {}
        flatten("", json.loads(blanks), out)
        cols[arm] = out
    keys = list(dict.fromkeys(k for c in cols.values() for k in c))
    differing = {k for k in keys if len({json.dumps(c.get(k)) for c in cols.values()}) > 1}
    return keys, cols, differing


# ----------------------------------------------------------------------------- plots


def _fig_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def plots(d: Data, rows: list[dict[str, Any]], scores: pl.DataFrame) -> dict[str, bytes]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: dict[str, bytes] = {}
    ev = d.evals.join(d.runs.select("run_id", "arm"), on="run_id").with_columns(
        (pl.col("device_seconds") / 3600).alias("device_hours")
    )
    arms = [r["arm"] for r in rows]
    colors = {a: plt.cm.tab10(i % 10) for i, a in enumerate(arms)}
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for ax, (col, label) in zip(axes.ravel(), COST_AXES):
        for arm in arms:
            sub = ev.filter(pl.col("arm") == arm)
            curves = [(g[col].to_numpy(), g["score"].to_numpy()) for _, g in sub.group_by("run_id")]
            if not curves:
                continue
            xmax = max(float(c[0].max()) for c in curves if len(c[0]))
            grid = np.linspace(0, xmax, 60)
            mean, lo, hi = stats.band(curves, grid)
            ax.plot(grid, mean, label=arm, color=colors[arm])
            if not np.all(np.isnan(lo)):
                ax.fill_between(grid, lo, hi, alpha=0.15, color=colors[arm])
        if d.warm_start_score is not None:
            ax.axhline(d.warm_start_score, color="gray", ls=":", lw=1, label="warm start")
        ax.set_xlabel(label)
        ax.set_ylabel("held-out score")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.suptitle("held-out score against cost (mean across seeds, 95% bootstrap band)")
    out["score_vs_cost.png"] = _fig_png(fig)

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
    ax.set_ylabel("tokens per run (mean over seeds)")
    ax.set_title("budget census: launched = accepted + discarded (by reason)")
    ax.legend(fontsize=8)
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    out["census.png"] = _fig_png(fig)

    cur = d.curves.join(d.runs.select("run_id", "arm"), on="run_id")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ax, name, label in (
        (axes[0], "trainable_group_frac", "trainable-group fraction"),
        (axes[1], "response_length", "response length (tokens)"),
    ):
        for arm in arms:
            sub = cur.filter((pl.col("arm") == arm) & (pl.col("name") == name))
            curves = [
                (g["launched_tokens"].to_numpy(), g["value"].to_numpy())
                for _, g in sub.group_by("run_id")
            ]
            if not curves:
                continue
            grid = np.linspace(0, max(float(c[0].max()) for c in curves), 60)
            mean, _, _ = stats.band(curves, grid, resamples=50)
            ax.plot(grid, mean, label=arm, color=colors[arm])
        ax.set_xlabel("launched tokens")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    out["training_curves.png"] = _fig_png(fig)

    fig, ax = plt.subplots(figsize=(7, 0.5 * len(arms) + 1.5))
    for i, r in enumerate(rows):
        if "mean" not in r:
            continue
        f = scores.filter((pl.col("arm") == r["arm"]) & (pl.col("status") == "finished"))
        ax.scatter(
            f["final_score"].to_numpy(), np.full(f.height, i) + 0.15, s=12, color="gray", alpha=0.7
        )
        if not math.isnan(r["mean_lo"]):
            ax.plot([r["mean_lo"], r["mean_hi"]], [i, i], color=colors[r["arm"]], lw=3)
        ax.scatter([r["mean"]], [i], color=colors[r["arm"]], zorder=3)
    if d.warm_start_score is not None:
        ax.axvline(d.warm_start_score, color="gray", ls=":", label="warm start")
        ax.legend(fontsize=8)
    ax.set_yticks(range(len(rows)), [r["arm"] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("final held-out score (mean, 95% stratified bootstrap CI; dots: seeds)")
    ax.grid(alpha=0.3, axis="x")
    out["final_scores.png"] = _fig_png(fig)
    return out


# ----------------------------------------------------------------------------- rendering


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _ci(r: dict[str, Any], key: str) -> str:
    if key not in r:
        return "no finished run"
    if math.isnan(r.get(f"{key}_lo", float("nan"))):
        return f"{_fmt(r[key])} (one seed: no interval)"
    return f"{_fmt(r[key])} [{_fmt(r[key + '_lo'])}, {_fmt(r[key + '_hi'])}]"


def build_report(
    out_dir: str | Path, baseline: str | None = None, resamples: int = 2000, with_plots: bool = True
) -> Path:
    out_dir = Path(out_dir)
    d = load(out_dir, baseline)
    rows, scores = arm_table(d, resamples)
    rep = out_dir / "report"
    rep.mkdir(parents=True, exist_ok=True)
    scores.write_csv(rep / "scores.csv")
    scores.write_parquet(rep / "scores.parquet")
    images = plots(d, rows, scores) if with_plots and rows else {}
    for name, png in images.items():
        (rep / name).write_bytes(png)
    keys, cols, differing = flat_blanks(d)
    budget = d.config.get("budget", {})
    unfinished = d.runs.filter(pl.col("status") != "finished")
    flags = d.fairness.filter(pl.col("flagged"))
    n_seeds = len(d.config.get("seeds", []))

    e = html.escape
    h: list[str] = []
    h.append(
        f"<!doctype html><html><head><meta charset='utf-8'><title>sixblanks report: {e(d.name)}</title>"
    )
    h.append(
        "<style>body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px}"
        "th{background:#f3f3f3}tr.diff td{background:#fff3c4}.flag{color:#b00}img{max-width:100%}</style>"
    )
    h.append("</head><body>")
    h.append(f"<h1>sixblanks report: {e(d.name)}</h1>")
    h.append(
        f"<p>Built {e(time.strftime('%Y-%m-%d %H:%M:%S'))}. Matched budget per run: "
        f"{e(', '.join(f'{k} ≤ {v:g}' for k, v in budget.items()))}. Seeds: {n_seeds}. "
        f"Warm-start score (the common reference): <b>{_fmt(d.warm_start_score)}</b>. "
        f"Baseline arm for P(improvement): <b>{e(str(d.baseline))}</b>. Intervals: 95% stratified bootstrap "
        f"over seeds ({resamples} resamples); with few seeds they are wide, and with one seed there is none.</p>"
    )
    if unfinished.height:
        h.append(
            f"<p class='flag'>{unfinished.height} run(s) are not finished; they are listed below and "
            "excluded from the matched-budget statistics.</p>"
        )
    h.append(
        "<h2>Arms at the matched budget</h2><table><tr><th>arm</th><th>preset</th><th>finished/runs</th>"
        "<th>mean score [95% CI]</th><th>median</th><th>IQM</th><th>gain over warm start</th>"
        f"<th>P(improve over {e(str(d.baseline))})</th><th>AUC vs launched tokens</th></tr>"
    )
    for r in rows:
        h.append(
            f"<tr><td>{e(r['arm'])}</td><td>{e(r['preset'])}</td><td>{r['finished']}/{r['runs']}</td>"
            f"<td>{e(_ci(r, 'mean'))}</td><td>{e(_ci(r, 'median'))}</td><td>{e(_ci(r, 'iqm'))}</td>"
            f"<td>{e(_ci(r, 'gain'))}</td><td>{_fmt(r.get('p_improve'))}</td><td>{_fmt(r.get('auc_launched'))}</td></tr>"
        )
    h.append("</table>")
    for name, title in (
        ("final_scores.png", "Final scores"),
        ("score_vs_cost.png", "Score against cost"),
        ("census.png", "Budget census"),
        ("training_curves.png", "Training"),
    ):
        if name in images:
            b64 = base64.b64encode(images[name]).decode()
            h.append(f"<h2>{e(title)}</h2><img alt='{e(title)}' src='data:image/png;base64,{b64}'>")
    h.append(
        "<h2>The six blanks (rows that differ are highlighted)</h2><table><tr><th>field</th>"
        + "".join(f"<th>{e(a)}</th>" for a in cols)
        + "</tr>"
    )
    for k in keys:
        cls = " class='diff'" if k in differing else ""
        h.append(
            f"<tr{cls}><td>{e(k)}</td>"
            + "".join(f"<td>{e(json.dumps(c.get(k)))}</td>" for c in cols.values())
            + "</tr>"
        )
    h.append("</table>")
    h.append("<h2>Fairness audit</h2>")
    if flags.height:
        h.append("<table><tr><th>arm</th><th>item</th><th>reason</th><th>run</th></tr>")
        for arm, item, _, reason, rid in flags.iter_rows():
            h.append(
                f"<tr><td>{e(arm)}</td><td>{e(item)}</td><td class='flag'>{e(str(reason))}</td>"
                f"<td>{e(str(rid or ''))}</td></tr>"
            )
        h.append("</table>")
    else:
        h.append(
            "<p>No arm differs on a held-constant item; every run consumed at least 90% of the matched budget.</p>"
        )
    h.append(
        "<h2>Planned vs consumed budget per run</h2><table><tr><th>run</th><th>arm</th><th>task</th><th>seed</th>"
        "<th>status</th><th>counter</th><th>planned</th><th>consumed</th></tr>"
    )
    b = d.budgets.join(d.runs.select("run_id", "arm", "task", "seed", "status"), on="run_id").sort(
        "arm", "seed"
    )
    for rid, counter, limit, consumed, arm, task, seed, status in b.select(
        "run_id", "counter", "limit_value", "consumed", "arm", "task", "seed", "status"
    ).iter_rows():
        h.append(
            f"<tr><td>{e(rid)}</td><td>{e(arm)}</td><td>{e(task)}</td><td>{seed}</td><td>{e(status)}</td>"
            f"<td>{e(counter)}</td><td>{limit:g}</td><td>{consumed:g} ({100 * consumed / limit:.0f}%)</td></tr>"
        )
    h.append("</table><h2>Failed and unfinished runs</h2>")
    if unfinished.height:
        h.append(
            "<table><tr><th>run</th><th>arm</th><th>seed</th><th>status</th><th>error</th></tr>"
        )
        for rid, arm, seed, status, error in unfinished.select(
            "run_id", "arm", "seed", "status", "error"
        ).iter_rows():
            h.append(
                f"<tr><td>{e(rid)}</td><td>{e(arm)}</td><td>{seed}</td><td>{e(status)}</td>"
                f"<td>{e(str(error or ''))}</td></tr>"
            )
        h.append("</table>")
    else:
        h.append("<p>None: every run finished.</p>")
    if d.evals.height == 0:
        h.append("<p class='flag'>No evaluations were recorded yet.</p>")
    if d.trials.height:
        h.append(
            "<h2>Hyperparameter search: effort per arm</h2><p>Arms named <code>ARM.tuned</code> above run the "
            "best trial's configuration, <code>ARM</code> the defaults, both on fresh seeds under the matched "
            "budget.</p><table><tr><th>arm</th><th>trials</th><th>complete</th><th>pruned</th><th>failed</th>"
            "<th>launched tokens</th><th>device-hours</th><th>best value</th></tr>"
        )
        eff = d.trials.group_by("arm", maintain_order=True).agg(
            pl.len().alias("n"),
            (pl.col("state") == "COMPLETE").sum().alias("c"),
            (pl.col("state") == "PRUNED").sum().alias("p"),
            (pl.col("state") == "FAIL").sum().alias("f"),
            pl.col("launched_tokens").sum().alias("tok"),
            (pl.col("device_seconds").sum() / 3600).alias("dh"),
            pl.col("value").max().alias("best"),
        )
        for arm, n, c, p_, f, tok, dh, best in eff.iter_rows():
            h.append(
                f"<tr><td>{e(arm)}</td><td>{n}</td><td>{c}</td><td>{p_}</td><td>{f}</td><td>{_fmt(tok, 0)}</td>"
                f"<td>{_fmt(dh, 4)}</td><td>{_fmt(best)}</td></tr>"
            )
        h.append("</table>")
    if d.ladder.height:
        h.append(
            "<h2>Ablation ladder</h2><table><tr><th>arm</th><th>rung</th><th>variant</th><th>status</th>"
            "<th>evidence</th></tr>"
        )
        for arm, rung, rname, variant, status, evidence in d.ladder.iter_rows():
            cls = " class='flag'" if status == "fail" else ""
            h.append(
                f"<tr><td>{e(arm)}</td><td>{rung} {e(rname)}</td><td>{e(variant)}</td><td{cls}>{e(status)}</td>"
                f"<td>{e(evidence)}</td></tr>"
            )
        h.append("</table>")
    h.append("</body></html>")
    (rep / "index.html").write_text("\n".join(h), encoding="utf-8")

    md = [
        f"# sixblanks report: {d.name}",
        "",
        f"Matched budget: {', '.join(f'{k} <= {v:g}' for k, v in budget.items())}; seeds: {n_seeds}; "
        f"warm-start score: {_fmt(d.warm_start_score)}; baseline: {d.baseline}.",
        "",
        "| arm | preset | finished/runs | mean [95% CI] | IQM | gain over warm start | P(improve) | AUC |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        md.append(
            f"| {r['arm']} | {r['preset']} | {r['finished']}/{r['runs']} | {_ci(r, 'mean')} | {_ci(r, 'iqm')} | "
            f"{_ci(r, 'gain')} | {_fmt(r.get('p_improve'))} | {_fmt(r.get('auc_launched'))} |"
        )
    md += ["", *[f"![{n}]({n})" for n in images], "", "## Fairness flags", ""]
    md += [f"- {arm}: {item}: {reason}" for arm, item, _, reason, _ in flags.iter_rows()] or [
        "- none"
    ]
    md += ["", "## Failed and unfinished runs", ""]
    md += [
        f"- {rid} ({arm}, seed {seed}): {status} {error or ''}"
        for rid, arm, seed, status, error in unfinished.select(
            "run_id", "arm", "seed", "status", "error"
        ).iter_rows()
    ] or ["- none"]
    if d.ladder.height:
        md += [
            "",
            "## Ablation ladder",
            "",
            "| arm | rung | variant | status | evidence |",
            "|---|---|---|---|---|",
        ]
        md += [
            f"| {a} | {r} {n} | {v} | {s} | {ev} |" for a, r, n, v, s, ev in d.ladder.iter_rows()
        ]
    (rep / "report.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    (rep / "arms.json").write_text(json.dumps(rows, indent=2, default=str))
    return rep / "index.html"
