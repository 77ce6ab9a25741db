"""A worked example of a user task: reverse a short string of letters.

Use it from experiments.yaml with an import path (the module must be importable,
e.g. run from the repository root or install your package):

    task:
      name: examples.my_tasks:Reverse
      params: {length: 4}

A task subclasses ``sixblanks.harness.tasks.Task``, declares its parameters as a pydantic
model (unknown keys are rejected), makes deterministic instances from a seed,
and verifies a response. ``oracle`` (optional) gives demonstrations for the
warm-start SFT; ``alphabet`` tells the tiny model's tokenizer which characters
to expect. Multi-turn tasks also override ``make_env`` (see
``harness/tasks/builtin.py: GuessNumber``).
"""

from __future__ import annotations

import random

from pydantic import Field

from sixblanks.harness.tasks import Instance, Task, TaskParams


class ReverseParams(TaskParams):
    length: int = Field(4, ge=1, le=12, description="Letters to reverse.")


class Reverse(Task):
    name = "reverse"
    Params = ReverseParams
    has_oracle = True

    def make_instance(self, seed: int) -> Instance:
        rng = random.Random(seed)
        word = "".join(rng.choice("abcdef") for _ in range(self.params.length))
        return Instance(seed, f"rev {word}:", {"answer": word[::-1]})

    def verify(self, instance: Instance, response: str) -> float:
        return 1.0 if response.strip() == instance.data["answer"] else 0.0

    def oracle(self, instance: Instance, observations: list[str]) -> str:
        return instance.data["answer"] + "\n"

    def alphabet(self) -> str:
        return "abcdefrev: \n"
