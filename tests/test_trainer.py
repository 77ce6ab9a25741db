"""The trainer runs every preset end to end on real rollouts, under its budget."""

import copy
import math

import pytest
import torch
from sixblanks.algorithms.presets import PRESETS
from sixblanks.harness.config import validate_mapping
from sixblanks.harness.models import state_hash
from sixblanks.harness.tasks import make_task
from sixblanks.harness.trainer import RunSettings, Trainer, TrainingError
from sixblanks.harness.warmstart import warm_start


@pytest.fixture(scope="module")
def initial(tmp_path_factory):
    cfg = validate_mapping(
        {
            "arms": {"a": {"preset": "grpo"}},
            "task": {"name": "arithmetic"},
            "warm_start": {"steps": 150},
            "rollout": {"max_new_tokens": 6, "prompts_per_step": 4, "group_size": 4},
        }
    )
    task = make_task("arithmetic")
    model, tok, info = warm_start(cfg, [task], tmp_path_factory.mktemp("ws"))
    return cfg, task, model, tok


def _settings(cfg, preset, budget=800.0, **over):
    blanks = cfg.resolved_blanks("a") if preset is None else PRESETS[preset].blanks
    if over:
        from sixblanks.algorithms.presets import resolve

        blanks = resolve(preset, over)
    return RunSettings(
        blanks=blanks,
        rollout=cfg.rollout,
        optimizer=cfg.optimizer,
        budget={"launched_tokens": budget},
        seed=0,
        eval_size=16,
        name=preset or "a",
    )


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_each_preset_runs_and_moves_the_policy(initial, preset):
    cfg, task, model0, tok = initial
    model = copy.deepcopy(model0)
    before = state_hash(model)
    res = Trainer(_settings(cfg, preset), task, model, tok).train()
    assert res.steps, "no step ran"
    assert state_hash(model) != before, "the policy did not move"
    trained = [m for m in res.steps if not m.get("skipped")]
    assert trained
    for m in trained:
        assert math.isfinite(m["loss"]) and math.isfinite(m["kl"]), m
    led = res.ledger
    assert led.counters["launched_tokens"] <= 800
    assert not led.check_invariants()
    assert led.counters["launched_tokens"] == pytest.approx(
        led.counters["accepted_tokens"] + led.counters["discarded_tokens"]
    )
    assert res.ended_because == "budget"
    assert len(res.evals) >= 2 and all(0 <= e["score"] <= 1 for e in res.evals)


def test_dynamic_sampling_discards_are_in_the_ledger_by_reason(initial):
    cfg, task, model0, tok = initial
    res = Trainer(_settings(cfg, "dapo", budget=1500), task, copy.deepcopy(model0), tok).train()
    led = res.ledger
    assert led.discarded_by_reason["dynamic_sampling"] > 0
    assert sum(c["groups_launched"] for c in res.census) == sum(
        c["groups_kept"] + sum(c["groups_dropped"].values()) for c in res.census
    )
    assert led.counters["launched_tokens"] == pytest.approx(
        led.counters["accepted_tokens"] + sum(led.discarded_by_reason.values())
    )


def test_remax_pays_for_its_greedy_baseline(initial):
    cfg, task, model0, tok = initial
    res = Trainer(_settings(cfg, "remax", budget=600), task, copy.deepcopy(model0), tok).train()
    led = res.ledger
    assert led.discarded_by_reason["baseline"] > 0
    assert led.counters["rollouts_launched"] == 2 * led.counters["rollouts_accepted"]


def test_micro_batch_size_does_not_change_the_gradient(initial, monkeypatch):
    from sixblanks.algorithms.presets import resolve

    cfg, task, model0, tok = initial
    grads = {}
    real = Trainer._clip_and_step

    def record(self):
        grads.setdefault(self.s.rollout.micro_batch_size, []).append(
            torch.cat(
                [
                    p.grad.detach().flatten().clone()
                    for p in self.model.parameters()
                    if p.grad is not None
                ]
            )
        )
        return real(self)

    monkeypatch.setattr(Trainer, "_clip_and_step", record)
    for micro in (64, 3):
        rollout = cfg.rollout.model_copy(update={"micro_batch_size": micro})
        blanks = resolve(
            "grpo", {"advantage": {"estimator": "return"}}
        )  # A = R: nonzero whenever one is right
        s = RunSettings(
            blanks=blanks,
            rollout=rollout,
            optimizer=cfg.optimizer,
            budget={"launched_tokens": 1e9},
            seed=1,
            name="g",
        )
        Trainer(s, task, copy.deepcopy(model0), tok).train(max_steps=1, evaluate_start=False)
    g_full, g_micro = grads[64][0], grads[3][0]
    assert g_full.abs().max() > 1e-4  # a real gradient
    assert torch.allclose(g_full, g_micro, rtol=1e-4, atol=1e-6 * float(g_full.abs().max()))


def test_nan_loss_is_a_clear_error(initial, monkeypatch):
    import sixblanks.harness.trainer as trainer_mod

    cfg, task, model0, tok = initial
    real = trainer_mod.policy_loss

    def poisoned(*args, **kwargs):
        loss, met = real(*args, **kwargs)
        return loss * float("nan"), met

    monkeypatch.setattr(trainer_mod, "policy_loss", poisoned)
    with pytest.raises(TrainingError, match="loss is nan at step 0"):
        Trainer(_settings(cfg, "rloo"), task, copy.deepcopy(model0), tok).train(
            evaluate_start=False
        )


def test_non_finite_policy_is_a_clear_rollout_error(initial):
    from sixblanks.harness.rollout.engine import RolloutError

    cfg, task, model0, tok = initial
    model = copy.deepcopy(model0)
    with torch.no_grad():
        model.lm_head.weight.mul_(float("nan"))
    with pytest.raises(RolloutError, match="non-finite logits"):
        Trainer(_settings(cfg, "grpo"), task, model, tok).train(evaluate_start=False)


def test_dynamic_sampling_round_cap_error(initial):
    cfg, task, model0, tok = initial
    s = _settings(
        cfg, "dapo", budget=5000, data={"max_sampling_rounds": 1, "on_round_cap": "error"}
    )
    s.rollout = cfg.rollout.model_copy(
        update={"temperature": 0.01}
    )  # near-greedy: groups are all-equal
    with pytest.raises(TrainingError, match="dynamic sampling kept"):
        Trainer(s, task, copy.deepcopy(model0), tok).train(evaluate_start=False)
