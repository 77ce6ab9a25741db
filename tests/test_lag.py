"""Deterministic lag (data.lag: k): each batch sampled by the policy k versions back, reproducible
from the seed, resumable; lag 0 is the synchronous run; bounded staleness discards by reason."""

import math

import pytest
import torch

from sixblanks.algorithms.presets import resolve
from sixblanks.harness.models import state_hash
from tests.conftest import Saved
from tests.golden.record import (
    BUDGET,
    CONFIG,
    EVAL_SIZE,
    INITIAL_DIR,
    record_result,
    reference_result,
)


def _trainer(over=None, preset="grpo", budget=None, spawn=False):
    """A trainer of the golden fixture's policy; a concurrent collector of it is forked from the
    fork server, as a run's is (``spawn``: spawned, as where no context is given)."""

    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.models import load_pretrained
    from sixblanks.harness.orchestration.spawning import helper_context
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
        process_context=None if spawn else helper_context,
    )
    return Trainer(s, make_task("arithmetic"), model, tok)


LAG2 = {"data": {"lag": 2}, "weight": {"tis_cap": 2.0}}


def test_lag_zero_is_the_synchronous_run():
    tr = _trainer({"data": {"lag": 0}})
    res = tr.train()
    got, want = record_result(res, tr.model), reference_result("grpo")
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
    synchronous = _trainer()
    sync = synchronous.train()
    assert all(m["mismatch.kl"] < 1e-9 for m in sync.steps)
    assert record_result(ra, a.model)["policy_hash"] != state_hash(synchronous.model)
    assert not ra.ledger.check_invariants()


class Killed(Exception):
    pass


def _killed_and_resumed(over) -> dict:
    """The record of a run of ``over`` killed after step 3 and resumed from its checkpoint."""

    saved = Saved()

    def kill(tr, metrics):
        if tr.step_idx == 3:
            saved.save(tr)
            raise Killed

    with pytest.raises(Killed):
        _trainer(over).train(on_step=kill)
    resumed = _trainer(over)
    resumed.load_state_dict(saved.load())
    return record_result(resumed.train(evaluate_start=False), resumed.model)


def test_a_lagged_run_killed_and_resumed_ends_as_uninterrupted():
    """The ring of snapshots is in the checkpoint: the resumed run samples with the same old
    weights."""

    whole = _trainer(LAG2)
    want = record_result(whole.train(), whole.model)
    got = _killed_and_resumed(LAG2)
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


# ----------------------------------------------------------------------------- the controls, wired


def t(x):
    return torch.tensor(x, dtype=torch.float64)


def test_dis_passes_gradient_only_inside_the_band_and_weighs_it_by_rho():
    from sixblanks.algorithms.loss import policy_loss
    from sixblanks.algorithms.normalization import loss_weights

    b = resolve(
        "dr_grpo",  # no KL term
        {"weight": {"ratio": "behavior", "trust_region": "dis", "eps_low": 0.3, "eps_high": 0.5}},
    )
    behavior = t([[0.0, 0.0, 0.0, 0.0]])
    logp = t([[math.log(1.2), math.log(0.6), math.log(1.6), math.log(0.9)]]).requires_grad_()
    adv = t([[1.0, 1.0, -1.0, -2.0]])
    mask = torch.ones(1, 4, dtype=torch.float64)
    w = loss_weights(mask, "token-mean")
    # pi_old is not used by DIS: any value gives the same loss
    loss, met = policy_loss(b, logp, t([[5.0] * 4]), adv, mask, w, behavior_logp=behavior)
    (g,) = torch.autograd.grad(loss, logp)
    # rho = 1.2 (in), 0.6 (below 0.7: out), 1.6 (above 1.5: out), 0.9 (in); grad = -rho A / 4
    assert torch.allclose(g, t([[-1.2 * 1.0 / 4, 0.0, 0.0, -0.9 * -2.0 / 4]]))
    assert met["clip_count"] == 2  # the tokens outside the band
    with pytest.raises(ValueError, match="set weight.ratio: behavior"):
        resolve("grpo", {"weight": {"trust_region": "dis"}})


