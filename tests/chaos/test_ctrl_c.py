"""Ctrl-C stops `sixblanks run` within 5 seconds, whenever it comes (harness/stopping.py).

A run sees the stop request at its step boundaries and at the stop points inside every long phase
(its setup, each decode step, each micro-batch, each environment step, the wait for a concurrent
collector). A step that cannot reach its boundary within the grace is abandoned: the run is then
recorded where its last checkpoint stands (status, events and ledger.jsonl alike), and the next
invocation resumes from there with nothing counted twice.

In-process: a stop requested in the start evaluation, in the middle of a generation and of an update
leaves the run consistent at its checkpoint, and the resumed run ends exactly as an uninterrupted
one. Then the bound itself, five times: SIGINT to the process group of `sixblanks run` (three arms,
two workers) at varied moments exits 130 within 5 s of the signal, with the store and every run's
ledger consistent."""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from sixblanks.budgets.ledger import TIME_COUNTERS
from sixblanks.harness import stopping
from sixblanks.harness.layout import ExperimentDir, RunDir
from sixblanks.harness.orchestration.ledgerlog import compare, effective_events, read_events, replay
from sixblanks.harness.orchestration.runner import RunInterrupted, execute_run

from .. import terminal
from ..conftest import ROOT, query

pytestmark = pytest.mark.xdist_group("chaos-ctrl-c")  # one worker: the warm start once

HOLD = Path(tempfile.gettempdir()) / f"sixblanks-ctrl-c-hold-{os.getpid()}"
"""While this file exists, every verifier call of a run waits for it to go or for the stop request
(gated_task.py): a start evaluation then lasts until the signal, however fast the machine. One path
for the module's process, so that every experiment below shares one warm start."""

EXPERIMENT = {
    "name": "ctrl-c",
    "task": {
        "name": "tests.chaos.gated_task:GatedArithmetic",
        "eval_size": 8,
        "params": {"hold": str(HOLD)},
    },
    # four micro-batches an update: a stop point between them
    "rollout": {
        "max_new_tokens": 4,
        "prompts_per_step": 4,
        "group_size": 4,
        "ignore_eos": True,
        "micro_batch_size": 4,
    },
    "warm_start": {"steps": 20, "num_demos": 200},
    "budget": {"launched_tokens": 384},  # six steps of 64 tokens
    "eval": {"every": 192},
    "seeds": [0],
    "arms": {"grpo": {"preset": "grpo"}},
    "tracking": {"mlflow": False},
}
STOP_BOUND = 5.0
"""Seconds from SIGINT to the exit of `sixblanks run` (the specification)."""


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """(experiment directory, its one run spec, the warm-start policy directory)."""

    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.orchestration.plan import prepare_experiment

    out = tmp_path_factory.mktemp("ctrl-c") / "out"
    plan = prepare_experiment(validate_mapping(EXPERIMENT), out)
    spec = plan.specs[0]
    return out, spec, str(plan.warm_dir)


@pytest.fixture
def stop_flag():
    """This process's stop request, cleared after the test (a worker's would end with it)."""

    yield stopping.STOP
    stopping.STOP.clear()


@pytest.fixture(scope="module")
def reference(prepared, tmp_path_factory):
    """The run uninterrupted: its result."""

    _, spec, warm = prepared
    return execute_run(spec, tmp_path_factory.mktemp("reference") / "run", warm, threads=1)


def _untimed(counters: dict) -> dict:
    return {k: v for k, v in counters.items() if k not in TIME_COUNTERS}


def _standing(rd: RunDir) -> dict:
    return replay(effective_events(read_events(rd.ledger_log)))["counters"]


def _steps(rd: RunDir) -> list[int]:
    return [e["step"] for e in rd.read_events() if e["type"] == "step"]


