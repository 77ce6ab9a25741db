"""Built-in tasks: ``arithmetic`` (single-turn), ``guess_number`` and ``chain_arithmetic``
(multi-turn)."""

from __future__ import annotations

import itertools
import random
import re
import time
from collections.abc import Iterator
from typing import Literal

from pydantic import Field, model_validator

from .base import Env, Instance, StepResult, Task, TaskParams

_INT = re.compile(r"^\s*(-?\d+)\s*$")


def parse_int(text: str) -> int | None:
    m = _INT.match(text)
    return int(m.group(1)) if m else None


def expression(nums, ops) -> str:
    """The expression of operands ``nums`` joined by operators ``ops`` (one fewer): ``12+7-3``."""

    return str(nums[0]) + "".join(o + str(n) for o, n in zip(ops, nums[1:]))


def check_operators(params, allowed: str):
    """``params`` unchanged, or ValueError naming the operators outside ``allowed``."""

    bad = set(params.operators) - set(allowed)
    if bad:
        raise ValueError(
            f"operators: unsupported operator(s) {''.join(sorted(bad))!r}; use {' '.join(allowed)}"
        )
    return params


class ArithmeticParams(TaskParams):
    digits: int = Field(1, ge=1, le=6, description="Digits per operand.")
    operators: str = Field("+-", min_length=1, description="Any of + - *.")
    operands: int = Field(2, ge=2, le=4)

    @model_validator(mode="after")
    def _ops(self) -> ArithmeticParams:
        return check_operators(self, "+-*")


class Arithmetic(Task):
    """``12+7=`` -> ``19``. Reward 1 for the exact integer, else 0."""

    name = "arithmetic"
    Params = ArithmeticParams
    has_oracle = True
    verifier_timeout_s = None
    """Its verifier is a bounded integer comparison: it runs inline, with no thread handoff per call
    (about 80 us each). A subclass whose ``verify`` can hang sets a timeout (tests/chaos)."""
    params: ArithmeticParams

    def make_instance(self, seed: int) -> Instance:
        rng = random.Random(seed)
        p = self.params
        lo, hi = (0 if p.digits == 1 else 10 ** (p.digits - 1)), 10**p.digits - 1
        nums = [rng.randint(lo, hi) for _ in range(p.operands)]
        ops = [rng.choice(p.operators) for _ in range(p.operands - 1)]
        expr = expression(nums, ops)
        answer = eval(expr, {"__builtins__": {}}, {})  # noqa: S307 - digits and + - * only
        return Instance(
            seed,
            f"{expr}=",
            {"answer": int(answer), "expr": expr},
            difficulty=len(str(abs(answer))),
        )

    def problem_key(self, instance: Instance) -> str:
        """The expression: its operands and operators (``12+7``)."""

        return instance.data["expr"]

    def _operands(self) -> range:
        d = self.params.digits
        return range(0 if d == 1 else 10 ** (d - 1), 10**d)

    def space_size(self) -> int:
        p = self.params
        return len(self._operands()) ** p.operands * len(set(p.operators)) ** (p.operands - 1)

    def problem_space(self) -> Iterator[str]:
        p, ops = self.params, sorted(set(self.params.operators))
        for nums in itertools.product(self._operands(), repeat=p.operands):
            for chosen in itertools.product(ops, repeat=p.operands - 1):
                yield expression(nums, chosen)

    def verify(self, instance: Instance, response: str) -> float:
        return 1.0 if parse_int(response) == instance.data["answer"] else 0.0

    def oracle(self, instance: Instance, observations: list[str]) -> str:
        return f"{instance.data['answer']}\n"

    def alphabet(self) -> str:
        return "0123456789+-*= \n"


class GuessNumberParams(TaskParams):
    low: int = 1
    high: int = Field(16, description="Secret is uniform in [low, high].")
    max_turns: int = Field(5, ge=1, description="K: reward only for success within K guesses.")
    noise: float = Field(
        0.0, ge=0, le=0.5, description="Probability that higher/lower feedback is flipped (seeded)."
    )
    mode: Literal["binary", "shaped"] = Field(
        "binary", description="binary: 1 on success; shaped: 1 - (turns-1)/K."
    )

    @model_validator(mode="after")
    def _range(self) -> GuessNumberParams:
        if self.high <= self.low:
            raise ValueError(f"high: must be > low ({self.low})")
        return self


