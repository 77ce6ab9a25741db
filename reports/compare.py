"""``sixblanks report DIR1 DIR2 ...``: experiments side by side (the same arms on two backends, two
models or two code versions), from each directory's ``results.duckdb`` only.

OUT/index.html, OUT/compare.md   the same blocks (render.py); OUT/compare.json the numbers

Per arm x task and directory: final score (raw, the directory's score split) with its 95% Student t
interval over seeds, finished/runs and launched tokens per run. Where an arm x task is in two
directories, the difference of mean final scores with Welch's t interval over each directory's
seeds: different runs, not paired. Then every audit item whose value differs between the
directories (experiment facts, fairness-audit items, blanks, per-run flags), the agreeing ones
counted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from . import curves, render, stats
from .audit_tables import compact, flat_blanks
from .build import load
from .data import DB_NAME, Data, ReportError
from .tables import ci, fmt, run_scores

SKIP_CONFIG = ("name", "arms", "tracking")
"""Config sections that are not experiment facts: the name, the arms (compared by their blanks and
audit items) and where results are tracked."""
NOT_RUN, NOT_AUDITED = "(arm not run)", "(not recorded)"
STYLES = ("-", "--", "-.", ":")
ArmTaskStats = dict[tuple[str, str], dict[str, Any]]
"""One directory's statistics per (arm, task) (``arm_task_stats``)."""


def labels(dirs: list[Path]) -> list[str]:
    """Each directory's name; where names repeat, parent/name; the same directory twice: name#k."""

    names = [d.resolve().name for d in dirs]
    out = [
        f"{d.resolve().parent.name}/{n}" if names.count(n) > 1 else n for d, n in zip(dirs, names)
    ]
    return [f"{names[i]}#{i + 1}" if out.count(x) > 1 else x for i, x in enumerate(out)]