PHASES = {
    # phase: (where the stop is requested, at which step, checkpoint_seconds, the step it stands
    # at, the stop point that sees it)
    "start evaluation": ("evaluation", 0, 0.0, 0, "generation"),  # no checkpoint: from scratch
    "generation": ("generation", 3, 600.0, 0, "generation"),  # none since the start: all redone
    "update": ("update", 2, 0.0, 2, "update"),  # a checkpoint after every step: step 2 is redone
}


@pytest.mark.parametrize("phase", sorted(PHASES))
def test_a_stop_inside_a_phase_leaves_the_run_at_its_checkpoint_and_it_resumes_exactly(
    phase, prepared, reference, stop_flag, tmp_path, monkeypatch, chaos
):
    from sixblanks.harness.rollout.engine import HFEngine
    from sixblanks.harness.training import evaluating, loop
    from sixblanks.harness.training.objectives import pg_pass as pg  # its policy_loss

    _, spec, warm = prepared
    where, at_step, ckpt_s, stands_at, seen_in = PHASES[phase]
    monkeypatch.setattr(stopping, "GRACE_SECONDS", 0.0)  # no step may finish after the request
    now = {"step": None, "evaluating": False, "requested": False}
    step, evaluate_run = loop.Trainer.step, evaluating.evaluate_run
    generate, loss = HFEngine.generate, pg.policy_loss

    def tracking_step(self):
        now["step"] = self.step_idx
        return step(self)

    def tracking_evaluation(ctx):
        now["evaluating"] = True
        try:
            return evaluate_run(ctx)
        finally:
            now["evaluating"] = False

    def request(what: str) -> None:  # once: the resumed run goes through
        if where == what and not now["requested"] and (now["step"] or 0) == at_step:
            now["requested"] = True
            stopping.request_stop()

    def generating(self, *args, **kw):
        request("evaluation" if now["evaluating"] else "generation")
        return generate(self, *args, **kw)

    def updating(*args, **kw):
        request("update")
        return loss(*args, **kw)

    monkeypatch.setattr(loop.Trainer, "step", tracking_step)
    monkeypatch.setattr(evaluating, "evaluate_run", tracking_evaluation)  # where the loop calls it
    monkeypatch.setattr(HFEngine, "generate", generating)
    monkeypatch.setattr(pg, "policy_loss", updating)
    chaos.fault(f"a stop request in the {phase} of step {at_step}")
    run_dir = tmp_path / "run"
    with pytest.raises(RunInterrupted, match=f"interrupted during {seen_in}"):
        execute_run(spec, run_dir, warm, threads=1, checkpoint_seconds=ckpt_s)

    rd = RunDir(run_dir)
    status = rd.read_status()
    assert status["state"] == "interrupted" and status["step"] == stands_at, status
    assert _steps(rd) == list(range(stands_at))
    c = status["counters"]
    assert c["launched_tokens"] == c["accepted_tokens"] + c["discarded_tokens"]
    chaos.same(_standing(rd), c, "ledger.jsonl replayed against the interrupted run's status")
    if phase == "start evaluation":  # nothing recorded, no checkpoint: it starts from scratch
        assert not rd.read_events() and not rd.checkpoint.exists()
        assert not any(c.values())

    stop_flag.clear()  # the next invocation
    again = execute_run(spec, run_dir, warm, threads=1, checkpoint_seconds=ckpt_s)
    assert again["resumed_from"] == (None if phase == "start evaluation" else stands_at)
    steps = _steps(rd)
    chaos.rows(len(steps), reference["steps"], "step records of the resumed run")
    assert steps == list(range(reference["steps"]))
    chaos.same(
        _untimed(again["counters"]),
        _untimed(reference["counters"]),
        "counters against the uninterrupted run",
    )
    chaos.same(_standing(rd), again["counters"], "ledger.jsonl replayed against the counters")
    assert [e["score"] for e in again["evals"]] == [e["score"] for e in reference["evals"]]


