"""The results store: ``results.duckdb`` in the experiment's output directory.

This module alone writes it, from the process that owns the experiment (the CLI's orchestrator,
ladder or sweep); runs write only their own directories. Every writer replaces a whole unit in one
transaction, so writing it twice adds nothing:

    ingest          the experiment's row, every row of each ingested run (a resumed run's rows
                    replace its partial ones) and the fairness audit
    write_ladder    the ladder rows of one experiment and arm
    write_trials    the search trials of one experiment

Bulk inserts go through Arrow. The tables are documented in docs/results-schema.md.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from sixblanks.budgets.counters import COUNTERS, DISCARD_REASONS

from .errors import SixblanksError
from .layout import ExperimentDir, RunDir

LEDGER_COLUMNS = list(COUNTERS)

SCHEMA: dict[str, str] = {
    "experiments": """
        experiment_id VARCHAR PRIMARY KEY, name VARCHAR, config JSON, warm_start_key VARCHAR,
        initial_policy_hash VARCHAR, warm_start_score DOUBLE, code_version VARCHAR, ingested_at DOUBLE""",
    "runs": """
        run_id VARCHAR PRIMARY KEY, experiment_id VARCHAR, arm VARCHAR, preset VARCHAR, task VARCHAR,
        seed BIGINT, status VARCHAR, spec JSON, blanks JSON, initial_policy_hash VARCHAR, steps BIGINT,
        ended_because VARCHAR, error VARCHAR, started_at DOUBLE, updated_at DOUBLE, finished_at DOUBLE,
        final_score DOUBLE""",
    "budgets": "run_id VARCHAR, counter VARCHAR, limit_value DOUBLE, consumed DOUBLE",
    "ledger": "run_id VARCHAR, step BIGINT, "
    + ", ".join(f"{c} DOUBLE" for c in LEDGER_COLUMNS)
    + ", "
    + ", ".join(f"discarded_{r} DOUBLE" for r in DISCARD_REASONS),
    "metrics": "run_id VARCHAR, step BIGINT, name VARCHAR, value DOUBLE",
    "evals": """
        run_id VARCHAR, step BIGINT, split VARCHAR, score DOUBLE, n BIGINT, success_rate DOUBLE,
        launched_tokens DOUBLE, accepted_tokens DOUBLE, device_seconds DOUBLE, verifier_calls DOUBLE,
        position JSON, detail JSON, eval_generated_tokens DOUBLE, eval_verifier_calls DOUBLE,
        eval_device_seconds DOUBLE, eval_wall_seconds DOUBLE, env_steps DOUBLE, wall_seconds DOUBLE,
        pass_at JSON, eval_judge_calls DOUBLE""",
    "discards": "run_id VARCHAR, step BIGINT, reason VARCHAR, rollouts DOUBLE, tokens DOUBLE",
    "census": """
        run_id VARCHAR, step BIGINT, rounds BIGINT, prompts_sampled BIGINT, groups_launched BIGINT,
        groups_varied BIGINT, groups_kept BIGINT, dropped_all_correct BIGINT, dropped_all_wrong BIGINT,
        dropped_zero_variance BIGINT, dropped_surplus BIGINT, responses_launched BIGINT,
        responses_accepted BIGINT, tokens_launched BIGINT, tokens_accepted BIGINT, cap_hit BOOLEAN""",
    "fairness": """
        experiment_id VARCHAR, arm VARCHAR, item VARCHAR, flagged BOOLEAN, reason VARCHAR, value JSON,
        reference JSON, run_id VARCHAR""",
    "inert": "experiment_id VARCHAR, arm VARCHAR, blank VARCHAR, note VARCHAR",
    "trials": """
        experiment_id VARCHAR, arm VARCHAR, trial BIGINT, state VARCHAR, params JSON, value DOUBLE,
        launched_tokens DOUBLE, device_seconds DOUBLE, pruned_at DOUBLE, run_id VARCHAR, split VARCHAR""",
    "ladder": """
        experiment_id VARCHAR, arm VARCHAR, rung BIGINT, rung_name VARCHAR, variant VARCHAR, status VARCHAR,
        evidence VARCHAR, ci_low DOUBLE, ci_high DOUBLE, detail JSON""",
}


class StoreBusy(SixblanksError):
    exit_code = 4


def connect(out_dir: str | Path, read_only: bool = False):
    """Open the store; a reader that finds the writer's lock gets a clear StoreBusy error."""

    import duckdb

    exp_dir = ExperimentDir(out_dir)
    path = exp_dir.results_db
    if read_only and not path.exists():
        raise SixblanksError(f"{path}: no results store yet (run `sixblanks run` first)")
    try:
        return duckdb.connect(str(path), read_only=read_only)
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            raise StoreBusy(
                f"{path} is being written by another process (the orchestrator); try again when it is done, "
                f"or read the run directories under {exp_dir.runs}"
            ) from None
        raise


