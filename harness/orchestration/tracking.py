"""MLflow tracking from the run directories (so nothing is lost when the server is unreachable).

One parent run per experiment invocation, one nested run per arm x task x seed. Params are the
flattened blanks and config; metrics are the per-step metrics and every ledger counter (so curves
can be drawn against tokens); tags name the preset, seed, code version and fairness flags.

What was sent is recorded in ``OUT/mlflow_sync.json``
(:class:`~sixblanks.harness.layout.ExperimentDir`); ``sixblanks sync OUT`` sends what is missing.
Re-sending a run first deletes its earlier (possibly partial) MLflow run, so nothing is duplicated.

So that MLflow's UI shows a finished experiment: the experiment's kind is set (its UI opens on the
runs, not on an empty GenAI traces page), the parent run ends with the experiment's status
(:func:`experiment_status`; KILLED when a Ctrl-C stops the sync) and each run with its own, over
the runs' own times, and series that stay 0 for a whole run are not sent (:func:`nonzero_series`;
they stay in results.duckdb, and the run's ``sixblanks.zero_metrics`` tag names them).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from ..layout import ExperimentDir, read_json, write_json
from ..redact import redact
from ..version import code_fingerprint

PARAM_MAX = 6000
KEY_MAX = 250
# MLflow 3's UI opens an experiment on the page of its kind: without this tag it infers one and,
# with no runs seen yet, shows the GenAI traces page ("Traces 0"); this kind opens it on the runs
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")
# a series kept even when every point is 0: a score of 0 throughout is a result, not a blank chart
ALWAYS_LOGGED = frozenset({"eval.score"})
ZERO_TAG = "sixblanks.zero_metrics"


def tracking_uri(cfg_uri: str | None, out_dir: Path) -> str:
    return (
        cfg_uri
        or os.environ.get("MLFLOW_TRACKING_URI")
        or f"sqlite:///{ExperimentDir(out_dir).mlflow_db.resolve()}"
    )


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        text = json.dumps(value, default=str) if not isinstance(value, str) else value
        text = redact(text)  # no parameter carries a password, whatever a spec comes to hold
        if len(text) > PARAM_MAX:
            text = text[: PARAM_MAX - 20] + "...(truncated)"
        out[prefix[:KEY_MAX]] = text


def sync_state(exp_dir: ExperimentDir) -> dict[str, Any]:
    return read_json(exp_dir.mlflow_sync) or {"synced": {}, "pending": [], "errors": {}}


# a run's end state as MLflow's run status (a pending or running run is left RUNNING)
RUN_STATUS = {"finished": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}


def experiment_status(states: list[str]) -> str | None:
    """The MLflow status of an experiment's parent run, from its runs' states: FINISHED when every
    run finished, KILLED when one was stopped (Ctrl-C) or never started, else FAILED when one
    failed; None (it stays RUNNING) while one is running."""

    if "running" in states:
        return None
    if all(s == "finished" for s in states):
        return "FINISHED"
    if any(s in ("interrupted", "pending") for s in states):
        return "KILLED"
    return "FAILED"


@contextlib.contextmanager
def _signals_held():
    """Ctrl-C (SIGINT) and SIGTERM held back until the block ends, then acted on as they would
    have been. Their handlers are swapped, not the thread's signal mask: MLflow's threads would
    take a signal the main thread masks, and Python runs its handler in the main thread anyway."""

    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread sets handlers (and only it runs them)
        return
    seen: list[int] = []
    old = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            old[sig] = signal.signal(sig, lambda signum, _frame: seen.append(signum))
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if seen:
        signal.raise_signal(seen[0])


def _times(statuses, key: str) -> list[float]:
    return [float(st[key]) for st in statuses if isinstance(st.get(key), (int, float))]


def _millis(seconds: float | None) -> int | None:
    return None if seconds is None else int(seconds * 1000)


def _pending(state: dict[str, Any], run_ids: list[str]) -> list[str]:
    """The runs of ``run_ids`` not yet sent to an end (finished or failed)."""

    return [r for r in run_ids if state["synced"].get(r) not in ("finished", "failed")]


def _log_artifact(client, parent_id: str, path: Path) -> None:
    """A file, or a folder under its own name, added to the parent run (absent: skipped)."""

    if path.is_file():
        client.log_artifact(parent_id, str(path))
    elif path.exists():
        client.log_artifacts(parent_id, str(path), artifact_path=path.name)


class Tracker:
    def __init__(
        self,
        out_dir: str | Path,
        uri: str,
        experiment: str,
        enabled: bool = True,
        code_version: str | None = None,
    ):
        """``code_version``: the code fingerprint tagged on the parent run (default: of the code
        running now; a process that sends for another passes that one's)."""

        self.dir = ExperimentDir(out_dir)
        self.uri, self.experiment, self.enabled = uri, experiment, enabled
        self.code_version = code_version
        self._in_flight: str | None = None  # the MLflow run being sent

    def client(self):
        """An MLflow client for the tracking URI and the id of this tracker's MLflow experiment
        (created, with its artifacts under OUT, when missing)."""

        # fail fast on an unreachable server instead of retrying for minutes
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
        os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "ERROR")
        import logging

        logging.getLogger("mlflow").setLevel(logging.ERROR)
        logging.getLogger("alembic").setLevel(logging.ERROR)
        from mlflow.tracking import MlflowClient

        # a database store is made (or migrated) as the client opens it: a Ctrl-C half-way would
        # leave one MLflow cannot open again ("duplicate column name"); a server's calls are
        # bounded (the timeout above)
        server = self.uri.startswith(("http://", "https://", "databricks"))
        with contextlib.nullcontext() if server else _signals_held():
            client = MlflowClient(tracking_uri=self.uri)
            exp = client.get_experiment_by_name(self.experiment)
        key, kind = EXPERIMENT_KIND
        if exp is None:
            # artifacts go beside the experiment's results, never into the current directory's
            # ./mlruns
            exp_id = client.create_experiment(
                self.experiment,
                artifact_location=self.dir.mlflow_artifacts.resolve().as_uri(),
                tags={key: kind},
            )
        else:
            exp_id = exp.experiment_id
            if key not in exp.tags:  # a store made before the tag was set; a kind chosen is kept
                client.set_experiment_tag(exp_id, key, kind)
        return client, exp_id

    def sync(
        self,
        run_ids: list[str],
        fairness: dict[str, Any] | None = None,
        artifacts: list[Path] | None = None,
    ) -> dict[str, Any]:
        """Send every run of ``run_ids`` not yet synced (finished ones are marked synced)."""

        state = sync_state(self.dir)
        if not self.enabled:
            return state
        todo = [r for r in run_ids if state["synced"].get(r) not in ("finished", "failed")]
        client = None
        try:
            client, exp_id = self.client()
            statuses = {rid: self.dir.run(rid).read_status() for rid in run_ids}
            parent_id = self._parent(client, exp_id, state, statuses)
            flagged = {f["arm"] for f in (fairness or {}).get("flags", [])}
            for rid in todo:
                run_state = self._send_run(client, exp_id, parent_id, rid, flagged)
                state["synced"][rid] = run_state
                state["errors"].pop(rid, None)
            for art in artifacts or []:
                _log_artifact(client, parent_id, Path(art))
            state["pending"] = _pending(state, run_ids)
            status = experiment_status([st.get("state", "pending") for st in statuses.values()])
            if status is not None:  # else a run is still running: so is the experiment
                end = max(_times(statuses.values(), "updated"), default=None)
                client.set_terminated(parent_id, status, end_time=_millis(end))
            state["parent_status"] = status or "RUNNING"
            state["last_error"] = None
        except KeyboardInterrupt:  # Ctrl-C (or, beside, the parent's SIGTERM) while sending
            self._interrupted(client, state, run_ids)
            raise
        except Exception as exc:  # noqa: BLE001 - server unreachable: go on, events stay on disk
            state["pending"] = sorted(
                set(state.get("pending", [])) | {r for r in todo if r not in state["synced"]}
            )
            # MLflow's errors quote the request's URL, user-info included: masked before it is
            # cut (a cut URI would no longer be recognised) and before it reaches the file
            state["last_error"] = f"{type(exc).__name__}: {redact(str(exc))[:300]}"
        write_json(self.dir.mlflow_sync, state)
        return state

    def _parent(self, client, exp_id: str, state: dict[str, Any], statuses: dict) -> str:
        """The experiment's parent run: the one ``state`` names while it is active, else a new one
        (recorded in ``state`` and on disk at once)."""

        parent_id = state.get("parent_run_id")
        if parent_id:
            try:
                if client.get_run(parent_id).info.lifecycle_stage == "active":
                    return parent_id
            except Exception:  # noqa: BLE001 - deleted or unknown: a new parent
                pass
        parent = client.create_run(
            exp_id,
            run_name=f"{self.experiment} {time.strftime('%Y-%m-%d %H:%M:%S')}",
            start_time=_millis(min(_times(statuses.values(), "started"), default=None)),
            tags={
                "sixblanks.kind": "experiment",
                "sixblanks.code_version": self.code_version or code_fingerprint(),
            },
        )
        parent_id = parent.info.run_id
        state["parent_run_id"] = parent_id
        # recorded at once: a sync stopped from here on (Ctrl-C) still ends this parent (KILLED),
        # and the next sync adds to it rather than leaving it RUNNING
        write_json(self.dir.mlflow_sync, state)
        if self.dir.experiment.exists():
            client.log_artifact(parent_id, str(self.dir.experiment))
        return parent_id

    def _interrupted(self, client, state: dict[str, Any], run_ids: list[str]) -> None:
        """A Ctrl-C while sending: best effort (the next sync ends them again), the run being sent
        (a partial copy, replaced by the next sync) and the parent ended KILLED; the state
        written."""

        parent_id = state.get("parent_run_id")
        if client is not None and self._in_flight:
            with contextlib.suppress(Exception):
                client.set_terminated(self._in_flight, "KILLED")
        if client is not None and parent_id:
            with contextlib.suppress(Exception):
                client.set_terminated(parent_id, "KILLED")
                state["parent_status"] = "KILLED"
        state["pending"] = _pending(state, run_ids)
        write_json(self.dir.mlflow_sync, state)

    def _send_run(self, client, exp_id: str, parent_id: str, rid: str, flagged: set[str]) -> str:
        from mlflow.entities import Param

        rd = self.dir.run(rid)
        spec = rd.read_spec()
        status = rd.read_status()
        # replace an earlier (partial) upload of the same run
        for old in client.search_runs([exp_id], filter_string=f"tags.`sixblanks.run_id` = '{rid}'"):
            client.delete_run(old.info.run_id)
        tags = {
            "mlflow.parentRunId": parent_id,
            "sixblanks.run_id": rid,
            "sixblanks.arm": spec.arm,
            "preset": spec.preset,
            "seed": str(spec.seed),
            "task": spec.task_name,
            "sixblanks.code_version": str(spec.code_version),
            "sixblanks.status": status.get("state", "pending"),
            "fairness.flagged": str(spec.arm in flagged).lower(),
        }
        run = client.create_run(
            exp_id,
            run_name=spec.label,
            start_time=_millis(status.get("started")),  # the run's own time, not the sync's
            tags=tags,
        )
        run_id = self._in_flight = run.info.run_id
        params: dict[str, str] = {}
        _flatten("blanks", spec.blanks, params)
        for key in ("optimizer", "rollout", "budget", "eval", "model", "task"):
            _flatten(key, getattr(spec, key), params)
        params["preset"], params["seed"], params["arm"] = spec.preset, str(spec.seed), spec.arm
        plist = [Param(k, v) for k, v in params.items()]
        for i in range(0, len(plist), 100):
            client.log_batch(run_id, params=plist[i : i + 100])
        zero = log_metrics(client, run_id, run_metrics(rd.read_events(), int(time.time() * 1000)))
        if zero:  # said where the charts would be, so that their absence is not a question
            text = f"{len(zero)} series 0 throughout, not logged (in results.duckdb): "
            client.set_tag(run_id, ZERO_TAG, (text + ", ".join(zero))[:5000])
        client.log_artifact(run_id, str(rd.spec))
        state = status.get("state", "pending")
        if state in RUN_STATUS:
            client.set_terminated(
                run_id, RUN_STATUS[state], end_time=_millis(status.get("updated"))
            )
        self._in_flight = None
        return state


