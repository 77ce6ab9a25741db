"""What the arms' updates did: the trainable-group fraction (measured on launched groups, before
any filtering), the clip fraction and the importance ratios' range (plain means over action
tokens), KL and the reward-shaping terms, and for multi-step credit GiGPO's anchor-group share and
the share of labelled steps right; one row per arm, over every step of every seed (a column only
where some arm has the metric)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from .lag import arm_labels
from .render import Block, Cell, Heading, Para, Table

if TYPE_CHECKING:
    from .data import Data

METRICS = (
    ("trainable_group_frac", "trainable-group fraction", "mean"),
    ("clip_frac", "clip fraction", "mean"),
    ("ratio.seq_logratio_spread", "sequence log-ratio spread", "mean"),
    ("ratio.seq_logratio_std", "log-ratio spread within a sequence", "mean"),
    ("ratio.outlier_seq_frac", "sequences one token pushed out of the band", "mean"),
    ("ratio_min", "ratio min", "min"),
    ("ratio_max", "ratio max", "max"),
    ("kl", "KL to reference (loss)", "mean"),
    ("reward_kl", "KL in the reward", "mean"),
    ("overlong_penalty_frac", "share overlong-penalized", "mean"),
    ("replay.groups", "groups replayed per step", "mean"),
    ("gigpo.anchor_frac", "GiGPO: steps with an anchor group of 2+", "mean"),
    ("potential_shaping_mean", "potential shaping per sample", "mean"),
    ("step_accuracy", "labelled steps right", "mean"),
)
SCALE = ("clip_scale.sigma", "clip_scale.eps_low", "clip_scale.eps_high")
"""weight.clip_scale's measurement: read for the clip-bounds column, not shown as columns."""
NAMES = tuple(m[0] for m in METRICS) + SCALE


def clip_bounds(blanks_json: str | None, vals: dict) -> str:
    """An arm's clip bounds and where they come from: absolute (as configured) or scaled to the
    measured spread of its sequence log-ratio (weight.clip_scale: the multiples, the bounds and
    the spread, averaged over seeds, each seed measuring its own); '—' without a clip."""

    import json

    try:
        w = json.loads(blanks_json or "{}").get("weight", {})
    except ValueError:
        return "—"
    if w.get("trust_region", "clip") != "clip" or w.get("ratio", "token") == "none":
        return "—"
    scale = w.get("clip_scale")
    if not scale:
        return f"{w.get('eps_low', 0.2):.3g}/{w.get('eps_high', 0.2):.3g} (absolute)"
    sigma, lo, hi = (vals.get(k) for k in SCALE)
    rule = f"{scale['low']:.3g}/{scale['high']:.3g} x spread"
    if sigma is None:
        return f"{rule} (never measured)"
    return (
        f"{lo['mean']:.3g}/{hi['mean']:.3g} = {rule} {sigma['mean']:.3g} "
        f"(measured after the first update)"
    )


def query(con) -> pl.DataFrame:
    """Per arm and metric: mean, min and max over every step of every run."""

    names = ", ".join(f"'{n}'" for n in NAMES)
    return con.sql(
        "SELECT r.arm, m.name, avg(m.value) AS mean, min(m.value) AS min, max(m.value) AS max, "
        f"count(*) AS n FROM metrics m JOIN runs r USING (run_id) WHERE m.name IN ({names}) "
        "GROUP BY r.arm, m.name"
    ).pl()


def diagnostics_blocks(d: Data) -> list[Block]:
    if d.diagnostics.height == 0:
        return []
    vals = {(r["arm"], r["name"]): r for r in d.diagnostics.iter_rows(named=True)}
    shown = [m for m in METRICS if any((a, m[0]) in vals for a in d.arms)]
    blanks = {}
    for r in d.runs.iter_rows(named=True):
        blanks.setdefault(r["arm"], r["blanks"])
    bounds = {a: clip_bounds(blanks.get(a), {k: vals.get((a, k)) for k in SCALE}) for a in d.arms}
    with_bounds = any(b != "—" for b in bounds.values())
    labels = arm_labels(d)
    inert = {}
    for r in d.inert.iter_rows(named=True):
        if (r["blank"] or "").startswith("weight.") and (r["note"] or "").startswith("never acted"):
            inert.setdefault(r["arm"], r["note"])

    def cell(arm: str, name: str, how: str) -> Cell | str:
        r = vals.get((arm, name))
        if r is None:
            return "—"
        text = f"{r[how]:.3f}"
        if name == "clip_frac" and r["max"] == 0 and arm in inert:
            return Cell(text, "inert", inert[arm], "(never acted) ")
        return text

    return [
        Heading("Training diagnostics"),
        Para(
            "Per arm, over every step of every seed: the trainable-group fraction (launched groups "
            "whose rewards are not all equal, counted before dynamic sampling drops any), the clip "
            "fraction and the importance ratios' range (plain means and extremes over action "
            "tokens, whatever the loss normalization; 'off-policy data' says how an arm reuses or "
            "lags its samples; SAPO's clip fraction: tokens whose soft gate "
            "passes less than half the gradient), KL and the reward-shaping terms. A clip "
            "fraction of 0 with every ratio at 1 means the trust region never acted. The clip "
            "bounds are absolute (as configured) or scaled to the spread of the arm's sequence "
            "log-ratio measured after its first update (weight.clip_scale); the sequence "
            "log-ratio spread beside them is its standard deviation across sequences over every "
            "update (the first minibatch of a step has every ratio at 1): a sequence ratio's "
            "bounds are only comparable with that spread, never with a token ratio's.",
            "caption",
        ),
        Table(
            [
                "arm",
                "off-policy data",
                *(["clip bounds"] if with_bounds else []),
                *[m[1] for m in shown],
            ],
            [
                [
                    a,
                    labels.get(a) or "no (single use)",
                    *([bounds[a]] if with_bounds else []),
                    *[cell(a, n, how) for n, _, how in shown],
                ]
                for a in d.arms
            ],
        ),
    ]
