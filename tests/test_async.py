"""Asynchronous training with a concurrent collector (data.concurrent): rounds sampled ahead in a
process of its own, each reserved before launch and spooled before it is reported; every spooled
round is counted exactly once, whichever process is killed."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from sixblanks.algorithms.presets import resolve
from sixblanks.harness import checkpoint
from sixblanks.harness.layout import RunDir, read_status
from sixblanks.harness.orchestration.runner import execute_run
from sixblanks.harness.training.meter import UNIT_KINDS

from .conftest import ROOT, Saved
from .test_lag import _trainer
from .test_orchestrator import TINY as TINY_RUN

# keep_spool: every round's file stays, so the tests can recount what was launched from them
ASYNC = {"data": {"concurrent": {"queue": 3, "keep_spool": True}}, "weight": {"tis_cap": 2.0}}
PER_ROUND = 16  # prompts_per_step 4 x group_size 4


def spool_totals(spool) -> dict[str, float]:
    """What the spooled rounds launched, recomputed from their trajectories (a second method: the
    ledger's counts come from the costs the collector reported)."""

    tot = dict.fromkeys(
        ("launched_tokens", "prompt_tokens", "rollouts_launched", "env_steps", "verifier_calls"),
        0.0,
    )
    for f in sorted(spool.glob("round-*.pt")):
        rec = checkpoint.load_record(f)
        b = rec["batch"]
        tot["launched_tokens"] += float(b.action_mask.sum())
        tot["prompt_tokens"] += float(b.prompt_tokens())
        tot["rollouts_launched"] += b.size
        tot["env_steps"] += float(b.n_turns.sum())
        tot["verifier_calls"] += float(b.n_turns.sum())  # one verification per turn here
    return tot


def assert_counted_once(counters, discarded_rollouts, spool):
    """Every non-time counter equals what the spooled rounds launched, and what was launched was
    either accepted or discarded by reason."""

    for k, v in spool_totals(spool).items():
        assert counters[k] == pytest.approx(v), k
    assert counters["accepted_tokens"] + counters["discarded_tokens"] == pytest.approx(
        counters["launched_tokens"]
    )
    rejected = sum(discarded_rollouts.values())
    assert counters["rollouts_accepted"] + rejected == pytest.approx(counters["rollouts_launched"])


def test_rounds_still_queued_at_the_end_are_launched_and_discarded(tmp_path):
    tr = _trainer(
        {**ASYNC, "data": {"concurrent": {"queue": 3, "keep_spool": True}, "staleness": 1}}
    )
    tr.ctx.settings.work_dir = str(tmp_path)
    res = tr.train(max_steps=5)
    led = res.ledger
    assert not led.check_invariants() and tr.collector.worker is None  # stopped
    # three rounds were launched ahead when the run stopped: finished, counted, never trained on
    assert led.discarded_rollouts_by_reason["unconsumed"] == 3 * PER_ROUND
    # recorded in a last step that trained on nothing, so the step rows carry them too
    last = res.steps[-1]
    assert last["skipped"] == 1.0 and last["async.drained_rounds"] == 3
    assert last["ledger.discarded_rollouts.unconsumed"] == 3 * PER_ROUND and len(res.steps) == 6
    assert_counted_once(led.counters, led.discarded_rollouts_by_reason, tmp_path / "spool")
    files = {f.name for f in (tmp_path / "spool").glob("round-*.pt")}
    assert tr.collector.counted == files and len(files) >= 5 + 3
    # sampled ahead, so behind the trainer; the bound drops what is more than 1 version behind
    launched = [m["lag.versions_behind_max"] for m in res.steps[:-1]]
    kept = [m["lag.kept_behind_max"] for m in res.steps if "lag.kept_behind_max" in m]
    assert max(launched) == 3 and kept and max(kept) <= 1
    assert led.discarded_rollouts_by_reason["staleness"] > 0
    # one round a step: its versions behind (from the samples' own version tags) split into those
    # it spent in flight and those in the queue, each >= 0
    split = [m for m in res.steps if "lag.inflight_behind" in m]
    assert len(split) == 5
    for m in split:
        assert m["lag.inflight_behind"] >= 0 and m["lag.queue_behind"] >= 0
        assert m["lag.inflight_behind"] + m["lag.queue_behind"] == m["lag.versions_behind"]
    assert max(m["lag.queue_behind"] for m in split) > 0  # rounds waited, three ahead
    kinds = tr.ctx.meter.time_by_kind
    assert kinds["broadcast"]["device_seconds"] > 0 and kinds["rollouts"]["device_seconds"] > 0
    # every kind of work a step does is in the time estimate a step's admission reserves (the
    # drain waits for the collector at the run's end, after its last step)
    assert set(kinds) - {"step", "drain"} <= set(UNIT_KINDS)


def _parent_of(pid: int) -> int:
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])


