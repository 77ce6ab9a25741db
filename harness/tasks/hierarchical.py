"""A two-level task: ``plan_execute``. A planning turn (level 0) chooses subgoals, executor turns
(level 1) carry them out one each, and the environment reports each subgoal's completion."""

from __future__ import annotations

import random
import re

from pydantic import Field

from .base import Env, Instance, StepResult, Task, TaskParams

REACH = 9
"""The most one executor operation moves the value: a sign and a single digit."""

_OP = re.compile(r"^\s*([+-])(\d)\s*$")
_START = re.compile(r"^\s*(\d+)>(\d+)[:=]\s*$")


class PlanExecuteParams(TaskParams):
    subgoals: int = Field(
        2, ge=1, le=4, description="Waypoints in a plan, exactly: one executor turn each."
    )
    high: int = Field(
        20, ge=1, le=99, description="The start value and the target are in [0, high]."
    )


def parse_plan(text: str, n: int) -> list[int] | None:
    """The ``n`` waypoints of a plan ``"7,11"``; None when it is not exactly ``n`` comma-separated
    non-negative integers (of at most three digits)."""

    parts = text.strip().split(",")
    if len(parts) != n or not all(re.fullmatch(r"\d{1,3}", p) for p in parts):
        return None
    return [int(p) for p in parts]


def parse_op(text: str) -> int | None:
    """The move of an operation ``"+4"`` / ``"-3"`` (a sign and one digit); None when malformed."""

    m = _OP.match(text)
    return None if m is None else (int(m.group(2)) if m.group(1) == "+" else -int(m.group(2)))


def simulate(start: int, plan: list[int], ops: list[str]) -> tuple[list[int], list[bool]]:
    """The value after each operation and whether it reached that operation's waypoint. A
    malformed operation leaves the value where it is and fails its subgoal; the next subgoal
    starts from the value actually reached."""

    values, done, v = [], [], start
    for w, op in zip(plan, ops):
        move = parse_op(op)
        v = v if move is None else v + move
        values.append(v)
        done.append(move is not None and v == w)
    return values, done


class PlanExecuteEnv(Env):
    """Turn 0 (level 0) writes the plan: ``subgoals`` waypoints, e.g. ``7,11``. Each later turn
    (level 1) answers ``v>w=`` (the value now, the waypoint to reach) with one operation, e.g.
    ``+4``; ``info["step_correct"]`` says whether it reached the waypoint (the subgoal's
    completion) and the next turn starts from the value actually reached. The outcome, on the last
    turn, is whether the value is the target (the task's verifier, on the whole transcript). A
    malformed plan ends the episode at once with the verifier's 0."""

    task: PlanExecute

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        self.turn, self.value = 0, self.instance.data["start"]
        self.plan: list[int] = []
        self.actions: list[str] = []
        return self.instance.prompt, {}

    def _transcript(self) -> str:
        return "\n".join(self.actions)

    def step(self, action: str) -> StepResult:
        n = self.task.params.subgoals
        self.actions.append(" ".join(action.strip().split("\n")))  # one line per turn
        self.turn += 1
        if self.turn == 1:  # the plan
            plan = parse_plan(self.actions[0], n)
            if plan is None:
                reward = self.verify(self.instance, self._transcript())  # 0: counted all the same
                return StepResult("", reward, True, False, {"level": 0, "malformed": True})
            self.plan = plan
            return StepResult(f"{self.value}>{plan[0]}=", 0.0, False, False, {"level": 0})
        j = self.turn - 2  # the subgoal this turn carries out
        move = parse_op(self.actions[-1])
        self.value = self.value if move is None else self.value + move
        reached = move is not None and self.value == self.plan[j]
        last = j == n - 1
        reward = self.verify(self.instance, self._transcript()) if last else 0.0
        info = {"level": 1, "step_correct": bool(reached), "subgoal": j, "value": self.value}
        obs = "" if last else f"{self.value}>{self.plan[j + 1]}="
        return StepResult(obs, reward, last, False, info)

    def state_key(self) -> tuple:
        """The turn, the value now and the waypoint to reach next (None before the plan): what the
        next answer's label depends on, and what the observations show (the waypoints further
        ahead are not shown, so they are not part of the key)."""

        j = self.turn - 1
        return self.turn, self.value, self.plan[j] if 0 <= j < len(self.plan) else None

    def snapshot(self) -> dict:
        return {
            "turn": self.turn,
            "value": self.value,
            "plan": list(self.plan),
            "actions": list(self.actions),
        }

    def restore(self, state: dict) -> None:
        self.turn, self.value = state["turn"], state["value"]
        self.plan, self.actions = list(state["plan"]), list(state["actions"])