def ensure_schema(con) -> None:
    """Create the tables; a store made by an earlier version gains the columns added since."""

    for table, cols in SCHEMA.items():
        con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({cols})")
        for col in cols.split(","):
            name, kind = col.split()[:2]
            con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {name} {kind}")


def _insert(con, table: str, rows: list[dict[str, Any]] | pa.Table) -> None:
    """Bulk insert through Arrow (no per-row executemany)."""
    if isinstance(rows, list):
        if not rows:
            return
        rows = pa.Table.from_pylist(rows)
    if rows.num_rows == 0:
        return
    con.register("_incoming", rows)
    cols = ", ".join(rows.column_names)
    con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _incoming")
    con.unregister("_incoming")


def run_tables(run_dir: Path) -> dict[str, Any]:
    """Rows of one run directory for every per-run table."""

    rd = RunDir(run_dir)
    spec = rd.read_spec()
    status = rd.read_status()
    result = rd.read_result()
    events = rd.read_events()
    rid = rd.run_id
    state = status.get("state", "pending")
    db_status = {"finished": "finished", "failed": "failed", "running": "partial"}.get(state, state)
    steps = [e for e in events if e["type"] == "step"]
    evals = [e for e in events if e["type"] == "eval"]
    step_idx = [int(e["step"]) for e in steps]
    n = len(steps)
    # column-wise construction: one pass per key, not per (step, key) pair
    ledger_cols: dict[str, list] = {"run_id": [rid] * n, "step": step_idx}
    for c in LEDGER_COLUMNS:
        key = f"ledger.{c}"
        ledger_cols[c] = [float(e.get(key, 0.0)) for e in steps]
    discards = []
    for r in DISCARD_REASONS:
        tok = [float(e.get(f"ledger.discarded_tokens.{r}", 0.0)) for e in steps]
        rol = [float(e.get(f"ledger.discarded_rollouts.{r}", 0.0)) for e in steps]
        ledger_cols[f"discarded_{r}"] = tok
        pt = pr = 0.0
        for i in range(n):
            dt, dr = tok[i] - pt, rol[i] - pr
            if dt > 0 or dr > 0:
                discards.append(
                    {"run_id": rid, "step": step_idx[i], "reason": r, "rollouts": dr, "tokens": dt}
                )
            pt, pr = tok[i], rol[i]
    ledger_rows = pa.table(ledger_cols) if n else []
    # metrics: steps grouped by their key set, then one list comprehension per (group, key)
    groups: dict[tuple, list[int]] = {}
    for i, e in enumerate(steps):
        groups.setdefault(tuple(e), []).append(i)
    parts = []
    for keys, idxs in groups.items():
        sub = [steps[i] for i in idxs]
        sub_steps = pa.array([step_idx[i] for i in idxs], pa.int64())
        m = len(sub)
        for k in keys:
            if (
                k in ("type", "step")
                or k.startswith("ledger.")
                or not isinstance(sub[0][k], (int, float))
            ):
                continue
            vals = pa.array([e[k] for e in sub], pa.float64())
            tbl = pa.table(
                {
                    "run_id": pa.array([rid] * m, pa.string()),
                    "step": sub_steps,
                    "name": pa.array([k] * m, pa.string()),
                    "value": vals,
                }
            )
            if vals.null_count:
                tbl = tbl.filter(vals.is_valid())
            parts.append(tbl)
    metrics = (
        pa.concat_tables(parts)
        if parts
        else pa.table(
            {
                "run_id": pa.array([], pa.string()),
                "step": pa.array([], pa.int64()),
                "name": pa.array([], pa.string()),
                "value": pa.array([], pa.float64()),
            }
        )
    )
    eval_rows = []
    for e in evals:
        pos = e.get("position", {})
        cost = e.get("cost") or {}
        eval_rows.append(
            {
                "run_id": rid,
                "step": int(e["step"]),
                "split": e.get("split", "test"),
                "score": float(e["score"]),
                "n": int(e["n"]),
                "success_rate": float(e.get("success_rate", e["score"])),
                "launched_tokens": float(pos.get("launched_tokens", 0.0)),
                "accepted_tokens": float(pos.get("accepted_tokens", 0.0)),
                "device_seconds": float(pos.get("device_seconds", 0.0)),
                "verifier_calls": float(pos.get("verifier_calls", 0.0)),
                "env_steps": float(pos.get("env_steps", 0.0)),
                "wall_seconds": float(pos.get("wall_seconds", 0.0)),
                "pass_at": json.dumps(e.get("pass_at") or {"1": float(e["score"])}),
                "position": json.dumps(pos),
                "detail": json.dumps({spec["task"]["name"]: e.get("per_instance")}),
                # what the evaluation itself cost (counted apart from the training budget)
                **{f"eval_{k}": cost.get(k) for k in EVAL_COST},
            }
        )
    last_counters = result.get("counters") or status.get("counters") or {}
    budgets = [
        {
            "run_id": rid,
            "counter": k,
            "limit_value": float(v),
            "consumed": float(last_counters.get(k, 0.0)),
        }
        for k, v in spec["budget"].items()
    ]
    final = result.get("final_score")
    if final is None and evals:
        final = float(evals[-1]["score"])
    run_row = {
        "run_id": rid,
        "experiment_id": None,
        "arm": spec["arm"],
        "preset": spec["preset"],
        "task": spec["task"]["name"],
        "seed": int(spec["seed"]),
        "status": db_status,
        "spec": json.dumps(spec),
        "blanks": json.dumps(spec["blanks"]),
        "initial_policy_hash": None,
        "steps": len(steps),
        "ended_because": result.get("ended_because"),
        "error": status.get("error"),
        "started_at": status.get("started"),
        "updated_at": status.get("updated"),
        "finished_at": status.get("finished"),
        "final_score": final,
    }
    census = [
        {
            "run_id": rid,
            **{k: c.get(k) for k in CENSUS_COLUMNS},
            **{f"dropped_{v}": int(c["groups_dropped"].get(v, 0)) for v in CENSUS_VERDICTS},
        }
        for c in (e for e in events if e["type"] == "census")
    ]
    return {
        "runs": [run_row],
        "budgets": budgets,
        "ledger": ledger_rows,
        "metrics": metrics,
        "evals": eval_rows,
        "discards": discards,
        "census": census,
    }


