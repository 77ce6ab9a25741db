"""Ctrl-C: SIGINT to `sixblanks run`'s process group, as a terminal sends it, stops
the experiment promptly: the runs in flight stop at a step boundary, checkpointed (`interrupted`,
`partial` in the store), the queued runs never start, the results so far are ingested, and the
command exits 130 with a one-line summary. A second invocation is SIGKILLed (the orchestrator
alone: its workers must end by themselves); the third resumes the interrupted runs with their
ledgers intact and finishes the experiment with every step recorded once. Ctrl-C in `ladder`
records its finished rungs; a ladder SIGKILLed between rungs resumes at the first unfinished one."""

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from sixblanks.harness.layout import ExperimentDir, RunDir
from sixblanks.harness.orchestration import processes

from .. import terminal
from ..conftest import ROOT, query

EXPERIMENT = """
name: interrupt
task: {name: "tests.chaos.gated_task:GatedArithmetic", eval_size: 8,
       params: {hold: "HOLD", after: AFTER}}
rollout: {max_new_tokens: 6, prompts_per_step: 4, group_size: 4, ignore_eos: true}
warm_start: {steps: 20, num_demos: 200}
budget: {launched_tokens: 4000}
eval: {every: 2000}
seeds: [0]
arms: {grpo: {preset: grpo}, dr_grpo: {preset: dr_grpo}, rloo: {preset: rloo}}\
  # no dynamic sampling: even steps
executor: {workers: 2, checkpoint_seconds: 600}
tracking: {mlflow: false}
"""
HELD_AFTER = 8 + 3 * 16
"""Verifier calls a run makes before the hold file holds it: a start evaluation of 8 and three
steps of 16 rollouts. While the file exists, a run goes no further than its fourth step (a
resumed one: three steps past where it resumed), however fast or slow the machine: it is in flight
when the interrupt comes, and a resumed one passes its resumed step by 2 before the kill."""


def _sixblanks(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        terminal.command(*args),
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kw,
    )


def _states(out) -> dict[str, dict]:
    exp = ExperimentDir(out)
    return {p.name: RunDir(p).read_status() for p in sorted(exp.runs.glob("*")) if p.is_dir()}


def _fail_killing(proc: subprocess.Popen, out, why: str) -> None:
    """Fail with the runs' states and the command's last words, its process group killed first."""

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # it had ended
        pass
    _, err = proc.communicate()
    states = {rid: (s.get("state"), s.get("step")) for rid, s in _states(out).items()}
    pytest.fail(f"{why}: {states}, exit {proc.returncode}\n{err[-3000:]}")