def run_metrics(events, ts: int) -> list[tuple[str, float, int]]:
    """(key, value, step) of every numeric step metric and evaluation of a run's events, each
    (key, step) once: the curves MLflow draws against the step."""

    out: dict[tuple[str, int], float] = {}
    for e in events:
        step = int(e.get("step", 0))
        if e["type"] == "step":
            for k, v in e.items():
                if k not in ("type", "step") and isinstance(v, (int, float)) and v == v:
                    out[k[:KEY_MAX], step] = float(v)
        elif e["type"] == "eval":
            out["eval.score", step] = float(e["score"])
            for c in ("launched_tokens", "accepted_tokens", "device_seconds", "verifier_calls"):
                out[f"eval.at.{c}", step] = float(e["position"].get(c, 0.0))
            for k, v in (e.get("shift") or {}).items():  # a DPO arm's shift evaluation
                if isinstance(v, (int, float)) and v == v:
                    out[k[:KEY_MAX], step] = float(v)
    return [(k, v, step) for (k, step), v in out.items()]


def log_metrics(
    client, run_id: str, metrics: list[tuple[str, float, int]], ts: int = 0
) -> list[str]:
    """Send a new run's metric points, less the series that stay 0 (:func:`nonzero_series`;
    returns their keys). A SQL store (the default SQLite file, or a database the
    tracking URI names) takes them as two bulk inserts into MLflow's own tables, in one
    transaction: MLflow's ``log_batch`` builds and flushes an ORM object per point (about 0.2 ms
    each, some 15,000 points a run of the default experiment), which made MLflow the slowest part
    of an experiment after its training. Any other store (a tracking server) gets ``log_batch``."""

    metrics, zero = nonzero_series(metrics)
    ts = ts or int(time.time() * 1000)
    store = getattr(getattr(client, "_tracking_client", None), "store", None)
    try:
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    except ImportError:  # an MLflow without the SQL store: the public API
        SqlAlchemyStore = ()  # noqa: N806
    if isinstance(store, SqlAlchemyStore):
        _bulk_insert(store, run_id, metrics, ts)
        return zero
    from mlflow.entities import Metric

    points = [Metric(k, v, ts, step) for k, v, step in metrics]
    for i in range(0, len(points), 1000):
        client.log_batch(run_id, metrics=points[i : i + 1000])
    return zero