class PlanExecute(Task):
    """Plan, then execute: ``3>17:`` -> plan ``10,17`` (level 0), then ``3>10=`` -> ``+7`` and
    ``10>17=`` -> ``+7`` (level 1). One operation moves at most 9 (one digit), so a target further
    than 9 away needs a plan whose waypoints are each within reach of the previous one; the
    environment labels each executor turn with its subgoal's completion (``info["step_correct"]``)
    and each turn with its level (``info["level"]``: 0 plan, 1 execute). Reward 1 when the last
    value is the target, else 0."""

    name = "plan_execute"
    Params = PlanExecuteParams
    multi_turn = True
    has_oracle = True
    env_state_keys = True
    has_step_labels = True  # subgoal completion of each executor turn
    params: PlanExecuteParams

    @property
    def max_turns(self) -> int:
        return 1 + self.params.subgoals

    def make_instance(self, seed: int) -> Instance:
        rng, p = random.Random(seed), self.params
        start = rng.randint(0, p.high)
        far = REACH * p.subgoals  # every target is within the plan's reach
        target = rng.randint(max(0, start - far), min(p.high, start + far))
        data = {"start": start, "target": target, "subgoals": p.subgoals}
        return Instance(seed, f"{start}>{target}:", data, difficulty=abs(target - start))

    def problem_key(self, instance: Instance) -> tuple[int, int]:
        """The start value and the target."""

        return instance.data["start"], instance.data["target"]

    def _pairs(self):
        p, far = self.params, REACH * self.params.subgoals
        for start in range(p.high + 1):
            for target in range(max(0, start - far), min(p.high, start + far) + 1):
                yield start, target

    def space_size(self) -> int:
        return sum(1 for _ in self._pairs())  # at most 100 x 100

    def problem_space(self):
        return self._pairs()

    def make_env(self, instance: Instance, verify) -> Env:
        return PlanExecuteEnv(self, instance, verify)

    def verify(self, instance: Instance, response: str) -> float:
        """1.0 when the transcript (the plan's line, then one operation a line) is a well-formed
        plan whose ``subgoals`` operations end on the target; else 0.0. A missing operation
        counts as a malformed one (it does not move); lines past the last are not read."""

        d, n = instance.data, instance.data["subgoals"]
        lines = response.split("\n")
        plan = parse_plan(lines[0], n)
        if plan is None:
            return 0.0
        values, _ = simulate(d["start"], plan, (lines[1:] + [""] * n)[:n])
        return 1.0 if values[-1] == d["target"] else 0.0

    def oracle_plan(self, instance: Instance) -> list[int]:
        """Waypoints evenly spaced from the start to the target (each step at most 9)."""

        s, t, n = instance.data["start"], instance.data["target"], instance.data["subgoals"]
        off = t - s
        sign = 1 if off >= 0 else -1
        return [s + sign * (abs(off) * j // n) for j in range(1, n + 1)]

    def oracle(self, instance: Instance, observations: list[str]) -> str:
        if len(observations) == 1:
            return ",".join(map(str, self.oracle_plan(instance))) + "\n"
        m = _START.match(observations[-1])
        if m is None:  # not an executor's question: no move
            return "+0\n"
        diff = int(m.group(2)) - int(m.group(1))
        return f"{'+' if diff >= 0 else '-'}{min(abs(diff), REACH)}\n"

    def alphabet(self) -> str:
        return "0123456789+-,>:= \n"
