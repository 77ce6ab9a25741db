"""Tasks, environments and the verifier choke point."""

import math
import time

import pytest

from sixblanks.harness.seeds import (
    DEMO_SEED_BASE,
    DEMO_SEEDS_PER_TASK,
    TRAIN_SEED_RANGE,
    eval_seeds,
)
from sixblanks.harness.tasks import EVAL_SEED_OFFSET, Instance, Task, make_task
from sixblanks.harness.tasks.registry import TaskLoadError
from sixblanks.harness.tasks.verify import VerifierFailure, VerifierGate


def test_arithmetic_instances_are_deterministic_and_verified():
    t = make_task("arithmetic", {"digits": 2, "operators": "+-*", "operands": 3})
    a, b = t.make_instance(7), t.make_instance(7)
    assert a.prompt == b.prompt and a.data == b.data
    expr = a.prompt[:-1]
    assert a.prompt.endswith("=")
    assert a.data["answer"] == eval(expr)  # independent evaluation of the expression
    assert all(len(x) == 2 for x in expr.replace("*", "+").replace("-", "+").split("+"))
    ans = a.data["answer"]
    assert t.verify(a, f"{ans}\n") == 1.0
    assert t.verify(a, f" {ans} ") == 1.0
    assert t.verify(a, f"{ans + 1}\n") == 0.0
    assert t.verify(a, "abc") == 0.0
    assert t.make_instance(8).prompt != a.prompt or t.make_instance(9).prompt != a.prompt


def test_eval_set_is_deterministic_and_disjoint_from_training():
    t = make_task("arithmetic")
    e1, e2 = t.eval_instances(16), t.eval_instances(16)
    assert [i.prompt for i in e1] == [i.prompt for i in e2]
    assert all(i.seed >= EVAL_SEED_OFFSET for i in e1)
    # two held-out splits: validation (what the sweep and the ladder select on) and test (reports)
    val = t.eval_instances(16, "validation")
    assert [i.seed for i in e1] == [i.seed for i in t.eval_instances(16, "test")]
    assert not set(eval_seeds(10**6, "validation")) & set(eval_seeds(10**6, "test"))
    # the held-out sets walk their own seed range in order, keeping each new problem of their
    # split: ascending seeds of that range, and no problem in both
    seeds = [i.seed for i in val]
    assert seeds == sorted(seeds) and seeds[0] >= eval_seeds(1, "validation")[0]
    assert not {i.prompt for i in val} & {i.prompt for i in e1}
    assert min(i.seed for i in val) > DEMO_SEED_BASE + 10 * DEMO_SEEDS_PER_TASK > TRAIN_SEED_RANGE
    with pytest.raises(ValueError, match="valid: test, validation"):
        t.eval_instances(4, "train")


def test_pass_at_k_is_the_unbiased_estimator():
    import itertools
    import math

    from sixblanks.harness.training.evaluate import pass_at_k

    # by hand: 4 samples, 1 correct, k = 2: 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(4, 1, 2) == 0.5 and pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 3, 2) == 1.0
    # a second method: the share of k-subsets of the n samples that hold a success
    for n, c, k in [(5, 2, 3), (8, 1, 4), (6, 3, 1)]:
        outcomes = [1] * c + [0] * (n - c)
        subsets = list(itertools.combinations(outcomes, k))
        assert math.isclose(pass_at_k(n, c, k), sum(any(s) for s in subsets) / len(subsets))


def _play(env, actions):
    out = []
    for a in actions:
        r = env.step(a)
        out.append((r.observation, r.reward, r.terminated, r.truncated))
        if r.terminated or r.truncated:
            break
    return out


def test_guess_number_dynamics_by_hand():
    t = make_task("guess_number", {"low": 1, "high": 16, "max_turns": 4})
    inst = Instance(0, "guess 1-16\n", {"secret": 11})
    env = t.make_env(inst, VerifierGate(t, timeout_s=None))
    obs, _ = env.reset(seed=0)
    assert obs == "guess 1-16\n"
    steps = _play(env, ["8\n", "12\n", "10\n", "11\n"])
    assert steps == [
        ("higher\n", 0.0, False, False),
        ("lower\n", 0.0, False, False),
        ("higher\n", 0.0, False, False),
        ("", 1.0, True, False),
    ]
    env.reset(seed=0)
    steps = _play(env, ["1\n", "x\n", "2\n", "3\n"])
    assert [s[0] for s in steps] == ["higher\n", "invalid\n", "higher\n", "higher\n"]
    # out of turns: a terminal failure (the limit is part of the task), not a truncation; no reward
    assert steps[-1][2] is True and steps[-1][3] is False
    assert all(s[1] == 0 for s in steps)


