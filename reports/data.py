"""The report's data: the results store's tables as polars frames (:class:`Data`), the columns each
table is read with, and the store's connection. Imports no other report module, so every report
module may import it (and :mod:`.build`, which reads the store into it, imports them all)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

DB_NAME = "results.duckdb"
COST_AXES = [
    ("launched_tokens", "launched tokens"),
    ("accepted_tokens", "accepted tokens"),
    ("device_hours", "device-hours (CPU: process CPU time)"),
    ("verifier_calls", "verifier calls"),
    ("env_steps", "environment steps"),
    ("wall_seconds", "wall-clock seconds"),
]
SPLIT_PREFERENCE = ("test", "heldout")
"""The split scores come from: test (what reports show), or heldout in a store written before the
split existed; validation (what sweeps select on) only where nothing else was evaluated."""


class ReportError(Exception):
    """A report cannot be built (no store, a locked or damaged one, an unknown arm): exit code 2."""

    exit_code = 2

    def __init__(self, message: str):
        self.problems = [message]
        super().__init__(message)


def connect(out_dir: Path):
    """A read-only connection to ``out_dir``'s results store; :class:`ReportError` if it is missing,
    locked by a writer or damaged."""

    import duckdb

    path = out_dir / DB_NAME
    if not path.exists():
        raise ReportError(f"{path}: no results store (run `sixblanks run` first)")
    try:
        return duckdb.connect(str(path), read_only=True)
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            raise ReportError(
                f"{path} is being written by the orchestrator; build the report when it is done"
            ) from None
        raise ReportError(
            f"{path} is damaged ({str(exc)[:160]}): `sixblanks ingest {out_dir}` sets it aside "
            "and rebuilds it from the run directories"
        ) from None
    except duckdb.Error as exc:
        raise ReportError(
            f"{path} is damaged ({str(exc)[:160]}): `sixblanks ingest {out_dir}` sets it aside "
            "and rebuilds it from the run directories"
        ) from None


# the columns read from each table; a column (or table) that an older store lacks reads as NULL
RUNS = dict.fromkeys(
    ("run_id", "arm", "preset", "task", "status", "blanks", "error", "ended_because"), "VARCHAR"
) | {"seed": "BIGINT", "final_score": "DOUBLE", "steps": "BIGINT"}
EVALS = (
    {"run_id": "VARCHAR", "step": "BIGINT", "split": "VARCHAR", "score": "DOUBLE", "n": "BIGINT"}
    | dict.fromkeys(
        ("launched_tokens", "accepted_tokens", "device_seconds", "verifier_calls"), "DOUBLE"
    )
    | dict.fromkeys(("env_steps", "wall_seconds"), "DOUBLE")
    | {"pass_at": "JSON", "position": "JSON", "detail": "JSON"}
    | {
        f"eval_{k}": "DOUBLE"
        for k in ("generated_tokens", "verifier_calls", "device_seconds", "wall_seconds")
    }
    # an inference-time search at evaluation (eval.beam): its score and compute, reported apart
    | {"search_mode": "VARCHAR", "search_score": "DOUBLE", "search_generated_tokens": "DOUBLE"}
)
CENSUS = {"run_id": "VARCHAR", "step": "BIGINT"} | dict.fromkeys(
    (
        "groups_launched",
        "groups_kept",
        "dropped_all_correct",
        "dropped_all_wrong",
        "dropped_zero_variance",
        "dropped_accuracy",
        "dropped_surplus",
        "tokens_launched",
    ),
    "BIGINT",
)
FAIRNESS = dict.fromkeys(("arm", "item", "reason", "value", "reference", "run_id"), "VARCHAR") | {
    "flagged": "BOOLEAN"
}
INERT = dict.fromkeys(("experiment_id", "arm", "blank", "note"), "VARCHAR")
TRIALS = {
    "arm": "VARCHAR",
    "trial": "BIGINT",
    "state": "VARCHAR",
    "params": "JSON",
} | dict.fromkeys(("value", "launched_tokens", "device_seconds", "pruned_at"), "DOUBLE")
LADDER = {"arm": "VARCHAR", "rung": "BIGINT"} | dict.fromkeys(
    ("rung_name", "variant", "status", "evidence"), "VARCHAR"
)


def read_table(con, table: str, columns: dict[str, str], tail: str = "") -> pl.DataFrame:
    """``columns`` of ``table`` (then ``tail``: ORDER BY ...); a column or table an older store
    lacks reads as NULL."""

    have = {
        r[0]
        for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [table]
        ).fetchall()
    }
    sel = ", ".join(
        (f"CAST({c} AS VARCHAR) AS {c}" if t == "JSON" else c)
        if c in have
        else f"CAST(NULL AS {'VARCHAR' if t == 'JSON' else t}) AS {c}"
        for c, t in columns.items()
    )
    source = f"{table} {tail}" if have else "(SELECT 1) WHERE false"
    return con.sql(f"SELECT {sel} FROM {source}").pl()


@dataclass
class Data:
    name: str
    config: dict[str, Any]
    runs: pl.DataFrame
    evals: pl.DataFrame
    budgets: pl.DataFrame
    ledger_last: pl.DataFrame
    curves: pl.DataFrame
    fairness: pl.DataFrame
    baseline: str | None
    warm_start_score: float | None
    trials: pl.DataFrame = field(default_factory=pl.DataFrame)
    ladder: pl.DataFrame = field(default_factory=pl.DataFrame)
    census: pl.DataFrame = field(default_factory=pl.DataFrame)
    inert: pl.DataFrame = field(default_factory=pl.DataFrame)
    diagnostics: pl.DataFrame = field(default_factory=pl.DataFrame)
    lag: pl.DataFrame = field(default_factory=pl.DataFrame)
    credit: dict[str, pl.DataFrame] = field(default_factory=dict)
    selfplay: pl.DataFrame = field(default_factory=pl.DataFrame)
    worldmodel: pl.DataFrame = field(default_factory=pl.DataFrame)
    mismatch: pl.DataFrame = field(default_factory=pl.DataFrame)
    split: str | None = None
    tasks: list[str] = field(default_factory=list)
    arms: list[str] = field(default_factory=list)
    ranges: dict[str, tuple[float, float]] | None = None
    scored: pl.DataFrame = field(default_factory=pl.DataFrame)
    warm_by_task: dict[str, float] = field(default_factory=dict)

    @property
    def score_label(self) -> str:
        return f"{self.split} split" if self.split else "no evaluation"


def order(preferred: list[str], present: list[str]) -> list[str]:
    """``present`` in the ``preferred`` order, the others after it sorted."""

    seen = set(present)
    return [x for x in dict.fromkeys(preferred) if x in seen] + sorted(seen - set(preferred))
