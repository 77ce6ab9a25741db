"""The results store: ``results.duckdb`` in the experiment's output directory.

This module alone writes it, from the process that owns the experiment (the CLI's orchestrator,
ladder or sweep); runs write only their own directories. Every writer replaces a whole unit in one
transaction, so writing it twice adds nothing:

    ingest          the experiment's row, every row of each ingested run (a resumed run's rows
                    replace its partial ones) and the fairness audit
    write_ladder    the ladder rows of one experiment and arm
    write_trials    the search trials of one experiment

Bulk inserts go through Arrow; the rows come from ``store_rows`` (run directories, the audit). The
tables are documented in docs/results-schema.md (its column tables generated from ``SCHEMA``:
harness/store/schema_doc.py).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from sixblanks.budgets.counters import DISCARD_REASONS

from ..errors import SixblanksError
from ..layout import ExperimentDir, read_json
from .rows import LEDGER_COLUMNS, fairness_rows, run_tables, trial_rows

# A line of columns too long for 100 columns goes on in the next literal ("""...""" """...): the
# same text, line breaks and indentation as one literal.
SCHEMA: dict[str, str] = {
    "experiments": """
        experiment_id VARCHAR PRIMARY KEY, name VARCHAR, config JSON, warm_start_key VARCHAR,
        initial_policy_hash VARCHAR, warm_start_score DOUBLE, code_version VARCHAR, """
    """ingested_at DOUBLE""",
    "runs": """
        run_id VARCHAR PRIMARY KEY, experiment_id VARCHAR, arm VARCHAR, preset VARCHAR, """
    """task VARCHAR,
        seed BIGINT, status VARCHAR, spec JSON, blanks JSON, initial_policy_hash VARCHAR, """
    """steps BIGINT,
        ended_because VARCHAR, error VARCHAR, started_at DOUBLE, updated_at DOUBLE, """
    """finished_at DOUBLE,
        final_score DOUBLE, placement JSON, shared_from VARCHAR""",
    "budgets": "run_id VARCHAR, counter VARCHAR, limit_value DOUBLE, consumed DOUBLE",
    "ledger": "run_id VARCHAR, step BIGINT, "
    + ", ".join(f"{c} DOUBLE" for c in LEDGER_COLUMNS)
    + ", "
    + ", ".join(f"discarded_{r} DOUBLE" for r in DISCARD_REASONS),
    "metrics": "run_id VARCHAR, step BIGINT, name VARCHAR, value DOUBLE",
    "evals": """
        run_id VARCHAR, step BIGINT, split VARCHAR, score DOUBLE, n BIGINT, success_rate DOUBLE,
        launched_tokens DOUBLE, accepted_tokens DOUBLE, device_seconds DOUBLE, """
    """verifier_calls DOUBLE,
        position JSON, detail JSON, eval_generated_tokens DOUBLE, eval_verifier_calls DOUBLE,
        eval_device_seconds DOUBLE, eval_wall_seconds DOUBLE, env_steps DOUBLE, wall_seconds DOUBLE,
        pass_at JSON, eval_judge_calls DOUBLE, search_mode VARCHAR, search_score DOUBLE,
        search_generated_tokens DOUBLE, search_env_steps DOUBLE, search_verifier_calls DOUBLE""",
    "discards": "run_id VARCHAR, step BIGINT, reason VARCHAR, rollouts DOUBLE, tokens DOUBLE",
    "census": """
        run_id VARCHAR, step BIGINT, rounds BIGINT, prompts_sampled BIGINT, groups_launched BIGINT,
        groups_varied BIGINT, groups_kept BIGINT, dropped_all_correct BIGINT, """
    """dropped_all_wrong BIGINT,
        dropped_zero_variance BIGINT, dropped_surplus BIGINT, """
    """dropped_accuracy BIGINT, responses_launched BIGINT,
        responses_accepted BIGINT, tokens_launched BIGINT, tokens_accepted BIGINT, cap_hit BOOLEAN,
        skipped_all_correct BIGINT, skipped_all_wrong BIGINT""",
    "fairness": """
        experiment_id VARCHAR, arm VARCHAR, item VARCHAR, flagged BOOLEAN, reason VARCHAR, """
    """value JSON,
        reference JSON, run_id VARCHAR""",
    "inert": "experiment_id VARCHAR, arm VARCHAR, blank VARCHAR, note VARCHAR",
    "trials": """
        experiment_id VARCHAR, arm VARCHAR, trial BIGINT, state VARCHAR, params JSON, value DOUBLE,
        launched_tokens DOUBLE, device_seconds DOUBLE, pruned_at DOUBLE, """
    """run_id VARCHAR, split VARCHAR""",
    "ladder": """
        experiment_id VARCHAR, arm VARCHAR, rung BIGINT, rung_name VARCHAR, variant VARCHAR, """
    """status VARCHAR,
        evidence VARCHAR, ci_low DOUBLE, ci_high DOUBLE, detail JSON""",
    "selfplay_evals": """
        run_id VARCHAR, step BIGINT, split VARCHAR, opponent VARCHAR, games BIGINT, wins BIGINT,
        losses BIGINT, draws BIGINT, win_rate DOUBLE, winnable BIGINT, launched_tokens DOUBLE,
        eval_generated_tokens DOUBLE, eval_verifier_calls DOUBLE, eval_env_steps DOUBLE,
        eval_device_seconds DOUBLE, eval_wall_seconds DOUBLE""",
}
"""Every table of the store and its columns (``name TYPE [constraint]``, comma-separated). The one
statement of the results schema: docs/results-schema.md's column tables are generated from it and
from each column's meaning in harness/store/schema_doc.py (a new column needs one there), and
tests/test_schema_contract.py checks that every column the reports read is here, its type
compatible."""


