"""Warm start: a real, small SFT run raises held-out accuracy; the result is cached by content hash."""

import json

import torch

from sixblanks.harness.config import validate_mapping
from sixblanks.harness.models import load_policy, state_hash
from sixblanks.harness.orchestration.warmstart import warm_start, warm_start_key
from sixblanks.harness.rollout.engine import HFEngine
from sixblanks.harness.tasks import make_task
from sixblanks.harness.training.collectors import demonstration_batch
from sixblanks.harness.training.evaluate import evaluate


def _cfg(**over):
    data = {
        "arms": {"a": {"preset": "grpo"}},
        "task": {"name": "arithmetic"},
        "warm_start": {"steps": 400, "num_demos": 2000},
    }
    data.update(over)
    return validate_mapping(data)


def test_demonstrations_mask_only_action_tokens():
    task = make_task("guess_number")
    _, tok = load_policy(_cfg().model, [task])
    batch = demonstration_batch(task, tok, [1, 2, 3])
    for b in range(batch.size):
        for kind, s, e in batch.segments[b]:
            assert batch.action_mask[b, s:e].eq(1.0 if kind == "action" else 0.0).all()
        assert batch.reward[b] == 1.0  # the oracle solves it
        assert all(a.endswith("\n") for a in batch.actions[b])


def test_sft_raises_held_out_accuracy_and_is_cached(tmp_path):
    cfg = _cfg()
    task = make_task("arithmetic")
    m0, tok0 = load_policy(cfg.model, [task])
    before = evaluate(HFEngine(m0, tok0), tok0, task, 128, max_new_tokens=6)["score"]
    model, tok, info = warm_start(cfg, [task], tmp_path)
    after = evaluate(HFEngine(model, tok), tok, task, 128, max_new_tokens=6)["score"]
    # chance of an exact answer in -9..18 is ~1/28; the untrained model scores ~0
    assert before < 0.05
    assert after >= 0.3, (before, after)
    assert info["cached"] is False and info["steps"] == 400
    assert (
        json.loads((tmp_path / info["key"] / "warm_start.json").read_text())["policy_hash"]
        == info["policy_hash"]
    )
    model2, _, info2 = warm_start(cfg, [task], tmp_path)
    assert info2["cached"] is True and state_hash(model2) == info["policy_hash"]
    # the key changes with anything the policy depends on
    assert warm_start_key(_cfg(warm_start={"steps": 10}), [task]) != info["key"]
    assert warm_start_key(cfg, [make_task("arithmetic", {"digits": 2})]) != info["key"]
    assert torch.isfinite(torch.tensor(info["final_loss"]))
