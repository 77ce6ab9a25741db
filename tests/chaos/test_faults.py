"""The chaos suite's faults inside a run and its store: a SIGKILL inside the
store's ingest, a truncated results.duckdb, a NaN loss, a verifier that raises, returns NaN or
hangs, and a tokenizer that does not belong to its weights. Each case ends by checking that nothing
was lost or counted twice (tests/chaos_summary.py prints the totals)."""

import json
import shutil
import subprocess
import sys

import pytest

from sixblanks.budgets.ledger import TIME_COUNTERS
from sixblanks.harness.layout import ExperimentDir, RunDir
from sixblanks.harness.orchestration.ledgerlog import effective_events, read_events, replay
from sixblanks.harness.orchestration.runner import execute_run

from ..conftest import ROOT, query
from ..servers import MlflowServer

EXPERIMENT = {
    "name": "chaos",
    "task": {"name": "arithmetic", "eval_size": 8},
    "rollout": {"max_new_tokens": 4, "prompts_per_step": 4, "group_size": 4, "ignore_eos": True},
    "warm_start": {"steps": 20, "num_demos": 200},
    "budget": {"launched_tokens": 400},
    "eval": {"every": 200},
    "seeds": [0, 1],  # two runs on two workers: one torch thread each, as execute_run(threads=1)
    "arms": {"grpo": {"preset": "grpo"}},
    "executor": {"workers": 2},
    "tracking": {"mlflow": False},
}
TABLES = ("runs", "budgets", "ledger", "metrics", "evals", "discards")
pytestmark = pytest.mark.xdist_group("chaos-faults")  # one worker: the finished experiment once


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished two-run experiment (its directory: copy it before changing anything)."""

    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.orchestration.orchestrator import Orchestrator

    out = tmp_path_factory.mktemp("chaos") / "out"
    res = Orchestrator(validate_mapping(EXPERIMENT), out, progress=False).run()
    assert not res["failures"], res["failures"]
    return out


def _copy(src, tmp_path):
    dst = tmp_path / "out"
    shutil.copytree(src, dst)
    return dst


def _counts(out) -> dict[str, int]:
    return {t: query(out, f"SELECT count(*) FROM {t}")[0][0] for t in TABLES}


def _from_run_dirs(out) -> dict[str, int]:
    """What the store must hold, counted from the run directories (a second method)."""

    exp = ExperimentDir(out)
    results = [RunDir(p).read_result() for p in sorted(exp.runs.iterdir())]
    return {
        "runs": len(results),
        "ledger": sum(r["steps"] for r in results),
        "evals": sum(len(r["evals"]) for r in results),
    }


def _untimed(counters: dict) -> dict:
    return {k: v for k, v in counters.items() if k not in TIME_COUNTERS}


def test_a_sigkill_inside_the_ingest_transaction_loses_nothing(finished, tmp_path, chaos):
    out = _copy(finished, tmp_path)
    want = _counts(out)
    for table, n in _from_run_dirs(out).items():
        chaos.rows(want[table], n, f"{table} rows ingested by the run")
    dying = (
        "import os, signal, sys\n"
        "from sixblanks.harness.store import database as store\n"
        "calls, insert = [0], store._insert\n"
        "def dying(con, table, rows):\n"
        "    insert(con, table, rows)\n"
        "    calls[0] += 1\n"
        "    if calls[0] == 5:  # some runs' rows replaced, others deleted, none committed\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "store._insert = dying\n"
        "store.ingest(sys.argv[1])\n"
    )
    chaos.fault("SIGKILL inside the store's ingest transaction")
    proc = subprocess.run([sys.executable, "-c", dying, str(out)], cwd=ROOT)
    assert proc.returncode == -9
    for table, n in _counts(out).items():  # the transaction never committed: all still there
        chaos.rows(n, want[table], f"{table} rows after the kill")
    from sixblanks.harness.store.database import ingest

    ingest(out)
    for table, n in _counts(out).items():
        chaos.rows(n, want[table], f"{table} rows after ingesting again")
    dup = query(out, "SELECT run_id, step FROM ledger GROUP BY ALL HAVING count(*) > 1")
    chaos.rows(len(dup), 0, "ledger rows stored twice")


def test_a_truncated_results_store_is_set_aside_and_rebuilt_from_the_runs(
    finished, tmp_path, cli, chaos
):
    out = _copy(finished, tmp_path)
    want = _counts(out)
    db = ExperimentDir(out).results_db
    chaos.fault("results.duckdb truncated to a third")
    db.write_bytes(db.read_bytes()[: db.stat().st_size // 3])
    code, _, err = cli("report", str(out))
    assert code == 2 and "Traceback" not in err, err
    line = " ".join(err.split())
    assert "results.duckdb" in line and "is damaged" in line and "sixblanks ingest" in line, line
    code, _, err = cli("ingest", str(out))
    assert code == 0, err
    assert "set aside as" in " ".join(err.split())
    assert list(out.glob("results.duckdb.damaged-*"))
    for table, n in _counts(out).items():
        chaos.rows(n, want[table], f"{table} rows rebuilt from the run directories")
    code, _, err = cli("report", str(out))
    assert code == 0, err


def _spec_and_warm(out):
    exp = ExperimentDir(out)
    spec = RunDir(sorted(exp.runs.iterdir())[0]).read_spec()
    return spec, exp.warm_policy(spec.warm_start_key)


def test_a_nan_loss_fails_the_run_clearly_and_the_rerun_resumes_as_uninterrupted(
    finished, tmp_path, monkeypatch, chaos
):
    from sixblanks.harness.training.loop import Trainer
    from sixblanks.harness.training.objectives import pg_pass as pg  # its policy_loss

    spec, warm = _spec_and_warm(finished)
    reference = RunDir(finished / "runs" / spec.run_id).read_result()
    at = {"step": None}
    step, loss = Trainer.step, pg.policy_loss

    def tracking_step(self):
        at["step"] = self.step_idx
        return step(self)

    def nan_at_step_2(*args, **kw):
        value, met = loss(*args, **kw)
        return (value * float("nan") if at["step"] == 2 else value), met

    monkeypatch.setattr(Trainer, "step", tracking_step)
    monkeypatch.setattr(pg, "policy_loss", nan_at_step_2)
    chaos.fault("a NaN loss at step 2")
    run_dir = tmp_path / "run"
    with pytest.raises(Exception, match=r"loss is nan at step 2 .*Lower optimizer.lr"):
        execute_run(spec, run_dir, warm, threads=1)
    rd = RunDir(run_dir)
    status = rd.read_status()
    assert status["state"] == "failed" and "loss is nan at step 2" in status["error"]
    assert [e["step"] for e in rd.read_events() if e["type"] == "step"] == [0, 1]

    monkeypatch.setattr(pg, "policy_loss", loss)  # the cause fixed: the same run resumes
    again = execute_run(spec, run_dir, warm, threads=1)
    assert again["resumed_from"] == 2
    steps = [e["step"] for e in rd.read_events() if e["type"] == "step"]
    chaos.rows(len(steps), reference["steps"], "step records")
    assert steps == list(range(reference["steps"]))
    chaos.same(
        _untimed(again["counters"]),
        _untimed(reference["counters"]),
        "counters against the uninterrupted run",
    )
    standing = replay(effective_events(read_events(rd.ledger_log)))["counters"]
    chaos.same(standing, again["counters"], "ledger.jsonl replayed against the counters")


def test_a_verifier_that_raises_returns_nan_or_hangs_is_a_counted_failure(finished, chaos):
    from sixblanks.harness.orchestration.runner import build_trainer

    from . import faulty_task

    spec, warm = _spec_and_warm(finished)
    spec = spec.replace(task={**spec.task, "name": "tests.chaos.faulty_task:FaultyArithmetic"})
    trainer = build_trainer(spec, warm)
    trainer.ctx.settings.evaluate = False  # the training gate's calls only
    faulty_task.INJECTED.clear()
    for kind in ("raises", "returns NaN", "hangs past its timeout"):
        chaos.fault(f"a verifier that {kind}")
    res = trainer.train()
    injected = faulty_task.INJECTED
    kinds = {k: injected.count(k) for k in ("raised", "non_finite", "timeout")}
    assert all(kinds.values()), kinds  # each kind happened
    gate = trainer.ctx.gate.stats
    chaos.same(gate.reasons, kinds, "the gate's failures by kind against the faults injected")
    led = res.ledger
    chaos.rows(int(led.discarded_rollouts_by_reason["failed"]), len(injected), "failed samples")
    c = led.counters
    assert c["launched_tokens"] == c["accepted_tokens"] + c["discarded_tokens"]
    assert c["verifier_calls"] == gate.calls


def test_a_tokenizer_that_does_not_belong_to_its_weights_is_refused(
    tmp_path, cli, write_yaml, chaos
):
    from sixblanks.harness.config import ModelConfig
    from sixblanks.harness.models import load_policy
    from sixblanks.harness.tasks import make_task

    model, tok = load_policy(ModelConfig(seed=1), [make_task("arithmetic")])
    model.save_pretrained(tmp_path / "model")
    chaos.fault("a model directory whose tokenizer has more tokens than the embedding")
    tok.add_tokens([f"<extra{i}>" for i in range(300)])
    tok.save_pretrained(tmp_path / "model")
    exp = {**EXPERIMENT, "model": {"path": str(tmp_path / "model")}, "seeds": [0]}
    code, _, err = cli("run", write_yaml(json.dumps(exp)), "--out", str(tmp_path / "out"))
    assert code == 2 and "Traceback" not in err, err
    line = " ".join(err.split())
    assert f"the tokenizer has {len(tok)} tokens" in line
    assert f"embedding has {model.get_input_embeddings().num_embeddings} rows" in line
    assert not (tmp_path / "out" / "runs").exists()  # refused before any run started


def test_a_full_disk_fails_clearly_and_the_run_then_resumes(finished, tmp_path, chaos):
    """A file-size limit (RLIMIT_FSIZE, as a full disk: writes past it fail) below a checkpoint's
    size: a run fails at its first checkpoint with a one-line 'no space left' error naming the file;
    with the space back, it finishes, nothing lost or counted twice, its counters those of the
    same run made before (the lost attempt's time charged)."""

    import resource

    from sixblanks.harness.store.database import ingest

    out = _copy(finished, tmp_path)
    victim = sorted((out / "runs").iterdir())[0]
    spec, warm = RunDir(victim).read_spec(), _spec_and_warm(out)[1]
    reference = RunDir(victim).read_result()
    ckpt = (victim / "checkpoint" / "tensors.safetensors").stat().st_size
    shutil.rmtree(victim)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    chaos.fault("a full disk (a file-size limit below a checkpoint)")
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(ckpt * 0.8), hard))  # this process only
    try:
        with pytest.raises(Exception) as failed:
            execute_run(spec, victim, warm, threads=1)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    line = str(failed.value)
    assert line.startswith("no space left writing ") and "tensors.safetensors" in line, line
    assert "run the same command" in line
    status = RunDir(victim).read_status()
    assert status["state"] == "failed" and status["error"] == line

    res = execute_run(spec, victim, warm, threads=1)
    chaos.same(
        _untimed(res["counters"]),
        _untimed(reference["counters"]),
        "counters against the run before",
    )
    standing = replay(effective_events(read_events(RunDir(victim).ledger_log)))["counters"]
    chaos.same(standing, res["counters"], "ledger.jsonl replayed against the counters")
    ingest(out)
    for table, n in _from_run_dirs(out).items():
        chaos.rows(_counts(out)[table], n, f"{table} rows in the store")