def test_a_killed_collector_is_restarted_and_nothing_is_lost_or_counted_twice(tmp_path):
    """The collector, forked from the fork server as a run's is (the server's child, not the
    trainer's), SIGKILLed after step 2."""

    killed = []

    def kill(tr, m):
        if m["step"] == 2:
            assert _parent_of(tr.collector.worker.pid) not in (os.getpid(), 1)
            os.kill(tr.collector.worker.pid, signal.SIGKILL)
            killed.append(tr.collector.worker.pid)

    tr = _trainer(ASYNC, budget={"launched_tokens": 500.0})
    tr.ctx.settings.work_dir = str(tmp_path)
    res = tr.train(on_step=kill)
    assert killed and res.steps[-1]["async.restarts"] == 1.0
    led = res.ledger
    assert not led.check_invariants() and res.ended_because == "budget"
    assert_counted_once(led.counters, led.discarded_rollouts_by_reason, tmp_path / "spool")
    files = {f.name for f in (tmp_path / "spool").glob("round-*.pt")}
    assert tr.collector.counted == files
    assert len({f.split(".")[1] for f in files}) == 2  # rounds of both collectors were used


def test_a_dead_collector_past_its_restarts_fails_the_run_clearly(tmp_path):
    """A collector spawned (a trainer given no process context: the trainer's own child)."""

    def kill(tr, m):
        assert _parent_of(tr.collector.worker.pid) == os.getpid()
        os.kill(tr.collector.worker.pid, signal.SIGKILL)

    tr = _trainer({**ASYNC, "data": {"concurrent": {"queue": 1, "restarts": 0}}}, spawn=True)
    from sixblanks.harness.training import TrainingError

    with pytest.raises(TrainingError, match=r"concurrent collector died .*restarts: 0"):
        tr.train(on_step=kill)
    assert tr.collector.worker is None  # stopped, not left running


def test_concurrent_collection_is_refused_with_lag_or_remax():
    with pytest.raises(ValueError, match="data.concurrent"):
        resolve("grpo", {"data": {"concurrent": {}, "lag": 1}})
    with pytest.raises(ValueError, match="data.concurrent"):
        resolve("remax", {"data": {"concurrent": {}}})


TINY = {
    **TINY_RUN,
    "name": "tiny-async",
    "budget": {"launched_tokens": 1500},
    "eval": {"every": 600},
    "seeds": [0],
    "arms": {"async": {"preset": "grpo", "blanks": ASYNC}},
    "tracking": {"mlflow": False},
}


def killed_at_step(cfg: dict, tmp_path, step: int):
    """The first run of experiment ``cfg`` started in a process of its own and killed with SIGKILL
    once it has finished ``step`` steps: (its spec, its run directory, the warm start's)."""

    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.orchestration.plan import prepare_experiment

    plan = prepare_experiment(validate_mapping(cfg), tmp_path / "exp")
    spec = plan.specs[0]
    warm, run_dir = str(plan.warm_dir), tmp_path / "run"
    script = tmp_path / "run.py"
    script.write_text(
        "import sys; from sixblanks.harness.orchestration.runner import execute_run\n"
        "from sixblanks.harness.runspec import RunSpec\n"
        "if __name__ == '__main__':\n"
        f"    execute_run(RunSpec.from_json(sys.argv[1]), {str(run_dir)!r}, {warm!r}, threads=1)"
    )
    proc = subprocess.Popen([sys.executable, str(script), spec.to_json()], cwd=ROOT)
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None:
        if (read_status(run_dir).get("step") or 0) >= step:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return spec, run_dir, warm


@pytest.mark.slow
def test_a_killed_trainer_resumes_and_counts_every_spooled_round_once(tmp_path):
    spec, run_dir, warm = killed_at_step(TINY, tmp_path, 4)
    rd = RunDir(run_dir)
    at_kill = checkpoint.load(rd.checkpoint)["collector"]
    left = {f.name for f in (run_dir / "spool").glob("round-*.pt")} - set(at_kill["counted"])

    resumed = execute_run(spec, run_dir, warm, threads=1)
    assert resumed["resumed_from"] is not None and resumed["ended_because"] == "budget"
    counters = resumed["counters"]
    discarded = checkpoint.load(rd.checkpoint)["meter"]["ledger"]
    assert_counted_once(counters, discarded["discarded_rollouts_by_reason"], run_dir / "spool")
    final = checkpoint.load(rd.checkpoint)["collector"]
    files = {f.name for f in (run_dir / "spool").glob("round-*.pt")}
    # the rounds the killed trainer's collector spooled after the checkpoint are counted too:
    # replayed, or launched and discarded
    assert left and left <= set(final["counted"]) and set(final["counted"]) == files
    assert counters["launched_tokens"] <= 1500
    events = [json.loads(x) for x in rd.events.read_text().splitlines()]
    assert [e["step"] for e in events if e["type"] == "step"] == list(range(resumed["steps"]))