def test_a_step_that_ends_within_the_grace_is_checkpointed_and_kept(
    prepared, stop_flag, tmp_path, monkeypatch
):
    """A stop requested in an update whose step ends within the grace: the run stops at the
    boundary with that step recorded and checkpointed (nothing is redone)."""

    from sixblanks.harness.training import loop
    from sixblanks.harness.training.objectives import pg_pass as pg  # its policy_loss

    _, spec, warm = prepared
    monkeypatch.setattr(stopping, "GRACE_SECONDS", 60.0)
    step, loss, now = loop.Trainer.step, pg.policy_loss, {"step": None}

    def tracking_step(self):
        now["step"] = self.step_idx
        return step(self)

    def updating(*args, **kw):
        if now["step"] == 1 and not stop_flag.is_set():  # its first micro-batch of four
            stopping.request_stop()
        return loss(*args, **kw)

    monkeypatch.setattr(loop.Trainer, "step", tracking_step)
    monkeypatch.setattr(pg, "policy_loss", updating)
    run_dir = tmp_path / "run"
    with pytest.raises(RunInterrupted, match="interrupted after step 2"):
        execute_run(spec, run_dir, warm, threads=1, checkpoint_seconds=600.0)
    rd = RunDir(run_dir)
    assert rd.read_status()["state"] == "interrupted" and rd.read_status()["step"] == 2
    assert _steps(rd) == [0, 1]
    assert not compare(_standing(rd), rd.read_status()["counters"])


def test_a_run_handed_out_after_the_stop_does_not_start(prepared, stop_flag, tmp_path):
    _, spec, warm = prepared
    stopping.request_stop()
    with pytest.raises(RunInterrupted, match="during setup"):
        execute_run(spec, tmp_path / "run", warm, threads=1)
    rd = RunDir(tmp_path / "run")
    assert rd.read_status()["state"] == "pending" and not rd.read_events()


# ---------------------------------------------------------------------- the bound, five times

THREE_ARMS = {
    **EXPERIMENT,
    "eval": {"every": 10**6},
    "budget": {"launched_tokens": 100_000},  # no run ends before the signal
    "arms": {
        "grpo": {"preset": "grpo"},
        "dr_grpo": {"preset": "dr_grpo"},
        "rloo": {"preset": "rloo"},
    },
    "executor": {"workers": 2, "checkpoint_seconds": 5},
}


def _states(out) -> dict[str, dict]:
    runs = ExperimentDir(out).runs
    return {p.name: RunDir(p).read_status() for p in sorted(runs.glob("*")) if p.is_dir()}


def _in_flight_at_step_1(out, _pid: int = 0) -> bool:
    running = [s for s in _states(out).values() if s.get("state") == "running"]
    return len(running) == 2 and min(s.get("step") or 0 for s in running) >= 1


def _in_start_evaluation(out, _pid: int = 0) -> bool:
    return any(
        s.get("state") == "running"
        and s.get("step") == 0
        and not RunDir(out / "runs" / r).read_events()
        for r, s in _states(out).items()
    )


def _runs_in_setup(out, _pid: int = 0) -> bool:
    return (out / "runs").exists()  # made by the first run that starts


def _command_started(out, _pid: int = 0) -> bool:
    return (out / ".sixblanks.lock").exists()  # taken by `run` before its warm start and plan


def _workers_starting(out, pid: int = 0) -> bool:
    """The command's fork server is making its imports (its first worker waits for them), no run
    has started."""

    from sixblanks.harness.orchestration.processes import cmdline, stat

    for name in os.listdir("/proc"):
        if name.isdigit() and b"multiprocessing.forkserver" in cmdline(int(name)):
            st = stat(int(name))
            if len(st) > 1 and int(st[1]) == pid:
                return not (out / "runs").exists()
    return False


EXECUTOR = "error: interrupted: "  # the executor's line: runs stopped, not started
MOMENTS = [  # (what, when the signal goes, how the last line starts, whether HOLD holds the runs)
    ("two runs in flight at step >= 1", _in_flight_at_step_1, EXECUTOR, False),
    ("the command's start, before any run", _command_started, ("interrupted", EXECUTOR), False),
    ("the runs in their setup", _runs_in_setup, EXECUTOR, False),
    ("a start evaluation", _in_start_evaluation, EXECUTOR, True),  # held there until the signal
    (
        "the workers starting (the fork server's imports)",
        _workers_starting,
        ("interrupted", EXECUTOR),
        False,
    ),
]


