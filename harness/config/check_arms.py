"""The arms as the cross-field checks (:mod:`.checks`) see them: each resolved arm's blanks,
rollout, group size and tool turns, with where a value it did not set comes from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sixblanks.algorithms.blanks import Blanks

from .experiment_config import ExperimentConfig
from .sections import RolloutConfig, TaskConfig


@dataclass
class CheckedArm:
    name: str
    preset: str
    override: dict[str, Any]
    blanks: Blanks
    rollout: RolloutConfig
    group_size: int
    tool_turns: int = 0
    """Tool turns an episode may take where the arm is offered the code tool (``tools:``)."""
    tool_calls: int = 0
    """Programs an episode may run (tool turns x calls per turn)."""

    @property
    def tools(self) -> bool:
        return self.tool_turns > 0

    def path(self, dotted: str) -> str:
        """``arms.<arm>.blanks.<dotted>``, with where the value comes from when the arm does not
        set it (the preset or the default)."""

        node: Any = self.override
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        where = f"arms.{self.name}.blanks.{dotted}"
        return where if node is not None else f"{where} (from preset '{self.preset}')"

    @property
    def group_path(self) -> str:
        """Where the arm's group size is set: its data blank (or preset), else
        rollout.group_size."""

        if self.blanks.data.group_size is None:
            return "rollout.group_size"
        return self.path("data.group_size")


def resolved_arms(cfg: ExperimentConfig) -> list[CheckedArm]:
    """The arms whose blanks resolve (the others are reported by the semantic pass)."""

    from pydantic import ValidationError

    out = []
    for name, spec in cfg.arms.items():
        try:
            blanks = cfg.resolved_blanks(name)
        except (ValidationError, KeyError, ValueError):
            continue
        rollout = cfg.rollout_for(name)
        g = blanks.data.group_size or rollout.group_size
        tools = cfg.tools_for(name)
        turns, calls = (
            (tools.max_calls, tools.max_calls * tools.calls_per_turn) if tools else (0, 0)
        )
        out.append(CheckedArm(name, spec.preset, spec.blanks, blanks, rollout, g, turns, calls))
    return out


def task_turns(task: TaskConfig) -> int | None:
    """The task's turn limit as a run sees it (``RunContext.turns``); None when the task cannot be
    built here (then 1 turn is the lower bound used)."""

    from ..tasks.registry import make_task

    try:
        return max(1, int(make_task(task.name, task.params).max_turns))
    except Exception:  # noqa: BLE001 - reported by the semantic pass
        return None