EVAL_COST = ("generated_tokens", "verifier_calls", "device_seconds", "wall_seconds", "judge_calls")
"""The cost of one evaluation, as the loop records it (``cost`` of each eval record)."""

CENSUS_COLUMNS = (
    "step",
    "rounds",
    "prompts_sampled",
    "groups_launched",
    "groups_varied",
    "groups_kept",
    "responses_launched",
    "responses_accepted",
    "tokens_launched",
    "tokens_accepted",
    "cap_hit",
)
CENSUS_VERDICTS = ("all_correct", "all_wrong", "zero_variance", "surplus")
"""Why a launched group was dropped (``SamplingCensus.groups_dropped``)."""

PER_RUN_TABLES = ("runs", "budgets", "ledger", "metrics", "evals", "discards", "census")


@contextmanager
def _transaction(out_dir: str | Path) -> Iterator[Any]:
    """A connection to the store with its schema, inside one transaction: committed when the block
    ends, rolled back (nothing written) when it raises."""

    con = connect(out_dir)
    try:
        ensure_schema(con)
        con.execute("BEGIN TRANSACTION")
        try:
            yield con
        except BaseException:
            try:
                con.execute("ROLLBACK")
            except Exception:  # noqa: BLE001 - the original error matters, not the rollback's
                pass
            raise
        con.execute("COMMIT")
    finally:
        con.close()


