"""The resolved spec of one run: what the orchestrator plans, a run's ``spec.json`` holds, and a
worker process receives.

Its JSON form (:meth:`RunSpec.as_dict`) is the dict the run id hashes
(:func:`sixblanks.harness.orchestration.runner.spec_id`) and ``spec.json`` stores, key for key and
in the same order as the spec was planned: a spec read back from a run's files and written again
is the same file, and its run id the same id.

It lives on the ground floor of the harness (beside :mod:`.layout`): the orchestrator, the
fairness audit and the store all read specs.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

OPTIONAL = ("seed_offset", "fault", "tools", "task_inputs", "arm_inputs")
"""The keys a spec carries only where set (an arm's run fields, the code tool, its data files):
absent from a spec that lacks them, so that the run ids of the runs without them never changed."""


@dataclass(frozen=True)
class RunSpec:
    """One run, fully resolved. The sections (``task``, ``blanks``, ``optimizer``, ``rollout``,
    ``budget``, ``eval``, ``model``, and the optional ones) are their JSON forms, as the
    configuration dumped them; they are shared with the spec, so a variant is made with
    :meth:`replace` and new sections, never by editing one in place. ``extra``: keys of a spec
    written by an older version of the harness that this one no longer plans (kept so its run id
    and its file stay as they were)."""

    experiment: str
    arm: str
    preset: str
    seed: int
    task: dict[str, Any]
    blanks: dict[str, Any]
    optimizer: dict[str, Any]
    rollout: dict[str, Any]
    budget: dict[str, float]
    eval: dict[str, Any]
    model: dict[str, Any]
    warm_start_key: str
    code_version: str
    seed_offset: int | None = None
    fault: dict[str, Any] | None = None
    tools: dict[str, Any] | None = None
    task_inputs: dict[str, Any] | None = None
    arm_inputs: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    run_id: str | None = None

    # ------------------------------------------------------------------ the JSON form

    def as_dict(self, run_id: bool = True) -> dict[str, Any]:
        """The spec as ``spec.json`` holds it (a copy: editing it leaves the spec as it is): the
        required keys, then the optional ones that are set, then ``extra``, then the run id where
        there is one (``run_id=False``: without it, the dict the run id hashes)."""

        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "extra":
                out.update(value)
            elif f.name == "run_id":
                if run_id and value is not None:
                    out["run_id"] = value
            elif f.name not in OPTIONAL or value is not None:
                out[f.name] = value
        return copy.deepcopy(out)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        """The spec of its JSON form (a spec.json's content, :meth:`as_dict`'s output); keys this
        version does not plan are kept in ``extra``."""

        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        data = copy.deepcopy(data)
        known = {k: v for k, v in data.items() if k in names}
        return cls(**known, extra={k: v for k, v in data.items() if k not in names})

    def to_json(self) -> str:
        """The JSON text of :meth:`as_dict`: how a spec crosses to a worker process."""

        return json.dumps(self.as_dict(), default=str)

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        return cls.from_dict(json.loads(text))

    def replace(self, **changes: Any) -> RunSpec:
        """A copy with the fields in ``changes`` replaced (the run id is kept unless replaced)."""

        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ what callers read

    @property
    def task_name(self) -> str:
        return self.task["name"]

    @property
    def task_params(self) -> dict[str, Any]:
        """The task's parameters ({} where it has none)."""

        return self.task.get("params") or {}

    @property
    def label(self) -> str:
        """``arm/task/seedN``: the run's name in progress lines and in its training settings."""

        return f"{self.arm}/{self.task_name}/seed{self.seed}"

    @property
    def world_size(self) -> int:
        """The processes one data-parallel run trains on (1: a single process)."""

        return int((self.model.get("parallel") or {}).get("world_size", 1))

    @property
    def group_size(self) -> int:
        """Samples per prompt: the data blank's, else the rollout section's."""

        return int(self.blanks["data"].get("group_size") or self.rollout["group_size"])

    @property
    def has_inputs(self) -> bool:
        """Whether the run reads data files or calls user modules (recorded by content)."""

        return self.task_inputs is not None or self.arm_inputs is not None
