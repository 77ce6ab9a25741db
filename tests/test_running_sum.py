"""The testbed's task, ``running_sum``: its instances, difficulty grades and verifier checked by
hand, its space counted, and its verifier calls counted in a real run of the testbed's configuration
(its held-out split is checked with every built-in task's, in test_heldout.py)."""

from __future__ import annotations

import pytest
import yaml

from sixblanks.harness.tasks import make_task
from sixblanks.harness.tasks.scratchpad import last_integer

from .conftest import ROOT, query


def _steps(expr: str) -> list[str]:
    """The scratchpad of ``expr`` worked by hand: one ``a op b = c`` per operator, left to right."""

    nums, ops = [int(c) for c in expr[0::2]], list(expr[1::2])
    out, value = [], nums[0]
    for op, n in zip(ops, nums[1:]):
        new = value + n if op == "+" else value - n
        out.append(f"{value}{op}{n}={new}")
        value = new
    return out


def test_an_instance_by_hand():
    task = make_task("running_sum", {})
    for seed in range(200):
        inst = task.make_instance(seed)
        expr = inst.data["expr"]
        assert inst.prompt == f"{expr}="
        assert inst.data["answer"] == eval(expr)  # noqa: S307 - one-digit operands and + - only
        assert inst.data["steps"] == _steps(expr)
        assert inst.difficulty == expr.count("+") + expr.count("-")
        assert 3 <= len(expr[0::2]) <= 5  # the default 3 to 5 operands


@pytest.mark.parametrize(
    ("response", "graded"),
    [
        ("3+5=8,8-2=6,6+7=13", 13),
        ("3+5=8,8-2=6,6+7=13\n", 13),
        ("13", 13),
        (" -4 ", -4),
        ("8,6,13,", 13),
        ("", None),
        ("x=13", None),  # a letter: not an answer of this task
        ("3+5=8,8-2=6,6+7=", 7),  # the last integer written, even an operand
        ("6-7", 7),  # a minus after a digit is the operator, not a sign
        ("6-7=", 7),
        ("3+5=8,8-2", 2),
        ("6--7", -7),
        ("8,-2", -2),
    ],
)
def test_only_the_last_integer_is_graded(response, graded):
    assert last_integer(response) == graded


def test_the_verifier_by_hand_long_or_short_right_or_wrong():
    task = make_task("running_sum", {})
    inst = next(
        task.make_instance(s)
        for s in range(200_000)
        if task.make_instance(s).data["expr"] == "3+5-2"
    )
    assert task.oracle(inst, [inst.prompt]) == "3+5=8,8-2=6\n"
    assert task.verify(inst, "3+5=8,8-2=6\n") == 1.0  # long and right
    assert task.verify(inst, "6\n") == 1.0  # short and right
    assert task.verify(inst, "3+5=8,8-2=5\n") == 0.0  # long and wrong
    assert task.verify(inst, "5\n") == 0.0  # short and wrong


def test_the_direct_share_of_the_demonstrations():
    task = make_task("running_sum", {"direct_share": 0.5})
    answers = [task.oracle(i, [i.prompt]) for i in task.instances(list(range(4000)))]
    direct = [a for a in answers if "=" not in a]
    assert 0.46 < len(direct) / len(answers) < 0.54
    assert all(len(a) <= 4 for a in direct)  # -36 to 45, and the newline
    again = make_task("running_sum", {"direct_share": 0.5})
    assert answers == [again.oracle(i, [i.prompt]) for i in again.instances(list(range(4000)))]
    # the working: 2 to 4 steps of 5 ("3+5=8") to 9 ("-18-9=-27") characters, a comma between;
    # the shortest two steps of 5, the longest 0-9=-9,-9-9=-18,-18-9=-27,-27-9=-36 (35)
    worked = [len(a) - 1 for a in answers if "=" in a]
    assert min(worked) == 2 * 5 + 1 and max(worked) <= 35
    longest = make_task("running_sum", {})
    demo = next(
        longest.make_instance(s)
        for s in range(2_000_000)
        if longest.make_instance(s).data["expr"] == "0-9-9-9-9"
    )
    assert len(longest.oracle(demo, [])) == 35 + 1
    assert (
        make_task("running_sum", {"direct_share": 0.0}).oracle(task.make_instance(1), [])
        == ",".join(task.make_instance(1).data["steps"]) + "\n"
    )


