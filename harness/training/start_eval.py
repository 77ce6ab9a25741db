"""A start evaluation computed once for the runs that would compute the same one.

Every arm of an experiment starts from the same warm-start policy. Before its first step a run
scores that policy on the held-out set, and that evaluation is a pure function of its inputs: the
policy, the task and its data, the evaluation and sampler settings, the seed (its sampler draws
from a generator seeded with the run's ``seed``, never from the training's random state), the code
and the number of threads the kernels use. Runs whose inputs are equal (the arms of one seed, the
same arm in several claims) compute the same evaluation bit for bit; with a store the first to
finish it writes it, and the others read it instead of sampling it again.

    store = StartEvaluations(directory)
    key = start_key(spec_dict, threads=torch.get_num_threads())  # None: not shareable
    found = store.load(key)            # (the evaluation, its cost where computed) or None
    store.save(key, ev, cost)          # atomic: a reader never sees half a file

What is not shared (``start_key`` returns None): an inference-time beam search, the code tool
(its programs' outcomes may depend on time), a judge (its calls are counted across training and
evaluation), and a data-parallel run. A reused evaluation spends nothing: its record's ``cost``
holds the seconds spent reading it, ``reused`` what it cost where it was computed.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

KEY_FIELDS = (
    "model",
    "task",
    "task_inputs",
    "rollout",
    "eval",
    "seed",
    "seed_offset",
    "fault",
    "warm_start_key",
    "code_version",
)
"""The spec's fields (its JSON form's keys) an evaluation at step 0 may depend on: the arm, its
preset and blanks, the optimizer and the budget act only once training starts. Keys of a spec
written by another version of the harness (``extra``) are added too: unknown, so counted in."""

KNOWN_TRAINING_ONLY = ("experiment", "arm", "preset", "blanks", "optimizer", "budget", "run_id")
"""The spec's fields that cannot change the step-0 evaluation."""


def start_key(spec: dict[str, Any], threads: int) -> str | None:
    """The key of a run's start evaluation (``spec``: its spec's JSON form; ``threads``: the
    kernels' thread count), or None where it is not shared (see the module's docstring)."""

    model, task, ev = spec.get("model") or {}, spec.get("task") or {}, spec.get("eval") or {}
    parallel = model.get("parallel") or {}
    if spec.get("tools") or task.get("judge") or ev.get("beam") or spec.get("arm_inputs"):
        return None
    if int(parallel.get("world_size", 1)) > 1:
        return None
    fields = {k: spec.get(k) for k in KEY_FIELDS}
    known = set(KEY_FIELDS) | set(KNOWN_TRAINING_ONLY) | {"tools", "arm_inputs"}
    fields["other"] = {k: v for k, v in spec.items() if k not in known}
    fields["threads"] = int(threads)
    text = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class StartEvaluations:
    """Start evaluations by key, one JSON file each under ``directory``."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)

    def path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def load(self, key: str) -> tuple[dict[str, Any], dict[str, float]] | None:
        """(the evaluation as :func:`~.evaluate.evaluate_run` returned it, its record's ``cost``
        where it was computed), or None where none is stored (or the file cannot be read)."""

        try:
            data = json.loads(self.path(key).read_text())
            return data["evaluation"], data["cost"]
        except (OSError, ValueError, KeyError):
            return None

    def save(self, key: str, ev: dict[str, Any], cost: dict[str, float]) -> None:
        """Store evaluation ``ev`` and its ``cost`` under ``key``: written beside and renamed,
        so a concurrent reader finds the whole file or none (two runs computing the same key
        write the same evaluation)."""

        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f".{self.path(key).name}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"evaluation": ev, "cost": cost}))
        os.replace(tmp, self.path(key))


def start_store(ctx, steps: list[Any]):
    """(the store of start evaluations, the run's key, what the store holds under it or None) of a
    run (``ctx``: its RunContext; ``steps``: the steps it took) about to evaluate before its first
    step, where it shares its start evaluation; (None, None, None) otherwise."""

    s = ctx.settings
    if not (s.start_evaluations and s.start_key) or ctx.dp is not None:
        return None, None, None
    if ctx.step != 0 or steps:
        return None, None, None
    store = StartEvaluations(s.start_evaluations)
    return store, s.start_key, store.load(s.start_key)


def keep_start(
    record: dict[str, Any],
    ev: dict[str, Any],
    found: tuple[dict[str, Any], dict[str, float]] | None,
    store: StartEvaluations | None,
    key: str | None,
) -> None:
    """An evaluation ``record`` marked ``reused`` (what it cost where it was computed) where it
    was ``found`` in the store; else, with a store, the evaluation ``ev`` stored for the others."""

    if found is not None:
        record["reused"] = found[1]
    elif store is not None and key is not None:
        store.save(key, ev, record["cost"])