def nonzero_series(
    metrics: list[tuple[str, float, int]],
) -> tuple[list[tuple[str, float, int]], list[str]]:
    """``metrics`` less every series whose points are all 0, and those series' keys (sorted).
    Most of a run's counters stay 0 (a discard reason the arm never meets, a search counter of an
    arm that does not search): sent, each is a flat chart, some fifty of a run's hundred, that
    buries the ones that move. They stay in results.duckdb; the score is always sent."""

    moving = {k for k, v, _ in metrics if v != 0}  # NaN != 0: a NaN point is sent
    zero = {k for k, _, _ in metrics} - moving - ALWAYS_LOGGED
    return [m for m in metrics if m[0] not in zero], sorted(zero)


def _bulk_insert(store, run_id: str, metrics: list[tuple[str, float, int]], ts: int) -> None:
    """The rows MLflow's SQL store writes for ``log_batch`` on a run with no metrics yet: every
    point into ``metrics`` and each key's latest point (highest step, then value) into
    ``latest_metrics``, NaN as 0 with ``is_nan`` and infinities as the largest float, as MLflow
    stores them."""

    from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric

    cols = ("run_uuid", "key", "value", "timestamp", "step", "is_nan")
    rows, latest = [], {}
    for key, value, step in metrics:
        is_nan, value = store.sanitize_metric_value(value)
        row = (run_id, key, value, ts, step, is_nan)
        rows.append(row)
        old = latest.get(key)
        if old is None or (step, value) > (old[4], old[2]):
            latest[key] = row
    with store.ManagedSessionMaker(read_only=False) as session:
        conn = session.connection()
        mark = {"qmark": "?", "format": "%s", "pyformat": "%s"}.get(conn.dialect.paramstyle)
        for table, values in (
            (SqlMetric.__table__, rows),
            (SqlLatestMetric.__table__, list(latest.values())),
        ):
            if not values:
                continue
            if mark is None:  # a driver of another parameter style: SQLAlchemy binds the rows
                conn.execute(table.insert(), [dict(zip(cols, r)) for r in values])
                continue
            sql = (
                f"INSERT INTO {table.name} ({', '.join(cols)}) "
                f"VALUES ({', '.join([mark] * len(cols))})"
            )
            conn.exec_driver_sql(sql, values)
