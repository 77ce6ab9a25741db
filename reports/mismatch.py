"""Rollout/trainer mismatch in the report: per arm and step, the k3 KL between the
distribution the rollout engine sampled from and the trainer's recomputation (``mismatch.kl``) and
the share of tokens whose ratio is outside [0.5, 2] (``mismatch.ratio_out_frac``), averaged over
runs; per arm, the importance ratios before any correction (mean |k - 1|, 1st and 99th
percentiles, the effective sample size of the token and sequence weights) and what each
correction did (the share of tokens a mask or gate dropped, the share truncated IS capped). A vLLM
engine and the trainer differ by kernels and precision, and the mismatch lab (``rollout.mismatch``)
injects a controlled difference; the same-process HF engine's mismatch is float noise, so the
section appears only where some arm's mismatch exceeds it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from .render import Block, Heading, Image, Para, Table

if TYPE_CHECKING:
    from .data import Data

NAMES = ("mismatch.kl", "mismatch.ratio_out_frac")
DETAIL = (
    ("mismatch.ratio_abs_dev", "mean |k - 1|"),
    ("mismatch.ratio_p1", "k, 1st pct."),
    ("mismatch.ratio_p99", "k, 99th pct."),
    ("mismatch.ess", "ESS, tokens"),
    ("mismatch.seq_ess", "ESS, sequences"),
    ("gate.masked_frac", "gate drops"),
    ("dropped.masking_frac", "masked (IS/gate)"),
    ("dropped.dis_frac", "DIS drops"),
    ("tis.truncated_frac", "TIS capped"),
    ("bypass.zeroed_frac", "zeroed (bypass)"),
)
"""Per-arm columns: the ratios before any correction, then what each correction dropped or capped
(shares of action tokens; a column no arm logs is left out)."""
NOISE = 1e-6
"""Mismatch KL at or below this is float noise (the HF engine's is about 1e-14)."""


def query(con) -> pl.DataFrame:
    names = ", ".join(f"'{n}'" for n in (*NAMES, *(k for k, _ in DETAIL)))
    return con.sql(
        "SELECT r.arm, m.step, m.name, avg(m.value) AS value FROM metrics m JOIN runs r "
        f"USING (run_id) WHERE m.name IN ({names}) GROUP BY r.arm, m.step, m.name ORDER BY m.step"
    ).pl()


def mismatch_png(t: pl.DataFrame, arms: list[str]) -> bytes:
    import matplotlib.pyplot as plt

    from .curves import fig_png

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for arm in arms:
        for ax, name in zip(axes, NAMES):
            s = t.filter((pl.col("arm") == arm) & (pl.col("name") == name))
            if s.height:
                ax.plot(s["step"].to_list(), s["value"].to_list(), marker=".", label=arm)
    axes[0].set(title="KL(rollout engine || trainer), k3", xlabel="step")
    axes[1].set(title="share of tokens with ratio outside [0.5, 2]", xlabel="step")
    axes[0].legend(fontsize=7)
    return fig_png(fig)


def mismatch_blocks(d: Data, with_plots: bool = True) -> list[Block]:
    t = d.mismatch
    if t is None or t.height == 0:
        return []
    kl = t.filter(pl.col("name") == "mismatch.kl")
    if kl.height == 0 or float(kl["value"].max()) <= NOISE:
        return []
    arms = [a for a in d.arms if t.filter(pl.col("arm") == a).height]

    def stat(arm: str, name: str, how: str) -> str:
        s = t.filter((pl.col("arm") == arm) & (pl.col("name") == name))["value"]
        return f"{(s.mean() if how == 'mean' else s.max()):.2e}" if len(s) else "—"

    blocks: list[Block] = [
        Heading("Rollout/trainer mismatch over training"),
        Para(
            "Per arm, averaged over runs at each step: the k3 KL between the distribution the "
            "rollout engine sampled from and the trainer's recomputation of it, and the share of "
            "action tokens whose ratio falls outside [0.5, 2].",
            "caption",
        ),
        Table(
            ["arm", "mismatch KL, mean", "max", "ratio outside [0.5, 2], mean", "max"],
            [
                [
                    a,
                    stat(a, NAMES[0], "mean"),
                    stat(a, NAMES[0], "max"),
                    stat(a, NAMES[1], "mean"),
                    stat(a, NAMES[1], "max"),
                ]
                for a in arms
            ],
        ),
    ]
    cols = [(k, label) for k, label in DETAIL if t.filter(pl.col("name") == k).height]
    if cols:
        blocks += [
            Para(
                "The importance ratio k = pi_trainer / pi_rollout on the sampled tokens before any "
                "truncation or masking (means over steps and runs; ESS = (sum k)^2 / (N sum k^2), "
                "1 when no token is reweighted), and the share of action tokens each correction "
                "dropped or capped.",
                "caption",
            ),
            Table(
                ["arm", *(label for _, label in cols)],
                [[a, *(stat(a, k, "mean") for k, _ in cols)] for a in arms],
            ),
        ]
    if with_plots:
        blocks.append(Image("mismatch.png", "Rollout/trainer mismatch", mismatch_png(t, arms)))
    return blocks
