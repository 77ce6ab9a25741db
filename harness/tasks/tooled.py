"""A task with the code tool offered: the same instances, verifier and held-out split, an episode
that may take tool turns before its answer.

:func:`with_tools` wraps a task (an arm with the experiment's ``tools:`` section runs on the
wrapper; an arm with ``tools: false`` on the task itself). The wrapper's environment announces the
tool before the prompt, and at each turn:

- a turn that opens a call (``<code>...</code>``, or ``<tool_call>...</tool_call>``) is a tool
  turn while the episode has tool turns left (``max_calls``): its programs run in the sandbox, no
  reward, and their output is the next observation;
- any other turn, or any turn once the tool turns are spent, goes to the task's own environment
  (the answer, graded by its verifier as without the tool).

Each program run is recorded on the environment (``tool_log``: its outcome and wall seconds), which
the agent loop copies into the trajectory, so what an episode's calls cost is counted with the
episode wherever it runs.
"""

from __future__ import annotations

import string
from typing import Any

from ..tools.toolbox import Toolbox
from .base import Env, Instance, StepResult, Task

DELEGATED = (
    "make_instance",
    "instances",
    "problem_key",
    "problem_space",
    "space_size",
    "seed_key",
    "in_split",
    "trains_on",
    "split_size",
    "distinct_available",
    "heldout_notes",
    "heldout_seeds",
    "eval_instances",
    "verify",
    "input_files",
    "called_modules",
    "preflight",
    "evaluate_apart",
    "corrupt_step",
)
"""What the wrapper leaves to the task: its instances, their split, its verifier and its inputs."""

COPIED = ("params", "name", "stop", "judge", "reward_range", "verifier_timeout_s", "has_oracle")
COPIED += ("has_potential", "has_step_labels")


class ToolEnv(Env):
    """The task's environment behind the tool: tool turns are answered here, the rest by it."""

    task: ToolTask

    def __init__(self, task: ToolTask, instance: Instance, verify, inner: Env):
        super().__init__(task, instance, verify)
        self.inner = inner
        self.tool_turns = 0
        self.tool_log: list[tuple[str, float]] = []

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.turn, self.tool_turns, self.tool_log = 0, 0, []
        obs, info = self.inner.reset(seed=seed)
        return self.task.toolbox.announce + obs, info

    def step(self, action: str) -> StepResult:
        self.turn += 1
        box = self.task.toolbox
        if self.tool_turns < box.config.max_calls:
            turn = box.turn(action)
            if turn.is_call:
                self.tool_turns += 1
                self.tool_log += turn.records
                return StepResult(turn.observation, 0.0, False, False, {"tool_call": True})
        return self.inner.step(action)

    def potential(self) -> float | None:
        return self.inner.potential()


class ToolTask(Task):
    """``task`` with the code tool of ``toolbox`` offered in every episode (see the module)."""

    multi_turn = True

    def __init__(self, task: Task, toolbox: Toolbox):
        self.inner, self.toolbox = task, toolbox
        for name in COPIED:
            setattr(self, name, getattr(task, name))

    @property
    def chat_tools(self) -> tuple[dict, ...]:
        """The tools a chat template declares in the prompt (its ``tools=``), where it does."""
        return self.toolbox.chat_tools

    @property
    def max_turns(self) -> int:
        return max(1, self.inner.max_turns) + self.toolbox.config.max_calls

    def make_env(self, instance: Instance, verify) -> Env:
        return ToolEnv(self, instance, verify, self.inner.make_env(instance, verify))

    def oracle(self, instance: Instance, observations: list[str]) -> str:
        """The task's tool oracle: a program as a call in the toolbox's format, or its answer."""

        kind, text = self.inner.tool_oracle(instance, observations)
        return self.toolbox.call(text) + self.stop if kind == "code" else text

    def alphabet(self) -> str:
        return self.inner.alphabet() + string.printable


def _delegate(name: str):
    def method(self, *args, **kwargs):
        return getattr(self.inner, name)(*args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"The task's own ``{name}``."
    return method


for _name in DELEGATED:
    setattr(ToolTask, _name, _delegate(_name))


def with_tools(task: Task, config, tokenizer=None, hide=()) -> Task:
    """``task`` with the code tool of ``config`` (a ToolsConfig; None: ``task`` as it is).
    Raises SandboxUnavailable, with what is missing, where this machine cannot isolate it."""

    if config is None:
        return task
    return ToolTask(task, Toolbox(config, tokenizer, hide=hide))