def test_truncated_is_forms_and_the_gate_by_hand():
    from sixblanks.algorithms.loss import behavior_mask, behavior_weight

    old = t([[math.log(3.0), 0.0, math.log(0.5)], [math.log(1.5), math.log(1.5), 0.0]])
    beh = torch.zeros(2, 3, dtype=torch.float64)
    mask = t([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    seq = resolve("grpo", {"weight": {"tis_cap": 2.0, "tis_form": "sequence"}})
    # per sequence: min(3 * 1 * 0.5, 2) = 1.5; min(1.5 * 1.5, 2) = 2
    assert torch.allclose(behavior_weight(seq, old, beh, mask), t([[1.5], [2.0]]))
    tok = resolve("grpo", {"weight": {"tis_cap": 2.0}})
    assert torch.allclose(
        behavior_weight(tok, old, beh, mask), t([[2.0, 1.0, 0.5], [1.5, 1.5, 1.0]])
    )
    masked = resolve("grpo", {"weight": {"tis_cap": 2.0, "tis_form": "token_mask"}})
    m, dropped, _ = behavior_mask(masked, old, beh, mask)
    assert m.tolist() == [[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]] and dropped == {"masking": (1.0, 0)}
    gate = resolve("grpo", {"weight": {"gate": {"low": 0.6, "high": 2.0}}})
    m, dropped, met = behavior_mask(gate, old, beh, mask)
    # ratios 3 and 0.5 are outside [0.6, 2]: row 0 keeps one token
    assert m.tolist() == [[0.0, 1.0, 0.0], [1.0, 1.0, 0.0]] and dropped == {"masking": (2.0, 0)}
    assert met["gate.masked_frac"] == 2 / 5
    with pytest.raises(ValueError, match="needs weight.tis_cap"):
        resolve("grpo", {"weight": {"tis_form": "sequence_mask"}})


def test_a_lagged_run_with_a_gate_and_dis_discards_by_reason_and_balances_its_ledger():
    gated = _trainer({"data": {"lag": 3}, "weight": {"gate": {"low": 0.9, "high": 1.1}}})
    res = gated.train()
    led = res.ledger
    assert led.discarded_by_reason["masking"] > 0 and not led.check_invariants()
    assert any("gate.masked_frac" in m for m in res.steps)
    assert {"lag.kl_p50", "lag.kl_p90", "lag.kl_max"} <= set(res.steps[-1])
    sao = _trainer(
        {
            "data": {"lag": 3},
            "weight": {"ratio": "behavior", "trust_region": "dis", "eps_low": 0.1, "eps_high": 0.1},
        }
    )
    res = sao.train()
    led = res.ledger
    assert led.discarded_by_reason["dis"] > 0 and not led.check_invariants()
    assert led.counters["launched_tokens"] == pytest.approx(
        led.counters["accepted_tokens"] + led.counters["discarded_tokens"]
    )


def test_vtrace_targets_match_gae_on_policy_and_run_on_lagged_data():
    """On-policy (rho = 1 up to the engine's rounding) at lambda = 1, V-trace's targets are the GAE
    returns and its policy advantages the GAE advantages; on lagged data it trains."""

    over = {"advantage": {"lam": 1.0, "critic": {"targets": "vtrace"}}}
    prepared = {}
    for name, o in (("vtrace", over), ("gae", {"advantage": {"lam": 1.0}})):
        tr = _trainer(o, preset="ppo")
        prepared[name] = tr.objective.prepare(tr.collector.collect())
    v, g = prepared["vtrace"].tensors, prepared["gae"].tensors
    assert torch.allclose(v["ret"], g["ret"], atol=1e-4) and torch.allclose(
        v["adv"], g["adv"], atol=1e-3
    )
    lagged = _trainer({**over, "data": {"lag": 2}}, preset="ppo")
    res = lagged.train()
    assert (
        all(math.isfinite(m["value_loss"]) for m in res.steps) and not res.ledger.check_invariants()
    )
    with pytest.raises(ValueError, match="c_bar <= rho_bar"):
        resolve("ppo", {"advantage": {"critic": {"targets": "vtrace", "rho_bar": 0.5}}})


def test_sao_policy_lambda_and_gae_with_one_lambda_per_sample():
    from sixblanks.algorithms.critic import gae, sao_policy_lambda

    mask = t([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    lam = sao_policy_lambda(mask, 1.5)
    # 1 - 1/(1.5 * 2) = 2/3; 1 - 1/(1.5 * 4) = 5/6; no action token: 0
    assert torch.allclose(lam, t([2 / 3, 5 / 6, 0.0]))
    g = torch.Generator().manual_seed(0)
    r, v = (
        torch.rand(3, 4, generator=g, dtype=torch.float64),
        torch.rand(3, 4, generator=g, dtype=torch.float64),
    )
    adv, _ = gae(r, v, mask, 0.9, lam)
    for i in range(3):  # a second method: each row with its own scalar lambda
        row, _ = gae(r[i : i + 1], v[i : i + 1], mask[i : i + 1], 0.9, float(lam[i]))
        assert torch.allclose(adv[i], row[0])


def test_the_sao_preset_trains_its_mlp_only_critic_and_masks_outside_the_dis_band():
    tr = _trainer({"data": {"lag": 2}}, preset="sao", budget={"launched_tokens": 400.0})
    critic = tr.objective.critic
    before = {n: p.detach().clone() for n, p in critic.backbone.named_parameters()}
    res = tr.train()
    moved = {n for n, p in critic.backbone.named_parameters() if not torch.equal(p, before[n])}
    assert moved and all(".mlp." in n for n in moved)  # attention, embeddings and norms frozen
    trained = [m for m in res.steps if not m.get("skipped")]
    assert trained and all(m.get("optimizer_steps") for m in trained)
    # two critic optimizer steps per actor step: counted per step, and in AdamW's own state
    assert all(m["critic_optimizer_steps"] == 2 * m["optimizer_steps"] for m in trained)
    actor = {int(st["step"]) for st in tr.ctx.optimizer.state.values()}
    crit = {int(st["step"]) for st in tr.objective.critic_optimizer.state.values()}
    assert crit == {2 * n for n in actor} and sum(m["optimizer_steps"] for m in trained) in actor
    led = res.ledger
    assert led.counters["rollouts_launched"] == 4 * len(res.steps)  # one rollout per prompt
    # DIS masked tokens in this run: counted, by its own reason, in a ledger that balances
    assert not led.check_invariants() and led.discarded_by_reason["dis"] > 0
    assert any(m.get("dropped.dis_tokens", 0) > 0 for m in res.steps)


def test_corrections_that_would_weigh_twice_are_refused():
    with pytest.raises(ValueError, match="would correct twice"):
        resolve("sao", {"weight": {"tis_cap": 2.0}})
    with pytest.raises(ValueError, match="use one"):
        resolve("grpo", {"weight": {"tis_cap": 2.0, "gate": {"mode": "clamp"}}})
    # a masking gate with TIS, or a mask form of TIS with a clamping gate, is one weight each
    resolve("grpo", {"weight": {"tis_cap": 2.0, "gate": {"mode": "mask"}}})
    resolve(
        "grpo", {"weight": {"tis_cap": 2.0, "tis_form": "token_mask", "gate": {"mode": "clamp"}}}
    )


def test_a_round_dropped_whole_still_counts_toward_the_round_cap():
    from sixblanks.algorithms.data import DynamicSampler

    sampler = DynamicSampler(target_groups=2, max_rounds=2)
    sampler.add_empty_round()
    assert not sampler.done and sampler.census.rounds == 1
    sampler.add_empty_round()
    assert sampler.done and sampler.census.cap_hit and sampler.census.balanced()


# ----------------------------------------------------------------------------- the replay buffer

REPLAY = {
    "data": {"replay": {"capacity": 6, "reuse": 1, "per_step": 2}},
    "weight": {"tis_cap": 2.0},
}


def test_the_replay_buffer_draws_counts_uses_and_evicts_by_hand():
    from types import SimpleNamespace

    from sixblanks.harness.training.collectors.replay import ReplayBuffer

    tr = _trainer(REPLAY)
    fresh = tr.collector.round()[0]  # 4 groups of 4
    buf = ReplayBuffer(tr.ctx)
    buf.spec = SimpleNamespace(capacity=6, reuse=2, per_step=3, eviction="fifo")
    assert buf.draw() is None and buf.add(fresh) == 0 and len(buf.groups) == 4
    again = fresh.select(list(range(16)))
    again.group_ids = again.group_ids + 100
    assert buf.add(again) == 2  # 8 groups > capacity 6: the two oldest leave
    assert [int(g["batch"].group_ids[0]) for g in buf.groups][:2] == [
        int(fresh.group_ids[8]),
        int(fresh.group_ids[12]),
    ]
    drawn = buf.draw()
    assert drawn.size == 12 and len(set(drawn.group_ids.tolist())) == 3  # whole groups
    assert sorted(g["uses"] for g in buf.groups) == [0, 0, 0, 1, 1, 1]
    for _ in range(3):
        buf.draw()
    assert all(g["uses"] < 2 for g in buf.groups) and len(buf.groups) < 6  # used up: gone


def test_replayed_groups_train_again_without_being_launched_or_accepted_again():
    tr = _trainer(REPLAY)
    res = tr.train()
    led = res.ledger
    c = led.counters
    assert c["replayed_tokens"] > 0 and not led.check_invariants()
    # launched = accepted + discarded counts each token once, however often it was trained on
    assert c["launched_tokens"] == pytest.approx(c["accepted_tokens"] + c["discarded_tokens"])
    replayed = [m.get("replay.groups", 0.0) for m in res.steps]
    assert replayed[0] == 0 and all(r == 2 for r in replayed[1:])  # 2 groups per step once filled
    # reuse 1: every group is replayed at most once, so replayed tokens <= accepted tokens
    assert c["replayed_tokens"] <= c["accepted_tokens"]
    # resumable: the buffer is in the checkpoint
    whole, got = record_result(res, tr.model), _killed_and_resumed(REPLAY)
    assert got["policy_hash"] == whole["policy_hash"] and got["counters"] == whole["counters"]
    with pytest.raises(ValueError, match="not with ReMax"):
        resolve("remax", {"data": {"replay": {}}})


def test_broadcast_every_n_versions_samples_from_the_last_broadcast():
    """broadcast_every 3: versions 0, 0, 0, 3, 3, 3, 6 ...; with lag 1 on top: max(0, v - 1)
    rounded down to a multiple of 3."""

    res = _trainer({"data": {"broadcast_every": 3}, "weight": {"tis_cap": 2.0}}).train()
    behind = [m["lag.versions_behind"] for m in res.steps]
    assert behind == [v % 3 for v in range(len(res.steps))] and len(behind) >= 6
    res = _trainer({"data": {"broadcast_every": 3, "lag": 1}}).train()
    sampled = [v - m["lag.versions_behind"] for v, m in enumerate(res.steps)]
    assert sampled == [max(0, v - 1) // 3 * 3 for v in range(len(res.steps))]
    assert not res.ledger.check_invariants()
