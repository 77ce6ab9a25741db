"""The comparison report, built from ``results.duckdb`` only (reports import nothing from harness).

DIR/report/index.html   self-contained (images embedded as base64, no network)
DIR/report/report.md    the same blocks in Markdown, plots as PNG files beside it
DIR/report/scores.csv, scores.parquet   per-run scores
DIR/report/arms.json, tasks.json        the per-arm (and per arm x task) statistics

Scores come from one held-out split (``test``; a store written before the split existed holds
``heldout``) and every number names it. An experiment with several tasks is summarised as rliable
does: scores normalized per task where tasks differ in scale, IQM over runs x tasks, bootstrap
intervals that resample seeds within each task, P(improvement) within each task and then averaged.
A mean's interval is a Student t interval over the seeds (``stats.stratified_t_interval``), and
the report opens with the summary (``summary.py``): per arm its mean and interval, and a sentence
per pair of arms.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from . import (
    credit,
    curve_fits,
    diagnostics,
    lag,
    mismatch,
    pairs,
    render,
    selfplay,
    stats,
    summary,
    worldmodel,
)
from .audit_tables import blanks_blocks, fairness_blocks
from .cost_tables import budget_blocks, census_blocks, eval_cost_blocks, search_blocks
from .data import (
    CENSUS,
    DB_NAME,
    EVALS,
    FAIRNESS,
    INERT,
    LADDER,
    RUNS,
    SPLIT_PREFERENCE,
    TRIALS,
    Data,
    ReportError,
    connect,
    order,
    read_table,
)
from .tables import (
    MIN_BOOTSTRAP_RUNS,
    MIN_P_SEEDS,
    arm_table,
    fmt,
    scores_blocks,
)


def load(out_dir: Path, baseline: str | None = None) -> Data:
    """The report's data from ``out_dir``'s store; ReportError for an unknown ``baseline`` arm."""

    stored = _read_store(out_dir)
    config, runs = stored["config"], stored["runs"]
    arms_cfg = list(config.get("arms", {}))
    arms = order(arms_cfg, runs["arm"].unique().to_list())
    base = baseline or (arms_cfg[0] if arms_cfg else None)
    if runs.height and base is not None and base not in arms:
        raise ReportError(f"--baseline: unknown arm '{base}' (arms: {', '.join(sorted(arms))})")
    task_cfg = [t.get("name") for t in config.get("tasks") or [config.get("task") or {}]]
    tasks = order([t for t in task_cfg if t], runs["task"].drop_nulls().unique().to_list())
    evals = _with_positions(stored.pop("evals"))
    split = _score_split(evals["split"].unique().to_list())
    scored = evals.filter(pl.col("split") == (split or "")).join(
        runs.select("run_id", "arm", "task", "seed", "status"), on="run_id"
    )
    scored, ranges = _normalized(scored, tasks)
    start = scored.filter(pl.col("step") == 0)
    warm_by_task = {
        t: float(m) for t, m in start.group_by("task").agg(pl.col("score").mean()).iter_rows()
    }
    return Data(
        **stored,
        evals=evals,
        baseline=base,
        warm_start_score=float(start["nscore"].mean()) if start.height else None,
        split=split,
        tasks=tasks,
        arms=arms,
        ranges=ranges,
        scored=scored,
        warm_by_task=warm_by_task,
    )


def _read_store(out_dir: Path) -> dict[str, Any]:
    """{Data field: value} of every table the report reads, as the store holds it."""

    # ReportError: no store, or one without an experiment
    con = connect(out_dir)
    try:
        exp = con.sql("SELECT name, config FROM experiments").pl()
        if exp.height == 0:
            raise ReportError(f"{out_dir}: the results store has no experiment")
        name = exp["name"][0]
        config = json.loads(exp["config"][0])
        runs = read_table(con, "runs", RUNS).with_columns(pl.col("task").fill_null("(no task)"))
        evals = read_table(con, "evals", EVALS)
        budgets = con.sql("SELECT * FROM budgets").pl()
        ledger_last = con.sql(
            "SELECT l.* FROM ledger l JOIN (SELECT run_id, max(step) s FROM ledger GROUP BY "
            "run_id) m ON l.run_id = m.run_id AND l.step = m.s"
        ).pl()
        curves = con.sql(
            "SELECT m.run_id, m.step, m.name, m.value, l.launched_tokens FROM metrics m JOIN "
            "ledger l ON m.run_id = l.run_id AND m.step = l.step WHERE m.name IN "
            "('trainable_group_frac', 'response_length')"
        ).pl()
        census = read_table(con, "census", CENSUS)
        if census.height:  # x-axis: the ledger's cumulative launched tokens after that step
            pos = con.sql("SELECT run_id, step, launched_tokens FROM ledger").pl()
            census = census.join(pos, on=["run_id", "step"], how="left")
        return {
            "name": name,
            "config": config,
            "runs": runs,
            "evals": evals,
            "budgets": budgets,
            "ledger_last": ledger_last,
            "curves": curves,
            "census": census,
            "fairness": read_table(con, "fairness", FAIRNESS, "ORDER BY rowid"),
            "inert": read_table(con, "inert", INERT, "ORDER BY rowid"),
            "trials": read_table(con, "trials", TRIALS, "ORDER BY arm, trial"),
            "ladder": read_table(
                con, "ladder", LADDER, "ORDER BY arm, rung, variant = 'verdict', rowid"
            ),
            "diagnostics": diagnostics.query(con),
            "lag": lag.query(con),
            "credit": credit.query(con),
            "selfplay": selfplay.query(con),
            "worldmodel": worldmodel.query(con),
            "mismatch": mismatch.query(con),
        }
    finally:
        con.close()


def _with_positions(evals: pl.DataFrame) -> pl.DataFrame:
    """``evals`` with the split and the env-steps and wall-clock positions of older stores."""

    # a store written before splits: heldout; an evaluation's position on the env-steps and
    # wall-clock axes: its own columns, else the counters recorded with it (a store written before
    # those columns existed)
    return evals.with_columns(
        pl.col("split").fill_null("heldout"),
        *[
            pl.col(c).fill_null(pl.col("position").str.json_path_match(f"$.{c}").cast(pl.Float64))
            for c in ("env_steps", "wall_seconds")
        ],
    )


def _score_split(splits: list[str]) -> str | None:
    """The split scores come from (SPLIT_PREFERENCE, else not validation); None without any."""

    # validation (what sweeps select on) only where nothing else was evaluated
    return next((s for s in SPLIT_PREFERENCE if s in splits), None) or next(
        (s for s in sorted(splits) if s != "validation"), "validation" if splits else None
    )


def _normalized(
    scored: pl.DataFrame, tasks: list[str]
) -> tuple[pl.DataFrame, dict[str, tuple[float, float]] | None]:
    """(``scored`` with ``nscore``, per-task ranges or None): min-max per task if scales differ."""

    # rliable: scores normalized per task where tasks differ in scale (built-in rewards are in
    # [0, 1])
    ranges = None
    if len(tasks) > 1:
        ranges = stats.task_ranges(
            {t: scored.filter(pl.col("task") == t)["score"].to_numpy() for t in tasks}
        )
    if ranges:
        lo = pl.col("task").replace_strict({t: r[0] for t, r in ranges.items()}, default=0.0)
        hi = pl.col("task").replace_strict({t: r[1] for t, r in ranges.items()}, default=1.0)
        span = hi - lo
        nscore = pl.when(span > 0).then((pl.col("score") - lo) / span).otherwise(0.0)
    else:
        nscore = pl.col("score")
    return scored.with_columns(nscore.alias("nscore")), ranges


# ----------------------------------------------------------------------------- the report


def heldout_size(d: Data) -> str:
    """ ", over N distinct problems" (per task where several: ", over distinct problems
    (arithmetic: 25, running_sum: 128)"): the effective number of instances each evaluation held,
    as its records say (a range where evaluations held different numbers); "" where none says."""

    if d.scored.height == 0 or "n" not in d.scored.columns:
        return ""
    per = (
        d.scored.drop_nulls("n")
        .group_by("task")
        .agg(pl.col("n").min().alias("lo"), pl.col("n").max().alias("hi"))
        .sort("task")
    )
    if per.height == 0:
        return ""
    sizes = [(t, f"{lo}" if lo == hi else f"{lo}-{hi}") for t, lo, hi in per.iter_rows()]
    if len(sizes) == 1:
        return f", over {sizes[0][1]} distinct problems"
    return ", over distinct problems (" + ", ".join(f"{t}: {n}" for t, n in sizes) + ")"


def intro_blocks(d: Data, resamples: int) -> list[render.Block]:
    budget = d.config.get("budget", {})
    n_seeds = len(d.config.get("seeds", []))
    scale = (
        "Tasks differ in scale (a score outside [0, 1]), so each task's scores are min-max "
        "normalized over all runs of that task ("
        + ", ".join(f"{t}: [{lo:g}, {hi:g}]" for t, (lo, hi) in d.ranges.items())
        + "); aggregates, the warm-start score and aggregate curves are in those units, "
        "per-task rows raw."
        if d.ranges
        else "Every task's scores lie in [0, 1]: raw scores, not normalized."
        if len(d.tasks) > 1
        else "One task: raw scores, not normalized."
    )
    blocks: list[render.Block] = [
        render.Para(
            f"Built {time.strftime('%Y-%m-%d %H:%M:%S')}. Matched budget per run: "
            f"{', '.join(f'{k} ≤ {v:g}' for k, v in budget.items())}. Seeds: {n_seeds}. "
            f"Tasks: {', '.join(d.tasks) or '—'}. "
            + (
                f"Scores: the {d.score_label}{heldout_size(d)} (held-out instances never used "
                "for selection). "
                if d.split
                else "No evaluation recorded yet. "
            )
            + f"The warm-start score ({d.score_label}, the common reference): "
            f"{fmt(d.warm_start_score)}. "
            f"Baseline arm for P(improvement): {d.baseline}."
        ),
        render.Para(
            "Intervals (95%): a mean's (the final score's, the gain's) is a Student t interval "
            "over the seeds (n − 1 degrees of freedom; with several tasks each task's seeds, "
            "combined with Welch–Satterthwaite's degrees of freedom). It covers at any number of "
            "seeds from two, and so it is wide with few: at 2 seeds the t quantile is 12.7. One "
            "seed gives none. Median and IQM have a stratified percentile bootstrap interval "
            f"({resamples} resamples; seeds resampled within each task) only from "
            f"{MIN_BOOTSTRAP_RUNS} finished runs: over fewer it is too narrow (at 2 seeds it spans "
            "just the two values). P(improvement) is shown with the seeds behind it, and not below "
            f"{MIN_P_SEEDS} seeds per arm (with 2 against 2, a complete ordering happens by chance "
            "one time in six). Aggregates over tasks follow rliable: IQM over runs x tasks, "
            "P(improvement) computed within each task and then averaged over tasks. " + scale,
            "caption",
        ),
    ]
    unfinished = d.runs.filter(pl.col("status") != "finished")
    if unfinished.height:
        blocks.append(
            render.Para(
                f"{unfinished.height} run(s) are not finished; they are listed below and "
                "excluded from the matched-budget statistics.",
                "flag",
            )
        )
    return blocks


def tail_blocks(d: Data) -> list[render.Block]:
    unfinished = d.runs.filter(pl.col("status") != "finished")
    blocks: list[render.Block] = [render.Heading("Failed and unfinished runs")]
    if unfinished.height:
        blocks.append(
            render.Table(
                ["run", "arm", "task", "seed", "status", "error"],
                [
                    [rid, arm, str(task), str(seed), status, str(error or "")]
                    for rid, arm, task, seed, status, error in unfinished.select(
                        "run_id", "arm", "task", "seed", "status", "error"
                    ).iter_rows()
                ],
            )
        )
    else:
        blocks.append(render.Para("None: every run finished."))
    if d.evals.height == 0:
        blocks.append(render.Para("No evaluations were recorded yet.", "flag"))
    if d.ladder.height:
        blocks += [
            render.Heading("Ablation ladder"),
            render.Table(
                ["arm", "rung", "variant", "status", "evidence"],
                [
                    [
                        arm,
                        f"{rung} {rname}",
                        str(variant),
                        render.Cell(str(status), "flag" if status == "fail" else ""),
                        str(evidence),
                    ]
                    for arm, rung, rname, variant, status, evidence in d.ladder.iter_rows()
                ],
                # each rung's one verdict line closes its rows, in bold
                ["verdict" if v == "verdict" else "" for v in d.ladder["variant"].to_list()],
            ),
        ]
    return blocks


_LAST_BUILT: dict[tuple, summary.Summary] = {}
"""The summary of the report this process built last, under its store's stamp (``_stamp``): what
``summary_of`` gives again without reading the store (``sixblanks run`` prints it after the
report; 0.15-0.2 s)."""


def _stamp(out_dir: Path, baseline: str | None) -> tuple | None:
    """The store of ``out_dir`` as it is now (each file's size and modification time) and
    ``baseline``: equal stamps, equal data. None where there is no store."""

    if not (out_dir / DB_NAME).exists():
        return None
    files = (out_dir / DB_NAME, out_dir / f"{DB_NAME}.wal")
    stats = [(f.stat().st_mtime_ns, f.stat().st_size) if f.exists() else None for f in files]
    return (str(out_dir.resolve()), baseline, *stats)


def summary_of(out_dir: str | Path, baseline: str | None = None) -> summary.Summary:
    """The summary (per arm its mean final score and t interval, a sentence per pair) of the
    experiment in ``out_dir``, from its results store; ReportError where there is none. The
    summary of a report just built from the same store is not computed again."""

    out_dir = Path(out_dir)
    known = _LAST_BUILT.get(_stamp(out_dir, baseline))
    return known if known is not None else summary.summarize(load(out_dir, baseline))


def build_report(
    out_dir: str | Path, baseline: str | None = None, resamples: int = 2000, with_plots: bool = True
) -> Path:
    from . import plots

    out_dir = Path(out_dir)
    stamp = _stamp(out_dir, baseline)
    d = load(out_dir, baseline)
    rows, task_rows, scores = arm_table(d, resamples)
    compared = pairs.pair_rows(d)
    rep = out_dir / "report"
    rep.mkdir(parents=True, exist_ok=True)
    scores.write_csv(rep / "scores.csv")
    scores.write_parquet(rep / "scores.parquet")
    images = plots.plots(d, rows, scores) if with_plots and rows else {}
    lag_png = lag.lag_figure(d, rows) if with_plots and rows else None
    if lag_png:
        images["lag.png"] = lag_png
    for name, (_, png) in images.items():
        (rep / name).write_bytes(png)

    def image(name: str) -> list[render.Block]:
        if name not in images:
            return []
        title, png = images[name]
        return [render.Heading(title), render.Image(name, title, png)]

    blocks = intro_blocks(d, resamples)
    said = summary.summarize(d, scores, compared)
    _LAST_BUILT.clear()
    if stamp is not None:
        _LAST_BUILT[stamp] = said
    blocks += summary.summary_blocks(said)
    blocks += scores_blocks(d, rows, task_rows)
    blocks += pairs.paired_blocks(d, compared)
    for name in ("final_scores.png", "score_vs_cost.png", "task_curves.png"):
        blocks += image(name)
    blocks += curve_fits.curve_blocks(d, resamples=max(20, min(200, resamples // 10)))
    blocks += census_blocks(d)
    for name in ("sampling_census.png", "census.png", "training_curves.png", "lag.png"):
        blocks += image(name)
    blocks += lag.async_blocks(d)
    blocks += eval_cost_blocks(d)
    blocks += diagnostics.diagnostics_blocks(d)
    blocks += _written(rep, credit.credit_blocks(d, with_plots))
    blocks += blanks_blocks(d)
    blocks += fairness_blocks(d)
    blocks += budget_blocks(d)
    blocks += tail_blocks(d)
    blocks += search_blocks(d)
    blocks += selfplay.selfplay_blocks(d)
    blocks += worldmodel.worldmodel_blocks(d)
    blocks += _written(rep, mismatch.mismatch_blocks(d, with_plots))
    title = f"sixblanks report: {d.name}"
    (rep / "index.html").write_text(render.to_html(title, blocks), encoding="utf-8")
    (rep / "report.md").write_text(render.to_markdown(title, blocks), encoding="utf-8")
    (rep / "arms.json").write_text(json.dumps(rows, indent=2, default=_json_default))
    (rep / "tasks.json").write_text(json.dumps(task_rows, indent=2, default=_json_default))
    return rep / "index.html"


def _written(rep: Path, blocks: list[render.Block]) -> list[render.Block]:
    """``blocks``, their images written into the report directory ``rep``."""

    for b in blocks:
        if isinstance(b, render.Image):
            (rep / b.name).write_bytes(b.png)
    return blocks


def _json_default(x: Any) -> Any:
    return float(x) if isinstance(x, np.floating) else str(x)