def test_guess_number_noise_is_controlled_by_the_seed():
    t = make_task("guess_number", {"noise": 0.5, "max_turns": 40, "high": 100})
    inst = t.make_instance(3)

    def feedback(seed):
        env = t.make_env(inst, VerifierGate(t, timeout_s=None))
        env.reset(seed=seed)
        g = 1 if inst.data["secret"] != 1 else 2
        return [env.step(f"{g}\n").observation for _ in range(30)]

    assert feedback(1) == feedback(1)
    assert feedback(1) != feedback(2)
    flips = sum(
        o == "lower\n" for o in feedback(1)
    )  # the truth is always 'higher' (or secret is 1)
    assert 3 < flips < 27


def test_guess_number_oracle_solves_noiseless():
    t = make_task("guess_number", {"low": 1, "high": 16, "max_turns": 5})
    for seed in range(20):
        inst = t.make_instance(seed)
        env = t.make_env(inst, VerifierGate(t, timeout_s=None))
        obs = [env.reset(seed=seed)[0]]
        for _ in range(5):
            r = env.step(t.oracle(inst, obs))
            if r.terminated:
                break
            obs.append(r.observation)
        assert r.reward == 1.0


# guesses bisection needs for each secret in 1-16, read off its tree by hand: 8 first; 4 or 12
# next; then 2, 6, 10, 14; then the odd numbers; 16 last (after 8, 12, 14, 15)
BISECTION_1_16 = {8: 1, 4: 2, 12: 2, 2: 3, 6: 3, 10: 3, 14: 3, 16: 5}
BISECTION_1_16 |= {n: 4 for n in range(1, 16, 2)}


def test_guess_number_difficulty_is_the_guesses_bisection_needs():
    t = make_task("guess_number", {"low": 1, "high": 16, "max_turns": 5})
    seen = {}
    for seed in range(200):
        inst = t.make_instance(seed)
        seen[inst.data["secret"]] = inst.difficulty
        # and the oracle (bisection) names the secret in exactly that many guesses
        env = t.make_env(inst, VerifierGate(t, timeout_s=None))
        obs, guesses = [env.reset(seed=seed)[0]], 0
        for _ in range(5):
            r = env.step(t.oracle(inst, obs))
            guesses += 1
            if r.terminated:
                break
            obs.append(r.observation)
        assert (r.reward, guesses) == (1.0, inst.difficulty), inst
    assert seen == BISECTION_1_16
    # 1-4: 2 first, then 1 or 3; 4 after 2 and 3
    small = make_task("guess_number", {"low": 1, "high": 4})
    assert {i.data["secret"]: i.difficulty for i in small.instances(list(range(50)))} == {
        2: 1,
        1: 2,
        3: 2,
        4: 3,
    }


def test_chain_arithmetic_difficulty_counts_carries_and_borrows():
    from sixblanks.harness.tasks.builtin import column_carries

    t = make_task("chain_arithmetic")  # 3 steps of one digit
    by_seed = {s: t.make_instance(s) for s in (0, 1, 5)}
    # seed 0: 6-0=6, 6-8=-2 (8-6), -2-6=-8 (2+6): no carry, no borrow
    # seed 1: 2+4=6, 6+7=13 (a carry), 13-7=6 (a borrow)
    # seed 5: 9-5=4, 4+7=11 (a carry), 11+0=11
    assert {s: i.data["values"] for s, i in by_seed.items()} == {
        0: [6, 6, -2, -8],
        1: [2, 6, 13, 6],
        5: [9, 4, 11, 11],
    }
    assert {s: i.difficulty for s, i in by_seed.items()} == {0: 0, 1: 2, 5: 1}
    two = make_task("chain_arithmetic", {"digits": 2, "steps": 2}).make_instance(1)
    # 17+32=49; 49+63=112 (9+3 carries, 4+6+1 carries)
    assert (two.data["values"], two.difficulty) == ([17, 49, 112], 2)
    # by hand: 99+1 carries twice; 100-1 borrows twice; 3-7=-4 is 7-3, no borrow;
    # -5-8=-13 adds the magnitudes 5+8: one carry; -13+20=7 is 20-13: one borrow
    cases = {(99, 100): 2, (100, 99): 2, (3, -4): 0, (-5, -13): 1, (-13, 7): 1, (0, 9): 0}
    assert {k: column_carries(*k) for k in cases} == cases
    # the histogram rung 4 draws has more than one bar
    assert len({t.make_instance(s).difficulty for s in range(200)}) > 1