def diff_ci(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """mean(b) - mean(a) and its 95% Welch t interval over the two experiments' seeds (different
    runs: unpaired; a percentile bootstrap over 2 or 3 seeds a side is too narrow). Fewer than 2
    seeds on a side: no interval."""

    return stats.welch_t_interval(a, b)


def arm_task_stats(d: Data) -> ArmTaskStats:
    """{(arm, task): runs, finished, final scores, mean [CI], launched tokens per finished run}."""

    scores = run_scores(d)
    tokens = dict(d.ledger_last.select("run_id", "launched_tokens").iter_rows())
    out = {}
    for (arm, task), g in scores.group_by(["arm", "task"], maintain_order=True):
        f = g.filter((pl.col("status") == "finished") & pl.col("final_score").is_not_null())
        finals = f["final_score"].to_numpy()
        spent = [tokens[r] for r in f["run_id"] if tokens.get(r) is not None]
        row: dict[str, Any] = {"runs": g.height, "finished": f.height, "scores": finals.tolist()}
        if f.height:  # the one-directory report's interval: Student t over the seeds
            row["mean"], row["mean_lo"], row["mean_hi"], _ = stats.stratified_t_interval([finals])
            row["mean_why"] = "one seed: no interval"
        row["launched_tokens"] = float(np.mean(spent)) if spent else None
        out[(str(arm), str(task))] = row
    return out


def _leaves(prefix: str, v: Any, out: dict[str, Any]) -> dict[str, Any]:
    if isinstance(v, dict) and v:
        for k, x in v.items():
            _leaves(f"{prefix}.{k}" if prefix else str(k), x, out)
    else:
        out[prefix] = v
    return out


def _parse(s: str | None) -> Any:
    try:
        return None if s is None else json.loads(s)
    except ValueError:
        return s


def audit_facts(path: Path, d: Data) -> dict[tuple[str, str, str], Any]:
    """{(kind, arm, item): value}: experiment facts (arm ""), fairness items and blanks per arm
    (nested values as dotted leaves), and each arm's count of flagged runs per flag item."""

    import duckdb

    facts: dict[tuple[str, str, str], Any] = {("experiment", "", "score split"): d.split}
    con = duckdb.connect(str(path / DB_NAME), read_only=True)
    try:
        have = {r[0] for r in con.sql("DESCRIBE experiments").fetchall()}
        cols = [c for c in ("initial_policy_hash", "code_version", "warm_start_key") if c in have]
        if cols:
            row = con.execute(f"SELECT {', '.join(cols)} FROM experiments LIMIT 1").fetchall()[0]
            facts |= {("experiment", "", c): v for c, v in zip(cols, row)}
    finally:
        con.close()
    conf = _leaves("", {k: v for k, v in d.config.items() if k not in SKIP_CONFIG}, {})
    facts |= {("experiment", "", f"config.{k}"): v for k, v in conf.items()}
    f = d.fairness
    for arm, item, value in (
        f.filter(pl.col("run_id").is_null()).select("arm", "item", "value").iter_rows()
    ):
        for k, v in _leaves(item, _parse(value), {}).items():
            facts[("fairness", arm, k)] = v
    per_run = f.filter(pl.col("run_id").is_not_null() & pl.col("flagged"))
    for arm, item, n in (
        per_run.group_by("arm", "item").agg(pl.col("run_id").n_unique()).iter_rows()
    ):
        facts[("flags", arm, f"flagged runs: {item}")] = n
    _, cols_by_arm, _ = flat_blanks(d)
    for arm, fields in cols_by_arm.items():
        facts |= {("blanks", arm, f"blanks.{k}"): v for k, v in fields.items()}
    return facts


def audit_differences(
    facts: list[dict[tuple[str, str, str], Any]], arms: list[set[str]]
) -> tuple[list[tuple[str, str, list[str]]], dict[str, int]]:
    """([(item, arm, each directory's value)] where they differ, {kind: items that agree}).

    A per-arm item is compared among the directories that ran the arm; a missing per-run flag
    count is 0; an item one directory lacks reads as not recorded there."""

    keys = list(dict.fromkeys(k for f in facts for k in f))
    kinds = ("experiment", "fairness", "blanks", "flags")
    keys.sort(key=lambda k: kinds.index(k[0]))
    diffs, agree = [], dict.fromkeys(kinds, 0)
    for kind, arm, item in keys:
        where = [i for i, a in enumerate(arms) if not arm or arm in a]
        if len(where) < 2:
            continue
        missing = 0 if kind == "flags" else NOT_AUDITED
        values = [f.get((kind, arm, item), missing) for f in facts]
        seen = {json.dumps(values[i], sort_keys=True, default=str) for i in where}
        if len(seen) == 1:
            agree[kind] += 1
            continue
        shown = [
            (v if v == NOT_AUDITED else compact(v)) if i in where else NOT_RUN
            for i, v in enumerate(values)
        ]
        diffs.append((item, arm or "(experiment)", shown))
    return diffs, agree


def score_figure(datas: list[Data], names: list[str], arms: list[str]) -> bytes | None:
    """Score (raw, finished runs) vs launched tokens: one panel per task, a colour per arm, a line
    style per directory; the mean over runs where at least one run is present."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(t for d in datas for t in d.tasks))
    if not tasks or not any(d.scored.height for d in datas):
        return None
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for k, (d, name) in enumerate(zip(datas, names)):
            ev = d.scored.filter((pl.col("status") == "finished") & (pl.col("task") == task))
            for j, arm in enumerate(arms):
                g = ev.filter(pl.col("arm") == arm).sort("step")
                runs = [
                    (r["launched_tokens"].to_numpy(), r["score"].to_numpy())
                    for _, r in g.filter(pl.col("launched_tokens").is_not_null()).group_by(
                        "run_id", maintain_order=True
                    )
                ]
                c = curves.curve(runs, resamples=0)
                if c is None:
                    continue
                y = np.where(c.covering > 0, c.mean, np.nan)
                ax.plot(
                    c.grid,
                    y,
                    color=plt.cm.tab10(j % 10),
                    ls=STYLES[k % len(STYLES)],
                    label=f"{arm} · {name} ({c.n} runs)",
                )
        ax.set(title=task, xlabel="launched tokens", ylabel="score")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    return curves.fig_png(fig)


def _cells(r: dict[str, Any] | None) -> list[render.Cell | str]:
    if r is None:
        return [render.Cell("missing", "flag", mark="✗"), "—", "—"]
    return [ci(r, "mean"), f"{r['finished']}/{r['runs']}", fmt(r["launched_tokens"], 0)]


def differences(keys, table, names) -> list[dict[str, Any]]:
    """Per arm x task: each later directory with finished runs minus the first such directory."""

    out = []
    for key in keys:
        have = [i for i, t in enumerate(table) if t.get(key, {}).get("finished")]
        for i in have[1:]:
            a, b = table[have[0]][key]["scores"], table[i][key]["scores"]
            p, lo, hi = diff_ci(np.array(a), np.array(b))
            out.append(
                {"arm": key[0], "task": key[1], "first": names[have[0]], "second": names[i]}
                | {"diff": p, "diff_lo": lo, "diff_hi": hi, "n_first": len(a), "n_second": len(b)}
            )
    return out


def build_comparison(
    dirs: list[str | Path], out: str | Path | None = None, resamples: int = 2000, with_plots=True
) -> Path:
    """Compare the experiments in ``dirs`` into ``out`` (default DIR1/compare); returns index.html.

    ``resamples`` is kept for the command line's ``--resamples``: a comparison's intervals are t
    intervals now and draw no resamples."""

    dirs = [Path(p) for p in dirs]
    if len(dirs) < 2:
        raise ReportError("a comparison needs two or more experiment directories")
    names = labels(dirs)
    datas = [load(p) for p in dirs]  # a directory without results.duckdb: ReportError naming it
    table = [arm_task_stats(d) for d in datas]
    keys = shared_keys(dirs, datas, table)
    diffs = differences(keys, table, names)
    audit, agree = audit_differences(
        [audit_facts(p, d) for p, d in zip(dirs, datas)], [{a for a, _ in t} for t in table]
    )
    blocks: list[render.Block] = [
        render.Para(
            "Experiments: "
            + "; ".join(f"{n} = {p} (experiment '{d.name}')" for n, p, d in zip(names, dirs, datas))
            + ". Scores are raw final scores (never normalized across experiments); intervals are "
            "95% Student t intervals over seeds (Welch's for a difference between experiments)."
        ),
        render.Heading("Arms side by side"),
        side_by_side_table(names, datas, table, keys),
        *difference_blocks(diffs),
        *audit_blocks(audit, agree, names),
    ]
    out = Path(out) if out is not None else dirs[0] / "compare"
    out.mkdir(parents=True, exist_ok=True)
    if with_plots:
        blocks += figure_blocks(out, datas, names, keys)
    title = f"sixblanks comparison: {' vs '.join(names)}"
    (out / "index.html").write_text(render.to_html(title, blocks), encoding="utf-8")
    (out / "compare.md").write_text(render.to_markdown(title, blocks), encoding="utf-8")
    summary = comparison_summary(names, dirs, table, keys, diffs, audit, agree)
    (out / "compare.json").write_text(json.dumps(summary, indent=2, default=str))
    return out / "index.html"


def shared_keys(
    dirs: list[Path], datas: list[Data], table: list[ArmTaskStats]
) -> list[tuple[str, str]]:
    """Every (arm, task) in each directory's arm order; ReportError where none is shared."""

    keys = list(
        dict.fromkeys(k for d, t in zip(datas, table) for a in d.arms for k in t if k[0] == a)
    )
    if not any(sum(k in t for t in table) >= 2 for k in keys):
        raise ReportError(
            "the directories share no arm and task: "
            + "; ".join(
                f"{p}: arms {', '.join(d.arms) or 'none'} on {', '.join(d.tasks) or 'no task'}"
                for p, d in zip(dirs, datas)
            )
        )
    return keys


def side_by_side_table(
    names: list[str],
    datas: list[Data],
    table: list[ArmTaskStats],
    keys: list[tuple[str, str]],
) -> render.Table:
    """Per arm x task, each directory's final score [CI], finished/runs and launched tokens."""

    header = ["arm", "task"]
    for name, d in zip(names, datas):
        header += [
            f"{name}: final score, mean [95% CI] ({d.score_label})",
            f"{name}: finished/runs (seeds)",
            f"{name}: launched tokens per run",
        ]
    side = [
        [arm, task, *(x for t in table for x in _cells(t.get((arm, task))))] for arm, task in keys
    ]
    return render.Table(header, side)


def difference_blocks(diffs: list[dict[str, Any]]) -> list[render.Block]:
    """The section of the differences of mean final scores between directories (unpaired)."""

    return [
        render.Heading("Differences between experiments"),
        render.Para(
            "Second minus first mean final score. The experiments are different runs, not paired: "
            "Welch's t interval over each experiment's seeds; with one seed on a side there is "
            "none.",
            "caption",
        ),
        render.Table(
            ["arm", "task", "comparison", "difference of means [95% CI]", "seeds (first, second)"],
            [
                [
                    x["arm"],
                    x["task"],
                    f"{x['second']} − {x['first']}",
                    ci(x, "diff"),
                    f"{x['n_first']}, {x['n_second']}",
                ]
                for x in diffs
            ],
        ),
    ]


def audit_blocks(
    audit: list[tuple[str, str, list[str]]], agree: dict[str, int], names: list[str]
) -> list[render.Block]:
    """The audit section: the items that differ (a table, if any) and the count that agree."""

    blocks: list[render.Block] = [
        render.Heading("Audit differences"),
        render.Para(
            f"{len(audit)} audit item(s) differ between the directories"
            + (" (listed below)" if audit else "")
            + f"; {sum(agree.values())} audit items agree ("
            + ", ".join(f"{k}: {v}" for k, v in agree.items())
            + "). Per-arm items are compared where the arm ran."
        ),
    ]
    if audit:
        rows = [[item, arm, *vals] for item, arm, vals in audit]
        blocks.append(render.Table(["item", "arm", *names], rows, ["diff"] * len(audit)))
    return blocks


def figure_blocks(
    out: Path, datas: list[Data], names: list[str], keys: list[tuple[str, str]]
) -> list[render.Block]:
    """The score figure's heading and image, written into ``out`` (none without evaluations)."""

    png = score_figure(datas, names, list(dict.fromkeys(a for a, _ in keys)))
    if not png:
        return []
    title = "Score vs launched tokens (colour: arm; line style: experiment)"
    (out / "score_vs_launched.png").write_bytes(png)
    return [render.Heading(title), render.Image("score_vs_launched.png", title, png)]


def comparison_summary(
    names: list[str],
    dirs: list[Path],
    table: list[ArmTaskStats],
    keys: list[tuple[str, str]],
    diffs: list[dict[str, Any]],
    audit: list[tuple[str, str, list[str]]],
    agree: dict[str, int],
) -> dict[str, Any]:
    """compare.json: the directories, their statistics, the differences and the audit."""

    return {
        "experiments": dict(zip(names, map(str, dirs))),
        "rows": [
            {"arm": a, "task": t} | {n: tb[(a, t)] for n, tb in zip(names, table) if (a, t) in tb}
            for a, t in keys
        ],
        "differences": diffs,
        "audit_differences": [
            {"item": i, "arm": a, "values": dict(zip(names, v))} for i, a, v in audit
        ],
        "audit_agree": agree,
    }
