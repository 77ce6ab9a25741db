"""Tasks and environments: one interface for single-turn tasks and multi-turn environments."""

from ..seeds import EVAL_SEED_OFFSET
from .base import Clone, Env, Instance, StepResult, Task, TaskParams, clone_env
from .registry import check_task, make_task

__all__ = [
    "EVAL_SEED_OFFSET",
    "Clone",
    "Env",
    "Instance",
    "StepResult",
    "Task",
    "TaskParams",
    "check_task",
    "clone_env",
    "make_task",
]
