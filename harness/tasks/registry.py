"""Task registry: built-in names, ``reasoning_gym:<dataset>``, ``gymnasium:<env id>`` and user
tasks ``module:Class``.

Light to import (no torch): the config validator uses it to check names.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

BUILTIN = (
    "arithmetic",
    "running_sum",
    "guess_number",
    "chain_arithmetic",
    "long_arithmetic",
    "plan_execute",
    "nim",
    "dataset",
)
VALID_FORMS = [*BUILTIN, "reasoning_gym:<dataset>", "gymnasium:<env id>", "module:Class"]


class TaskLoadError(ValueError):
    pass


def builtin_class(name: str):
    """The class of the built-in task ``name`` (one of BUILTIN)."""

    return _builtin(name)


def _builtin(name: str):
    from .builtin import Arithmetic, ChainArithmetic, GuessNumber
    from .dataset import DatasetTask
    from .hierarchical import PlanExecute
    from .longarith import LongArithmetic
    from .scratchpad import RunningSum
    from .selfplay import Nim

    return {
        "arithmetic": Arithmetic,
        "running_sum": RunningSum,
        "guess_number": GuessNumber,
        "chain_arithmetic": ChainArithmetic,
        "long_arithmetic": LongArithmetic,
        "plan_execute": PlanExecute,
        "nim": Nim,
        "dataset": DatasetTask,
    }[name]


def _import_class(path: str):
    from ..imports import ImportObjectError, import_object
    from .base import Task

    try:
        cls = import_object(path, "class")
    except ImportObjectError as exc:
        raise TaskLoadError(f"task {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise TaskLoadError(f"task '{path}' is not a subclass of sixblanks.harness.tasks.Task")
    return cls


def task_class(name: str):
    """The class of a built-in task or a user task ``module:Class`` (None for reasoning_gym: and
    gymnasium: tasks, whose class is one for every dataset or environment); raises TaskLoadError."""

    if name in BUILTIN:
        return _builtin(name)
    if name.startswith(("reasoning_gym:", "gymnasium:")):
        return None
    if ":" in name:
        return _import_class(name)
    from ..errors import unknown_name

    raise TaskLoadError(unknown_name("task", name, VALID_FORMS))


def make_task(name: str, params: dict[str, Any] | None = None):
    """Instantiate a task by name; raises TaskLoadError (or pydantic ValidationError for params)."""

    from .rgym import ReasoningGymTask, dataset_names

    if name in BUILTIN:
        return _builtin(name)(params)
    if name.startswith("reasoning_gym:"):
        ds = name.split(":", 1)[1]
        if ds not in dataset_names():
            from ..errors import unknown_name

            raise TaskLoadError(unknown_name("reasoning-gym dataset", ds, dataset_names()))
        return ReasoningGymTask(ds, params)
    if name.startswith("gymnasium:"):
        from .gymenv import GymUnavailable, gym_task

        try:
            return gym_task(name.split(":", 1)[1], params)
        except GymUnavailable as exc:
            raise TaskLoadError(str(exc)) from None
    if ":" in name:
        return _import_class(name)(params)
    from ..errors import unknown_name

    raise TaskLoadError(unknown_name("task", name, VALID_FORMS))


def check_task(name: str, params: dict[str, Any]) -> list[tuple[str, str]]:
    """[] when ``name`` and ``params`` make a task, else (key sub-path, reason) pairs."""

    try:
        make_task(name, params)
    except TaskLoadError as exc:
        return [("name", str(exc))]
    except ValidationError as exc:
        from ..errors import format_validation_error

        out = []
        for line in format_validation_error(exc):
            path, _, msg = line.partition(": ")
            out.append((f"params.{path}", msg))
        return out
    except Exception as exc:  # noqa: BLE001 - a user task that raises on construction
        return [("name", f"task '{name}' raised on construction: {type(exc).__name__}: {exc}")]
    return []
