"""The trainer runs every preset end to end on real rollouts, under its budget."""

import copy

import pytest
import torch

from sixblanks.algorithms.presets import PRESETS
from sixblanks.harness.config import validate_mapping
from sixblanks.harness.models import load_pretrained
from sixblanks.harness.tasks import make_task
from sixblanks.harness.training import RunSettings, Trainer, TrainingError
from sixblanks.harness.training.context import RunContext
from tests.golden.record import CONFIG, INITIAL_DIR


@pytest.fixture(scope="module")
def initial():
    """The golden fixture's initial policy: this config's warm start (tests/golden/record.py)."""

    cfg = validate_mapping(CONFIG)
    model, tok = load_pretrained(INITIAL_DIR, "cpu", "float32")
    return cfg, make_task("arithmetic"), model, tok


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
    real = RunContext.clip_and_step

    def record(self):
        grads.setdefault(self.settings.rollout.micro_batch_size, []).append(
            torch.cat(
                [
                    p.grad.detach().flatten().clone()
                    for p in self.model.parameters()
                    if p.grad is not None
                ]
            )
        )
        return real(self)

    monkeypatch.setattr(RunContext, "clip_and_step", record)
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
    import sixblanks.harness.training.objectives.pg_pass as trainer_mod  # its policy_loss

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


def test_target_kl_stops_the_epochs_of_a_critic_free_arm(initial):
    """weight.target_kl is read by the shared minibatch routine: a GRPO arm with 4 epochs stops
    after its first step once the approx KL to pi_old passes 1.5 x target_kl; a loose target never
    stops."""

    cfg, task, model0, tok = initial
    runs = {}
    for target in (1e-9, 1e3):
        s = _settings(cfg, "grpo", budget=1e9, data={"epochs": 4}, weight={"target_kl": target})
        res = Trainer(s, task, copy.deepcopy(model0), tok).train(max_steps=3, evaluate_start=False)
        runs[target] = [m for m in res.steps if not m.get("skipped")]
    # a batch whose groups all have equal rewards has A = 0: no gradient, the policy stays pi_old
    tight = [m for m in runs[1e-9] if m["adv_abs_mean"] > 0]
    loose = runs[1e3]
    assert tight and loose
    for m in tight:  # epoch 0 is on pi_old (approx KL 0); the check after the first step stops it
        assert m["early_stop_epoch"] == 1 and m["optimizer_steps"] == 1
        assert m["early_stop_approx_kl"] > 1.5e-9
    for m in loose:
        assert m["early_stop_epoch"] == -1 and m["optimizer_steps"] == 4


@pytest.mark.parametrize(
    "preset, ref_forward, old_forward",
    [
        ("grpo", True, False),  # KL in the loss reads pi_ref; one epoch of one minibatch
        ("dr_grpo", False, False),  # no KL at all: neither forward
        # four minibatches: pi_old is recomputed once, before them (gspo's scaled bounds add
        # one forward, once a run, to measure the spread: the paper's absolute bounds do not)
        ("gspo_paper", False, True),
        ("rloo", True, True),  # KL in the reward reads pi_old and pi_ref before the update
    ],
)
def test_skipping_unused_forwards_gives_the_same_gradients(
    initial, monkeypatch, preset, ref_forward, old_forward
):
    """rollout.skip_unused_forwards: no reference forward where no blank reads pi_ref, no pi_old
    forward where the update is exactly on-policy (the training forward's log-probs, detached,
    are pi_old). The gradients of the first update equal those of both forwards run, as before,
    and the forwards counted are those the blanks need."""

    cfg, task, model0, tok = initial
    grads, forwards, metrics = {}, {}, {}
    real_step, real_lp = RunContext.clip_and_step, RunContext.batched_logprobs
    mode = [None]

    def record(self):
        grads.setdefault(mode[0], []).append(
            torch.cat(
                [
                    p.grad.detach().flatten().clone()
                    for p in self.model.parameters()
                    if p.grad is not None
                ]
            )
        )
        return real_step(self)

    def count(self, model, batch):
        kind = "ref" if model is self.ref_model else "old"
        forwards.setdefault(mode[0], []).append(kind)
        return real_lp(self, model, batch)

    monkeypatch.setattr(RunContext, "clip_and_step", record)
    monkeypatch.setattr(RunContext, "batched_logprobs", count)
    for skip in (False, True):
        mode[0] = skip
        s = _settings(cfg, preset, budget=1e9)
        s.rollout = cfg.rollout.model_copy(update={"skip_unused_forwards": skip})
        s.seed = 1
        res = Trainer(s, task, copy.deepcopy(model0), tok).train(max_steps=2, evaluate_start=False)
        metrics[skip] = res.steps[-1]
    assert sorted(forwards[False]) == ["old", "old", "ref", "ref"]  # two steps
    want = (["old"] * 2 if old_forward else []) + (["ref"] * 2 if ref_forward else [])
    assert sorted(forwards.get(True, [])) == want
    assert len(grads[True]) == len(grads[False]) >= 2
    assert max(float(g.abs().max()) for g in grads[False]) > 1e-4  # a real gradient
    for g_all, g_skip in zip(grads[False], grads[True]):
        tol = 1e-6 * max(float(g_all.abs().max()), 1e-3)
        assert torch.allclose(g_all, g_skip, rtol=1e-4, atol=tol)
    a, b = metrics[False], metrics[True]
    assert b["loss"] == pytest.approx(a["loss"], rel=1e-5, abs=1e-7)
    assert ("kl" in b) == ref_forward
    # the rollout/trainer mismatch is still measured (on the training forward where it is reused)
    assert b["mismatch.logp_abs_max"] == pytest.approx(a["mismatch.logp_abs_max"], abs=1e-5)


def test_ignore_eos_generates_max_new_tokens_every_turn(initial):
    """rollout.ignore_eos (fixed-length generation, for throughput comparisons): every sample is
    exactly max_new_tokens long, past EOS and the task's stop string; without it they stop."""

    cfg, task, model0, tok = initial
    lengths = {}
    for ignore in (False, True):
        s = _settings(cfg, "dr_grpo", budget=1e9)
        s.rollout = cfg.rollout.model_copy(update={"ignore_eos": ignore, "max_new_tokens": 9})
        tr = Trainer(s, task, copy.deepcopy(model0), tok)
        from tests.conftest import record_batches

        batches = record_batches(tr)
        tr.train(max_steps=1, evaluate_start=False)
        lengths[ignore] = batches[0].action_mask.sum(1).tolist()
    assert set(lengths[True]) == {9.0}
    assert max(lengths[False]) < 9  # the warm policy answers and stops at the newline
