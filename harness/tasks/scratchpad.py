"""``running_sum``: a chain of one-digit additions and subtractions answered with a scratchpad.

The testbed's task: built so that algorithms can differ on it. Its space holds millions of problems
(a held-out split of distinct problems as large as any evaluation needs); each instance states its
difficulty (the number of operations); the demonstrated answer works the chain one step at a time
(``3+5=8,8-2=6,6+7=13``: 11 to 35 characters, one token each for the tiny policy), and only the last
integer of a response is graded, so an answer can be long or short, with or without the scratchpad,
whether it is right or wrong: length is free to move apart from correctness.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterator

from pydantic import Field, model_validator

from .base import Instance, Task, TaskParams
from .builtin import check_operators, expression

# a minus is a sign only where no digit precedes it: in "8-2" it is the operator, and the last
# integer written is 2, not -2 (a working cut off mid-step must not read as a negative answer)
_LAST_INT = re.compile(r"(?:(?<!\d)-)?\d+")
_ALLOWED = re.compile(r"^[0-9+\-=,\s]*$")


def last_integer(text: str) -> int | None:
    """The last integer written in ``text`` (``"3+5=8,8-2=6"`` -> 6); None when there is none or
    the text holds anything but digits, signs, ``=``, commas and whitespace."""

    if not _ALLOWED.match(text):
        return None
    found = _LAST_INT.findall(text)
    return int(found[-1]) if found else None


class RunningSumParams(TaskParams):
    min_operands: int = Field(3, ge=2, le=8, description="Fewest numbers in a chain.")
    max_operands: int = Field(5, ge=2, le=8, description="Most numbers in a chain.")
    operators: str = Field("+-", min_length=1, description="Any of + -.")
    direct_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of the demonstrations (the warm start's) that give the answer alone, "
        "without the scratchpad: a teacher that often skips its working. A policy imitating it "
        "answers many chains in one token, which it rarely gets right; RL can learn to work "
        "instead.",
    )

    max_total: int | None = Field(
        None,
        ge=0,
        description="Keep every running total within 0..max_total (9: each step is a one-digit "
        "fact, which a small policy can learn to near certainty, so a worked chain is mostly right "
        "and skipping the working is what costs); None: any total.",
    )

    @model_validator(mode="after")
    def _check(self) -> RunningSumParams:
        if self.max_operands < self.min_operands:
            raise ValueError(f"max_operands: must be >= min_operands ({self.min_operands})")
        return check_operators(self, "+-")


def sum_of(nums: list[int], ops: list[str]) -> int:
    """The chain's value: ``nums[0] ops[0] nums[1] ...`` evaluated left to right."""

    value = nums[0]
    for op, n in zip(ops, nums[1:]):
        value = value + n if op == "+" else value - n
    return value


def _within(nums, ops, top: int) -> bool:
    """Whether every running total of the chain (the first number included) lies in 0..top."""

    value = nums[0]
    if not 0 <= value <= top:
        return False
    for op, n in zip(ops, nums[1:]):
        value = value + n if op == "+" else value - n
        if not 0 <= value <= top:
            return False
    return True


class RunningSum(Task):
    """``3+5-2+7=`` -> ``3+5=8,8-2=6,6+7=13`` (reward 1 when the last integer is 13, else 0).

    Operands are one digit (0-9); the number of operands is uniform on
    ``min_operands..max_operands``, and an instance's difficulty is its number of operations
    (``operands - 1``): each is one step of the scratchpad. Under ``max_total``, each operation and
    operand is drawn uniformly among those that keep the running total within 0..max_total."""

    name = "running_sum"
    Params = RunningSumParams
    has_oracle = True
    verifier_timeout_s = None
    """Its verifier is a regular expression and an integer comparison: it runs inline."""
    params: RunningSumParams

    def make_instance(self, seed: int) -> Instance:
        rng, p = random.Random(seed), self.params
        k = rng.randint(p.min_operands, p.max_operands)
        if p.max_total is None:
            nums = [rng.randint(0, 9) for _ in range(k)]
            ops = [rng.choice(p.operators) for _ in range(k - 1)]
        else:
            nums, ops = [rng.randint(0, min(9, p.max_total))], []
            for _ in range(k - 1):  # uniform over the steps that keep the total in range
                op, n = rng.choice(self._steps_from(sum_of(nums, ops)))
                nums.append(n)
                ops.append(op)
        expr = expression(nums, ops)
        steps, value = [], nums[0]
        for op, n in zip(ops, nums[1:]):
            new = value + n if op == "+" else value - n
            steps.append(f"{value}{op}{n}={new}")
            value = new
        data = {"expr": expr, "answer": value, "steps": steps}
        return Instance(seed, f"{expr}=", data, difficulty=k - 1)

    def _steps_from(self, total: int) -> list[tuple[str, int]]:
        """The (operator, operand) pairs that keep ``total`` within 0..max_total, in a fixed
        order."""

        top = self.params.max_total
        return [
            (op, n)
            for op in sorted(set(self.params.operators))
            for n in range(10)
            if 0 <= (total + n if op == "+" else total - n) <= top
        ]

    def problem_key(self, instance: Instance) -> str:
        """The expression (``3+5-2+7``)."""

        return instance.data["expr"]

    def space_size(self) -> int:
        p = self.params
        ops = len(set(p.operators))
        if p.max_total is None:
            return sum(10**k * ops ** (k - 1) for k in range(p.min_operands, p.max_operands + 1))
        # chains counted by their running total, one operation at a time
        ways = {t: 1 for t in range(min(9, p.max_total) + 1)}
        size = 0
        for k in range(2, p.max_operands + 1):
            step: dict[int, int] = {}
            for total, n in ways.items():
                for op, d in self._steps_from(total):
                    new = total + d if op == "+" else total - d
                    step[new] = step.get(new, 0) + n
            ways = step
            size += sum(ways.values()) if k >= p.min_operands else 0
        return size

    def problem_space(self) -> Iterator[str]:
        p, ops = self.params, sorted(set(self.params.operators))
        for k in range(p.min_operands, p.max_operands + 1):
            for nums in itertools.product(range(10), repeat=k):
                for chosen in itertools.product(ops, repeat=k - 1):
                    if p.max_total is None or _within(nums, chosen, p.max_total):
                        yield expression(nums, chosen)

    def verify(self, instance: Instance, response: str) -> float:
        return 1.0 if last_integer(response) == instance.data["answer"] else 0.0

    def oracle(self, instance: Instance, observations: list[str]) -> str:
        """The scratchpad (``3+5=8,8-2=6,6+7=13``), or with probability ``direct_share`` (decided
        by the instance's seed, so a demonstration is the same wherever it is made) the answer
        alone (``13``)."""

        share = self.params.direct_share
        if share and random.Random(f"direct:{instance.seed}").random() < share:
            return f"{instance.data['answer']}\n"
        return ",".join(instance.data["steps"]) + "\n"

    def alphabet(self) -> str:
        return "0123456789+-=, \n"