class GuessNumberEnv(Env):
    task: GuessNumber

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        self.turn = 0
        # all environment randomness (the noisy feedback) comes from this seed
        self.rng = random.Random(self.instance.seed if seed is None else seed)
        self.low, self.high = self.task.params.low, self.task.params.high  # what feedback allows
        return self.instance.prompt, {}

    def snapshot(self) -> dict:
        return {
            "turn": self.turn,
            "low": self.low,
            "high": self.high,
            "rng": self.rng.getstate(),
        }

    def restore(self, state: dict) -> None:
        self.turn, self.low, self.high = state["turn"], state["low"], state["high"]
        self.rng = random.Random()
        self.rng.setstate(state["rng"])

    def potential(self) -> float:
        """Phi: the share of the range the feedback has ruled out (0 at the start; progress)."""

        p = self.task.params
        width = max(0, self.high - self.low + 1)
        return 1.0 - width / (p.high - p.low + 1)

    def state_key(self) -> tuple[int, int, int]:
        """The interval the feedback so far leaves open, and the guesses left: episodes that
        narrowed it the same way are in the same state, whatever they guessed."""

        return self.low, self.high, self.task.params.max_turns - self.turn

    def step(self, action: str) -> StepResult:
        p = self.task.params
        self.turn += 1
        reward = self.verify(self.instance, action)
        if reward > 0:
            shaped = 1.0 - (self.turn - 1) / p.max_turns if p.mode == "shaped" else 1.0
            return StepResult("", shaped, True, False, {"turn": self.turn})
        guess = parse_int(action)
        secret = self.instance.data["secret"]
        if guess is None:
            feedback = "invalid"
        else:
            higher = secret > guess
            if self.rng.random() < p.noise:
                higher = not higher
            feedback = "higher" if higher else "lower"
            if higher:
                self.low = max(self.low, guess + 1)
            else:
                self.high = min(self.high, guess - 1)
        # the K-turn limit is part of the task (reward only within K guesses): running out of turns
        # is a terminal failure, not a time-limit truncation, so a critic must not bootstrap past it
        out_of_turns = self.turn >= p.max_turns
        return StepResult(
            f"{feedback}\n",
            0.0,
            out_of_turns,
            False,
            {"turn": self.turn, "out_of_turns": out_of_turns},
        )


def bisection_guesses(low: int, high: int, secret: int) -> int:
    """Guesses to name ``secret`` in ``[low, high]`` by bisection (guess the midpoint rounded down,
    keep the half the noiseless feedback points to): the oracle's strategy, an optimal one."""

    guesses = 1
    guess = (low + high) // 2
    while guess != secret:
        low, high = (guess + 1, high) if secret > guess else (low, guess - 1)
        guess = (low + high) // 2
        guesses += 1
    return guesses


class GuessNumber(Task):
    """Multi-turn: guess a secret number; the environment answers higher/lower."""

    name = "guess_number"
    Params = GuessNumberParams
    verifier_timeout_s = None
    """Its verifier is a bounded integer comparison: it runs inline, with no thread handoff per call
    (about 80 us each). A subclass whose ``verify`` can hang sets a timeout (tests/chaos)."""
    multi_turn = True
    env_state_keys = True
    has_potential = True
    has_oracle = True
    params: GuessNumberParams

    @property
    def max_turns(self) -> int:
        return self.params.max_turns

    def make_instance(self, seed: int) -> Instance:
        """An instance whose difficulty is the number of guesses the bisection of the oracle (and of
        :func:`bisection_guesses`) needs to name its secret without noise: 1 for the midpoint,
        up to ceil(log2(high - low + 2)); above ``max_turns``, bisection cannot win."""

        p = self.params
        secret = random.Random(seed).randint(p.low, p.high)
        return Instance(
            seed,
            f"guess {p.low}-{p.high}\n",
            {"secret": secret},
            difficulty=bisection_guesses(p.low, p.high, secret),
        )

    def problem_key(self, instance: Instance) -> tuple[int, int, int]:
        """The secret and its range (the noise of the feedback is the environment's, not the
        problem's: a policy that memorised a secret would name it whatever the feedback)."""

        return self.params.low, self.params.high, instance.data["secret"]

    def space_size(self) -> int:
        return self.params.high - self.params.low + 1

    def problem_space(self) -> Iterator[tuple[int, int, int]]:
        p = self.params
        return ((p.low, p.high, s) for s in range(p.low, p.high + 1))

    def make_env(self, instance: Instance, verify) -> Env:
        return GuessNumberEnv(self, instance, verify)

    def verify(self, instance: Instance, response: str) -> float:
        return 1.0 if parse_int(response) == instance.data["secret"] else 0.0

    def oracle(self, instance: Instance, observations: list[str]) -> str:
        lo, hi = self.params.low, self.params.high
        guesses: list[int] = []
        # replay binary search over the feedback so far
        guess = (lo + hi) // 2
        for obs in observations[1:]:
            guesses.append(guess)
            if obs.startswith("higher"):
                lo = guess + 1
            elif obs.startswith("lower"):
                hi = guess - 1
            lo, hi = min(lo, hi), max(lo, hi)
            guess = (lo + hi) // 2
        return f"{guess}\n"

    def alphabet(self) -> str:
        return "0123456789- \nguesshigherlowerinvalid"


