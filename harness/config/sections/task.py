"""A ``tasks`` entry: the task, its parameters and the judge in its reward."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from .base import Section


class JudgeConfig(Section):
    """A judge in the reward (harness/tasks/judge.py): every call counted as ``judge_calls``."""

    kind: Literal["callable", "model"] = Field(
        "callable", description="callable: a user function; model: a local HF causal LM."
    )
    callable: str | None = Field(
        None,
        description="kind callable: 'module:function', called as function(prompt, response, data).",
    )
    path: str | None = Field(None, description="kind model: a local Hugging Face model directory.")
    prompt: str = Field(
        "Question: {prompt}\nAnswer: {response}\nIs the answer correct? Answer yes or no:",
        description="kind model: the question, with {prompt} and {response}.",
    )
    yes: str = Field(" yes", description="kind model: the word whose probability is the score.")
    no: str = Field(" no", description="kind model: the word it is weighed against.")
    use: Literal["replace", "add", "task"] = Field(
        "replace",
        description="replace: the judge's score is the reward; add: added to the verifier's; task: "
        "the task's verify calls self.judge itself.",
    )
    max_calls_per_verify: int = Field(
        1, ge=1, description="Judge calls one verification may make (what a rollout reserves)."
    )
    timeout_s: float | None = Field(30.0, gt=0, description="A longer call fails the sample.")

    @model_validator(mode="after")
    def _source(self) -> JudgeConfig:
        if self.kind == "callable" and not self.callable:
            raise ValueError("callable: kind 'callable' needs callable: 'module:function'")
        if self.kind == "model" and not self.path:
            raise ValueError("path: kind 'model' needs path: a local model directory")
        return self


def _task_schema(schema: dict[str, Any]) -> None:
    """The JSON Schema of a task entry: a built-in name or a ``prefix:name`` form (so an editor
    flags a misspelt name), and each built-in task's parameters with their types and defaults."""

    from ...tasks.registry import BUILTIN, builtin_class

    schema["properties"]["name"]["anyOf"] = [
        {"enum": list(BUILTIN)},
        {"type": "string", "pattern": "^[^:]+:.+$"},
    ]
    rules = []
    for name in BUILTIN:
        params = builtin_class(name).Params.model_json_schema()
        params.pop("title", None)
        params["additionalProperties"] = False
        rules.append(
            {
                "if": {"properties": {"name": {"const": name}}, "required": ["name"]},
                "then": {"properties": {"params": params}},
            }
        )
    schema["allOf"] = rules


class TaskConfig(Section):
    model_config = ConfigDict(extra="forbid", validate_default=True, json_schema_extra=_task_schema)

    name: str = Field(
        "arithmetic",
        description="A built-in task (arithmetic, running_sum, guess_number, chain_arithmetic, "
        "long_arithmetic, plan_execute, nim, dataset), reasoning_gym:<dataset>, "
        "gymnasium:<env id>, or a user task 'module:Class'.",
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="Task parameters (validated by the task)."
    )
    eval_size: int = Field(64, gt=0, description="Held-out evaluation instances (deterministic).")
    reward_range: tuple[float, float] | None = Field(
        None, description="Declared reward range; None: the task's own."
    )
    judge: JudgeConfig | None = Field(
        None, description="A judge in the reward (counted as judge_calls, which may be budgeted)."
    )

    @property
    def id(self) -> str:
        return self.name.replace(":", "-").replace(".", "-")
