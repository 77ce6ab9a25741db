"""Results store (DuckDB) and MLflow: every table, idempotent ingest, partial runs, unreachable
tracking."""

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from sixblanks.harness.config import validate_mapping
from sixblanks.harness.fairness.audit import HELD_CONSTANT
from sixblanks.harness.layout import RunDir, read_status, write_json
from sixblanks.harness.orchestration.command import run_experiment
from sixblanks.harness.orchestration.plan import prepare_experiment
from sixblanks.harness.orchestration.runner import execute_run
from sixblanks.harness.store.database import (
    SCHEMA,
    StoreBusy,
    connect,
    ensure_schema,
    ingest,
    write_ladder,
    write_trials,
)

from .conftest import ROOT

# one worker builds the module-scoped fixtures once (split across two, each built its own)
pytestmark = pytest.mark.xdist_group("store")


TINY = {
    "name": "store",
    "task": {"name": "arithmetic", "eval_size": 16},
    "rollout": {"max_new_tokens": 6, "prompts_per_step": 4, "group_size": 4},
    "warm_start": {"steps": 40, "num_demos": 300},
    "budget": {"launched_tokens": 900},
    "seeds": [0],
    "arms": {"grpo": {"preset": "grpo"}, "dapo": {"preset": "dapo"}},
}


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    out = tmp_path_factory.mktemp("exp")
    # as `sixblanks run` does: the runs, the store, then the report while MLflow gets the runs
    res, _ = run_experiment(validate_mapping(TINY), out)
    assert not res["failures"]
    return out, res


def _counts(out):
    con = connect(out, read_only=True)
    try:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in SCHEMA}
    finally:
        con.close()