class ChainParams(TaskParams):
    steps: int = Field(
        3, ge=1, le=16, description="Operations in the chain: one turn each (with tail, the most)."
    )
    tail: float | None = Field(
        None,
        gt=0,
        description="A long-tailed episode length: each instance's number of operations is drawn "
        "from P(k) proportional to k^-tail on 1..steps (most chains short, a few long, as agentic "
        "episodes are); None: every chain has steps operations.",
    )
    step_seconds: float = Field(
        0.0,
        ge=0,
        le=10,
        description="Simulated environment latency: each step waits this long before it answers "
        "(a tool call, a sandbox), so that wall time depends on episode length as in agentic "
        "tasks; 0: none.",
    )
    digits: int = Field(1, ge=1, le=3, description="Digits of the start value and each operand.")
    operators: str = Field("+-", min_length=1, description="Any of + -.")
    outcome: Literal["last", "all"] = Field(
        "last",
        description="last: reward 1 when the last running value is exact (a slip earlier costs "
        "nothing, the chain goes on from the true value); all: reward 1 only when every step is "
        "right, so the outcome depends on each step (process credit has something to find).",
    )

    @model_validator(mode="after")
    def _ops(self) -> ChainParams:
        return check_operators(self, "+-")


class ChainEnv(Env):
    """One operation a turn: the policy answers the running value; the environment checks each
    step against the true chain (``info["step_correct"]``, a step label) and goes on from the
    true value, so one slip costs only the steps it touches; the outcome is the last step."""

    task: ChainArithmetic

    def step(self, action: str) -> StepResult:
        if self.task.params.step_seconds:
            time.sleep(self.task.params.step_seconds)
        values, k = self.instance.data["values"], self.turn
        self.turn += 1
        step_correct = parse_int(action) == values[k + 1]
        self.all_right = getattr(self, "all_right", True) and step_correct
        last = self.turn >= len(values) - 1
        reward = self.verify(self.instance, action) if last else 0.0  # the outcome, counted
        if last and self.task.params.outcome == "all" and not self.all_right:
            reward = 0.0
        info = {"turn": self.turn, "step_correct": bool(step_correct), "step": k}
        nxt = "" if last else f"{self.instance.data['ops'][k + 1]}="
        return StepResult(nxt, reward, last, False, info)

    def state_key(self) -> tuple[int, int]:
        """The step the chain is at and its true running value (what the next answer builds on);
        with ``outcome: all``, also whether the episode can still earn its reward."""

        value = self.instance.data["values"][self.turn]
        if self.task.params.outcome == "all":
            return self.turn, value, getattr(self, "all_right", True)
        return self.turn, value

    def reset(self, seed: int | None = None):
        self.all_right = True
        return super().reset(seed)

    def potential(self) -> float:
        """Progress that can still pay: the share of the chain done while the episode can still
        earn its reward (with ``outcome: all``, 0 after a slip)."""

        steps = len(self.instance.data["values"]) - 1  # this chain's (params.steps, or its draw)
        return self.turn / steps if getattr(self, "all_right", True) else 0.0

    def snapshot(self) -> dict:
        return {"turn": self.turn, "all_right": getattr(self, "all_right", True)}

    def restore(self, state: dict) -> None:
        self.turn, self.all_right = state["turn"], state["all_right"]