def test_the_space_counted_two_ways():
    small = make_task("running_sum", {"min_operands": 2, "max_operands": 3})
    listed = list(small.problem_space())
    assert len(listed) == len(set(listed)) == small.space_size() == 10 * 10 * 2 + 10**3 * 4
    drawn = {small.problem_key(small.make_instance(s)) for s in range(200_000)}
    assert drawn == set(listed)  # every listed problem is made, and nothing else
    # the testbed's space: 3 to 5 one-digit operands, + and -
    assert make_task("running_sum", {}).space_size() == 10**3 * 4 + 10**4 * 8 + 10**5 * 16


def _totals(expr: str) -> list[int]:
    """Every running total of ``expr``, the first number included, by hand."""

    nums, ops = [int(c) for c in expr[0::2]], list(expr[1::2])
    out = [nums[0]]
    for op, n in zip(ops, nums[1:]):
        out.append(out[-1] + n if op == "+" else out[-1] - n)
    return out


def test_bounded_totals_keep_every_step_a_one_digit_fact():
    task = make_task("running_sum", {"max_total": 9})
    made = [task.make_instance(s) for s in range(3000)]
    for inst in made:
        assert all(0 <= t <= 9 for t in _totals(inst.data["expr"]))
        assert inst.data["steps"] == _steps(inst.data["expr"])
    # every step that stays in range is drawn: from a total of 3, "+0".."+6" and "-0".."-3"
    firsts = {i.data["expr"][1:3] for i in made if i.data["expr"][0] == "3"}
    assert firsts == {f"+{d}" for d in range(7)} | {f"-{d}" for d in range(4)}
    # counted by hand: 10 first numbers, then 11 ways to stay in 0..9 from any total
    # (the 10 totals, with 0 reached both as +0 and -0)
    small = make_task("running_sum", {"min_operands": 2, "max_operands": 3, "max_total": 9})
    listed = list(small.problem_space())
    assert len(listed) == len(set(listed)) == small.space_size() == 10 * 11 + 10 * 11**2
    assert task.space_size() == 10 * 11**2 + 10 * 11**3 + 10 * 11**4  # 160,930
    drawn = {small.problem_key(small.make_instance(s)) for s in range(20_000)}
    assert drawn == set(listed)
    # a bound above 9 lets totals pass one digit (and only then), never below 0
    wide = make_task("running_sum", {"max_total": 12})
    totals = [t for s in range(3000) for t in _totals(wide.make_instance(s).data["expr"])]
    assert min(totals) == 0 and max(totals) == 12


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="max_operands: must be >= min_operands"):
        make_task("running_sum", {"min_operands": 4, "max_operands": 3})
    with pytest.raises(ValueError, match="unsupported operator"):
        make_task("running_sum", {"operators": "+*"})


def test_a_run_on_the_testbed_counts_every_verifier_call(run_experiment):
    """The testbed's own file, shrunk (a smaller policy, a few warm-start steps, two training
    steps): every sampled response is verified once and counted, and so is every evaluation
    sample."""

    cfg = yaml.safe_load((ROOT / "experiments" / "testbed.yaml").read_text())
    rollout = cfg["rollout"]
    per_step = rollout["prompts_per_step"] * rollout["group_size"]
    cfg.update(
        seeds=[0],
        model={
            "tiny": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64}
        },
        warm_start={"steps": 5, "num_demos": 64},
        budget={"launched_tokens": 2 * per_step * rollout["max_new_tokens"]},
        eval={**cfg["eval"], "size": 8, "every": None},
        arms={"grpo": cfg["arms"]["grpo"]},
    )
    out = run_experiment(cfg)
    (steps,) = query(out, "select count(distinct step) from metrics where name = 'reward_mean'")[0]
    (calls,) = query(out, "select max(verifier_calls) from ledger")[0]
    assert steps == 2 and calls == 2 * per_step
    evals = query(out, "select n, eval_verifier_calls from evals order by step")
    samples = cfg["eval"]["samples"]
    assert evals and all(calls == n * samples for n, calls in evals)
