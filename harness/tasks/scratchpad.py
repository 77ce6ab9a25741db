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
        "answers many chains in one token, which it rarely gets right; RL can learn to work instead.",
    )

    @model_validator(mode="after")
    def _check(self) -> RunningSumParams:
        if self.max_operands < self.min_operands:
            raise ValueError(f"max_operands: must be >= min_operands ({self.min_operands})")
        return check_operators(self, "+-")


class RunningSum(Task):
    """``3+5-2+7=`` -> ``3+5=8,8-2=6,6+7=13`` (reward 1 when the last integer is 13, else 0).

    Operands are one digit (0-9); the number of operands is uniform on
    ``min_operands..max_operands``, and an instance's difficulty is its number of operations
    (``operands - 1``): each is one step of the scratchpad."""

    name = "running_sum"
    Params = RunningSumParams
    has_oracle = True
    verifier_timeout_s = None
    """Its verifier is a regular expression and an integer comparison: it runs inline."""
    params: RunningSumParams

    def make_instance(self, seed: int) -> Instance:
        rng, p = random.Random(seed), self.params
        k = rng.randint(p.min_operands, p.max_operands)
        nums = [rng.randint(0, 9) for _ in range(k)]
        ops = [rng.choice(p.operators) for _ in range(k - 1)]
        expr = expression(nums, ops)
        steps, value = [], nums[0]
        for op, n in zip(ops, nums[1:]):
            new = value + n if op == "+" else value - n
            steps.append(f"{value}{op}{n}={new}")
            value = new
        data = {"expr": expr, "answer": value, "steps": steps}
        return Instance(seed, f"{expr}=", data, difficulty=k - 1)

    def problem_key(self, instance: Instance) -> str:
        """The expression (``3+5-2+7``)."""

        return instance.data["expr"]

    def space_size(self) -> int:
        p = self.params
        ops = len(set(p.operators))
        return sum(10**k * ops ** (k - 1) for k in range(p.min_operands, p.max_operands + 1))

    def problem_space(self) -> Iterator[str]:
        p, ops = self.params, sorted(set(self.params.operators))
        for k in range(p.min_operands, p.max_operands + 1):
            for nums in itertools.product(range(10), repeat=k):
                for chosen in itertools.product(ops, repeat=k - 1):
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