def test_every_table_is_queryable(experiment):
    out, res = experiment
    con = connect(out, read_only=True)
    q = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    assert q("SELECT name FROM experiments") == [("store",)]
    runs = q(
        "SELECT arm, preset, status, steps, initial_policy_hash IS NOT NULL FROM runs ORDER BY arm"
    )
    assert [(r[0], r[1], r[2], r[4]) for r in runs] == [
        ("dapo", "dapo", "finished", True),
        ("grpo", "grpo", "finished", True),
    ]
    # the ledger has one row per step with every counter; its last row equals the run's result
    for rid, steps in q("SELECT run_id, steps FROM runs"):
        n, last = q(f"SELECT count(*), max(launched_tokens) FROM ledger WHERE run_id = '{rid}'")[0]
        result = json.loads((out / "runs" / rid / "result.json").read_text())
        assert n == steps and last == result["counters"]["launched_tokens"]
        assert q(f"SELECT consumed FROM budgets WHERE run_id = '{rid}'")[0][0] == last <= 900
    assert q("SELECT count(DISTINCT name) FROM metrics")[0][0] > 10
    assert q("SELECT min(step), count(*) FROM evals WHERE split = 'test'")[0][1] >= 4
    # each evaluation's own cost: greedy, one sample per instance, one verifier call each
    for n, calls, tokens, secs in q(
        "SELECT n, eval_verifier_calls, eval_generated_tokens, eval_device_seconds FROM evals"
    ):
        assert calls == n and n <= tokens <= n * 6 and secs > 0
    dapo_discards = q(
        "SELECT reason, sum(tokens) FROM discards JOIN runs USING (run_id) WHERE arm = 'dapo' "
        "GROUP BY reason"
    )
    assert dapo_discards and dapo_discards[0][0] == "dynamic_sampling"
    total = q(
        "SELECT sum(discarded_dynamic_sampling) FROM ledger l JOIN runs r USING (run_id) "
        "WHERE r.arm = 'dapo' AND l.step = r.steps - 1"
    )[0][0]
    assert (
        total == dapo_discards[0][1]
    )  # per-step discards add up to the ledger's cumulative counter
    # the census: every launched group is kept or dropped by a verdict, and the groups dapo dropped
    # account for its dynamic-sampling discards exactly
    census = q(
        "SELECT arm, sum(groups_launched), sum(groups_kept + dropped_all_correct"
        " + dropped_all_wrong + dropped_zero_variance + dropped_surplus),"
        " sum(tokens_launched - tokens_accepted),"
        " count(*) FROM census JOIN runs USING (run_id) GROUP BY arm ORDER BY arm"
    )
    steps = dict(q("SELECT arm, steps FROM runs"))
    for arm, launched, accounted, _, n in census:
        assert launched == accounted and n == steps[arm]
    assert census[0][0] == "dapo" and census[0][3] == dapo_discards[0][1]
    assert census[1][3] == 0  # grpo keeps every group
    assert (
        q("SELECT count(*) FROM fairness WHERE flagged AND arm = 'dapo' AND item = 'reward'")[0][0]
        == 1
    )
    assert (
        q("SELECT count(*) FROM trials")[0][0] == 0 and q("SELECT count(*) FROM ladder")[0][0] == 0
    )
    # the measured audit: one row per arm x item, each a value (a hash, not a proxy)
    items = dict(q("SELECT item, value FROM fairness WHERE arm = 'grpo' AND run_id IS NULL"))
    assert set(items) == set(HELD_CONSTANT)
    assert len(json.loads(items["tokenizer"])["vocab_merges"]) == 16
    assert json.loads(items["global_batch"])["measured"]["prompts_trained"] > 0
    # one on-policy update per batch: every ratio is 1, so DAPO's clip-higher never acted, in
    # either arm; the inert table says so, and the report prints it beside the difference
    assert q("SELECT max(value), min(value) FROM metrics WHERE name IN ('ratio_max', 'ratio_min')")[
        0
    ] == (
        1.0,
        1.0,
    )
    inert = q("SELECT arm, blank, note FROM inert ORDER BY arm")
    assert [(a, b) for a, b, _ in inert if b == "weight.eps_high"] == [
        ("dapo", "weight.eps_high"),
        ("grpo", "weight.eps_high"),
    ]
    assert all("every importance ratio was 1" in n for _, b, n in inert if b == "weight.eps_high")
    con.close()
    from sixblanks.reports.build import build_report

    html = build_report(out, resamples=50).read_text()
    assert "never acted: every importance ratio was 1" in html
    # the diagnostics table: DAPO's trainable-group fraction, measured before its filtering, is
    # the mean of the metric over its steps (and below 1: it had groups to drop)
    con = connect(out, read_only=True)
    tgf = con.execute(
        "SELECT avg(value) FROM metrics JOIN runs USING (run_id) "
        "WHERE arm = 'dapo' AND name = 'trainable_group_frac'"
    ).fetchone()[0]
    con.close()
    row = html[html.index("Training diagnostics") :]
    row = row[row.index("<td>dapo</td>") :]
    assert 0 < tgf < 1 and row.startswith(
        f"<td>dapo</td><td>no (single use)</td><td>0.2/0.28 (absolute)</td><td>{tgf:.3f}</td>"
    )


def test_ingesting_twice_changes_nothing(experiment):
    out, _ = experiment
    before = _counts(out)
    ingest(out)
    ingest(out)
    assert _counts(out) == before