def _counts(con) -> dict[str, int]:
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in SCHEMA}


def ingest(
    out_dir: str | Path,
    experiment: dict[str, Any] | None = None,
    fairness: dict[str, Any] | None = None,
    run_ids: list[str] | None = None,
) -> dict[str, int]:
    """Ingest run directories (all, or ``run_ids``) idempotently. Returns rows per table after ingest."""

    exp_dir = ExperimentDir(out_dir)
    exp = experiment or exp_dir.read_experiment()
    cfg = exp["config"]
    exp_id = cfg["name"]
    info = exp.get("warm_start", {})
    ids = run_ids if run_ids is not None else exp.get("runs", [])
    with _transaction(out_dir) as con:
        con.execute("DELETE FROM experiments WHERE experiment_id = ?", [exp_id])
        _insert(
            con,
            "experiments",
            [
                {
                    "experiment_id": exp_id,
                    "name": cfg["name"],
                    "config": json.dumps(cfg),
                    "warm_start_key": info.get("key"),
                    "initial_policy_hash": info.get("policy_hash"),
                    "warm_start_score": None,  # set below from the runs' step-0 evaluations
                    "code_version": exp.get("code_version"),
                    "ingested_at": time.time(),
                }
            ],
        )
        for rid in ids:
            rd = exp_dir.run(rid)
            if not rd.exists():
                continue
            tables = run_tables(rd.path)
            tables["runs"][0]["experiment_id"] = exp_id
            tables["runs"][0]["initial_policy_hash"] = info.get("policy_hash")
            for t in PER_RUN_TABLES:
                con.execute(f"DELETE FROM {t} WHERE run_id = ?", [rid])
                _insert(con, t, tables[t])
        # the warm start's held-out score: every run evaluates it first, at step 0
        con.execute(
            "UPDATE experiments SET warm_start_score = (SELECT avg(e.score) FROM evals e "
            "JOIN runs r USING (run_id) WHERE r.experiment_id = ? AND e.step = 0) "
            "WHERE experiment_id = ?",
            [exp_id, exp_id],
        )
        if fairness is not None:
            con.execute("DELETE FROM fairness WHERE experiment_id = ?", [exp_id])
            con.execute("DELETE FROM inert WHERE experiment_id = ?", [exp_id])
            _insert(con, "fairness", fairness_rows(exp_id, fairness))
            _insert(
                con,
                "inert",
                [{"experiment_id": exp_id, **r} for r in fairness.get("inert", [])],
            )
        return _counts(con)


