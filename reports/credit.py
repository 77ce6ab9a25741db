"""Process and agent credit in the report: what each credit scheme's extra model or
extra rollouts cost, and whether the extra model can be trusted.

- cost: the device-seconds of each arm's second model per run (a PRM, PRIME's implicit PRM, a
  critic) and the launched tokens its branches took, beside the training device-seconds;
- explicit PRM: its reliability across step positions (each batch is scored before the PRM trains
  on it), from the ``prm_calib.{position}.{bin}.{n,score,label}`` counts summed over runs;
- PRIME: its held-out outcome-prediction AUC and the intervention probe over training.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from .render import Block, Heading, Image, Para, Table

if TYPE_CHECKING:
    from .data import Data

SECONDS = ("credit_seconds", "critic_seconds")
OVER_TRAINING = ("prime.auc", "prime.intervention_drop", "prime.intervention_frac", "prm.brier")


def query(con) -> dict[str, pl.DataFrame]:
    """Per run: the extra models' seconds and branch tokens; per arm: the PRM's reliability counts
    and the validation metrics per step."""

    cost = con.sql(
        "SELECT r.arm, m.run_id, sum(CASE WHEN m.name IN ('credit_seconds', 'critic_seconds') THEN "
        "m.value ELSE 0 END) AS extra_seconds, sum(CASE WHEN m.name = 'branch.launched_tokens' "
        "THEN m.value ELSE 0 END) AS branch_tokens, max(CASE WHEN m.name IN ('credit_seconds', "
        "'critic_seconds', 'branch.rows') THEN 1 ELSE 0 END) AS has_extra FROM metrics m JOIN runs "
        "r USING (run_id) GROUP BY r.arm, m.run_id"
    ).pl()
    calib = con.sql(
        "SELECT r.arm, m.name, sum(m.value) AS value FROM metrics m JOIN runs r USING (run_id) "
        "WHERE m.name LIKE 'prm_calib.%' GROUP BY r.arm, m.name"
    ).pl()
    names = ", ".join(f"'{n}'" for n in OVER_TRAINING)
    over = con.sql(
        "SELECT r.arm, m.step, m.name, avg(m.value) AS value FROM metrics m JOIN runs r "
        f"USING (run_id) WHERE m.name IN ({names}) GROUP BY r.arm, m.step, m.name ORDER BY m.step"
    ).pl()
    return {"cost": cost, "calib": calib, "over": over}


def extra_cost(d: Data) -> dict[str, tuple[float, float]]:
    """Per arm with a credit model or branches: (mean extra device-seconds per run, mean branch
    launched tokens per run)."""

    cost = d.credit["cost"] if d.credit else pl.DataFrame()
    if cost.height == 0:
        return {}
    per = (
        cost.filter(pl.col("has_extra") == 1)
        .group_by("arm")
        .agg(pl.col("extra_seconds").mean(), pl.col("branch_tokens").mean())
    )
    return {a: (float(s), float(t)) for a, s, t in per.iter_rows()}


def reliability(calib: pl.DataFrame, arm: str) -> dict[int, list[tuple[float, float, float]]]:
    """Per step position: (mean score, share labelled right, steps) of each non-empty bin."""

    rows = calib.filter(pl.col("arm") == arm)
    cells: dict[tuple[int, int], dict[str, float]] = {}
    for name, value in rows.select("name", "value").iter_rows():
        _, pos, b, what = name.split(".")
        cells.setdefault((int(pos), int(b)), {})[what] = float(value)
    out: dict[int, list[tuple[float, float, float]]] = {}
    for (pos, _), c in sorted(cells.items()):
        if c.get("n"):
            out.setdefault(pos, []).append((c["score"] / c["n"], c["label"] / c["n"], c["n"]))
    return out


def reliability_png(d: Data) -> bytes | None:
    calib = d.credit["calib"] if d.credit else pl.DataFrame()
    arms = [a for a in d.arms if calib.height and a in calib["arm"].to_list()]
    if not arms:
        return None
    import matplotlib.pyplot as plt

    from .curves import fig_png

    fig, axes = plt.subplots(1, len(arms), figsize=(4.2 * len(arms), 3.8), squeeze=False)
    for ax, arm in zip(axes[0], arms):
        ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--", label="calibrated")
        for pos, pts in reliability(calib, arm).items():
            xs, ys, ns = zip(*pts)
            ax.plot(xs, ys, marker="o", label=f"step {pos}")
            for x, y, n in pts:
                ax.annotate(f"{int(n)}", (x, y), fontsize=6, alpha=0.6)
        ax.set(xlim=(0, 1), ylim=(0, 1), title=arm, xlabel="PRM score (before training on it)")
        ax.set_ylabel("share of steps labelled right")
        ax.legend(fontsize=7)
    return fig_png(fig)


def prime_png(d: Data) -> bytes | None:
    over = d.credit["over"] if d.credit else pl.DataFrame()
    prime = over.filter(pl.col("name").str.starts_with("prime.")) if over.height else over
    if prime.height == 0:
        return None
    import matplotlib.pyplot as plt

    from .curves import fig_png

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for arm in prime["arm"].unique(maintain_order=True).to_list():
        for ax, name in zip(axes, ("prime.auc", "prime.intervention_frac")):
            s = prime.filter((pl.col("arm") == arm) & (pl.col("name") == name))
            if s.height:
                ax.plot(s["step"].to_list(), s["value"].to_list(), marker=".", label=arm)
    axes[0].set(title="held-out outcome AUC", xlabel="step", ylim=(0, 1))
    axes[0].axhline(0.5, color="grey", lw=0.8, ls="--")
    axes[1].set(title="intervention: corrupted steps that lost reward", xlabel="step")
    axes[1].set_ylim(0, 1)
    axes[0].legend(fontsize=7)
    return fig_png(fig)


def credit_blocks(d: Data, with_plots: bool = True) -> list[Block]:
    cost = extra_cost(d)
    if not cost and not (d.credit and d.credit["over"].height):
        return []
    over = d.credit["over"]
    blocks: list[Block] = [
        Heading("Credit schemes: extra cost and validation"),
        Para(
            "What each arm's credit scheme cost beside the policy, per run: the device-seconds of "
            "its second model (explicit PRM, PRIME's implicit PRM or critic; their forward and "
            "backward passes are charged in the same budget) and the launched tokens its branches "
            "took (part of the matched launched-token budget). The PRM and PRIME columns are "
            "measured on each batch before the model trained on it (held out).",
            "caption",
        ),
    ]

    def mean_of(arm: str, name: str) -> str:
        s = over.filter((pl.col("arm") == arm) & (pl.col("name") == name))
        return f"{s['value'].mean():.3f}" if s.height else "—"

    arms = [a for a in d.arms if a in cost or over.filter(pl.col("arm") == a).height]
    blocks.append(
        Table(
            [
                "arm",
                "extra model device-seconds per run",
                "branch launched tokens per run",
                "PRM Brier",
                "PRIME outcome AUC",
                "PRIME intervention: share dropped",
                "mean drop",
            ],
            [
                [
                    a,
                    f"{cost[a][0]:.1f}" if a in cost else "—",
                    f"{cost[a][1]:.0f}" if a in cost and cost[a][1] else "—",
                    mean_of(a, "prm.brier"),
                    mean_of(a, "prime.auc"),
                    mean_of(a, "prime.intervention_frac"),
                    mean_of(a, "prime.intervention_drop"),
                ]
                for a in arms
            ],
        )
    )
    figures = (
        ("prm_reliability.png", "PRM reliability per step position", reliability_png),
        ("prime_validation.png", "PRIME's implicit PRM over training", prime_png),
    )
    for name, title, draw in figures if with_plots else ():
        png = draw(d)
        if png:
            blocks += [Heading(title), Image(name, title, png)]
    return blocks
