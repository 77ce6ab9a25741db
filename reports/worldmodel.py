"""A learned world model in the report: per arm, the real and imagined
environment steps of the ledger (the split) and the model's prediction error on held-out real
transitions (each step's real transitions, measured before the model trained on them) at the last
step, averaged over runs. No section where no arm used a world model."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from .render import Block, Heading, Para, Table

if TYPE_CHECKING:
    from .data import Data

HELD_OUT = (
    ("world_model.heldout_obs_nll", "observation NLL per token"),
    ("world_model.heldout_obs_exact", "observation exact match"),
    ("world_model.heldout_reward_mae", "reward MAE"),
    ("world_model.heldout_done_acc", "end-of-episode accuracy"),
)


def query(con) -> pl.DataFrame:
    """Per run with a world model: arm, real and imagined env steps (last ledger row), and the
    held-out errors of its last step."""

    cols = {r[0] for r in con.sql("DESCRIBE ledger").fetchall()}
    if "imagined_env_steps" not in cols:  # a store from before world models
        return pl.DataFrame()
    names = ", ".join(f"'{n}'" for n, _ in HELD_OUT)
    err = con.sql(
        "SELECT m.run_id, m.name, m.value FROM metrics m JOIN (SELECT run_id, max(step) AS s FROM "
        f"metrics WHERE name IN ({names}) GROUP BY run_id) x ON m.run_id = x.run_id AND m.step = "
        f"x.s WHERE m.name IN ({names})"
    ).pl()
    if err.height == 0:
        return pl.DataFrame()
    steps = con.sql(
        "SELECT l.run_id, r.arm, l.env_steps, l.imagined_env_steps FROM ledger l JOIN runs r USING "
        "(run_id) JOIN (SELECT run_id, max(step) AS s FROM ledger GROUP BY run_id) m "
        "ON l.run_id = m.run_id AND l.step = m.s"
    ).pl()
    wide = err.pivot(on="name", index="run_id", values="value")
    return steps.join(wide, on="run_id", how="inner")


def worldmodel_blocks(d: Data) -> list[Block]:
    t = d.worldmodel
    if t is None or t.height == 0:
        return []
    have = [(n, label) for n, label in HELD_OUT if n in t.columns]
    agg = t.group_by("arm", maintain_order=True).agg(
        pl.col("env_steps").mean(),
        pl.col("imagined_env_steps").mean(),
        *[pl.col(n).mean() for n, _ in have],
    )
    order = {a: i for i, a in enumerate(d.arms)}
    rows = []
    for r in sorted(agg.iter_rows(named=True), key=lambda r: order.get(r["arm"], len(order))):
        real, imagined = r["env_steps"] or 0.0, r["imagined_env_steps"] or 0.0
        share = imagined / (real + imagined) if real + imagined else 0.0
        fmt = [f"{r[n]:.3f}" if r[n] is not None else "—" for n, _ in have]
        rows.append([r["arm"], f"{real:.0f}", f"{imagined:.0f}", f"{share:.0%}", *fmt])
    return [
        Heading("World model: imagined and real environment steps"),
        Para(
            "Per arm, mean over runs: the real environment's steps (env_steps, the budget's) and "
            "the steps simulated by the learned world model (imagined_env_steps), and the model's "
            "prediction error at the last step on held-out real transitions (each step's real "
            "transitions, measured before it trained on them).",
            "caption",
        ),
        Table(
            ["arm", "real env steps", "imagined env steps", "imagined share"]
            + [f"held-out {label}" for _, label in have],
            rows,
        ),
    ]