@pytest.mark.slow
def test_ctrl_c_stops_run_then_a_killed_orchestrator_then_the_same_command_resumes(tmp_path, chaos):
    from sixblanks.harness.orchestration.ledgerlog import effective_events, read_events, replay

    out = tmp_path / "out"
    cfg = tmp_path / "exp.yaml"
    hold = tmp_path / "hold"  # while it exists, no run passes its fourth step (gated_task.py)
    hold.touch()
    cfg.write_text(EXPERIMENT.replace("HOLD", str(hold)).replace("AFTER", str(HELD_AFTER)))
    proc = _sixblanks("run", str(cfg), "--out", str(out), "--no-progress", start_new_session=True)
    deadline, in_flight = time.time() + 240, False
    while time.time() < deadline and proc.poll() is None and not in_flight:
        states = list(_states(out).values())
        running = [s for s in states if s.get("state") == "running"]
        assert not [s for s in states if s.get("state") == "finished"], "a run ended too soon"
        in_flight = len(running) == 2 and min(s.get("step") or 0 for s in running) >= 1
        time.sleep(0.05)
    if not in_flight:
        _fail_killing(proc, out, "no two runs in flight at step >= 1 within 240 s")
    t0 = time.time()
    chaos.fault("SIGINT to `sixblanks run`'s process group, two runs in flight, one queued")
    os.killpg(proc.pid, signal.SIGINT)  # the whole process group, as a terminal's Ctrl-C
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert time.time() - t0 < 60
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: interrupted: 2 run(s) stopped in flight (resumable), 1 not"), (
        err[-3000:]
    )
    assert "Traceback" not in err

    states = _states(out)
    stopped = {rid: s for rid, s in states.items() if s.get("state") == "interrupted"}
    assert len(stopped) == 2, states
    # the queued runs never started: no status, or no directory at all
    assert all(s.get("state") == "pending" for rid, s in states.items() if rid not in stopped)
    for rid, s in stopped.items():
        rd = RunDir(out / "runs" / rid)
        assert rd.checkpoint.exists()
        c = s["counters"]
        assert c["launched_tokens"] == c["accepted_tokens"] + c["discarded_tokens"]
    rows = dict(query(out, "SELECT run_id, status FROM runs"))
    assert {rid: rows[rid] for rid in stopped} == dict.fromkeys(stopped, "partial")
    before = {rid: RunDir(out / "runs" / rid).events.read_text().splitlines() for rid in stopped}

    # then SIGKILL of the orchestrator alone, once the runs have gone on: its workers end by
    # themselves (no checkpoint since the interrupt: the runs resume from the same step again)
    mid = _sixblanks("run", str(cfg), "--out", str(out), "--no-progress", start_new_session=True)
    deadline, went_on = time.time() + 240, False
    while time.time() < deadline and mid.poll() is None and not went_on:
        now = _states(out)
        went_on = any((now[rid].get("step") or 0) >= s["step"] + 2 for rid, s in stopped.items())
        time.sleep(0.05)
    if not went_on:
        _fail_killing(mid, out, "no resumed run went 2 steps on within 240 s")
    assert mid.poll() is None, mid.communicate()
    workers = processes.descendants(mid.pid)
    assert workers
    chaos.fault("SIGKILL of the `sixblanks run` process, its workers left behind")
    os.kill(mid.pid, signal.SIGKILL)
    mid.communicate()
    deadline = time.time() + 15
    while time.time() < deadline and any(processes.running(p) for p in workers):
        time.sleep(0.1)
    chaos.rows(
        sum(map(processes.running, workers)), 0, "workers of the killed orchestrator still running"
    )

    hold.unlink()  # the third invocation runs every run to its end
    again = _sixblanks("run", str(cfg), "--out", str(out), "--no-progress")
    _, err = again.communicate(timeout=400)
    assert again.returncode == 0, err
    for rid, s in stopped.items():
        rd = RunDir(out / "runs" / rid)
        res = json.loads(rd.result.read_text())
        assert res["resumed_from"] == s["step"]
        lines = rd.events.read_text().splitlines()
        assert lines[: len(before[rid])] == before[rid]  # the interrupted history, intact
        steps = [json.loads(x)["step"] for x in lines if json.loads(x)["type"] == "step"]
        assert steps == list(range(res["steps"]))
        chaos.rows(len(steps), res["steps"], "step records of a resumed run")
        c = res["counters"]
        standing = replay(effective_events(read_events(rd.ledger_log)))["counters"]
        chaos.same(standing, c, "ledger.jsonl replayed against the resumed run's counters")
        assert c["launched_tokens"] == c["accepted_tokens"] + c["discarded_tokens"] <= 4000 + 1e-9
    [(n, distinct)] = query(
        out, "SELECT count(*), count(DISTINCT run_id) FROM runs WHERE status = 'finished'"
    )
    chaos.rows(n, 3, "finished runs in the store")
    chaos.rows(distinct, 3, "distinct finished runs in the store")
    [(got,)] = query(out, "SELECT count(*) FROM ledger")
    [(want,)] = query(out, "SELECT count(DISTINCT (run_id, step)) FROM ledger")
    chaos.rows(got, want, "ledger rows in the store (one per run and step)")