def fairness_rows(exp_id: str, fairness: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per arm x held-constant item (its value; flagged with the reason and the experiment's
    value where it differs), then one per per-run flag (consumption, code)."""

    flags = {(f["arm"], f["item"]): f for f in fairness["flags"]}
    rows = []
    for arm, rec in fairness["arms"].items():
        for item in fairness["held_constant"]:
            f = flags.get((arm, item))
            ref = f.get("reference") if f else None
            rows.append(
                {
                    "experiment_id": exp_id,
                    "arm": arm,
                    "item": item,
                    "flagged": f is not None,
                    "reason": f["reason"] if f else None,
                    "value": json.dumps(rec["items"][item], default=str),
                    "reference": json.dumps(ref, default=str) if ref is not None else None,
                    "run_id": None,
                }
            )
    for f in fairness["flags"]:
        if f["item"] not in fairness["held_constant"]:  # per-run flags: consumption, code
            rows.append(
                {
                    "experiment_id": exp_id,
                    "arm": f["arm"],
                    "item": f["item"],
                    "flagged": True,
                    "reason": f["reason"],
                    "value": None,
                    "reference": None,
                    "run_id": f.get("run_id"),
                }
            )
    return rows


LADDER_FIELDS = (
    "rung",
    "rung_name",
    "variant",
    "status",
    "evidence",
    "ci_low",
    "ci_high",
    "detail",
)
TRIAL_FIELDS = (
    "arm",
    "trial",
    "state",
    "params",
    "value",
    "launched_tokens",
    "device_seconds",
    "pruned_at",
    "run_id",
    "split",
)


def _finite_or_null(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _fields(row: dict[str, Any], fields: tuple[str, ...], what: str) -> dict[str, Any]:
    extra = set(row) - set(fields)
    if extra:
        raise ValueError(f"{what} row: unknown field(s) {sorted(extra)}; the fields are {fields}")
    return {f: row.get(f) for f in fields}


def write_ladder(
    out_dir: str | Path, experiment_id: str, arm: str, rows: list[dict[str, Any]]
) -> int:
    """Replace the ladder rows of ``experiment_id`` and ``arm`` with ``rows``, in one transaction.

    Each row has the fields of LADDER_FIELDS (missing ones are NULL): ``detail`` any JSON-able
    value, ``ci_low``/``ci_high`` NULL where not finite. Each rung's rows end with its one verdict
    row (``variant = 'verdict'``: the rung's pass / fail / inconclusive and a short reason as
    ``evidence``). Other arms and experiments are untouched; writing the same rows twice leaves the
    same table. Returns the rows written."""

    out = []
    for row in rows:
        r = _fields(row, LADDER_FIELDS, "ladder")
        r["ci_low"], r["ci_high"] = _finite_or_null(r["ci_low"]), _finite_or_null(r["ci_high"])
        r["detail"] = json.dumps(r["detail"], default=str)
        out.append({"experiment_id": experiment_id, "arm": arm, **r})
    with _transaction(out_dir) as con:
        con.execute("DELETE FROM ladder WHERE experiment_id = ? AND arm = ?", [experiment_id, arm])
        _insert(con, "ladder", out)
    return len(out)


def write_trials(out_dir: str | Path, experiment_id: str, rows: list[dict[str, Any]]) -> int:
    """Replace every search trial of ``experiment_id`` with ``rows``, in one transaction.

    Each row has the fields of TRIAL_FIELDS (missing ones are NULL): ``params`` a JSON-able
    mapping, ``value`` NULL where not finite. Writing the same rows twice leaves the same table.
    Returns the rows written."""

    out = []
    for row in rows:
        r = _fields(row, TRIAL_FIELDS, "trials")
        r["params"] = json.dumps(r["params"], default=str)
        r["value"] = _finite_or_null(r["value"])
        out.append({"experiment_id": experiment_id, **r})
    with _transaction(out_dir) as con:
        con.execute("DELETE FROM trials WHERE experiment_id = ?", [experiment_id])
        _insert(con, "trials", out)
    return len(out)


def append_rows(out_dir: str | Path, tables: dict[str, list[dict[str, Any]] | pa.Table]) -> None:
    """Append rows to tables as they are, in one transaction, replacing nothing.

    For synthetic stores (benchmarks, tests of readers); an experiment's own rows are written by
    ``ingest``, ``write_ladder`` and ``write_trials``."""

    unknown = set(tables) - set(SCHEMA)
    if unknown:
        raise ValueError(f"unknown table(s) {sorted(unknown)}; the tables are {list(SCHEMA)}")
    with _transaction(out_dir) as con:
        for table, rows in tables.items():
            _insert(con, table, rows)
