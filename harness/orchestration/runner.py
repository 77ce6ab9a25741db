"""One run, in its own directory: spec, events, checkpoint, status. Resumable after a kill.

A run writes only inside ``run_dir`` (its files: :class:`sixblanks.harness.layout.RunDir`): the
spec, its status after every step, one event line per step / evaluation / census record (rewritten
from the checkpoint on resume), the checkpoint (written atomically) and, once finished, the result.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .. import checkpoint
from ..layout import START_EVALUATIONS, RunDir, write_json
from ..runspec import RunSpec
from ..stopping import ACTIVE, STOP, RunInterrupted, stop_point, stop_points
from .run_recorder import (
    RunRecorder,
    attach_ledger_log,
    record_failure,
    rewrite_events,
    stopped_at_checkpoint,
    stopped_before_start,
)


def exit_soon(seconds: float = 0.25) -> None:
    """End this worker shortly after its interrupted run's result is sent: it takes no more work
    (a pool that terminates its workers waits for them). The orchestrator reads what a run left in
    its status file, so a result lost to a busy machine loses nothing."""

    threading.Timer(seconds, os._exit, (0,)).start()


def spec_id(form: dict[str, Any]) -> str:
    """Content hash of a resolved run spec's JSON form (:meth:`RunSpec.as_dict` without the run
    id; :func:`identity_of` it): the run id."""

    view = identity_of(form)
    return hashlib.sha256(json.dumps(view, sort_keys=True, default=str).encode()).hexdigest()[:12]


def identity_of(form: dict[str, Any]) -> dict[str, Any]:
    """What a run id hashes: the spec's JSON form, with each data file it reads (its task's, its
    file of pairs) by content alone (``task_inputs``, ``arm_inputs``), not by path: the spec
    records the resolved path for reading, the id does not depend on where the checkout lies."""

    if "task_inputs" not in form and "arm_inputs" not in form:
        return form  # no data file: the spec as it is
    from .data_files import without_locations

    out = dict(form)
    params, task_in = without_locations(
        (form["task"].get("params") or {}), form.get("task_inputs") or {}
    )
    out["task"] = {**form["task"], "params": params}
    if "task_inputs" in form:
        out["task_inputs"] = task_in
    if "arm_inputs" in form:
        data = form["blanks"]["data"]
        pairs, arm_in = without_locations(data["pairs"], form["arm_inputs"])
        out["blanks"] = {**form["blanks"], "data": {**data, "pairs": pairs}}
        out["arm_inputs"] = arm_in
    return out


def settings_from_spec(spec: RunSpec):
    """The RunSettings of a spec. An arm's ``seed_offset`` and ``fault`` are in its specs only
    when set (``ArmConfig.run_fields``): a spec without them runs with neither."""

    from sixblanks.algorithms.blanks import Blanks

    from ..config import OptimizerConfig, RolloutConfig
    from ..training import RunSettings

    ev, task = spec.eval, spec.task
    return RunSettings(
        blanks=Blanks.model_validate(spec.blanks),
        rollout=RolloutConfig.model_validate(spec.rollout),
        optimizer=OptimizerConfig.model_validate(spec.optimizer),
        budget=dict(spec.budget),
        seed=int(spec.seed),
        eval_every=ev.get("every"),
        eval_counter=ev.get("counter"),
        eval_size=int(ev.get("size") or task.get("eval_size", 64)),
        eval_temperature=float(ev.get("temperature", 0.0)),
        eval_samples=int(ev.get("samples", 1)),
        eval_beam=ev.get("beam"),
        eval_split=ev.get("split", "test"),
        reward_range=tuple(task["reward_range"]) if task.get("reward_range") else (0.0, 1.0),
        name=spec.label,
        seed_offset=int(spec.seed_offset or 0),
        reward_fault=(spec.fault or {}).get("rewards", "none"),
        parallel=spec.model.get("parallel"),  # in the spec only where set
    )


def build_trainer(spec: RunSpec, warm_dir: str | Path, work_dir: str | Path | None = None):
    """The Trainer of one spec: the warm-start policy, a frozen reference copy, the rollout engine
    ``rollout.backend`` names. Used by runs and by sweep trials alike. ``work_dir``: the run's
    directory (a concurrent collector spools its rounds there)."""

    from ..models import load_pretrained, set_fp32_lm_head, set_gradient_checkpointing
    from ..rollout.backends import make_engine
    from ..tasks import make_task
    from ..tasks.judge import attach_judge
    from ..training import Trainer
    from .spawning import helper_context

    settings = settings_from_spec(spec)
    settings.work_dir = str(work_dir) if work_dir is not None else None
    settings.process_context = helper_context  # a concurrent collector: from the fork server
    shared = Path(warm_dir) / START_EVALUATIONS  # there where the experiment shares them
    if shared.is_dir():
        import torch

        from ..training.start_eval import start_key

        settings.start_evaluations = str(shared)
        settings.start_key = start_key(spec.as_dict(run_id=False), torch.get_num_threads())
    check_inputs_unchanged(spec)
    task = attach_judge(make_task(spec.task_name, spec.task_params), spec.task.get("judge"))
    if settings.reward_range == (0.0, 1.0):
        settings.reward_range = task.reward_range
    model, tok = load_pretrained(warm_dir, spec.model["device"], spec.model["dtype"])
    if spec.tools:  # the code tool: in the spec only where the arm is offered it
        from ..tasks.tooled import with_tools
        from ..tools.config import ToolsConfig

        hide = [work_dir] if work_dir is not None else []
        task = with_tools(task, ToolsConfig.model_validate(spec.tools), tok, hide=hide)
    stop_point("setup")  # each model load is long for a large model: a stop is seen between them
    fp32_head = bool(spec.model.get("fp32_lm_head"))  # in the spec only where set
    set_fp32_lm_head(model, fp32_head)
    set_gradient_checkpointing(model, bool(spec.model.get("gradient_checkpointing")))
    if spec.model.get("lora"):  # the reference is the base: the same weights, adapter off
        from ..lora import AdapterOff, apply_lora

        model = apply_lora(model, spec.model["lora"])
        ref = AdapterOff(model)
    else:
        ref, _ = load_pretrained(warm_dir, spec.model["device"], spec.model["dtype"])
        set_fp32_lm_head(ref, fp32_head)
        for p in ref.parameters():
            p.requires_grad_(False)
    ref.eval()
    stop_point("setup")
    engine = make_engine(settings.rollout, model, tok, seed=settings.train_seed)
    stop_point("setup")
    return Trainer(settings, task, model, tok, ref_model=ref, engine=engine)


def check_inputs_unchanged(spec: RunSpec) -> None:
    """Refuse a run whose data files or user modules changed after it was planned (its run id holds
    the versions it was planned with): it would train on other inputs than its id says. Raises a
    SixblanksError naming each changed input."""

    if not spec.has_inputs:
        return  # a run that reads no data file and calls no user module
    from ..config import TaskConfig
    from ..errors import SixblanksError
    from .data_files import changed_inputs, file_hash, task_inputs

    changed = []
    if spec.task_inputs is not None:
        now = task_inputs(TaskConfig.model_validate(spec.task))
        changed += changed_inputs(spec.task_inputs, now)
    if spec.arm_inputs is not None:  # the arm's file of pairs
        files = spec.arm_inputs.get("files") or {}
        changed += changed_inputs(spec.arm_inputs, {"files": {p: file_hash(p) for p in files}})
    if changed:
        raise SixblanksError(
            f"run {spec.run_id or '?'}: {', '.join(changed)} changed after the run was "
            "planned; run the command again, which plans the runs of the new version"
        )


def execute_run(
    spec: RunSpec,
    run_dir: str | Path,
    warm_dir: str | Path,
    threads: int = 1,
    checkpoint_seconds: float = 0.0,
) -> dict[str, Any]:
    """Run (or resume) one spec to the end of its budget. Returns the result summary.

    A checkpoint is written after a step once ``checkpoint_seconds`` have passed since the last one
    (0: after every step); a killed run resumes from it and redoes only the steps after it.

    Interrupted (:data:`STOP`, Ctrl-C): at a step boundary the step is checkpointed; inside a
    phase (a stop point, :mod:`~sixblanks.harness.stopping`) the step in progress is abandoned.
    Either way status.json says "interrupted", and it, the events and ``ledger.jsonl`` all stand
    where the last checkpoint does (before any checkpoint: where the run started), the state the
    next invocation resumes from; raises :class:`RunInterrupted` (a KeyboardInterrupt: itself).

    Raises on failure after recording it in status.json (state "failed", with the error).
    """

    import torch

    rd = RunDir(run_dir)
    rd.path.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(max(1, threads))
    if not rd.spec.exists():
        write_json(rd.spec, spec.as_dict())
    started = rd.read_status().get("started") or time.time()
    trainer, recorder = None, None
    try:
        # setup and the start evaluation stop at once; a training step gets the grace to reach its
        # boundary (harness/stopping.py)
        with stop_points(grace=0.0):
            stop_point("setup")  # handed out as the interrupt arrived: it does not start
            trainer = build_trainer(spec, warm_dir, rd.path)
            resumed_from, recovery = _resume(rd, trainer)
            recorder = RunRecorder(spec, rd, trainer, started, resumed_from, checkpoint_seconds)
            recorder.write_status(
                "running", **({"checkpoint_recovery": recovery} if recovery else {})
            )
            result, train_seconds = recorder.train()
        return recorder.finish(result, train_seconds, recovery)
    except (RunInterrupted, KeyboardInterrupt) as exc:
        # Ctrl-C: STOP seen (a stop point, a step boundary), or a KeyboardInterrupt reaching the
        # run itself (a Ray task cancelled): resumable, not failed
        if recorder is None:  # stopped in its setup: nothing of it ran
            stopped_before_start(rd, exc)
        else:
            stopped_at_checkpoint(rd, trainer, recorder.saved, exc, recorder.write_status)
        raise
    except BaseException as exc:
        record_failure(rd, spec, exc)
        raise


def _resume(rd: RunDir, trainer) -> tuple[int | None, dict[str, Any] | None]:
    """Load the run's latest checkpoint that verifies into ``trainer`` (none: it starts from its
    first step, charged what an earlier attempt spent), attach its ledger log, rewrite its events
    to the checkpoint's history. Returns (the step resumed from, the recovery record or None)."""

    state, refused = checkpoint.load_latest(
        rd.checkpoint, lambda m: sys.stderr.write(f"{rd.run_id}: {m}\n")
    )
    resumed_from = None
    if state is not None:
        trainer.load_state_dict(state)
        resumed_from = trainer.step_idx
    elif refused:  # no checkpoint verifies: the run starts again from its first step
        sys.stderr.write(f"{rd.run_id}: no usable checkpoint; the run starts from scratch\n")
    stop_point("setup")
    ACTIVE.set()  # a worker's SIGTERM now stops the run (STOP), which records from here
    recovery = {"refused": refused, "resumed_from": resumed_from} if refused else None
    lost = attach_ledger_log(rd, trainer, restarted=state is None)
    if lost and recovery is not None:
        recovery["charged"] = lost
    rewrite_events(rd, trainer)
    return resumed_from, recovery


def run_worker(args: tuple) -> dict[str, Any]:
    """Process-pool entry point: (the spec's JSON text, :meth:`RunSpec.to_json`; run_dir,
    warm_dir, threads, checkpoint_seconds)."""

    text, run_dir, warm_dir, threads, ckpt_s = args
    if STOP.is_set():  # handed out after the interrupt: never started
        exit_soon()
        return {"ok": False, "interrupted": True, "started": False, "run_id": Path(run_dir).name}
    from .rank_launch import launch

    spec = RunSpec.from_json(text)
    run = launch if spec.world_size > 1 else execute_run  # a data-parallel run: torchrun
    try:
        return {"ok": True, "summary": run(spec, run_dir, warm_dir, threads, ckpt_s)}
    except RunInterrupted as exc:
        exit_soon()
        return {
            "ok": False,
            "interrupted": True,
            "started": True,
            "error": str(exc),
            "run_id": Path(run_dir).name,
        }
    except Exception as exc:  # noqa: BLE001 - reported back to the orchestrator
        from ..errors import describe

        return {
            "ok": False,
            "error": describe(exc, f"run {Path(run_dir).name}'s files"),
            "run_id": Path(run_dir).name,
        }
    finally:
        ACTIVE.clear()