@pytest.mark.xdist_group("ray")  # one local Ray cluster at a time
@pytest.mark.slow
def test_a_ray_actor_collector_killed_mid_run_is_restarted(tmp_path):
    """backend: ray: the collector is a Ray actor (a local cluster here, shut down after); killed
    (ray.kill), it is restarted and every spooled round is still counted once."""

    import ray

    killed = []

    def kill(tr, m):
        if m["step"] == 2:
            ray.kill(tr.collector.worker.actor)
            killed.append(m["step"])

    tr = _trainer(
        {**ASYNC, "data": {"concurrent": {"queue": 2, "backend": "ray", "keep_spool": True}}},
        budget={"launched_tokens": 400.0},
    )
    tr.ctx.settings.work_dir = str(tmp_path)
    res = tr.train(on_step=kill)
    assert not ray.is_initialized()  # the cluster it started is gone
    assert killed and res.steps[-1]["async.restarts"] == 1.0
    led = res.ledger
    assert not led.check_invariants() and res.ended_because == "budget"
    assert_counted_once(led.counters, led.discarded_rollouts_by_reason, tmp_path / "spool")
    assert tr.collector.counted == {f.name for f in (tmp_path / "spool").glob("round-*.pt")}


class Killed(Exception):
    pass


def test_resume_replays_rounds_of_known_weights_and_counts_the_others_as_discarded(tmp_path):
    """The recovery rule, checked file by file: after a trainer dies past its checkpoint, a spooled
    round the checkpoint had launched and made by weights the resumed run has is replayed; one made
    by later weights (or launched after the checkpoint) is counted as launched and discarded, and
    never launched again."""

    saved = Saved()

    def die(tr, m):
        if m["step"] == 2:
            saved.save(tr)
        if m["step"] == 4:  # two steps past the checkpoint: later weights made later rounds
            raise Killed

    a = _trainer(ASYNC, budget={"launched_tokens": 500.0})
    a.ctx.settings.work_dir = str(tmp_path)
    with pytest.raises(Killed):
        a.train(on_step=die)
    state = saved.load()
    ckpt, v_ckpt = state["collector"], state["engine_version"]
    spool = tmp_path / "spool"
    left = {}
    for f in spool.glob("round-*.pt"):
        if f.name not in set(ckpt["counted"]):
            rec = checkpoint.load_record(f)
            left[f.name] = (rec["round"], rec["version"])
    replay = {n for n, (r, v) in left.items() if r in ckpt["requests"] and v <= v_ckpt}
    dropped = set(left) - replay
    assert replay and dropped  # both cases happen here

    b = _trainer(ASYNC, budget={"launched_tokens": 500.0})
    b.ctx.settings.work_dir = str(tmp_path)
    b.load_state_dict(state)
    res = b.train()
    led = res.ledger
    assert not led.check_invariants()
    assert_counted_once(led.counters, led.discarded_rollouts_by_reason, spool)
    assert led.discarded_rollouts_by_reason["unconsumed"] == PER_ROUND * len(dropped)
    # a pending round made by later weights was launched once: the resumed run did not redo it
    redone = {n.split(".")[0] for n in b.collector.counted} - {n.split(".")[0] for n in left}
    dropped_pending = {left[n][0] for n in dropped if left[n][0] in ckpt["requests"]}
    assert not {f"round-{r:06d}" for r in dropped_pending} & redone
    assert b.collector.counted == {f.name for f in spool.glob("round-*.pt")}


def test_counted_rounds_leave_the_spool_once_a_checkpoint_has_them(tmp_path):
    """Without keep_spool a round's file is deleted once a checkpoint counts it, and the run's
    weight files and pid file go when it ends; the ledger still balances."""

    sizes = []

    def checkpoint(tr, m):
        state = tr.state_dict()  # as the runner's checkpoint does
        sizes.append(len(state["collector"]["counted"]))

    tr = _trainer({"data": {"concurrent": {"queue": 2}}}, budget={"launched_tokens": 400.0})
    tr.ctx.settings.work_dir = str(tmp_path)
    res = tr.train(on_step=checkpoint)
    assert not res.ledger.check_invariants() and len(res.steps) >= 6
    assert max(sizes) <= 2  # only what the latest checkpoints counted, not the whole run
    assert not list((tmp_path / "spool").iterdir())  # rounds, weights and pid file: all gone


def test_the_staleness_split_by_hand():
    """Round 0 sampled by version 2, seen done at 3, consumed at 5: 1 version in flight, 2 in the
    queue; round 1 sampled by 4, never seen before its consumption at 5 (found in the spool): all
    in flight."""

    from sixblanks.harness.training.collectors.staleness import StalenessSplit

    s = StalenessSplit()
    s.done(0, 3)
    s.done(0, 4)  # seen again later: the first sighting counts
    s.consumed(0, 2, 5)
    s.consumed(1, 4, 5)
    assert s.metrics() == {
        "lag.inflight_behind": 1.0,
        "lag.inflight_behind_max": 1.0,
        "lag.queue_behind": 1.0,
        "lag.queue_behind_max": 2.0,
    }
    assert s.metrics() == {}  # a step without rounds reports none
