"""Self-play in the report: each arm's win rates against a game task's fixed external opponents (a
scripted random player, the optimal one), measured apart from training at every evaluation point
(the ``selfplay_evals`` table). Games against the training pool never appear here: a policy and its
past selves can agree on a private protocol, so only opponents no training can move count as
progress. The section appears only where such rows exist."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import polars as pl

from .render import Block, Heading, Para, Table

if TYPE_CHECKING:
    from .data import Data

COLUMNS = (
    "run_id",
    "step",
    "split",
    "opponent",
    "games",
    "wins",
    "losses",
    "draws",
    "win_rate",
    "winnable",
    "eval_generated_tokens",
)


def query(con) -> pl.DataFrame:
    """Every ``selfplay_evals`` row with its run's blanks and spec (empty where the store has
    none)."""

    have = con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_name = 'selfplay_evals'"
    ).fetchall()
    if not have:
        return pl.DataFrame()
    cols = ", ".join(f"s.{c}" for c in COLUMNS)
    return con.sql(
        f"SELECT {cols}, r.blanks, r.spec FROM selfplay_evals s JOIN runs r USING (run_id) "
        "ORDER BY s.run_id, s.step, s.opponent"
    ).pl()


def _json(x: Any) -> dict[str, Any]:
    return (json.loads(x) if isinstance(x, str) else x) or {}


def _opponent_cells(o: pl.DataFrame) -> list[str]:
    """One arm's games against one opponent (``o``: its evaluations, with each run's first and
    last step ``s0``, ``s1``): games per evaluation, first and last win rate, last draw rate, the
    perfect-play ceiling and the evaluation's generated tokens."""

    start = o.filter(pl.col("step") == pl.col("s0"))
    end = o.filter(pl.col("step") == pl.col("s1"))
    games = end["games"].to_list()
    draws = sum(end["draws"].to_list())
    ceiling = end["winnable"].drop_nulls()
    spent = o["eval_generated_tokens"].drop_nulls()
    return [
        f"{games[0]} ({end['split'][0]})",
        _rate(start["win_rate"].to_list()),
        _rate(end["win_rate"].to_list()),
        f"{draws / max(1, sum(games)):.3f}",
        f"{ceiling.sum() / max(1, sum(games)):.3f}" if ceiling.len() else "—",
        f"{spent.sum():.0f}" if spent.len() else "—",
    ]


def trained_against(blanks: Any, spec: Any = None) -> str:
    """An arm's training opponents, in words, from its resolved blanks (and its run spec)."""

    sp = (_json(blanks).get("data") or {}).get("self_play")
    if not sp:
        params = (_json(spec).get("task") or {}).get("params") or {}
        return f"the scripted {params.get('opponent', 'random')} player"
    return (
        f"pool of past checkpoints (size {sp.get('pool_size')}, "
        f"every {sp.get('snapshot_every')} steps, {sp.get('opponents')})"
    )


def _rate(values: list[float]) -> str:
    if not values:
        return "—"
    mean = sum(values) / len(values)
    spread = f" [{min(values):.3f}, {max(values):.3f}]" if len(values) > 1 else ""
    return f"{mean:.3f}{spread}"


def selfplay_blocks(d: Data) -> list[Block]:
    """Per arm and external opponent: the win rate at the first and the last evaluation of each
    run (mean over runs, [min, max] where several), the last evaluation's draws, and the ceiling
    of perfect play on those games."""

    if d.selfplay.height == 0:
        return []
    rows = d.selfplay.join(d.runs.select("run_id", "arm"), on="run_id")
    first = rows.group_by("run_id").agg(pl.col("step").min().alias("s0"))
    last = rows.group_by("run_id").agg(pl.col("step").max().alias("s1"))
    rows = rows.join(first, on="run_id").join(last, on="run_id")
    table = []
    for arm in d.arms:
        sub = rows.filter(pl.col("arm") == arm)
        if sub.height == 0:
            continue
        label = trained_against(sub["blanks"][0], sub["spec"][0])
        for opp in sorted(sub["opponent"].unique().to_list()):
            table.append([arm, label, opp, *_opponent_cells(sub.filter(pl.col("opponent") == opp))])
    return [
        Heading("Self-play: against fixed external opponents"),
        Para(
            "Win rate of each arm's greedy policy against the task's fixed external opponents, "
            "played apart from training at every evaluation (first and last evaluation of each "
            "run: mean over runs, [min, max] where there are several). Games against a training "
            "pool of past checkpoints are never shown as progress: only opponents that no training "
            "can move are. Draws: games cut short undecided. Perfect play: the share of these "
            "games a perfect first player wins against any opponent (the ceiling against the "
            "optimal one). These games are counted apart from the training budget (their generated "
            "tokens, all evaluations of all runs, in the last column).",
            "caption",
        ),
        Table(
            [
                "arm",
                "trained against",
                "external opponent",
                "games per evaluation",
                "first win rate",
                "last win rate",
                "last draw rate",
                "perfect play",
                "eval generated tokens (all)",
            ],
            table,
        ),
    ]