@pytest.mark.slow
def test_ctrl_c_stops_the_experiment_within_5_seconds_five_times(prepared, tmp_path, chaos):
    try:
        _five_times(ExperimentDir(prepared[0]).warm_start, tmp_path, chaos)
    finally:
        HOLD.unlink(missing_ok=True)


def _five_times(warm, tmp_path, chaos) -> None:
    for i, (what, ready, last_line, held) in enumerate(MOMENTS):
        out, cfg = tmp_path / f"out{i}", tmp_path / f"exp{i}.yaml"
        shutil.copytree(warm, ExperimentDir(out).warm_start)  # the same policy: no warm start
        HOLD.touch() if held else HOLD.unlink(missing_ok=True)
        cfg.write_text(json.dumps(THREE_ARMS))
        proc = subprocess.Popen(
            terminal.command("run", str(cfg), "--out", str(out), "--no-progress"),
            cwd=ROOT,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env={**os.environ, "PYTHONFAULTHANDLER": "1"},  # SIGABRT: every thread's stack
        )
        deadline, seen = time.monotonic() + 120, False
        while time.monotonic() < deadline and proc.poll() is None and not seen:
            seen = ready(out, proc.pid)
            time.sleep(0.01)
        assert proc.poll() is None, proc.communicate()
        assert seen, f"repetition {i + 1}: not seen within 120 s: {what}"
        chaos.fault(f"SIGINT to `sixblanks run`'s process group: {what}")
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # the whole group, as a terminal's Ctrl-C
        try:
            proc.wait(timeout=60)
        finally:
            took = time.monotonic() - t0
            if proc.poll() is None:  # it did not stop: where each of its threads waits, then ended
                os.kill(proc.pid, signal.SIGABRT)  # here rather than left to run to its end
                time.sleep(1)
                os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
            if took >= 60:
                # every thread's stack in full: the list of extension modules after it goes (about
                # 5,000 characters that would push the first threads out of the message)
                dump = re.sub(r"\nExtension modules: [^\n]*", "", err)
                pytest.fail(
                    f"repetition {i + 1} ({what}): still running 60 s after SIGINT:\n"
                    + dump[-16000:]
                )
        assert proc.returncode == 130, err[-3000:]
        assert took < STOP_BOUND, (
            f"repetition {i + 1} ({what}): stopped in {took:.2f} s\n{err[-3000:]}"
        )
        assert err.strip().splitlines()[-1].startswith(last_line), err[-3000:]
        assert "Traceback" not in err, err[-3000:]
        _check_consistent(out, chaos)


def _check_consistent(out, chaos) -> None:
    """Every run pending (never started) or interrupted where its checkpoint stands: its status, its
    step records and its ledger events agree, and so does the store."""

    states = _states(out) if ExperimentDir(out).runs.exists() else {}
    assert all(s.get("state") in ("pending", "interrupted") for s in states.values()), states
    rows = dict(query(out, "SELECT run_id, status FROM runs")) if states else {}
    for rid, s in states.items():
        rd = RunDir(out / "runs" / rid)
        if s["state"] == "pending":
            assert not rd.read_events()
            continue
        c = s["counters"]
        assert c["launched_tokens"] == c["accepted_tokens"] + c["discarded_tokens"]
        chaos.same(_standing(rd), c, "ledger.jsonl replayed against an interrupted run's status")
        steps = _steps(rd)
        chaos.rows(len(steps), s["step"], "step records of an interrupted run")
        assert steps == list(range(s["step"]))
        assert rows[rid] == "partial"
        [(n,)] = query(out, f"SELECT count(*) FROM ledger WHERE run_id = '{rid}'")
        chaos.rows(n, s["step"], "ledger rows of an interrupted run in the store")
