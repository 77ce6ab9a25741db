"""Deterministic lag (data.lag: k): each batch sampled by the policy k versions back, reproducible
from the seed, resumable; lag 0 is the synchronous run; bounded staleness discards by reason."""

import io
import json
import math

import pytest
import torch

from sixblanks.algorithms.presets import resolve
from tests.golden.record import BUDGET, CONFIG, EVAL_SIZE, GOLDEN_JSON, INITIAL_DIR, record_result

GOLDEN = json.loads(GOLDEN_JSON.read_text())


def _trainer(over=None, preset="grpo", budget=None):
    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.models import load_pretrained
    from sixblanks.harness.tasks import make_task
    from sixblanks.harness.training import RunSettings, Trainer

    torch.set_num_threads(1)
    cfg = validate_mapping(CONFIG)
    model, tok = load_pretrained(INITIAL_DIR, "cpu", "float32")
    s = RunSettings(
        blanks=resolve(preset, over or {}),
        rollout=cfg.rollout,
        optimizer=cfg.optimizer,
        budget=dict(budget or BUDGET),
        seed=0,
        eval_size=EVAL_SIZE,
        name=preset,
    )
    return Trainer(s, make_task("arithmetic"), model, tok)


LAG2 = {"data": {"lag": 2}, "weight": {"tis_cap": 2.0}}


def test_lag_zero_is_the_synchronous_run():
    tr = _trainer({"data": {"lag": 0}})
    res = tr.train()
    got, want = record_result(res, tr.model), GOLDEN["presets"]["grpo"]
    assert got["counters"] == want["counters"] and got["policy_hash"] == want["policy_hash"]
    assert tr.collector.lagged is None  # no ring, no second model


def test_a_lagged_run_samples_k_versions_back_and_is_reproducible():
    a, b = _trainer(LAG2), _trainer(LAG2)
    ra, rb = a.train(), b.train()
    # bit for bit from the seed: the same metrics, evaluations and final weights
    assert record_result(ra, a.model) == record_result(rb, b.model)
    behind = [m["lag.versions_behind"] for m in ra.steps]
    # version v samples with max(0, v - 2): 0 behind at step 0, 1 at step 1, then 2
    assert behind == [min(i, 2) for i in range(len(ra.steps))] and len(behind) >= 4
    # the behaviour policy really is the old one: it differs from the current (pi_old recomputed)
    kl = [m["mismatch.kl"] for m in ra.steps]
    assert kl[0] < 1e-9 and all(k > 1e-6 for k in kl[2:])
    sync = _trainer().train()
    assert all(m["mismatch.kl"] < 1e-9 for m in sync.steps)
    assert record_result(ra, a.model)["policy_hash"] != GOLDEN["presets"]["grpo"]["policy_hash"]
    assert not ra.ledger.check_invariants()


def test_a_lagged_run_killed_and_resumed_ends_as_uninterrupted():
    """The ring of snapshots is in the checkpoint: the resumed run samples with the same old weights."""

    whole = _trainer(LAG2)
    want = record_result(whole.train(), whole.model)
    saved = io.BytesIO()

    class Killed(Exception):
        pass

    def kill(tr, metrics):
        if tr.step_idx == 3:
            torch.save(tr.state_dict(), saved)
            raise Killed

    with pytest.raises(Killed):
        _trainer(LAG2).train(on_step=kill)
    resumed = _trainer(LAG2)
    saved.seek(0)
    resumed.load_state_dict(torch.load(saved, weights_only=False))
    got = record_result(resumed.train(evaluate_start=False), resumed.model)
    assert got["policy_hash"] == want["policy_hash"] and got["counters"] == want["counters"]


def test_bounded_staleness_discards_rows_behind_the_bound_by_reason():
    from sixblanks.harness.training.collectors.lagged import drop_stale

    tr = _trainer({"data": {"staleness": 1}})
    ctx = tr.ctx
    batch = tr.collector.round()[0]  # 4 prompts x 4 samples at version 0
    ctx.engine.policy_version = 3  # the trainer moved on: rows of version 0 are 3 behind
    batch.policy_version[4:8] = 2  # one group is 1 behind: within the bound
    keep, metrics = drop_stale(ctx, batch)
    assert keep == [4, 5, 6, 7]
    assert metrics["lag.versions_behind_max"] == 3 and metrics["lag.stale_dropped"] == 12
    assert math.isclose(metrics["lag.versions_behind"], (12 * 3 + 4 * 1) / 16)
    tokens = batch.row_action_tokens()
    stale_tokens = float(tokens.sum() - tokens[4:8].sum())
    led = ctx.meter.ledger
    assert led.discarded_by_reason["staleness"] == stale_tokens
    assert led.discarded_rollouts_by_reason["staleness"] == 12


def test_a_lag_beyond_the_staleness_bound_is_refused():
    with pytest.raises(ValueError, match="every sample would be dropped as stale"):
        resolve("grpo", {"data": {"lag": 3, "staleness": 2}})