def test_ingest_writes_runs_whose_tables_differ_in_columns_and_types(tmp_path, monkeypatch):
    """The runs' rows are written a table at a time: a column only some runs have, a column null in
    one run and a float or a string in another, and one Arrow cannot unify across runs (an integer
    in one, a string in another: written run by run, cast by DuckDB) all land as each run wrote
    them; an id listed twice is written once, a missing run directory is skipped, and a second
    ingest with changed rows replaces them."""

    import pyarrow as pa

    from sixblanks.harness.layout import ExperimentDir
    from sixblanks.harness.store import database

    version = {"loss": 0.5}

    def tables(path):
        rid = path.name
        run = {"run_id": rid, "arm": "grpo", "seed": {"a": 0, "b": 1, "c": "2"}[rid]}
        run |= {"a": {"error": None}, "b": {"error": "boom", "final_score": 0.25}}.get(rid, {})
        value = {"a": version["loss"], "b": 1, "c": None}[rid]  # float, integer, null
        metrics = pa.Table.from_pylist([{"run_id": rid, "step": 1, "name": "loss", "value": value}])
        empty = {t: [] for t in database.PER_RUN_TABLES}
        return empty | {"runs": [run], "metrics": metrics}

    monkeypatch.setattr(database, "run_tables", tables)
    exp_dir = ExperimentDir(tmp_path)
    for rid in "abc":  # a run exists once its spec is written
        exp_dir.run(rid).path.mkdir(parents=True)
        write_json(exp_dir.run(rid).spec, {"run_id": rid})
    experiment = {"config": {"name": "mixed"}, "runs": ["a", "b", "a", "c", "gone"]}
    counts = ingest(tmp_path, experiment)
    assert counts["runs"] == counts["metrics"] == 3

    def stored():
        return _rows(
            tmp_path,
            "SELECT r.run_id, r.experiment_id, r.seed, r.error, r.final_score, m.value "
            "FROM runs r JOIN metrics m USING (run_id) ORDER BY r.run_id",
        )

    assert stored() == [
        ("a", "mixed", 0, None, None, 0.5),
        ("b", "mixed", 1, "boom", 0.25, 1.0),
        ("c", "mixed", 2, None, None, None),
    ]
    version["loss"] = 0.75
    assert ingest(tmp_path, experiment) == counts
    assert stored()[0] == ("a", "mixed", 0, None, None, 0.75)


def test_mlflow_has_nested_runs_with_blanks_as_params(experiment):
    import mlflow

    out, res = experiment
    assert res["mlflow"]["pending"] == [] and res["mlflow"]["last_error"] is None
    mlflow.set_tracking_uri(f"sqlite:///{out / 'mlflow.db'}")
    df = mlflow.search_runs(experiment_names=["store"])
    children = df[df["tags.mlflow.parentRunId"].notna()]
    assert len(children) == 2 and set(children["tags.preset"]) == {"grpo", "dapo"}
    assert len(df) == 3  # one parent
    row = children[children["tags.preset"] == "dapo"].iloc[0]
    assert row["params.blanks.weight.eps_high"] == "0.28"
    assert row["params.blanks.data.dynamic_sampling"] == "true"
    assert row["tags.fairness.flagged"] == "true"
    client = mlflow.tracking.MlflowClient()
    hist = client.get_metric_history(row["run_id"], "ledger.launched_tokens")
    assert len(hist) > 2 and hist[-1].value <= 900
    # the report, built while the runs were sent, reached the parent run once it was written
    parent = df[df["tags.mlflow.parentRunId"].isna()].iloc[0]["run_id"]
    report = {a.path for a in client.list_artifacts(parent, "report")}
    assert {"report/index.html", "report/scores.csv"} <= report


def test_a_report_built_after_the_runs_reaches_the_parent_run_and_no_run_is_sent_twice(
    experiment,
):
    """A claim's looks track their runs without a report (``run_experiment(report=False)``) and
    build it once after the last look (``report_experiment``): the report is written and added to
    the experiment's parent run, and MLflow gets no run again (the same runs, one parent)."""

    import shutil
    import sqlite3

    from sixblanks.harness.orchestration.command import report_experiment

    out, res = experiment

    def mlflow_runs():
        con = sqlite3.connect(out / "mlflow.db")
        try:
            return con.execute("SELECT run_uuid, status FROM runs ORDER BY run_uuid").fetchall()
        finally:
            con.close()

    before = mlflow_runs()
    parent = json.loads((out / "mlflow_sync.json").read_text())["parent_run_id"]
    sent = out / "mlartifacts" / parent / "artifacts" / "report"
    assert (sent / "index.html").is_file()
    shutil.rmtree(sent)
    shutil.rmtree(out / "report")
    path = report_experiment(validate_mapping(TINY), out, res)
    assert path.is_relative_to(out / "report") and path.exists()
    written = sorted(p.name for p in (out / "report").iterdir())
    assert sorted(p.name for p in sent.iterdir()) == written and "index.html" in written
    assert (sent / "index.html").read_bytes() == (out / "report" / "index.html").read_bytes()
    assert mlflow_runs() == before and len(before) == 3
    assert json.loads((out / "mlflow_sync.json").read_text())["parent_run_id"] == parent


