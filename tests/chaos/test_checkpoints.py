"""Safe, verified checkpoints: tensors in safetensors, the rest read weights-only, a
checksummed manifest, written atomically with the previous one kept. A planted pickle payload is
refused without running; a truncated or altered checkpoint falls back to the previous one, or the
run starts again from scratch, with nothing counted twice."""

import json
import os

import pytest
import torch

from sixblanks.harness import checkpoint
from sixblanks.harness.checkpoint import CheckpointError
from sixblanks.harness.layout import RunDir
from sixblanks.harness.orchestration.plan import prepare_experiment
from sixblanks.harness.orchestration.runner import execute_run

from ..test_orchestrator import _cfg


def _state(step: int) -> dict:
    w = torch.arange(6.0).reshape(2, 3) + step
    return {
        "model": {"embed": w, "head": w},  # tied: one storage under two names
        "optimizer": {
            "state": {0: {"exp_avg": torch.ones(3) * step}},
            "param_groups": [{"lr": 1e-3}],
        },
        "rng_py": (3, tuple(range(5)), None),
        "gen": torch.ByteTensor([1, 2, 3]),
        "step_idx": step,
        "result": {"steps": [{"loss": float("nan"), "name": "a"}]},
    }


def test_a_round_trip_keeps_every_value_and_the_previous_checkpoint(tmp_path):
    path = tmp_path / "checkpoint"
    checkpoint.save(_state(2), path, 2)
    checkpoint.save(_state(3), path, 3)
    back = checkpoint.load(path)
    assert torch.equal(back["model"]["embed"], _state(3)["model"]["embed"])
    assert torch.equal(back["model"]["head"], back["model"]["embed"])
    assert back["optimizer"]["state"][0]["exp_avg"].tolist() == [3.0] * 3
    assert back["rng_py"] == (3, tuple(range(5)), None) and back["step_idx"] == 3
    assert back["gen"].dtype == torch.uint8 and back["result"]["steps"][0]["name"] == "a"
    assert checkpoint.load(path.with_name("checkpoint.prev"))["step_idx"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "checkpoint.prev"]


