"""`sixblanks run` end to end: specs, skipping, SIGKILL + resume without double counting, executors,
audit."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from sixblanks.budgets.ledger import TIME_COUNTERS
from sixblanks.harness.config import validate_mapping
from sixblanks.harness.layout import read_status
from sixblanks.harness.orchestration.orchestrator import Orchestrator, build_specs
from sixblanks.harness.orchestration.plan import prepare_experiment
from sixblanks.harness.orchestration.progress import plain_progress
from sixblanks.harness.orchestration.runner import execute_run

from .conftest import ROOT

TINY = {
    "name": "tiny",
    "task": {"name": "arithmetic", "eval_size": 16},
    "rollout": {"max_new_tokens": 6, "prompts_per_step": 4, "group_size": 4},
    "warm_start": {"steps": 40, "num_demos": 300},
    "budget": {"launched_tokens": 1200},
    "eval": {"every": 400},
    "seeds": [0, 1],
    "arms": {"grpo": {"preset": "grpo"}, "dapo": {"preset": "dapo"}},
    "executor": {"workers": 2},
    "tracking": {"mlflow": False},  # MLflow is tested in test_store and the chaos suite (~4 s each)
}


def _cfg(**over):
    data = json.loads(json.dumps(TINY))
    data.update(over)
    return validate_mapping(data)


def test_threads_per_worker_share_the_cores_and_honour_omp_num_threads(monkeypatch):
    """8 cores: 3 workers get 8 // 3 = 2 threads each, 1 worker all 8, more workers than cores 1;
    ``OMP_NUM_THREADS`` caps them (4: 1 worker gets 4, 3 workers still 2), and a value that is no
    count is ignored."""

    from sixblanks.harness.orchestration.orchestrator import threads_per_worker

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert [threads_per_worker(w) for w in (1, 3, 8, 20)] == [8, 2, 1, 1]
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert [threads_per_worker(w) for w in (1, 3, 8)] == [4, 2, 1]
    monkeypatch.setenv("OMP_NUM_THREADS", "auto")
    assert threads_per_worker(1) == 8


def test_an_early_executor_closed_before_any_run_keeps_the_fork_server_it_found():
    """An experiment that needs no run (every run finished) or fails before its first one closes
    the workers it started early; the fork server an earlier experiment of the process started,
    its imports made, stays for the next experiment instead of being killed and started again."""

    from multiprocessing import forkserver

    from sixblanks.harness.orchestration.executors import LocalExecutor
    from sixblanks.harness.orchestration.local_workers import local_pool

    with local_pool(1) as pool:
        pool.submit(os.getpid).result()  # the server started, its imports made
    server = forkserver._forkserver._forkserver_pid
    for _ in range(3):
        LocalExecutor(2, 1).start().close()  # at once: its workers still being started
    time.sleep(1.0)
    assert forkserver._forkserver._forkserver_pid == server
    assert os.waitpid(server, os.WNOHANG) == (0, 0)  # alive
    with local_pool(1) as pool:
        assert pool.submit(os.getppid).result() == server  # and serving


def test_run_ids_are_content_hashes():
    cfg = _cfg()
    a, b = build_specs(cfg, "k"), build_specs(cfg, "k")
    assert [s.run_id for s in a] == [s.run_id for s in b] and len({s.run_id for s in a}) == 4
    other = build_specs(_cfg(budget={"launched_tokens": 1300}), "k")
    assert not {s.run_id for s in a} & {s.run_id for s in other}


def _untimed(counters):
    return {k: v for k, v in counters.items() if k not in TIME_COUNTERS}


@pytest.mark.slow
def test_sigkill_at_a_random_point_then_resume_matches_an_uninterrupted_run(tmp_path):
    cfg = _cfg(budget={"launched_tokens": 2000})
    plan = prepare_experiment(cfg, tmp_path / "exp")
    spec = plan.specs[0]
    warm = str(plan.warm_dir)
    ref = execute_run(spec, tmp_path / "ref", warm, threads=1)
    assert ref["steps"] >= 8

    run_dir = tmp_path / "killed"
    # a step drawn once, pinned (the kill lands wherever inside that step the run then is)
    kill_at = random.Random(20261202).randint(2, ref["steps"] - 3)
    code = (
        "import sys; from sixblanks.harness.orchestration.runner import execute_run; "
        "from sixblanks.harness.runspec import RunSpec; "
        f"execute_run(RunSpec.from_json(sys.argv[1]), {str(run_dir)!r}, {warm!r}, threads=1)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, spec.to_json()], cwd=ROOT)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if (read_status(run_dir).get("step") or 0) >= kill_at:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert read_status(run_dir)["state"] == "running"

    resumed = execute_run(spec, run_dir, warm, threads=1)
    assert resumed["resumed_from"] is not None and resumed["resumed_from"] >= kill_at - 1
    assert _untimed(resumed["counters"]) == _untimed(ref["counters"])
    assert resumed["discarded_by_reason"] == ref["discarded_by_reason"]
    assert [e["score"] for e in resumed["evals"]] == [e["score"] for e in ref["evals"]]
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    steps = [e["step"] for e in events if e["type"] == "step"]
    assert steps == list(range(ref["steps"]))  # no step lost or double counted
    ref_events = [
        json.loads(x) for x in (tmp_path / "ref" / "events.jsonl").read_text().splitlines()
    ]
    assert [e["type"] for e in events] == [e["type"] for e in ref_events]


def test_run_skips_finished_runs_and_audits_fairness(tmp_path, cli, write_yaml, monkeypatch):
    import yaml

    import sixblanks.harness.orchestration.executors as executors
    import sixblanks.harness.orchestration.orchestrator as orchestrator

    # the early workers start before the draft (which imports the tasks and hashes the warm
    # start's inputs), from the configuration's count of runs, and not for a rerun with none left
    started = []
    real, real_draft = executors.early_executor, orchestrator.draft
    monkeypatch.setattr(executors, "early_executor", lambda c, w: started.append(w) or real(c, w))
    monkeypatch.setattr(orchestrator, "draft", lambda c: started.append("draft") or real_draft(c))
    path = write_yaml(yaml.safe_dump(TINY))
    out = tmp_path / "out"
    code, stdout, err = cli("run", path, "--out", str(out), "--no-progress")
    assert code == 0, err
    assert started == [2, "draft"]  # executor.workers: 2
    runs = json.loads((out / "experiment.json").read_text())["runs"]
    assert len(runs) == 4
    for rid in runs:
        res = json.loads((out / "runs" / rid / "result.json").read_text())
        assert res["counters"]["launched_tokens"] <= 1200
        assert len(res["evals"]) >= 3  # start, every 400 tokens, end
        assert all(e["position"]["launched_tokens"] <= 1200 for e in res["evals"])
    audit = json.loads((out / "fairness.json").read_text())
    # DAPO's overlong shaping changes the reward function: flagged, not hidden
    assert {"arm": "dapo", "item": "reward"}.items() <= next(
        f for f in audit["flags"] if f["arm"] == "dapo"
    ).items()
    # GRPO matches DAPO in every configured item; only the measured batch figures may differ
    # (they follow the sampled lengths), and then only by more than the audit's tolerance
    from sixblanks.harness.fairness.audit import MEASURED_TOLERANCE

    for f in (f for f in audit["flags"] if f["arm"] == "grpo"):
        assert f["item"] == "global_batch" and f["reason"].startswith("measured:"), f
        m, r = f["value"]["measured"], f["reference"]["measured"]
        assert any(
            m[k] is not None
            and r[k] is not None
            and abs(m[k] - r[k]) > MEASURED_TOLERANCE * abs(r[k])
            for k in m
        ), f
    assert (
        audit["arms"]["grpo"]["items"]["initial_policy"]
        == audit["arms"]["dapo"]["items"]["initial_policy"]
    )
    code, _, err = cli("run", path, "--out", str(out), "--no-progress")
    assert code == 0 and "4 finished run(s) skipped" in err
    assert started[2:] == ["draft"]  # every run finished: no worker started for the rerun
    code, stdout, _ = cli("status", str(out), "--json")
    rows = json.loads(stdout)
    assert {r["state"] for r in rows} == {"finished"} and all(r["last_eval"] for r in rows)
    from sixblanks.harness.store.database import connect

    con = connect(out, read_only=True)
    code_version, warm_score = con.execute(
        "SELECT code_version, warm_start_score FROM experiments"
    ).fetchone()
    step0 = con.execute("SELECT avg(score) FROM evals WHERE step = 0").fetchone()[0]
    con.close()
    assert code_version.startswith("sixblanks-") and "+" in code_version
    assert warm_score == pytest.approx(step0)


def test_a_code_change_reruns_unless_reuse_is_asked_and_then_flags(tmp_path, monkeypatch):
    """Runs are tied to the code that made them: after a code change nothing is skipped as
    finished; --reuse-finished reuses the old runs, and the audit flags each as run by other
    code."""

    import sixblanks.harness.fairness.audit as audit_mod
    import sixblanks.harness.orchestration.plan as plan_mod
    from sixblanks.harness.store.database import connect

    cfg = _cfg(seeds=[0], arms={"grpo": {"preset": "grpo"}}, budget={"launched_tokens": 300})
    out = tmp_path / "out"
    first = Orchestrator(cfg, out, progress=False)
    first.run()
    old_ids = [s.run_id for s in first.plan.specs]
    for mod in (plan_mod, audit_mod):
        monkeypatch.setattr(mod, "code_fingerprint", lambda: "sixblanks-0.2+edited000000")
    again = Orchestrator(cfg, out, progress=False)
    new_ids = {s.run_id for s in again.prepare().specs}
    assert {s.run_id for s in again.pending()} == new_ids and not set(old_ids) & new_ids
    reused = Orchestrator(cfg, out, progress=False, reuse_finished=True)
    assert [s.run_id for s in reused.prepare().specs] == old_ids and reused.pending() == []
    audit = reused.fairness()
    flags = [f for f in audit["flags"] if f["item"] == "code"]
    assert [f["run_id"] for f in flags] == old_ids and "edited000000" in flags[0]["reason"]
    reused.ingest(audit)
    con = connect(out, read_only=True)
    rows = con.execute("SELECT run_id FROM fairness WHERE item = 'code' AND flagged").fetchall()
    con.close()
    assert [r[0] for r in rows] == old_ids


def test_editing_an_algorithm_file_changes_the_run_ids(tmp_path):
    import shutil

    from sixblanks.harness.version import fingerprint, library_versions, source_roots

    copy = tmp_path / "src"
    for root in source_roots():
        shutil.copytree(root, copy / root.name, ignore=shutil.ignore_patterns("__pycache__"))
    roots = [copy / r.name for r in source_roots()]
    libs = library_versions()
    before = fingerprint(roots, libs)
    assert before == fingerprint(source_roots(), libs)  # the same source, the same fingerprint
    adv = copy / "algorithms" / "advantages.py"
    adv.write_text(adv.read_text().replace("1e-6", "1e-5", 1))
    after = fingerprint(roots, libs)
    assert after != before
    assert fingerprint(roots, {**libs, "torch": "0.0.1"}) != after  # and the library versions
    a, b = build_specs(_cfg(), "k", code=before), build_specs(_cfg(), "k", code=after)
    assert len({s.run_id for s in a}) == 4 and not {s.run_id for s in a} & {s.run_id for s in b}


def test_under_consumption_is_flagged(tmp_path):
    from sixblanks.harness.fairness.audit import fairness_audit

    cfg = _cfg()
    specs = build_specs(cfg, "k")
    for s in specs:
        d = tmp_path / s.run_id
        d.mkdir()
        used = 500 if s.arm == "dapo" and s.seed == 1 else 1150
        (d / "status.json").write_text(
            json.dumps({"state": "finished", "counters": {"launched_tokens": used}})
        )
    audit = fairness_audit(cfg, specs, tmp_path, {"policy_hash": "h", "key": "k"})
    cons = [f for f in audit["flags"] if f["item"] == "consumption"]
    assert len(cons) == 1 and cons[0]["arm"] == "dapo" and "< 90%" in cons[0]["reason"]


def test_a_run_that_had_no_room_for_another_step_is_not_flagged(tmp_path):
    """A grpo step here reserves 4 prompts x 4 samples x 6 tokens = 96 launched tokens before it
    starts: a run of 400 that ended with 80 left could not take another (not flagged, though
    under 90%), one that ended with 110 left could."""

    from sixblanks.harness.fairness.audit import fairness_audit

    cfg = _cfg(budget={"launched_tokens": 400})
    specs = build_specs(cfg, "k")
    spent = {("grpo", 0): 320, ("grpo", 1): 290}
    for s in specs:
        d = tmp_path / s.run_id
        d.mkdir()
        used = spent.get((s.arm, s.seed), 400)
        (d / "status.json").write_text(
            json.dumps({"state": "finished", "counters": {"launched_tokens": used}})
        )
    audit = fairness_audit(cfg, specs, tmp_path, {"policy_hash": "h", "key": "k"})
    cons = [f for f in audit["flags"] if f["item"] == "consumption"]
    (seed1,) = [s.run_id for s in specs if (s.arm, s.seed) == ("grpo", 1)]
    assert [(f["arm"], f["run_id"]) for f in cons] == [("grpo", seed1)]
    assert "it reserves 96" in cons[0]["reason"]


def test_failed_run_is_reported_and_others_finish(tmp_path, cli, write_yaml):
    import yaml

    data = json.loads(json.dumps(TINY))
    # verl's behaviour at the dynamic-sampling round cap: raise instead of training a short batch
    boom = {
        "preset": "dapo",
        "blanks": {"data": {"max_sampling_rounds": 1, "on_round_cap": "error"}},
    }
    data["arms"] = {"grpo": {"preset": "grpo"}, "boom": boom}
    data["seeds"] = [0]
    code, _, err = cli(
        "run", write_yaml(yaml.safe_dump(data)), "--out", str(tmp_path / "o"), "--no-progress"
    )
    assert code == 1
    assert "failed: TrainingError" in err and "dynamic sampling kept" in err
    rows = json.loads((tmp_path / "o" / "summary.json").read_text())["runs"]
    states = {r["arm"]: r["state"] for r in rows}
    assert states["grpo"] == "finished" and states["boom"] == "failed"
    assert next(r for r in rows if r["arm"] == "boom")["error"]


# Ray gives the local executor's numbers: tests/test_cluster.py (on a two-node cluster)


def test_local_workers_end_when_the_orchestrator_is_killed(tmp_path):
    """A killed `sixblanks run` or sweep leaves no worker process waiting for work forever."""

    code = (
        "import os, time; from sixblanks.harness.orchestration.local_workers import local_pool\n"
        "pool = local_pool(1)\n"
        "print(pool.submit(os.getpid).result(), flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    worker = int(proc.stdout.readline())
    os.kill(worker, 0)  # alive while its parent is
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 15
    while time.time() < deadline:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(worker, signal.SIGKILL)
        raise AssertionError("the pool worker outlived its killed parent")


def test_a_worker_is_forked_from_the_fork_server_and_takes_its_pools_environment(monkeypatch):
    """Run workers are forked from this process's fork server (its imports made once), not from
    this process; a variable set after the server started still reaches the workers of a pool
    made after it (a later `--no-cache`, say), and one removed is gone from them."""

    from sixblanks.harness.orchestration.local_workers import local_pool

    monkeypatch.setenv("SIXBLANKS_TEST_PROBE", "before")
    with local_pool(1) as pool:
        assert pool.submit(os.getenv, "SIXBLANKS_TEST_PROBE").result() == "before"
        assert pool.submit(os.getppid).result() != os.getpid()  # the fork server's child
    monkeypatch.setenv("SIXBLANKS_TEST_PROBE_LATER", "later")
    monkeypatch.delenv("SIXBLANKS_TEST_PROBE")
    with local_pool(1) as pool:
        assert pool.submit(os.getenv, "SIXBLANKS_TEST_PROBE_LATER").result() == "later"
        assert pool.submit(os.getenv, "SIXBLANKS_TEST_PROBE").result() is None


def test_a_worker_keeps_what_the_fork_servers_imports_set_in_the_environment():
    """A worker takes its pool's environment, and keeps what the fork server's imports set there
    (harness/models.py sets TOKENIZERS_PARALLELISM=false, so that each worker's tokenizer uses one
    thread); a command whose own process never imported that module has none of it."""

    code = (
        "import os; from sixblanks.harness.orchestration.local_workers import local_pool\n"
        "with local_pool(1) as pool:\n"
        "    print(os.getenv('TOKENIZERS_PARALLELISM'),"
        " pool.submit(os.getenv, 'TOKENIZERS_PARALLELISM').result())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TOKENIZERS_PARALLELISM"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["None", "false"]


def _first_load_in_a_worker(policy_dir: str) -> tuple[bool, list[str]]:
    """In a worker: whether transformers' checkpoint conversions were built before its first model
    load, and the modules (torch's, transformers', sixblanks') that loading a policy and making the
    task imported."""

    before = set(sys.modules)
    from transformers import conversion_mapping

    built = conversion_mapping._checkpoint_conversion_mapping_cache is not None
    from sixblanks.harness.models import load_pretrained
    from sixblanks.harness.orchestration.runner import settings_from_spec  # noqa: F401
    from sixblanks.harness.tasks import make_task

    load_pretrained(policy_dir)
    make_task("arithmetic", {"digits": 1})
    late = set(sys.modules) - before
    return built, sorted(
        m for m in late if m.split(".")[0] in ("torch", "transformers", "sixblanks")
    )


def test_a_worker_finds_its_first_model_load_prepared_by_the_fork_server(tmp_path):
    """The fork server made what a run's setup would otherwise make in every worker: the imports
    of the config, the tasks and torch's serialization, and transformers' table of checkpoint
    conversions (0.27 s; a worker's setup took 0.59 s without these, 0.32 s with them)."""

    from types import SimpleNamespace

    from sixblanks.harness.models import build_tiny_model, build_tokenizer, save_policy
    from sixblanks.harness.orchestration.local_workers import local_pool

    tok = build_tokenizer("0123456789+-=")
    tiny = SimpleNamespace(
        hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2, max_positions=32
    )
    policy = save_policy(build_tiny_model(tiny, tok), tok, tmp_path / "policy")
    with local_pool(1) as pool:
        built, late = pool.submit(_first_load_in_a_worker, str(policy)).result()
    assert built
    assert late == []


def test_without_a_terminal_run_prints_a_line_per_evaluation_and_per_finished_run(
    tmp_path, cli, write_yaml
):
    """Output to a log file (no terminal): no progress bars, but one plain line per evaluation and
    per finished run as they happen."""

    import yaml

    cfg = {
        **TINY,
        "seeds": [0],
        "arms": {"grpo": {"preset": "grpo"}},
        "budget": {"launched_tokens": 400},
        "eval": {"every": 200},
    }
    code, _, err = cli("run", write_yaml(yaml.safe_dump(cfg)), "--out", str(tmp_path / "o"))
    assert code == 0, err
    lines = [ln for ln in err.splitlines() if ln.startswith("grpo/arithmetic/seed0:")]
    evals = [ln for ln in lines if ": eval at step " in ln]
    assert evals and all("launched_tokens" in ln and "/400" in ln for ln in evals)
    # each line gives the evaluation's own place in the budget: the first is before any step
    assert "eval at step 0: " in evals[0] and "(launched_tokens 0/400)" in evals[0]
    # every evaluation the run recorded, once each, in order, then one line for the finished run
    (run,) = (tmp_path / "o" / "runs").iterdir()
    recorded = [
        json.loads(x) for x in (run / "events.jsonl").read_text().splitlines() if '"eval"' in x
    ]
    said = [
        (int(ln.split("eval at step ")[1].split(":")[0]), ln.split("score ")[1][:5]) for ln in evals
    ]
    assert said == [(e["step"], f"{e['score']:.3f}") for e in recorded if e["type"] == "eval"]
    assert lines[-1] == f"grpo/arithmetic/seed0: finished after {read_status(run)['step']} steps"
    assert len(lines) == len(evals) + 1


def test_plain_progress_says_each_evaluation_once_between_two_calls_and_across_a_resume(
    tmp_path, capsys
):
    """The plain lines come from the run's events file, not its status: two evaluations between two
    calls are both said, an earlier attempt's are not said again (nor its failure), a line being
    written waits for the next call."""

    from sixblanks.harness.layout import write_json, write_text

    spec = build_specs(_cfg(), "k")[0].replace(run_id="r1", budget={"launched_tokens": 400})
    orch = Orchestrator(_cfg(), tmp_path)
    rd = orch.dir.run("r1")
    rd.path.mkdir(parents=True)

    def ev(step, tokens, score):
        rec = {
            "type": "eval",
            "step": step,
            "score": score,
            "position": {"launched_tokens": tokens},
        }
        return json.dumps(rec) + "\n"

    def said():
        return capsys.readouterr().err.splitlines()

    step = json.dumps({"type": "step", "step": 1}) + "\n"
    write_text(rd.events, ev(0, 0, 0.1) + step)  # an earlier, killed attempt
    write_json(rd.status, {"state": "failed", "error": "killed", "updated": 1.0})
    tick = plain_progress(orch.dir.run, [spec])
    tick()
    assert said() == []
    # resumed: the file rewritten (a new file), two evaluations and a torn line before the next call
    write_text(
        rd.events, ev(0, 0, 0.1) + step + ev(1, 120, 0.2) + ev(2, 240, 0.25) + '{"type": "ev'
    )
    write_json(rd.status, {"state": "running", "updated": 2.0})
    tick()
    name = "grpo/arithmetic/seed0"
    assert said() == [
        f"{name}: eval at step 1: score 0.200 (launched_tokens 120/400)",
        f"{name}: eval at step 2: score 0.250 (launched_tokens 240/400)",
    ]
    with open(rd.events, "a") as f:
        f.write('al", "step": 3, "score": 0.5, "position": {"launched_tokens": 400}}\n')
    write_json(rd.status, {"state": "finished", "step": 3, "updated": 3.0})
    tick()
    tick(final=True)
    assert said() == [
        f"{name}: eval at step 3: score 0.500 (launched_tokens 400/400)",
        f"{name}: finished after 3 steps",
    ]


@pytest.fixture
def ctrl_c_in_effect():
    """SIGINT raising KeyboardInterrupt, as in a terminal, for the test (a job that a shell
    started in the background, as CI may run the suite, ignores it); restored after."""

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_ctrl_c_while_the_runs_are_waited_for_leaves_no_future_locked(
    monkeypatch, ctrl_c_in_effect
):
    """A Ctrl-C that arrives while the wait holds some of the futures' locks (the wait takes them
    one by one) is raised only after the wait: every lock is free again, so the pool's own thread,
    which takes them to record a result, is never left blocked (a command that could not exit)."""

    import concurrent.futures as cf
    import threading
    from concurrent.futures import _base  # noqa: PLC2701 - the lock-taking step itself

    from sixblanks.harness.orchestration.executors import LocalExecutor

    futures = [cf.Future() for _ in range(3)]
    take = _base._AcquireFutures.__enter__

    def taking_with_a_signal_between(self):  # the first lock taken, then Ctrl-C, then the rest
        self.futures[0]._condition.acquire()
        signal.raise_signal(signal.SIGINT)
        for f in self.futures[1:]:
            f._condition.acquire()

    monkeypatch.setattr(_base._AcquireFutures, "__enter__", taking_with_a_signal_between)
    ticks, failures = [], {}
    with pytest.raises(KeyboardInterrupt):
        LocalExecutor._wait(set(futures), dict.fromkeys(futures, "r"), failures, ticks.append)
    monkeypatch.setattr(_base._AcquireFutures, "__enter__", take)

    free = []  # from another thread, as the pool's thread would take them

    def try_each() -> None:
        for f in futures:
            got = f._condition.acquire(timeout=2)
            free.append(got)
            if got:
                f._condition.release()

    t = threading.Thread(target=try_each)
    t.start()
    t.join()
    assert free == [True, True, True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    futures[0].set_result({"ok": True})  # and the pool's thread records results as before
    assert futures[0].done()


def test_where_ctrl_c_is_ignored_the_wait_leaves_it_ignored():
    """A command a shell started in the background ignores Ctrl-C (SIG_IGN): the wait for the
    runs must not make it count there (they run on to their end)."""

    import concurrent.futures as cf
    import threading

    from sixblanks.harness.orchestration.executors import LocalExecutor

    done, later = cf.Future(), cf.Future()
    done.set_result({"ok": True})
    threading.Timer(0.3, later.set_result, ({"ok": True},)).start()
    seen = []

    def tick():  # Ctrl-C once the first run answered
        seen.append(signal.getsignal(signal.SIGINT))
        signal.raise_signal(signal.SIGINT)

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        pending = {done, later}
        LocalExecutor._wait(pending, dict.fromkeys(pending, "r"), {}, tick)
    finally:
        signal.signal(signal.SIGINT, before)
    assert not pending and seen and all(h is signal.SIG_IGN for h in seen)


def test_a_wait_inside_a_block_that_defers_ctrl_c_keeps_the_ctrl_c_it_noted(ctrl_c_in_effect):
    """The run loop defers Ctrl-C as the sweep does: nested in the sweep's block it neither takes
    the handler over nor forgets a Ctrl-C the sweep has already noted."""

    from sixblanks.harness.orchestration.interrupts import deferred_interrupts

    with deferred_interrupts() as outer:
        sweeps = signal.getsignal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)
        assert outer.is_set()
        with deferred_interrupts() as inner:
            assert inner.is_set() and signal.getsignal(signal.SIGINT) is sweeps
        assert outer.is_set() and signal.getsignal(signal.SIGINT) is sweeps
    assert not outer.is_set() and signal.getsignal(signal.SIGINT) is signal.default_int_handler