def test_mlflow_bulk_insert_stores_what_log_batch_stores(tmp_path):
    """The SQL store's bulk path writes the same metric histories and latest values as MLflow's own
    ``log_batch`` (a second method, on the same points): NaN, infinities, several steps per key,
    a key whose latest point is not its last."""

    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    from sixblanks.harness.orchestration.tracking import log_metrics

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'm.db'}")
    exp = client.create_experiment("bulk", artifact_location=(tmp_path / "a").as_uri())
    points = [("loss", 0.5, 0), ("loss", float("nan"), 1), ("loss", 0.25, 2),
              ("grad", float("inf"), 0), ("grad", float("-inf"), 3), ("eval.score", 0.1, 7),
              ("late", 2.0, 5), ("late", 1.0, 4)]  # fmt: skip
    ours, theirs = client.create_run(exp).info.run_id, client.create_run(exp).info.run_id
    log_metrics(client, ours, points, ts=1234)
    client.log_batch(theirs, metrics=[Metric(k, v, 1234, s) for k, v, s in points])

    def stored(run_id):
        keys = sorted(client.get_run(run_id).data.metrics)
        hist = {
            k: sorted(
                (m.step, m.timestamp, str(m.value)) for m in client.get_metric_history(run_id, k)
            )
            for k in keys
        }
        return client.get_run(run_id).data.metrics, hist

    mine, reference = stored(ours), stored(theirs)
    assert str(mine) == str(reference)  # str: NaN compares unequal to itself
    assert mine[0]["late"] == 2.0 and len(mine[1]["loss"]) == 3


def test_mlflow_looks_finished(experiment):
    """What MLflow's UI shows after `sixblanks run`: the experiment opens on its runs (its kind
    set), the parent and every run ended FINISHED over the runs' own times, and no chart of a
    series that stayed 0 all run (those stay in DuckDB, named in a tag)."""

    from mlflow.tracking import MlflowClient

    from sixblanks.harness.store.database import connect

    out, _ = experiment
    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name("store")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    runs = client.search_runs([exp.experiment_id])
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert parent.info.status == "FINISHED" and parent.info.end_time
    assert [c.info.status for c in children] == ["FINISHED", "FINISHED"]
    # the parent spans its runs: it started when the first did, not when MLflow was sent them
    assert parent.info.start_time <= min(c.info.start_time for c in children)
    con = connect(out, read_only=True)
    try:
        for child in children:
            keys = set(client.get_run(child.info.run_id).data.metrics)
            assert {"eval.score", "ledger.launched_tokens", "loss"} <= keys
            for key in keys:  # every series sent has a point that is not 0
                history = client.get_metric_history(child.info.run_id, key)
                assert any(m.value != 0 for m in history) or key == "eval.score", key
            # a counter that stayed 0: not sent, named in a tag, and every step of it in DuckDB
            assert "ledger.discarded_tokens.overlong_filter" not in keys
            tag = child.data.tags["sixblanks.zero_metrics"]
            assert "ledger.discarded_tokens.overlong_filter" in tag and "results.duckdb" in tag
            steps, total = con.execute(
                "SELECT count(*), sum(discarded_overlong_filter) FROM ledger WHERE run_id = ?",
                [child.data.tags["sixblanks.run_id"]],
            ).fetchone()
            assert steps > 2 and total == 0
    finally:
        con.close()