def chain_length(rng: random.Random, most: int, tail: float | None) -> int:
    """Operations in one chain: ``most``, or with ``tail`` a draw of P(k) ~ k^-tail, k = 1..most."""

    if tail is None:
        return most
    ks = range(1, most + 1)
    return rng.choices(ks, weights=[k**-tail for k in ks])[0]


def digit_sum(n: int) -> int:
    return sum(int(d) for d in str(abs(n)))


def column_carries(a: int, b: int) -> int:
    """Carries (or borrows) of the column arithmetic that takes running value ``a`` to ``b``.

    On magnitudes the step is an addition (``|b| = |a| + |b - a|``) or a subtraction of the smaller
    from the larger; adding u + v in base 10 carries (s(u) + s(v) - s(u + v)) / 9 times (s: the
    digit sum), and x - y borrows as often as y + (x - y) carries. E.g. 5 -> 12 (5 + 7): one carry;
    12 -> 7 (12 - 5): one borrow; 3 -> -4 (3 - 7, i.e. 7 - 3): none."""

    u, v = abs(a), abs(b - a)
    if abs(b) == u + v:  # the magnitudes add: u + v
        x, y = u, v
    else:  # the smaller magnitude comes off the larger: x + y is the larger
        x, y = min(u, v), max(u, v) - min(u, v)
    return (digit_sum(x) + digit_sum(y) - digit_sum(x + y)) // 9


class ChainArithmetic(Task):
    """Multi-step arithmetic, one operation a turn, every step verifiable: ``4+3=`` -> ``7``,
    then ``-5=`` -> ``2``, ... Reward 1 when the last running value is exact; each step's
    correctness is the environment's step label (``info["step_correct"]``), recomputable from
    ``instance.data["values"]``."""

    name = "chain_arithmetic"
    Params = ChainParams
    verifier_timeout_s = None
    """Its verifier is a bounded integer comparison: it runs inline, with no thread handoff per call
    (about 80 us each). A subclass whose ``verify`` can hang sets a timeout (tests/chaos)."""
    multi_turn = True
    has_oracle = True
    env_state_keys = True
    has_potential = True
    has_step_labels = True
    params: ChainParams

    @property
    def max_turns(self) -> int:
        return self.params.steps

    def make_instance(self, seed: int) -> Instance:
        """An instance whose difficulty is the carries and borrows its chain's column arithmetic
        needs (:func:`column_carries`, summed over the steps): 0 to ``steps`` x ``digits``."""

        rng, p = random.Random(seed), self.params
        hi = 10**p.digits - 1
        values = [rng.randint(0, hi)]
        ops = []
        for _ in range(chain_length(rng, p.steps, p.tail)):
            op, n = rng.choice(p.operators), rng.randint(0, hi)
            ops.append(f"{op}{n}")
            values.append(values[-1] + (n if op == "+" else -n))
        first = f"{values[0]}{ops[0]}="
        data = {"values": values, "ops": ops, "answer": values[-1]}
        carries = sum(column_carries(a, b) for a, b in zip(values, values[1:]))
        return Instance(seed, first, data, difficulty=carries)

    def problem_key(self, instance: Instance) -> tuple[int, tuple[str, ...]]:
        """The start value and the chain of operations (``(4, ("+3", "-5"))``)."""

        return instance.data["values"][0], tuple(instance.data["ops"])

    def _lengths(self) -> range:
        p = self.params
        return range(1 if p.tail is not None else p.steps, p.steps + 1)

    def space_size(self) -> int:
        p = self.params
        values = 10**p.digits
        ops = len(set(p.operators)) * values
        return values * sum(ops**k for k in self._lengths())

    def problem_space(self) -> Iterator[tuple[int, tuple[str, ...]]]:
        p = self.params
        values = range(10**p.digits)
        ops = [f"{o}{n}" for o in sorted(set(p.operators)) for n in values]
        for k in self._lengths():
            for start in values:
                for chain in itertools.product(ops, repeat=k):
                    yield start, chain

    def make_env(self, instance: Instance, verify) -> Env:
        return ChainEnv(self, instance, verify)

    def verify(self, instance: Instance, response: str) -> float:
        return 1.0 if parse_int(response) == instance.data["answer"] else 0.0

    def oracle(self, instance: Instance, observations: list[str]) -> str:
        return f"{instance.data['values'][len(observations)]}\n"

    def alphabet(self) -> str:
        return "0123456789+-= \n"
