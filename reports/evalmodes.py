"""Single-sample and search-time scores, never in one budget row (issue 19, item 3; the chapter:
"do not report search-time and single-sample policies under the same compute budget without
separation").

The arm table scores each policy by one sample per instance (pass@1). Where the evaluation drew k
samples per instance (``eval.samples``), best-of-k chosen by the verifier (pass@k) is an
inference-time search: it gets rows of its own here, each naming its evaluation mode and its
inference-time compute (samples and generated tokens per instance, from the evaluation's own
counters).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from .render import Block, Heading, Para, Table

if TYPE_CHECKING:
    from .build import Data


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


def eval_mode_blocks(d: Data, rows: list[dict[str, Any]]) -> list[Block]:
    ks = sorted({int(k[5:]) for r in rows for k in r if k.startswith("pass@")})
    if not [k for k in ks if k > 1]:
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
            if r.get(f"pass@{k}") is None:
                continue
            mode = (
                "pass@1: one sample" if k == 1 else f"best-of-{k} chosen by the verifier (pass@{k})"
            )
            table_rows.append([r["arm"], mode, compute(r["arm"], k), f"{r[f'pass@{k}']:.3f}"])
    return [
        Heading("Evaluation modes: single sample and inference-time search"),
        Para(
            "The arm table scores one sample per instance. Best-of-k chosen by the verifier is an "
            "inference-time search that spends k times the generation per instance: each mode is "
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