def test_mlflow_parent_ends_killed_on_ctrl_c_and_finished_once_synced(
    tmp_path, experiment, monkeypatch
):
    """A Ctrl-C while the runs are sent ends the experiment's parent run KILLED (not RUNNING for
    ever); a run a Ctrl-C stopped is KILLED too; `sixblanks sync` once the runs are done ends the
    same parent FINISHED."""

    import shutil

    from mlflow.tracking import MlflowClient

    from sixblanks.harness.orchestration import tracking
    from sixblanks.harness.orchestration.tracking import Tracker, experiment_status, log_metrics

    assert experiment_status(["finished", "finished"]) == "FINISHED"
    assert experiment_status(["finished", "failed"]) == "FAILED"
    assert experiment_status(["failed", "interrupted"]) == "KILLED"
    assert experiment_status(["finished", "pending"]) == "KILLED"  # never started: stopped
    assert experiment_status(["finished", "running"]) is None  # still going: left RUNNING
    src, _ = experiment
    out = tmp_path / "copy"
    shutil.copytree(src, out, ignore=shutil.ignore_patterns("mlflow*", "report"))
    run_ids = json.loads((out / "experiment.json").read_text())["runs"]
    uri = f"sqlite:///{out / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)

    def parent_and_children():
        exp = client.get_experiment_by_name("copy")
        runs = client.search_runs([exp.experiment_id])
        (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
        kids = {r.data.tags["sixblanks.run_id"]: r.info.status for r in runs if r is not parent}
        return parent, kids

    calls = []

    def ctrl_c_in_the_second(*args, **kwargs):  # while the second run's metrics are sent
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return log_metrics(*args, **kwargs)

    monkeypatch.setattr(tracking, "log_metrics", ctrl_c_in_the_second)
    with pytest.raises(KeyboardInterrupt):
        Tracker(out, uri, "copy").sync(run_ids)
    monkeypatch.undo()
    parent, kids = parent_and_children()
    assert parent.info.status == "KILLED"
    assert kids == {run_ids[0]: "FINISHED", run_ids[1]: "KILLED"}  # its partial copy too
    state = json.loads((out / "mlflow_sync.json").read_text())
    assert state["parent_run_id"] == parent.info.run_id and state["pending"] == [run_ids[1]]

    status = out / "runs" / run_ids[1] / "status.json"
    finished = status.read_text()
    status.write_text(json.dumps(json.loads(finished) | {"state": "interrupted"}))
    state = Tracker(out, uri, "copy").sync(run_ids)  # the run a Ctrl-C stopped
    parent, kids = parent_and_children()
    assert parent.info.status == "KILLED" and kids[run_ids[1]] == "KILLED"
    assert state["parent_status"] == "KILLED" and state["pending"] == [run_ids[1]]

    status.write_text(finished)  # resumed and finished
    state = Tracker(out, uri, "copy").sync(run_ids)
    again, kids = parent_and_children()
    assert again.info.run_id == parent.info.run_id  # the same parent, ended again
    assert again.info.status == "FINISHED" and set(kids.values()) == {"FINISHED"}
    assert state["pending"] == [] and len(kids) == 2


def test_partial_run_is_ingested_and_completed_on_resume_without_duplicates(tmp_path):
    cfg = validate_mapping(
        TINY | {"budget": {"launched_tokens": 2500}, "arms": {"grpo": {"preset": "grpo"}}}
    )
    plan = prepare_experiment(cfg, tmp_path)
    spec = plan.specs[0]
    run_dir = tmp_path / "runs" / spec.run_id
    code = (
        "import sys; from sixblanks.harness.orchestration.runner import execute_run; "
        "from sixblanks.harness.runspec import RunSpec; "
        f"execute_run(RunSpec.from_json(sys.argv[1]), {str(run_dir)!r}, {str(plan.warm_dir)!r}, "
        "threads=1)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, spec.to_json()], cwd=ROOT)
    t0 = time.time()
    while (
        (read_status(run_dir).get("step") or 0) < 4
        and time.time() - t0 < 120
        and proc.poll() is None
    ):
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    ingest(tmp_path)
    con = connect(tmp_path, read_only=True)
    status, steps = con.execute("SELECT status, steps FROM runs").fetchone()
    con.close()
    assert status == "partial" and steps >= 4
    execute_run(spec, run_dir, plan.warm_dir, threads=1)
    ingest(tmp_path)
    con = connect(tmp_path, read_only=True)
    status, steps = con.execute("SELECT status, steps FROM runs").fetchone()
    n, distinct = con.execute("SELECT count(*), count(DISTINCT step) FROM ledger").fetchone()
    dup_metrics = con.execute(
        "SELECT count(*) FROM "
        "(SELECT step, name, count(*) c FROM metrics GROUP BY ALL HAVING c > 1)"
    ).fetchone()[0]
    con.close()
    assert status == "finished" and n == distinct == steps and dup_metrics == 0


def test_unreachable_tracking_server_loses_nothing(tmp_path, monkeypatch, cli):
    """A tracking server that answered at start and is gone when the runs are sent: the runs go on,
    DuckDB has everything, and `sync` sends it later, once. (A server missing at start is refused:
    tests/test_cluster.py; a real server killed mid-sync: tests/chaos/test_faults.py.)"""

    import mlflow

    from sixblanks.harness.orchestration import servers

    checked = []
    monkeypatch.setattr(servers, "check_tracking", lambda uri, enabled=True: checked.append(uri))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # nothing listens there
    # as `sixblanks run` sends them: from a process of its own, beside the report
    res, _ = run_experiment(validate_mapping(TINY | {"name": "offline"}), tmp_path)
    assert checked == ["http://127.0.0.1:9"]  # it "answered" at start
    assert not res["failures"]  # the runs went on
    assert res["mlflow"]["last_error"] and len(res["mlflow"]["pending"]) == 2
    assert _counts(tmp_path)["runs"] == 2  # DuckDB has everything regardless
    monkeypatch.delenv("MLFLOW_TRACKING_URI")  # the server is back (here: the default sqlite store)
    code, out, err = cli("sync", str(tmp_path))
    assert code == 0, err
    assert "synced 2 runs to MLflow; pending: 0; the experiment's MLflow run is FINISHED" in out
    state = json.loads((tmp_path / "mlflow_sync.json").read_text())
    assert state["pending"] == [] and len(state["synced"]) == 2
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    df = mlflow.search_runs(experiment_names=["offline"])
    assert (df["tags.mlflow.parentRunId"].notna()).sum() == 2
    code, _, _ = cli("sync", str(tmp_path))  # syncing again sends nothing twice
    assert (
        mlflow.search_runs(experiment_names=["offline"])["tags.mlflow.parentRunId"].notna()
    ).sum() == 2


def test_reader_gets_a_clear_message_while_the_writer_holds_the_store(experiment):
    out, _ = experiment
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb,time; c=duckdb.connect({str(out / 'results.duckdb')!r}); "
            "print('locked', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(StoreBusy, match="being written by another process"):
            connect(out, read_only=True)
    finally:
        holder.kill()
        holder.wait()


def _rows(out, sql):
    con = connect(out, read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_ladder_writer_replaces_only_its_experiments_and_arms_rows(tmp_path):
    rung = {
        "rung": 5,
        "rung_name": "advantage",
        "variant": "a",
        "status": "pass",
        "evidence": "score 0.1 -> 0.2",
        "ci_low": float("nan"),  # a one-instance interval
        "ci_high": 0.25,
        "detail": {"engine": "HFEngine", "scores": [1, 0]},
    }
    assert (
        write_ladder(tmp_path, "exp", "grpo", [rung, rung | {"variant": "b", "ci_low": -0.1}]) == 2
    )
    write_ladder(tmp_path, "exp", "dapo", [rung])
    write_ladder(tmp_path, "other", "grpo", [rung])
    for _ in range(2):  # a second ladder of (exp, grpo) replaces its rows, twice the same
        write_ladder(tmp_path, "exp", "grpo", [rung | {"variant": "c", "ci_low": -0.5}])
    rows = _rows(
        tmp_path, "SELECT experiment_id, arm, variant, ci_low, ci_high FROM ladder ORDER BY ALL"
    )
    assert rows == [
        ("exp", "dapo", "a", None, 0.25),
        ("exp", "grpo", "c", -0.5, 0.25),
        ("other", "grpo", "a", None, 0.25),
    ]
    details = _rows(tmp_path, "SELECT DISTINCT detail FROM ladder")
    assert [json.loads(d) for (d,) in details] == [{"engine": "HFEngine", "scores": [1, 0]}]
    with pytest.raises(ValueError, match="unknown field"):
        write_ladder(tmp_path, "exp", "grpo", [rung | {"colour": "red"}])
    assert len(_rows(tmp_path, "SELECT * FROM ladder")) == 3


def test_trials_writer_is_idempotent_and_one_transaction(tmp_path):
    def trial(n, **kw):
        return {
            "arm": "grpo",
            "trial": n,
            "state": "COMPLETE",
            "params": {"optimizer.lr": 1e-3 * (n + 1)},
            "value": 0.5 + n,
            "launched_tokens": 600.0,
            "device_seconds": 2.0,
        } | kw

    rows = [trial(0), trial(1, state="PRUNED", value=None, pruned_at=300.0)]
    assert write_trials(tmp_path, "exp", rows) == 2
    write_trials(tmp_path, "other", [trial(0, arm="rloo")])
    write_trials(tmp_path, "exp", rows)
    got = _rows(
        tmp_path,
        "SELECT experiment_id, arm, trial, state, params, value, pruned_at FROM trials "
        "ORDER BY ALL",
    )
    assert [(e, a, t, s, json.loads(p), v, pr) for e, a, t, s, p, v, pr in got] == [
        ("exp", "grpo", 0, "COMPLETE", {"optimizer.lr": 1e-3}, 0.5, None),
        ("exp", "grpo", 1, "PRUNED", {"optimizer.lr": 2e-3}, None, 300.0),
        ("other", "rloo", 0, "COMPLETE", {"optimizer.lr": 1e-3}, 0.5, None),
    ]
    # a row the table refuses (trial is a number): the delete before it is rolled back too
    with pytest.raises(Exception, match="(?i)convert|conversion"):
        write_trials(tmp_path, "exp", [trial(0), trial(1, trial="x")])
    assert len(_rows(tmp_path, "SELECT * FROM trials WHERE experiment_id = 'exp'")) == 2


def test_run_directory_reads_survive_a_killed_run(tmp_path):
    rd = RunDir(tmp_path / "r")
    assert read_status(rd.path) == {"state": "pending"} and rd.read_events() == []
    assert rd.read_result() == {} and not rd.exists()
    rd.path.mkdir()
    rd.events.write_bytes(b'{"type": "step", "step": 0}\n{"type": "step", "step": 1}\n{"type": "st')
    assert [e["step"] for e in rd.read_events()] == [0, 1]  # the torn last line is dropped
    # a NaN metric (explained variance of constant returns) is read, and so is all that follows it
    rd.events.write_bytes(
        b'{"type": "step", "step": 0, "explained_variance": NaN}\n{"type": "step", "step": 1}\n'
    )
    events = rd.read_events()
    assert [e["step"] for e in events] == [0, 1] and math.isnan(events[0]["explained_variance"])
    rd.events.write_bytes(
        b'{"type": "step", "step": 0}\n{"type": bad\n{"type": "step", "step": 2}\n'
    )
    with pytest.raises(ValueError, match="line 2 of 3 is not JSON"):
        rd.read_events()  # a corrupt line in the middle is an error, never a silent truncation
    write_json(rd.status, {"state": "running", "step": 1})
    assert read_status(rd.path) == {"state": "running", "step": 1}
    assert sorted(p.name for p in rd.path.iterdir()) == ["events.jsonl", "status.json"]  # no .tmp


def test_a_store_of_an_earlier_version_gains_the_new_columns(tmp_path, experiment):
    """Ingesting into a results.duckdb made before the eval-cost columns existed adds them."""

    import duckdb

    out, _ = experiment
    old = tmp_path / "old"
    old.mkdir()
    con = duckdb.connect(str(old / "results.duckdb"))
    con.execute(
        "CREATE TABLE evals (run_id VARCHAR, step BIGINT, split VARCHAR, score DOUBLE, n BIGINT, "
        "success_rate DOUBLE, launched_tokens DOUBLE, accepted_tokens DOUBLE, "
        "device_seconds DOUBLE, verifier_calls DOUBLE, position JSON, detail JSON)"
    )
    con.close()
    con = connect(old)
    ensure_schema(con)
    cols = [r[0] for r in con.execute("DESCRIBE evals").fetchall()]
    con.close()
    assert cols[-13:] == [
        "eval_generated_tokens",
        "eval_verifier_calls",
        "eval_device_seconds",
        "eval_wall_seconds",
        "env_steps",
        "wall_seconds",
        "pass_at",
        "eval_judge_calls",
        "search_mode",  # an inference-time beam search at evaluation (eval.beam)
        "search_score",
        "search_generated_tokens",
        "search_env_steps",
        "search_verifier_calls",
    ]