def schema_columns(table: str) -> dict[str, str]:
    """``{column: type}`` of ``table`` as :data:`SCHEMA` declares it, in its order."""

    return dict(col.split()[:2] for col in SCHEMA[table].split(","))


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
                f"{path} is being written by another process (the orchestrator); try again when it "
                f"is done, or read the run directories under {exp_dir.runs}"
            ) from None
        raise StoreDamaged(path, exc) from None
    except duckdb.Error as exc:
        raise StoreDamaged(path, exc) from None


class StoreDamaged(SixblanksError):
    """results.duckdb cannot be read (truncated, corrupted): it is derived from the run
    directories, so :func:`rebuild` sets it aside and makes it again (exit code 2)."""

    exit_code = 2

    def __init__(self, path: Path, exc: BaseException):
        self.path = path
        super().__init__(
            f"{path} is damaged ({str(exc)[:160]}): `sixblanks ingest {path.parent}` sets it aside "
            "and rebuilds it from the run directories"
        )


def rebuild(out_dir: str | Path, log: Callable[[str], None] | None = None) -> dict[str, int]:
    """Make ``out_dir``'s store again from its files: every run directory of the experiment, the
    fairness audit, the ablation ladder, a sweep's trials. A damaged store is first renamed to
    ``results.duckdb.damaged-<time>`` (kept, never deleted). Returns rows per table."""

    exp_dir = ExperimentDir(out_dir)
    say = log or (lambda _m: None)
    if not exp_dir.experiment.exists():
        raise SixblanksError(f"{exp_dir.experiment}: no experiment here to rebuild the store from")
    try:
        return _rebuild(out_dir, exp_dir, say)
    except StoreDamaged as exc:  # nothing of it is lost: every row comes from the files
        path = exp_dir.results_db
        aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        os.replace(path, aside)
        for extra in path.parent.glob(path.name + ".wal"):
            os.replace(extra, aside.with_name(aside.name + ".wal"))
        say(f"{path} is damaged ({str(exc).split('(', 1)[-1][:100]}...): set aside as {aside.name}")
        return _rebuild(out_dir, exp_dir, say)


def _rebuild(out_dir, exp_dir: ExperimentDir, say: Callable[[str], None]) -> dict[str, int]:
    from ..layout import SweepDir

    path = exp_dir.results_db
    exp = exp_dir.read_experiment()
    counts = ingest(out_dir, exp, read_json(exp_dir.fairness, None))
    if exp_dir.ladder.exists():
        lad = read_json(exp_dir.ladder, {})
        write_ladder(out_dir, exp["config"]["name"], lad["arm"], lad["rungs"])
    summary = SweepDir(out_dir).sweep_summary
    if summary.exists():
        write_trials(out_dir, exp["config"]["name"], trial_rows(read_json(summary, {})))
    with _transaction(out_dir) as con:
        counts = _counts(con)
    say(f"{path}: " + ", ".join(f"{n} {t}" for t, n in counts.items() if n))
    return counts


