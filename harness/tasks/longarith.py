"""``long_arithmetic``: products (and sums) of numbers of up to six digits, a task where the code
tool matters.

A small policy cannot multiply ``3471*2849`` in its head, one token at a time; with the tool it
writes a one-line program and copies its output. The oracle demonstrates both ways: without the
tool, the answer alone (``9888879``); where the tool is offered (the ``tools:`` section), a call,
then the answer read from its output::

    3471*2849=   ->  <code>print(3471*2849)</code>   ->  9888879   ->  9888879

Each operand's number of digits is drawn uniformly from ``min_digits..max_digits``, so one-digit
products (which a policy can learn by heart) sit beside four-digit ones; an instance's difficulty is
the digits of its operands together. The space is large (10^8 two-operand products at the defaults)
and split by each expression's hash.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

from pydantic import Field, model_validator

from .base import Instance, Task, TaskParams
from .builtin import check_operators, expression, parse_int


class LongArithmeticParams(TaskParams):
    min_digits: int = Field(1, ge=1, le=6, description="Fewest digits of an operand.")
    max_digits: int = Field(4, ge=1, le=6, description="Most digits of an operand.")
    operands: int = Field(2, ge=2, le=4, description="Numbers in the expression.")
    operators: str = Field("*", min_length=1, description="Any of * + -.")

    @model_validator(mode="after")
    def _check(self) -> LongArithmeticParams:
        if self.max_digits < self.min_digits:
            raise ValueError(f"max_digits: must be >= min_digits ({self.min_digits})")
        return check_operators(self, "*+-")


def numbers_of(digits: int) -> range:
    """The operands with ``digits`` digits (0-9 for one digit)."""

    return range(0 if digits == 1 else 10 ** (digits - 1), 10**digits)


class LongArithmetic(Task):
    """``347*28=`` -> ``9716``. Reward 1 for the exact integer, else 0 (one verifier call per
    episode: tool turns are not graded)."""

    name = "long_arithmetic"
    Params = LongArithmeticParams
    has_oracle = True
    verifier_timeout_s = None
    """Its verifier is an integer comparison: it runs inline."""
    params: LongArithmeticParams

    def make_instance(self, seed: int) -> Instance:
        """An instance whose difficulty is the digits of its operands together."""

        rng, p = random.Random(seed), self.params
        nums = []
        for _ in range(p.operands):
            digits = numbers_of(rng.randint(p.min_digits, p.max_digits))
            nums.append(rng.randrange(digits.start, digits.stop))
        ops = [rng.choice(p.operators) for _ in range(p.operands - 1)]
        expr = expression(nums, ops)
        answer = eval(expr, {"__builtins__": {}}, {})  # noqa: S307 - digits and + - * only
        digits = sum(len(str(n)) for n in nums)
        return Instance(seed, f"{expr}=", {"answer": int(answer), "expr": expr}, digits)

    def problem_key(self, instance: Instance) -> str:
        """The expression (``347*28``)."""

        return instance.data["expr"]

    def _operand_count(self) -> int:
        p = self.params
        return sum(len(numbers_of(d)) for d in range(p.min_digits, p.max_digits + 1))

    def space_size(self) -> int:
        p = self.params
        return self._operand_count() ** p.operands * len(set(p.operators)) ** (p.operands - 1)

    def problem_space(self) -> Iterator[str]:
        p, ops = self.params, sorted(set(self.params.operators))
        values = itertools.chain.from_iterable(
            numbers_of(d) for d in range(p.min_digits, p.max_digits + 1)
        )
        operands = list(values)
        for nums in itertools.product(operands, repeat=p.operands):
            for chosen in itertools.product(ops, repeat=p.operands - 1):
                yield expression(nums, chosen)

    def verify(self, instance: Instance, response: str) -> float:
        return 1.0 if parse_int(response) == instance.data["answer"] else 0.0

    def oracle(self, instance: Instance, observations: list[str]) -> str:
        return f"{instance.data['answer']}\n"

    def tool_oracle(self, instance: Instance, observations: list[str]) -> tuple[str, str]:
        """First a program that prints the expression's value, then the answer (the program's
        output: written from the instance, so a demonstration whose call failed still answers
        right)."""

        if len(observations) == 1:
            return "code", f"print({instance.data['expr']})"
        return "answer", self.oracle(instance, observations)

    def alphabet(self) -> str:
        return "0123456789+-*= \n"
