"""The report's tables of what the runs cost and how their sampling went: the dynamic-sampling
census, evaluation cost, planned vs consumed budgets, and the hyperparameter search's effort. Each
``*_blocks`` function returns render blocks (see render.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from .render import Block, Heading, Para, Table
from .tables import fmt

if TYPE_CHECKING:
    from .data import Data


VERDICTS = ("all_correct", "all_wrong", "zero_variance", "accuracy", "surplus")


def census_blocks(d: Data) -> list[Block]:
    """Per arm: groups launched over training and the share kept or dropped by each verdict."""

    if d.census.height == 0:
        return []
    c = d.census.join(d.runs.select("run_id", "arm"), on="run_id")
    agg = c.group_by("arm").agg(
        pl.col("run_id").n_unique().alias("runs"),
        pl.col("groups_launched").sum(),
        pl.col("groups_kept").sum(),
        *[pl.col(f"dropped_{v}").sum() for v in VERDICTS],
    )
    by_arm = {r["arm"]: r for r in agg.iter_rows(named=True)}

    def share(n: Any, total: Any) -> str:
        n = n or 0  # a store written before a verdict existed has no count for it
        return f"{n} ({100 * n / total:.0f}%)" if total else str(n)

    return [
        Heading("Dynamic-sampling census"),
        Para(
            "Training groups launched per arm (all seeds) and what became of them: kept for the "
            "gradient, or dropped as all correct, all wrong, zero variance, outside the accuracy "
            "band (data.accuracy_filter, PRIME) or surplus beyond the step's quota. An arm "
            "without dynamic sampling keeps every group.",
            "caption",
        ),
        Table(
            ["arm", "runs", "groups launched", "kept", *[f"dropped: {v}" for v in VERDICTS]],
            [
                [
                    a,
                    str(r["runs"]),
                    str(r["groups_launched"]),
                    *[
                        share(r[k], r["groups_launched"])
                        for k in ("groups_kept", *[f"dropped_{v}" for v in VERDICTS])
                    ],
                ]
                for a in d.arms
                if (r := by_arm.get(a))
            ],
        ),
    ]


EVAL_COST = (
    ("eval_generated_tokens", "generated tokens", 0),
    ("eval_verifier_calls", "verifier calls", 0),
    ("eval_device_seconds", "device-seconds", 2),
    ("eval_wall_seconds", "wall-seconds", 2),
)


def eval_cost_blocks(d: Data) -> list[Block]:
    if d.evals.height == 0:
        return []
    ev = d.evals.join(d.runs.select("run_id", "arm"), on="run_id")
    train = d.ledger_last.join(d.runs.select("run_id", "arm"), on="run_id")
    rows = []
    for arm in d.arms:
        e = ev.filter(pl.col("arm") == arm)
        runs = max(e["run_id"].n_unique(), 1)
        splits = ", ".join(
            f"{n} {s}" for s, n in e.group_by("split").len().sort("split").iter_rows()
        )
        cells = [arm, splits or "0"]
        for col, _, digits in EVAL_COST:
            v = e[col]
            cells.append(
                "—"
                if v.null_count() == v.len()
                else f"{fmt(float(v.sum()), digits)} ({fmt(float(v.sum()) / runs, digits)})"
            )
        lt = train.filter(pl.col("arm") == arm)["launched_tokens"]
        cells.append(fmt(float(lt.sum()), 0) if lt.len() else "—")
        rows.append(cells)
    return [
        Heading("Evaluation cost"),
        Para(
            "What the evaluations themselves cost, all runs of the arm together (per run in "
            "parentheses), by split. Evaluation is counted apart from the training budget; the "
            "training launched tokens are shown for scale.",
            "caption",
        ),
        Table(
            [
                "arm",
                "evaluations",
                *[f"eval {label}" for _, label, _ in EVAL_COST],
                "training launched tokens",
            ],
            rows,
        ),
    ]


# ----------------------------------------------------------------------------- budgets, search


def budget_blocks(d: Data) -> list[Block]:
    b = d.budgets.join(d.runs.select("run_id", "arm", "task", "seed", "status"), on="run_id").sort(
        "arm", "task", "seed"
    )
    rows = [
        [
            rid,
            arm,
            str(task),
            str(seed),
            status,
            counter,
            f"{limit:g}",
            f"{consumed:g} ({100 * consumed / limit:.0f}%)" if limit else f"{consumed:g}",
        ]
        for rid, counter, limit, consumed, arm, task, seed, status in b.select(
            "run_id", "counter", "limit_value", "consumed", "arm", "task", "seed", "status"
        ).iter_rows()
    ]
    return [
        Heading("Planned vs consumed budget per run"),
        Table(["run", "arm", "task", "seed", "status", "counter", "planned", "consumed"], rows),
    ]


def search_blocks(d: Data) -> list[Block]:
    if d.trials.height == 0:
        return []
    eff = d.trials.group_by("arm", maintain_order=True).agg(
        pl.len().alias("n"),
        (pl.col("state") == "COMPLETE").sum().alias("c"),
        (pl.col("state") == "PRUNED").sum().alias("p"),
        (pl.col("state") == "FAIL").sum().alias("f"),
        pl.col("launched_tokens").sum().alias("tok"),
        (pl.col("device_seconds").sum() / 3600).alias("dh"),
        pl.col("value").max().alias("best"),
    )
    return [
        Heading("Hyperparameter search: effort per arm"),
        Para(
            "Arms named ARM.tuned above run the best trial's configuration, ARM the defaults, both "
            "on fresh seeds under the matched budget and scored on the test split; trials were "
            "chosen on the validation split.",
            "caption",
        ),
        Table(
            [
                "arm",
                "trials",
                "complete",
                "pruned",
                "failed",
                "launched tokens",
                "device-hours",
                "best value (validation split)",
            ],
            [
                [arm, str(n), str(c), str(p), str(f), fmt(tok, 0), fmt(dh, 4), fmt(best)]
                for arm, n, c, p, f, tok, dh, best in eff.iter_rows()
            ],
        ),
    ]