def ensure_schema(con) -> None:
    """Create the tables; a store made by an earlier version gains the columns added since."""

    for table, cols in SCHEMA.items():
        con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({cols})")
        for name, kind in schema_columns(table).items():
            con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {name} {kind}")


def _arrow(rows: list[dict[str, Any]] | pa.Table) -> pa.Table | None:
    """``rows`` as an Arrow table; None when there are none."""

    if isinstance(rows, list):
        rows = pa.Table.from_pylist(rows) if rows else None
    return rows if rows is not None and rows.num_rows else None


def _insert(con, table: str, rows: list[dict[str, Any]] | pa.Table) -> None:
    """Bulk insert through Arrow (no per-row executemany)."""
    rows = _arrow(rows)
    if rows is None:
        return
    con.register("_incoming", rows)
    cols = ", ".join(rows.column_names)
    con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _incoming")
    con.unregister("_incoming")


PER_RUN_TABLES = (
    "runs",
    "budgets",
    "ledger",
    "metrics",
    "evals",
    "discards",
    "census",
    "selfplay_evals",
)


@contextmanager
def _transaction(out_dir: str | Path) -> Iterator[Any]:
    """A connection to the store with its schema, inside one transaction: committed when the block
    ends, rolled back (nothing written) when it raises."""

    import duckdb

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
    except (duckdb.IOException, duckdb.InternalException) as exc:  # a block it cannot read
        from ..errors import DiskFull, disk_full, disk_full_message

        path = ExperimentDir(out_dir).results_db
        if disk_full(exc):  # rolled back: the store holds what it held before
            raise DiskFull(disk_full_message(exc, str(path))) from None
        raise StoreDamaged(path, exc) from None
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
    """Ingest run directories (all, or ``run_ids``) idempotently. Returns rows per table after
    ingest."""

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
        present = [rid for rid in dict.fromkeys(ids) if exp_dir.run(rid).exists()]
        for i in range(0, len(present), INGEST_CHUNK):
            _ingest_runs(con, exp_dir, present[i : i + INGEST_CHUNK], exp_id, info)
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


INGEST_CHUNK = 64
"""Runs whose rows are gathered in memory and written together by :func:`ingest`."""


def _ingest_runs(con, exp_dir: ExperimentDir, rids: list[str], exp_id: str, info: dict) -> None:
    """The rows of runs ``rids`` (existing directories) in place of any they had: one delete and one
    insert a table for all of them (a delete a run scanned each table once a run)."""

    gathered: dict[str, list[pa.Table]] = {t: [] for t in PER_RUN_TABLES}
    for rid in rids:
        tables = run_tables(exp_dir.run(rid).path)
        tables["runs"][0]["experiment_id"] = exp_id
        tables["runs"][0]["initial_policy_hash"] = info.get("policy_hash")
        for t in PER_RUN_TABLES:
            rows = _arrow(tables[t])
            if rows is not None:
                gathered[t].append(rows)
    for t in PER_RUN_TABLES:
        con.execute(f"DELETE FROM {t} WHERE run_id IN (SELECT unnest(?))", [rids])
        if not gathered[t]:
            continue
        try:
            # runs' tables may differ in their columns (a field only some runs record) or in a
            # column's inferred type (all null in one run): missing columns become nulls
            parts = [pa.concat_tables(gathered[t], promote_options="permissive")]
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # types Arrow cannot unify: run by run
            parts = gathered[t]
        for rows in parts:
            _insert(con, t, rows)


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


def clear(out_dir: str | Path) -> None:
    """Delete every row of every table, in one transaction: the experiment's definition changed
    (``--add``, harness/orchestration/definition.py) and the store is rebuilt from the current
    runs' directories."""

    with _transaction(out_dir) as con:
        for table in SCHEMA:
            con.execute(f"DELETE FROM {table}")
