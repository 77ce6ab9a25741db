"""The results store: ``results.duckdb`` in the experiment's output directory.

Only the orchestrator writes it. Ingestion reads run directories and replaces every row of each
ingested run in one transaction, so ingesting twice adds nothing and a resumed run's rows replace
its partial ones. Bulk inserts go through Arrow. The tables are documented in docs/results-schema.md.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from sixblanks.budgets.counters import COUNTERS, DISCARD_REASONS

from .errors import SixblanksError

DB_NAME = "results.duckdb"

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
        position JSON, detail JSON""",
    "discards": "run_id VARCHAR, step BIGINT, reason VARCHAR, rollouts DOUBLE, tokens DOUBLE",
    "fairness": """
        experiment_id VARCHAR, arm VARCHAR, item VARCHAR, flagged BOOLEAN, reason VARCHAR, value JSON,
        reference JSON, run_id VARCHAR""",
    "trials": """
        experiment_id VARCHAR, arm VARCHAR, trial BIGINT, state VARCHAR, params JSON, value DOUBLE,
        launched_tokens DOUBLE, device_seconds DOUBLE, pruned_at DOUBLE, run_id VARCHAR""",
    "ladder": """
        experiment_id VARCHAR, arm VARCHAR, rung BIGINT, rung_name VARCHAR, variant VARCHAR, status VARCHAR,
        evidence VARCHAR, ci_low DOUBLE, ci_high DOUBLE, detail JSON""",
}


class StoreBusy(SixblanksError):
    exit_code = 4


def connect(out_dir: str | Path, read_only: bool = False):
    """Open the store; a reader that finds the writer's lock gets a clear StoreBusy error."""

    import duckdb

    path = Path(out_dir) / DB_NAME
    if read_only and not path.exists():
        raise SixblanksError(f"{path}: no results store yet (run `sixblanks run` first)")
    try:
        return duckdb.connect(str(path), read_only=read_only)
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            raise StoreBusy(
                f"{path} is being written by another process (the orchestrator); try again when it is done, "
                f"or read the run directories under {Path(out_dir) / 'runs'}"
            ) from None
        raise


def ensure_schema(con) -> None:
    for table, cols in SCHEMA.items():
        con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({cols})")


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


def _read_events(run_dir: Path) -> list[dict[str, Any]]:
    import orjson

    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().splitlines():
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            break  # a torn last line of a killed run: the rest is redone on resume
    return out


def run_tables(run_dir: Path) -> dict[str, Any]:
    """Rows of one run directory for every per-run table."""

    spec = json.loads((run_dir / "spec.json").read_text())
    status = (
        json.loads((run_dir / "status.json").read_text())
        if (run_dir / "status.json").exists()
        else {}
    )
    result = (
        json.loads((run_dir / "result.json").read_text())
        if (run_dir / "result.json").exists()
        else {}
    )
    events = _read_events(run_dir)
    rid = run_dir.name
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
        eval_rows.append(
            {
                "run_id": rid,
                "step": int(e["step"]),
                "split": "heldout",
                "score": float(e["score"]),
                "n": int(e["n"]),
                "success_rate": float(e.get("success_rate", e["score"])),
                "launched_tokens": float(pos.get("launched_tokens", 0.0)),
                "accepted_tokens": float(pos.get("accepted_tokens", 0.0)),
                "device_seconds": float(pos.get("device_seconds", 0.0)),
                "verifier_calls": float(pos.get("verifier_calls", 0.0)),
                "position": json.dumps(pos),
                "detail": json.dumps({spec["task"]["name"]: e.get("per_instance")}),
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
    return {
        "runs": [run_row],
        "budgets": budgets,
        "ledger": ledger_rows,
        "metrics": metrics,
        "evals": eval_rows,
        "discards": discards,
    }


PER_RUN_TABLES = ("runs", "budgets", "ledger", "metrics", "evals", "discards")


def ingest(
    out_dir: str | Path,
    experiment: dict[str, Any] | None = None,
    fairness: dict[str, Any] | None = None,
    run_ids: list[str] | None = None,
) -> dict[str, int]:
    """Ingest run directories (all, or ``run_ids``) idempotently. Returns rows per table after ingest."""

    out_dir = Path(out_dir)
    exp = experiment or json.loads((out_dir / "experiment.json").read_text())
    cfg = exp["config"]
    exp_id = cfg["name"]
    info = exp.get("warm_start", {})
    ids = run_ids if run_ids is not None else exp.get("runs", [])
    con = connect(out_dir)
    try:
        ensure_schema(con)
        con.execute("BEGIN TRANSACTION")
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
                    "warm_start_score": info.get("score"),
                    "code_version": exp.get("code_version"),
                    "ingested_at": time.time(),
                }
            ],
        )
        for rid in ids:
            run_dir = out_dir / "runs" / rid
            if not (run_dir / "spec.json").exists():
                continue
            tables = run_tables(run_dir)
            tables["runs"][0]["experiment_id"] = exp_id
            tables["runs"][0]["initial_policy_hash"] = info.get("policy_hash")
            for t in PER_RUN_TABLES:
                con.execute(f"DELETE FROM {t} WHERE run_id = ?", [rid])
                _insert(con, t, tables[t])
        if fairness is not None:
            con.execute("DELETE FROM fairness WHERE experiment_id = ?", [exp_id])
            rows = []
            flagged = {(f["arm"], f["item"]) for f in fairness["flags"]}
            for arm, rec in fairness["arms"].items():
                for item in fairness["held_constant"]:
                    reason = next(
                        (
                            f["reason"]
                            for f in fairness["flags"]
                            if f["arm"] == arm and f["item"] == item
                        ),
                        None,
                    )
                    ref = next(
                        (
                            f.get("reference")
                            for f in fairness["flags"]
                            if f["arm"] == arm and f["item"] == item
                        ),
                        None,
                    )
                    rows.append(
                        {
                            "experiment_id": exp_id,
                            "arm": arm,
                            "item": item,
                            "flagged": (arm, item) in flagged,
                            "reason": reason,
                            "value": json.dumps(rec["items"][item], default=str),
                            "reference": json.dumps(ref, default=str) if ref is not None else None,
                            "run_id": None,
                        }
                    )
            for f in fairness["flags"]:
                if f["item"] == "consumption":
                    rows.append(
                        {
                            "experiment_id": exp_id,
                            "arm": f["arm"],
                            "item": "consumption",
                            "flagged": True,
                            "reason": f["reason"],
                            "value": None,
                            "reference": None,
                            "run_id": f.get("run_id"),
                        }
                    )
            _insert(con, "fairness", rows)
        con.execute("COMMIT")
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in SCHEMA}
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except Exception:  # noqa: BLE001
            pass
        raise
    finally:
        con.close()