def test_ctrl_c_in_the_ladder_records_the_finished_rungs_and_exits_130(
    tmp_path, monkeypatch, cli, write_yaml, chaos
):
    """Ctrl-C (KeyboardInterrupt in the ladder's process) during rung 3: rungs 1 and 2 are in
    ladder.json and the store, one verdict each; exit 130 with a one-line summary."""

    import yaml

    import sixblanks.harness.studies.ladder.walk as walk
    from sixblanks.harness.studies.ladder import VERDICT

    from ..test_ladder import BASE

    def ctrl_c(ctx):
        raise KeyboardInterrupt

    rungs = [replace(r, run=ctrl_c) if r.name == "no_update_eval" else r for r in walk.RUNGS]
    monkeypatch.setattr(walk, "RUNGS", tuple(rungs))
    chaos.fault("Ctrl-C in the ladder's rung 3")
    out = tmp_path / "out"
    code, _, err = cli("ladder", write_yaml(yaml.safe_dump(BASE)), "--out", str(out), "--all")
    assert code == 130, err
    last = err.strip().splitlines()[-1]
    assert "interrupted in rung 3 (no_update_eval): 2 finished rung(s) recorded" in " ".join(
        err.split()
    ), last
    rows = json.loads((out / "ladder.json").read_text())["rungs"]
    verdicts = [r["rung"] for r in rows if r["variant"] == VERDICT]
    chaos.rows(len(verdicts), 2, "verdicts of the finished rungs in ladder.json")
    assert verdicts == [1, 2]
    stored = query(out, "SELECT rung FROM ladder WHERE variant = 'verdict' ORDER BY rung")
    chaos.rows(len(stored), 2, "verdicts in the store")


LADDER_2 = (
    "import sys\n"
    "import sixblanks.harness.studies.ladder.walk as ladder\n"
    "ladder.RUNGS = ladder.RUNGS[:2]  # the first two rungs: contract, frozen batch\n"
    "from sixblanks.harness.cli import main\n"
    "main()\n"
)


@pytest.mark.slow
def test_a_ladder_killed_between_rungs_resumes_at_the_first_unfinished_one(tmp_path, chaos):
    """SIGKILL once the first rung is done: the next walk reuses it as recorded
    (ladder.progress.json) and walks the rest; ladder.json and the store hold one verdict per
    rung."""

    import yaml

    from ..test_ladder import BASE

    cfg = tmp_path / "exp.yaml"
    small = {
        **BASE,
        "task": {"name": "arithmetic", "eval_size": 16},
        "warm_start": {"steps": 20, "num_demos": 200},
        "ladder": {**BASE["ladder"], "budget": {"launched_tokens": 600}},
    }
    cfg.write_text(yaml.safe_dump(small))
    out = tmp_path / "out"
    cmd = [sys.executable, "-c", LADDER_2, "ladder", str(cfg), "--out", str(out), "--all"]
    progress = out / "ladder.progress.json"

    def rungs_done() -> dict:
        try:
            return json.loads(progress.read_text())["rungs"]
        except (OSError, ValueError):
            return {}

    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and len(rungs_done()) < 1:
        time.sleep(0.05)
    assert proc.poll() is None, "the ladder ended before it could be killed"
    chaos.fault("SIGKILL of the ladder between rungs")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = rungs_done()
    assert sorted(before) == ["1"]

    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert again.returncode in (0, 1), again.stderr[-2000:]  # 1: a rung failed (a verdict)
    said = " ".join(again.stderr.split())
    assert "rung 1 (contract): recorded by an earlier walk, reused" in said
    assert "rung 2 (frozen_batch): recorded" not in said
    rows = json.loads((out / "ladder.json").read_text())["rungs"]
    verdicts = [r["rung"] for r in rows if r["variant"] == "verdict"]
    chaos.rows(len(verdicts), 2, "verdicts in ladder.json (one per rung)")
    assert verdicts == [1, 2]
    assert [r for r in rows if r["rung"] == 1] == before["1"]
    stored = query(out, "SELECT count(*) FROM ladder WHERE variant = 'verdict'")[0][0]
    chaos.rows(stored, 2, "verdicts in the store")
