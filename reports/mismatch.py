"""Rollout/trainer mismatch in the report: per arm and step, the k3 KL between the
distribution the rollout engine sampled from and the trainer's recomputation (``mismatch.kl``) and
the share of tokens whose ratio is outside [0.5, 2] (``mismatch.ratio_out_frac``), averaged over
runs. A vLLM engine and the trainer differ by kernels and precision; the same-process HF engine's
mismatch is float noise, so the section appears only where some arm's mismatch exceeds it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from .render import Block, Heading, Image, Para, Table

if TYPE_CHECKING:
    from .data import Data

NAMES = ("mismatch.kl", "mismatch.ratio_out_frac")
NOISE = 1e-6
"""Mismatch KL at or below this is float noise (the HF engine's is about 1e-14)."""


def query(con) -> pl.DataFrame:
    names = ", ".join(f"'{n}'" for n in NAMES)
    return con.sql(
        "SELECT r.arm, m.step, m.name, avg(m.value) AS value FROM metrics m JOIN runs r "
        f"USING (run_id) WHERE m.name IN ({names}) GROUP BY r.arm, m.step, m.name ORDER BY m.step"
    ).pl()


def mismatch_png(t: pl.DataFrame, arms: list[str]) -> bytes:
    import matplotlib.pyplot as plt

    from .plots import fig_png

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
                ]  # fmt: skip
                for a in arms
            ],
        ),
    ]
    if with_plots:
        blocks.append(Image("mismatch.png", "Rollout/trainer mismatch", mismatch_png(t, arms)))
    return blocks