@pytest.fixture
def mlflow_server(tmp_path):
    server = MlflowServer(tmp_path)
    try:
        yield server
    finally:
        server.kill()


@pytest.mark.slow
def test_an_mlflow_server_killed_mid_sync_loses_nothing_and_sync_sends_the_rest_once(
    finished, tmp_path, cli, monkeypatch, mlflow_server, chaos
):
    """A tracking server on 127.0.0.1 dies (SIGKILL) after the first of two runs reached it: the
    second stays pending, the results are all on disk; with the server back, `sixblanks sync`
    sends what is missing, and MLflow holds each run once with every step's loss."""

    from mlflow.tracking import MlflowClient

    from sixblanks.harness.orchestration import tracking

    out = _copy(finished, tmp_path)
    exp = json.loads((out / "experiment.json").read_text())
    exp["config"]["tracking"] = {"mlflow": True, "uri": mlflow_server.url, "experiment": "chaos"}
    (out / "experiment.json").write_text(json.dumps(exp))
    mlflow_server.start()
    send = tracking.Tracker._send_run

    def dies_after_the_first(self, *args):
        state = send(self, *args)
        chaos.fault("the MLflow server SIGKILLed after the first run reached it")
        mlflow_server.kill()
        return state

    monkeypatch.setattr(tracking.Tracker, "_send_run", dies_after_the_first)
    code, _, err = cli("sync", str(out))
    assert code == 1 and "MLflow unreachable" in err and "1 run(s) still pending" in err, err
    monkeypatch.setattr(tracking.Tracker, "_send_run", send)
    state = json.loads((out / "mlflow_sync.json").read_text())
    chaos.rows(len(state["synced"]) + len(state["pending"]), 2, "runs synced or pending")
    for table, n in _from_run_dirs(out).items():  # the store never depended on the server
        chaos.rows(_counts(out)[table], n, f"{table} rows in the store")

    mlflow_server.start()
    code, stdout, err = cli("sync", str(out))
    assert code == 0 and "pending: 0" in stdout, err
    client = MlflowClient(tracking_uri=mlflow_server.url)
    exp_id = client.get_experiment_by_name("chaos").experiment_id
    runs = [r for r in client.search_runs([exp_id]) if "sixblanks.run_id" in r.data.tags]
    chaos.rows(len(runs), 2, "runs in MLflow")
    for r in runs:
        rid = r.data.tags["sixblanks.run_id"]
        steps = [e for e in RunDir(out / "runs" / rid).read_events() if e["type"] == "step"]
        losses = client.get_metric_history(r.info.run_id, "loss")
        chaos.rows(len(losses), len([e for e in steps if "loss" in e]), f"losses of {rid}")
