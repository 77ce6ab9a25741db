"""One way to charge the budget: reserve the worst case, commit the actual cost or release; nested
charges count their time once; every optimizer step of every objective runs under a reservation."""

import pytest

from sixblanks.budgets.ledger import Budget, Ledger
from sixblanks.harness.training.meter import Meter


class FakeTimer:
    """Device time under the test's control."""

    def __init__(self):
        self.t = 0.0

    def now(self):
        return self.t


@pytest.fixture
def meter():
    return Meter(Ledger(Budget({"launched_tokens": 100.0})), FakeTimer())


def test_commit_on_exit_release_on_error_refuse_what_does_not_fit(meter):
    led = meter.ledger
    c = meter.reserve({"launched_tokens": 60, "verifier_calls": 5}, "rollouts")
    assert led.reserved["launched_tokens"] == 60 and led.remaining("launched_tokens") == 40
    assert meter.reserve({"launched_tokens": 41}, "too much") is None  # 60 reserved + 41 > 100
    with c:
        c.actual = {"launched_tokens": 25, "verifier_calls": 3}
    assert led.counters["launched_tokens"] == 25 and led.counters["verifier_calls"] == 3
    assert led.reserved["launched_tokens"] == 0
    c2 = meter.reserve({"launched_tokens": 75}, "rollouts")
    with pytest.raises(RuntimeError), c2:
        raise RuntimeError("engine died")
    assert led.counters["launched_tokens"] == 25 and led.reserved["launched_tokens"] == 0
    c3 = meter.reserve({"launched_tokens": 75}, "rollouts")
    with c3:
        c3.actual = {"launched_tokens": 70}
        c3.cancel()
    assert led.counters["launched_tokens"] == 25 and led.reserved["launched_tokens"] == 0
    assert [e["type"] for e in led.events].count("refused") == 1


def test_nested_charges_commit_their_own_time_once(meter):
    clock = meter.timer
    outer = meter.reserve({}, "step 0")
    with outer:
        clock.t += 1.0
        inner = meter.reserve({"launched_tokens": 10}, "rollouts step 0")
        with inner:
            clock.t += 4.0
            inner.actual = {"launched_tokens": 10}
        clock.t += 2.0
        critic = meter.reserve({}, "critic pass")
        with critic:
            clock.t += 3.0
    assert outer.elapsed[0] == 10.0 and inner.elapsed[0] == 4.0 and critic.elapsed[0] == 3.0
    by_label = {
        e["label"]: e["amounts"]["device_seconds"]
        for e in meter.ledger.events
        if e["type"] == "commit"
    }
    assert by_label == {"rollouts step 0": 4.0, "critic pass": 3.0, "step 0": 3.0}
    assert meter.ledger.counters["device_seconds"] == 10.0  # the step's time, counted once


def test_time_limits_reserve_an_estimate_from_the_previous_step():
    meter = Meter(Ledger(Budget({"device_seconds": 10.0})), FakeTimer())
    assert meter.limited({"launched_tokens": 5}, estimate_time=True) == {"device_seconds": 0.0}
    meter.last_step_time = {"device_seconds": 5.0, "wall_seconds": 6.0}
    assert meter.limited({}, estimate_time=True) == {"device_seconds": 6.0}  # 1.2 x 5
    assert meter.fits({}) and meter.fits({"device_seconds": 5.0}, estimate_time=False) is not False


def test_work_inside_an_admitted_step_is_not_refused_for_measured_time():
    """Time is checked at the step's admission (an estimate, 1.2 x the last step); the measured
    time the step's own work commits may pass the estimate without refusing the rest of the step."""

    meter = Meter(Ledger(Budget({"device_seconds": 10.0, "launched_tokens": 1000.0})), FakeTimer())
    meter.ledger.add({"device_seconds": 7.0})
    meter.last_step_time = {"device_seconds": 2.0}
    assert meter.fits({"launched_tokens": 100})  # 2.4 s estimated of 3 s left
    step = meter.reserve({}, "step 9", estimate_time=True)
    with step:
        rollouts = meter.reserve({"launched_tokens": 100}, "rollouts step 9")
        with rollouts:
            meter.timer.t += 1.0
            rollouts.actual = {"launched_tokens": 80}
        # 8 s committed + 2.4 s reserved > 10 s: the update is still admitted with its step
        update = meter.must_reserve({"launched_tokens": 0, "optimizer_steps": 1}, "update step 9")
        with update:
            meter.timer.t += 1.5
    led = meter.ledger
    assert led.counters["device_seconds"] == 9.5 and led.reserved["device_seconds"] == 0
    meter.last_step_time = {"device_seconds": step.elapsed[0]}
    assert not meter.fits({"launched_tokens": 100})  # the next step: 3 s estimated, 0.5 s left


@pytest.mark.parametrize("preset", ["grpo", "ppo", "sft", "dpo"])
def test_every_optimizer_step_runs_under_a_reservation_of_its_update(preset, monkeypatch):
    """Rollouts, demonstrations and pairs are charged before the update, and the update (optimizer
    steps, accepted tokens) is reserved before any optimizer step: DPO included."""

    from sixblanks.algorithms.presets import PRESETS
    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.models import load_pretrained
    from sixblanks.harness.tasks import make_task
    from sixblanks.harness.training import RunSettings, Trainer
    from sixblanks.harness.training.context import RunContext
    from tests.golden.record import CONFIG, INITIAL_DIR

    seen = []
    real = RunContext.clip_and_step

    def checked(self):
        led = self.meter.ledger
        seen.append(led.reserved["optimizer_steps"])  # the limited counter: reserved
        return real(self)

    monkeypatch.setattr(RunContext, "clip_and_step", checked)
    cfg = validate_mapping(CONFIG)
    model, tok = load_pretrained(INITIAL_DIR, "cpu", "float32")
    s = RunSettings(
        PRESETS[preset].blanks, cfg.rollout, cfg.optimizer, {"optimizer_steps": 4.0}, 0, eval_size=4
    )
    res = Trainer(s, make_task("arithmetic"), model, tok).train()
    assert seen and all(opt >= 1 for opt in seen)
    led = res.ledger
    assert led.counters["optimizer_steps"] == len(seen) <= 4
    labels = [e["label"] for e in led.events if e["type"] == "commit"]
    assert any(label.startswith("update step") for label in labels)
    # evaluation is charged one way too, to its own ledger: counted apart from the budget
    ev = res.eval_cost
    assert ev["generated_tokens"] > 0 and ev["verifier_calls"] == 4 * len(res.evals)