class Payload:
    """Unpickling this runs os.system: what a malicious checkpoint would carry."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_planted_pickle_payload_is_refused_without_running(tmp_path, chaos):
    chaos.fault("a checkpoint with a planted os.system pickle")
    path = tmp_path / "checkpoint"
    checkpoint.save(_state(1), path, 1)
    marker = tmp_path / "pwned"
    # the attacker rewrites the state (as torch.save writes it) ...
    torch.save({"step_idx": Payload(marker)}, path / checkpoint.STATE)
    manifest = json.loads((path / checkpoint.MANIFEST).read_text())  # ... and its checksum
    manifest["sha256"][checkpoint.STATE] = checkpoint._sha256(path / checkpoint.STATE)
    (path / checkpoint.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(
        CheckpointError, match=r"refused by the weights-only loader.*(posix|os)\.system"
    ):
        checkpoint.load(path)
    assert not marker.exists()
    torch.load(path / checkpoint.STATE, weights_only=False)  # the payload is live: a plain load
    assert marker.exists()  # runs it


def test_a_spooled_round_keeps_its_batch_and_a_planted_one_is_refused(tmp_path, chaos):
    """A concurrent collector's round files (runs/<id>/spool/round-*.pt) are read weights-only too:
    a round round-trips with its TrajectoryBatch; a planted payload is refused without running."""

    from sixblanks.harness.config import ModelConfig
    from sixblanks.harness.models import load_policy
    from sixblanks.harness.rollout.agent import run_episodes
    from sixblanks.harness.rollout.engine import HFEngine, SamplingParams
    from sixblanks.harness.rollout.trajectory import TrajectoryBatch
    from sixblanks.harness.tasks import make_task
    from sixblanks.harness.training.collectors.spool import Spool

    task = make_task("arithmetic")
    model, tok = load_policy(ModelConfig(seed=1), [task])
    batch = run_episodes(
        HFEngine(model, tok),
        tok,
        task,
        task.instances([0, 1]),
        2,
        SamplingParams(max_new_tokens=3),
        generator=torch.Generator().manual_seed(0),
    )
    spool = Spool(str(tmp_path), keep=True)
    checkpoint.save_record({"round": 3, "batch": batch, "cost": {"x": 1.0}}, spool.path / "r.pt")
    back = spool.load("r.pt")
    assert back["round"] == 3 and back["cost"] == {"x": 1.0}
    assert isinstance(back["batch"], TrajectoryBatch)
    assert torch.equal(back["batch"].action_mask, batch.action_mask)
    marker = tmp_path / "pwned"
    chaos.fault("a spooled round with a planted os.system pickle")
    torch.save({"round": 4, "batch": Payload(marker)}, spool.path / "bad.pt")
    with pytest.raises(CheckpointError, match=r"bad\.pt: refused.*(posix|os)\.system"):
        spool.load("bad.pt")
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["truncate tensors", "alter state", "drop manifest"])
def test_a_damaged_checkpoint_is_refused_and_the_previous_one_loads(tmp_path, damage, chaos):
    chaos.fault(f"a checkpoint damaged: {damage}")
    path = tmp_path / "checkpoint"
    checkpoint.save(_state(2), path, 2)
    checkpoint.save(_state(3), path, 3)
    if damage == "truncate tensors":
        f = path / checkpoint.TENSORS
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    elif damage == "alter state":
        f = path / checkpoint.STATE
        raw = bytearray(f.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        f.write_bytes(bytes(raw))
    else:
        (path / checkpoint.MANIFEST).unlink()
    said = []
    state, refused = checkpoint.load_latest(path, said.append)
    assert state["step_idx"] == 2 and len(refused) == 1 and len(said) == 1
    assert ("checksum" if damage != "drop manifest" else "unreadable") in refused[0]


class Killed(Exception):
    """The run dies (a crash: a Ctrl-C would stop it where its last checkpoint stands)."""


def test_a_run_whose_checkpoints_are_all_damaged_starts_again_and_is_charged_the_lost_work(
    tmp_path, monkeypatch, chaos
):
    """A run that dies after step 2 with both its checkpoints then truncated: the next execution
    refuses them and runs from step 0 again, charged the work of the attempt before (its launched
    tokens discarded as 'restart', from its ledger events on disk); the counters of the finished
    run are what ledger.jsonl's standing events add up to, and launched = accepted + discarded."""

    from sixblanks.harness.orchestration import run_recorder
    from sixblanks.harness.orchestration.ledgerlog import (
        compare,
        effective_events,
        read_events,
        replay,
    )

    plan = prepare_experiment(_cfg(budget={"launched_tokens": 600}), tmp_path / "exp")
    spec = plan.specs[0]
    run_dir = tmp_path / "run"
    save, calls = run_recorder.save_checkpoint, []

    def dies_after_step_2(trainer, path):
        calls.append(trainer.step_idx)
        if trainer.step_idx == 3:  # the checkpoint after step 2 (step_idx counts steps done)
            raise Killed("killed")  # not Ctrl-C (which stops a run where its checkpoint is)
        save(trainer, path)

    monkeypatch.setattr(run_recorder, "save_checkpoint", dies_after_step_2)
    chaos.fault("the run killed after step 2")
    with pytest.raises(Killed):
        execute_run(spec, run_dir, str(plan.warm_dir), threads=1)
    monkeypatch.setattr(run_recorder, "save_checkpoint", save)
    rd = RunDir(run_dir)
    last = [e for e in rd.read_events() if e["type"] == "step"][-1]
    assert last["step"] == 2
    lost = last["ledger.launched_tokens"]  # what the attempt launched, by its step records
    chaos.fault("both its checkpoints truncated")
    for p in checkpoint.candidates(rd.checkpoint):
        f = p / checkpoint.TENSORS
        f.write_bytes(f.read_bytes()[:100])

    again = execute_run(spec, run_dir, str(plan.warm_dir), threads=1)
    rec = again["checkpoint_recovery"]
    assert again["resumed_from"] is None and len(rec["refused"]) == 2
    assert rec["charged"]["launched_tokens"] == lost > 0
    c = again["counters"]
    assert again["discarded_by_reason"]["restart"] == lost
    assert c["launched_tokens"] == c["accepted_tokens"] + c["discarded_tokens"] <= 600
    assert c["launched_tokens"] > lost  # it trained again, on what the budget had left
    assert c["device_seconds"] >= rec["charged"]["device_seconds"] > 0  # the lost time, charged
    records = read_events(rd.ledger_log)
    assert [r["seq"] for r in records if r["type"] == "resume"] == [0]  # everything before: lost
    standing = replay(effective_events(records))
    assert compare(standing["counters"], c) == []
    chaos.same(standing["counters"], c, "ledger.jsonl replayed against the run's counters")
    assert standing["discarded_by_reason"]["restart"] == lost
    steps = [json.loads(x) for x in rd.events.read_text().splitlines()]
    got = [e["step"] for e in steps if e["type"] == "step"]
    assert got == list(range(again["steps"]))
    chaos.rows(len(got), again["steps"], "step records")
    assert checkpoint.load(rd.checkpoint)["step_idx"] == again["steps"]
