"""Single-sample and search-time scores, never in one budget row: a search spends inference-time
compute that a single sample does not, so under one budget the search would look like a better
policy.

The arm table scores each policy by one sample per instance (pass@1). Where the evaluation drew k
samples per instance (``eval.samples``), best-of-k chosen by the verifier (pass@k) is an
inference-time search: it gets rows of its own here, each naming its evaluation mode and its
inference-time compute (samples and generated tokens per instance, from the evaluation's own
counters). An inference-time beam search at evaluation (``eval.beam``) is another such row, with
its own generated tokens per instance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from .render import Block, Heading, Para, Table

if TYPE_CHECKING:
    from .data import Data


def tokens_per_instance(d: Data) -> dict[str, float]:
    """Per arm: generated tokens per held-out instance of the last evaluation (all its samples),
    averaged over runs."""

    ev = d.scored
    if ev.height == 0 or "eval_generated_tokens" not in ev.columns:
        return {}
    last = ev.join(ev.group_by("run_id").agg(pl.col("step").max().alias("last")), on="run_id")
    last = last.filter((pl.col("step") == pl.col("last")) & (pl.col("n") > 0))
    per = last.with_columns((pl.col("eval_generated_tokens") / pl.col("n")).alias("t"))
    agg = per.group_by("arm").agg(pl.col("t").mean())
    return {a: float(t) for a, t in agg.iter_rows() if t is not None}


def search_rows(d: Data) -> list[list[str]]:
    """Per arm, the last evaluation's inference-time search (``eval.beam``): its mode, generated
    tokens per instance and score, each averaged over runs."""

    ev = d.scored
    if ev.height == 0 or "search_score" not in ev.columns:
        return []
    ev = ev.filter(pl.col("search_score").is_not_null() & (pl.col("n") > 0))
    if ev.height == 0:
        return []
    last = ev.join(ev.group_by("run_id").agg(pl.col("step").max().alias("last")), on="run_id")
    last = last.filter(pl.col("step") == pl.col("last")).with_columns(
        (pl.col("search_generated_tokens") / pl.col("n")).alias("t")
    )
    agg = last.group_by("arm", maintain_order=True).agg(
        pl.col("search_mode").first(), pl.col("t").mean(), pl.col("search_score").mean()
    )
    order = {a: i for i, a in enumerate(d.arms)} if hasattr(d, "arms") else {}
    out = []
    for arm, mode, t, score in sorted(agg.iter_rows(), key=lambda r: order.get(r[0], 0)):
        compute = f"{t:.1f} generated tokens" if t is not None else "not measured"
        out.append(
            [arm, f"{mode} search over turns, leaf chosen by the verifier", compute, f"{score:.3f}"]
        )
    return out


def eval_mode_blocks(d: Data, rows: list[dict[str, Any]]) -> list[Block]:
    ks = sorted({int(k[5:]) for r in rows for k in r if k.startswith("pass@")} | {1})
    search = search_rows(d)
    if not [k for k in ks if k > 1] and not search:
        return []
    kmax, sl = max(ks), d.score_label
    tokens = tokens_per_instance(d)

    def compute(arm: str, k: int) -> str:
        t = tokens.get(arm)
        per = f"; {t * k / kmax:.1f} generated tokens" if t is not None else ""
        return f"{k} sample{'s' if k > 1 else ''}{per}"

    table_rows = []
    for r in rows:
        for k in ks:
            # one sample: pass@1 where the evaluation drew several, else the final score itself
            value = r.get(f"pass@{k}") if k > 1 else r.get("pass@1", r.get("mean"))
            if value is None:
                continue
            mode = (
                "pass@1: one sample" if k == 1 else f"best-of-{k} chosen by the verifier (pass@{k})"
            )
            table_rows.append([r["arm"], mode, compute(r["arm"], k), f"{value:.3f}"])
        table_rows += [row for row in search if row[0] == r["arm"]]  # each arm's rows together
    return [
        Heading("Evaluation modes: single sample and inference-time search"),
        Para(
            "The arm table scores one sample per instance. Best-of-k chosen by the verifier, and "
            "beam search over turns, are inference-time searches that spend more generation per "
            "instance: each mode is "
            "its own row with its inference-time compute (from the evaluation's own counters, "
            "apart from the training budget), so search-time and single-sample scores never share "
            "a budget row.",
            "caption",
        ),
        Table(
            [
                "arm",
                "evaluation mode",
                "inference-time compute per instance",
                f"final score, mean over runs ({sl})",
            ],
            table_rows,
        ),
    ]
