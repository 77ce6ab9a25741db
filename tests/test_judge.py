"""Judges in the reward: one counted choke point, failures counted, a judge_calls budget holds."""

import math
import time

import pytest
import torch

from sixblanks.harness.config import JudgeConfig
from sixblanks.harness.tasks import make_task
from sixblanks.harness.tasks.judge import JudgeFailure, JudgeGate, attach_judge
from sixblanks.harness.tasks.verify import VerifierFailure, VerifierGate
from tests.golden.record import INITIAL_DIR

CALLS = []


def exact_judge(prompt, response, data):
    """A judge a user could write: 0.75 for the right answer, 0.25 otherwise."""

    CALLS.append(response)
    return 0.75 if response.strip() == str(data["answer"]) else 0.25


def _judged(use="replace", fn="tests.test_judge:exact_judge", **kw):
    cfg = JudgeConfig(callable=fn, use=use, **kw).model_dump()
    return attach_judge(make_task("arithmetic"), cfg)


def test_the_judge_replaces_or_adds_to_the_reward_and_every_call_is_counted():
    task = _judged("replace")
    inst = task.make_instance(3)
    right, wrong = str(inst.data["answer"]), "x"
    gate = VerifierGate(task)
    assert gate(inst, right) == 0.75 and gate(inst, wrong) == 0.25
    assert gate.counts() == (2, 2)
    add = VerifierGate(_judged("add"))
    assert add(inst, right) == 1.0 + 0.75 and add(inst, wrong) == 0.0 + 0.25
    assert add.counts() == (2, 2)


def test_judge_failures_fail_the_sample_and_are_counted_by_reason():
    inst = make_task("arithmetic").make_instance(0)

    def gate_of(fn, **kw):
        return JudgeGate(lambda i, r: fn(), "planted", **kw)

    for fn, reason in [
        (lambda: 1 / 0, "raised"),
        (lambda: "yes", "invalid"),
        (lambda: math.nan, "non_finite"),
        (lambda: time.sleep(1.0), "timeout"),
    ]:
        g = gate_of(fn, timeout_s=0.2)
        with pytest.raises(JudgeFailure):
            g(inst, "1")
        assert g.stats.calls == 1 and g.stats.failures == 1 and g.stats.reasons == {reason: 1}
    # more calls in one verification than a rollout reserved: refused, and not counted as a call
    g = gate_of(lambda: 1.0, max_calls_per_verify=2)
    g.begin_verify()
    g(inst, "1"), g(inst, "1")
    with pytest.raises(JudgeFailure, match="max_calls_per_verify = 2"):
        g(inst, "1")
    assert g.stats.calls == 2 and g.stats.reasons == {"over_limit": 1}
    assert issubclass(JudgeFailure, VerifierFailure)  # the agent loop marks the sample failed


class AskingTask(type(make_task("arithmetic"))):
    """A task whose verify asks the judge itself (use: task), twice per answer."""

    def verify(self, instance, response):
        return 0.5 * self.judge(instance, response) + 0.5 * self.judge(instance, response + " ")


def test_a_task_that_calls_its_judge_goes_through_the_same_gate():
    task = attach_judge(
        AskingTask(),
        JudgeConfig(
            callable="tests.test_judge:exact_judge", use="task", max_calls_per_verify=2
        ).model_dump(),
    )
    inst = task.make_instance(5)
    gate = VerifierGate(task, timeout_s=None)
    assert gate(inst, str(inst.data["answer"])) == 0.75  # both see the right answer (stripped)
    assert gate.counts() == (1, 2)


def test_a_judge_calls_budget_is_never_exceeded_and_each_call_is_in_the_ledger():
    from sixblanks.algorithms.presets import PRESETS
    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.models import load_pretrained
    from sixblanks.harness.training import RunSettings, Trainer
    from tests.golden.record import CONFIG

    cfg = validate_mapping({**CONFIG, "rollout": {**CONFIG["rollout"], "prompts_per_step": 2}})
    model, tok = load_pretrained(INITIAL_DIR, "cpu", "float32")
    task = _judged("replace")
    s = RunSettings(
        PRESETS["grpo"].blanks, cfg.rollout, cfg.optimizer, {"judge_calls": 20.0}, 0, eval_size=4
    )
    tr = Trainer(s, task, model, tok)
    res = tr.train()
    led = res.ledger
    # 8 judged episodes per step (2 prompts x 4): two steps fit in 20, a third would not
    assert res.ended_because == "budget" and len(res.steps) == 2
    assert led.counters["judge_calls"] == 16 <= 20 and not led.check_invariants()
    evaluated = sum(e["cost"]["judge_calls"] for e in res.evals)
    assert task.judge.stats.calls == 16 + evaluated and evaluated == 4 * len(res.evals)
    assert res.eval_cost["judge_calls"] == evaluated  # evaluation's judge calls counted apart


def test_a_local_model_judge_scores_p_yes_against_p_no():
    cfg = JudgeConfig(kind="model", path=str(INITIAL_DIR), yes="1", no="2").model_dump()
    task = attach_judge(make_task("arithmetic"), cfg)
    inst = task.make_instance(1)
    score = VerifierGate(task)(inst, "7")
    # the second method: the judge model's next-token logits, by hand
    judge = task.judge.fn
    text = cfg["prompt"].format(prompt=inst.prompt, response="7")
    with torch.no_grad():
        logits = judge.model(**judge.tok(text, return_tensors="pt")).logits[0, -1].double()
    y, n = (
        judge.tok("1", add_special_tokens=False)["input_ids"][0],
        judge.tok("2", add_special_tokens=False)["input_ids"][0],
    )
    assert 0 < score < 1 and math.isclose(
        score, 1 / (1 + math.exp(logits[n] - logits[y])), rel_tol=1e-9
    )


def test_validate_names_a_judge_that_cannot_be_imported(cli, write_yaml):
    code, _, err = cli(
        "validate",
        write_yaml(
            "arms: {a: {preset: grpo}}\n"
            "task: {name: arithmetic, judge: {callable: 'tests.test_judge:no_such_judge'}}\n"
        ),
    )
    assert code == 2 and "task.judge.callable" in err and "no callable 'no_such_judge'" in err
    code, _, err = cli(
        "validate", write_yaml("arms: {a: {preset: grpo}}\ntask: {judge: {kind: model}}\n")
    )
    assert code == 2 and "task.judge" in err and "path" in err


class SlowAskingTask(type(make_task("arithmetic"))):
    """verify asks the judge; for the response "slow" only after 0.4 s (past the gate's timeout)."""

    def verify(self, instance, response):
        if response == "slow":
            time.sleep(0.4)
        return self.judge(instance, response)


def test_a_verifier_abandoned_on_timeout_cannot_call_the_judge_later():
    task = attach_judge(
        SlowAskingTask(),
        JudgeConfig(callable="tests.test_judge:exact_judge", use="task").model_dump(),
    )
    inst = task.make_instance(2)
    gate = VerifierGate(task, timeout_s=0.2)
    with pytest.raises(VerifierFailure, match="timed out"):
        gate(inst, "slow")
    assert gate(inst, str(inst.data["answer"])) == 0.75 and gate.counts() == (2, 1)
    time.sleep(0.5)  # the abandoned verifier wakes up and asks the judge: refused, not counted
    assert gate.counts() == (2, 1) and task.judge.stats.reasons == {"abandoned": 1}