def test_reasoning_gym_task_uses_its_own_scorer():
    import reasoning_gym

    t = make_task("reasoning_gym:basic_arithmetic")
    inst = t.make_instance(5)
    entry = reasoning_gym.create_dataset("basic_arithmetic", size=1, seed=5)[0]
    assert inst.prompt.startswith(entry["question"])
    assert t.verify(inst, entry["answer"]) == 1.0
    assert t.verify(inst, "not a number") == 0.0
    assert t.oracle(inst, [inst.prompt]).strip() == entry["answer"]


def test_a_raising_reasoning_gym_scorer_is_a_counted_failure_of_the_gate(monkeypatch):
    """The task swallows nothing: a scorer that raises reaches the verifier gate, which counts it
    (failures, reasons["raised"]) and fails the sample; a normal answer still scores through it."""

    t = make_task("reasoning_gym:basic_arithmetic")
    broken, fine = t.make_instance(5), t.make_instance(6)
    ds, _ = t._entry(broken.seed)

    def score_answer(answer, entry):
        raise ValueError("scorer bug")

    monkeypatch.setattr(ds, "score_answer", score_answer)
    gate = VerifierGate(t)
    with pytest.raises(VerifierFailure, match="raised ValueError: scorer bug"):
        gate(broken, broken.data["answer"])
    assert gate.stats.failures == 1 and gate.stats.reasons == {"raised": 1}
    assert gate(fine, fine.data["answer"] + "\n") == 1.0
    assert gate(fine, "not a number") == 0.0
    assert (
        gate.stats.calls == 3 and gate.stats.failures == 1 and gate.stats.reasons == {"raised": 1}
    )


def test_reasoning_gym_config_is_checked_when_the_task_is_made():
    """A config the dataset refuses fails at make_task (so at `sixblanks validate`, naming
    task.params.config), not at the first instance inside a run."""

    from pydantic import ValidationError

    t = make_task("reasoning_gym:basic_arithmetic", {"config": {"min_terms": 3, "max_terms": 3}})
    assert t.make_instance(0).prompt.endswith("\nAnswer: ")
    with pytest.raises(ValidationError, match="unknown key 'min_term'"):
        make_task("reasoning_gym:basic_arithmetic", {"config": {"min_term": 3}})
    with pytest.raises(ValidationError, match="max_terms must be >= min_terms"):
        make_task("reasoning_gym:basic_arithmetic", {"config": {"min_terms": 4, "max_terms": 2}})


def test_user_task_from_import_path():
    t = make_task("examples.my_tasks:Reverse", {"length": 5})
    inst = t.make_instance(1)
    word = inst.prompt[len("rev ") : -1]
    assert t.verify(inst, word[::-1] + "\n") == 1.0
    assert t.verify(inst, word + "x") == 0.0
    with pytest.raises(TaskLoadError, match="has no class 'Nope'"):
        make_task("examples.my_tasks:Nope")
    with pytest.raises(TaskLoadError, match="cannot import module"):
        make_task("no_such_module_xyz:Task")


class _Raising(Task):
    name = "raising"

    def make_instance(self, seed):
        return Instance(seed, "p", {})

    def verify(self, instance, response):
        raise ZeroDivisionError("boom")


class _Hanging(_Raising):
    name = "hanging"

    def verify(self, instance, response):
        time.sleep(3)
        return 1.0


class _NaN(_Raising):
    name = "nan"

    def verify(self, instance, response):
        return math.nan


@pytest.mark.parametrize(
    "cls,reason,kind",
    [
        (_Raising, "raised ZeroDivisionError: boom", "raised"),
        (_Hanging, "timed out after 0.2s", "timeout"),
        (_NaN, "returned nan", "non_finite"),
    ],
)
def test_verifier_gate_turns_faults_into_counted_failures(cls, reason, kind):
    task = cls()
    gate = VerifierGate(task, timeout_s=0.2)
    with pytest.raises(VerifierFailure, match=reason):
        gate(task.make_instance(0), "x")
    assert gate.stats.calls == 1 and gate.stats.failures == 1 and gate.stats.reasons == {kind: 1}
