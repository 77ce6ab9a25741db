"""What one run writes while it trains, and where a stopped or failed run is left: status.json,
the events file, checkpoints, the ledger log and the result (:class:`RunRecorder`), and the records
of a run stopped by Ctrl-C (at its last checkpoint, or before it started) or failed."""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from .. import checkpoint, layout
from ..layout import RunDir, write_json, write_text
from ..runspec import RunSpec
from ..stopping import STOP, RunInterrupted, stop_points
from .policy_out import export_policy


class RunRecorder:
    """What one run writes while it trains: status.json, the events file (a line per step, census
    and evaluation), checkpoints (after a step once ``checkpoint_seconds`` passed, and at a stop),
    and at the end the result. ``saved``: the position the latest checkpoint holds (where a stopped
    run is recorded)."""

    def __init__(
        self, spec: RunSpec, rd: RunDir, trainer, started, resumed_from, checkpoint_seconds
    ):
        self.spec, self.rd, self.trainer = spec, rd, trainer
        self.started, self.resumed_from = started, resumed_from
        self.checkpoint_seconds = checkpoint_seconds
        self.saved: dict[str, Any] = position(trainer)
        self.seen_evals = len(trainer.result.evals)
        self.last_checkpoint = time.time()
        self.saved_at: int | None = (
            None  # the step of the latest checkpoint: the end saves one more
        )
        self.recording_seconds = 0.0
        self.events = None

    def write_status(self, state: str, at: dict[str, Any] | None = None, **extra: Any) -> None:
        """status.json; ``at``: the position it states (default: the trainer's now)."""

        trainer, spec = self.trainer, self.spec
        at = at or position(trainer)
        evals = trainer.result.evals[: at["evals"]]
        last = evals[-1] if evals else None
        write_json(
            self.rd.status,
            {
                "state": state,
                "run_id": self.rd.run_id,
                "arm": spec.arm,
                "task": spec.task_name,
                "seed": spec.seed,
                "step": at["step"],
                "counters": dict(at["counters"]),
                "limits": dict(trainer.ledger.budget.limits),
                "last_eval": {
                    "score": last["score"],
                    "step": last["step"],
                    # where in the budget it was taken (the plain progress lines say so)
                    "at": {k: last["position"].get(k, 0.0) for k in spec.budget},
                }
                if last
                else None,
                # a time limit is exceeded by at most this (one step and its checkpoint)
                "time_overshoot_bound": dict(trainer.ctx.meter.overshoot_bound),
                "time_by_kind": trainer.ctx.meter.time_by_kind,
                "started": self.started,
                "updated": time.time(),
                "resumed_from": self.resumed_from,
                **extra,
            },
        )

    def save(self) -> None:
        at = position(self.trainer)  # what the checkpoint holds (its own time comes after)
        save_checkpoint(self.trainer, self.rd.checkpoint)
        self.last_checkpoint = time.time()
        self.saved.update(at)

    def write_lines(self, lines: list[dict[str, Any]]) -> None:
        for line in lines:
            self.events.write(json.dumps(line, default=str) + "\n")
        self.events.flush()

    def new_evals(self) -> list[dict[str, Any]]:
        """The evaluations not written yet, as event lines."""

        evals = self.trainer.result.evals
        lines = [{"type": "eval", **ev} for ev in evals[self.seen_evals :]]
        self.seen_evals = len(evals)
        return lines

    def on_step(self, tr, metrics: dict[str, Any]) -> None:
        """After each training step: its lines, a checkpoint when due (or at a stop), the status."""

        t_rec = time.perf_counter()
        lines = [{"type": "step", **metrics}]
        if tr.result.census and tr.result.census[-1]["step"] == metrics["step"]:
            lines.append({"type": "census", **tr.result.census[-1]})
        self.write_lines(lines + self.new_evals())
        due = time.time() - self.last_checkpoint >= self.checkpoint_seconds or STOP.is_set()
        if tr.ctx.dp is not None:  # every rank checkpoints alike (FSDP2: a collective), at rank 0's
            due = tr.ctx.dp.from_rank0(due)
        if due:
            self.save()
            self.saved_at = tr.step_idx
        if STOP.is_set():  # interrupted: stop here, resumable from this step's checkpoint
            raise RunInterrupted(f"interrupted after step {tr.step_idx}")
        self.write_status("running")
        self.recording_seconds += time.perf_counter() - t_rec

    def train(self):
        """The start evaluation (a new run: then checkpointed), then training to the budget's end.
        Returns (the training result, its seconds)."""

        trainer = self.trainer
        events = self.rd.events if layout.writes(self.rd.events) else os.devnull  # rank 0's
        self.events = open(events, "a", encoding="utf-8")  # noqa: SIM115 - closed below
        try:
            if not trainer.result.evals:
                trainer.maybe_eval(force=True)
                self.write_lines(self.new_evals())
                self.save()
            t_train = time.perf_counter()
            with stop_points():
                result = trainer.train(evaluate_start=False, on_step=self.on_step)
            train_seconds = time.perf_counter() - t_train
            self.write_lines(self.new_evals())
        finally:
            self.events.close()
        return result, train_seconds

    def finish(self, result, train_seconds: float, recovery) -> dict[str, Any]:
        """The final state, saved (and charged) before the result is written, so that the result's
        counters include it (one checkpoint after the last step at most: the time bound's); then
        result.json and the finished status. Returns the result."""

        trainer, spec = self.trainer, self.spec
        if self.saved_at != trainer.step_idx:
            save_checkpoint(trainer, self.rd.checkpoint)
        ledger_events = check_ledger_log(self.rd, trainer.ledger)
        summary = {
            "run_id": self.rd.run_id,
            "arm": spec.arm,
            "preset": spec.preset,
            "task": spec.task_name,
            "seed": spec.seed,
            "steps": trainer.step_idx,
            "ended_because": result.ended_because,
            "counters": dict(trainer.ledger.counters),
            "discarded_by_reason": dict(trainer.ledger.discarded_by_reason),
            "limits": dict(trainer.ledger.budget.limits),
            "evals": [
                {k: e.get(k) for k in ("step", "score", "n", "split", "success_rate", "pass_at")}
                | {"position": e["position"]}
                | ({"search": e["search"]} if "search" in e else {})  # eval.beam, apart
                | ({"reused": e["reused"]} if "reused" in e else {})  # a shared start
                for e in result.evals
            ],
            "final_score": result.evals[-1]["score"] if result.evals else None,
            "eval_cost": result.eval_cost,
            "time_overshoot_bound": dict(trainer.ctx.meter.overshoot_bound),
            "time_by_kind": trainer.ctx.meter.time_by_kind,
            "resumed_from": self.resumed_from,
            "checkpoint_recovery": recovery,
            "train_seconds": train_seconds,
            "recording_seconds": self.recording_seconds,
            "ledger_events": ledger_events,
        }
        t0 = time.perf_counter()
        try:  # what a user evaluates or serves; a failure to write it does not undo the training
            export_policy(trainer, self.rd, spec, summary)
        except (OSError, RuntimeError, ValueError) as exc:
            summary["policy_error"] = f"{type(exc).__name__}: {exc}"
            sys.stderr.write(f"run {self.rd.run_id}: its policy was not saved: {exc}\n")
        summary["policy_seconds"] = time.perf_counter() - t0
        write_json(self.rd.result, summary)
        self.write_status("finished", finished=time.time())
        return summary


def record_failure(rd: RunDir, spec: RunSpec, exc: BaseException) -> None:
    """status.json says "failed", with the error and its traceback (the run's other files stay)."""

    from ..errors import describe

    status = rd.read_status()
    status.update(
        {
            "state": "failed",
            "error": describe(exc, f"run {rd.run_id}'s files"),
            "traceback": traceback.format_exc(limit=20),
            "updated": time.time(),
            "arm": spec.arm,
            "seed": spec.seed,
            "task": spec.task_name,
            "run_id": rd.run_id,
        }
    )
    write_json(rd.status, status)


def position(trainer) -> dict[str, Any]:
    """Where ``trainer`` stands: its step, counters, ledger event number and how many step,
    evaluation and census records it has (what a checkpoint taken now holds)."""

    result = trainer.result
    return {
        "step": trainer.step_idx,
        "counters": dict(trainer.ledger.counters),
        "seq": trainer.ledger.seq,
        "steps": len(result.steps),
        "evals": len(result.evals),
        "census": len(result.census),
    }


def stopped_at_checkpoint(rd: RunDir, trainer, saved: dict[str, Any], exc, write_status) -> None:
    """Record a run stopped by Ctrl-C where its last checkpoint (``saved``) stands: the ledger
    events after it superseded (as a resume from it would), the events file its history, the
    status "interrupted" at its step and counters. A step abandoned in a phase leaves nothing."""

    sink = trainer.ledger.sink
    if sink is not None:
        if trainer.ledger.seq > saved["seq"]:
            sink.resume(saved["seq"], saved["step"], interrupted=True)
        sink.close()
        trainer.ledger.sink = None
    rewrite_events(rd, trainer, saved)
    abandoned = trainer.step_idx != saved["step"] or len(trainer.result.evals) != saved["evals"]
    note = f"{exc}" + (
        f"; resumes from the checkpoint of step {saved['step']}" if abandoned else ""
    )
    write_status("interrupted", at=saved, interrupted=note)


def stopped_before_start(rd: RunDir, exc) -> None:
    """A run stopped by Ctrl-C in its setup (before it could record anything): a run that had not
    started stays pending; one resumed stays as its last attempt left it, "interrupted"."""

    status = rd.read_status()
    if status.get("state", "pending") == "pending":
        return
    status.update({"state": "interrupted", "interrupted": f"{exc}", "updated": time.time()})
    write_json(rd.status, status)


def attach_ledger_log(rd: RunDir, trainer, restarted: bool) -> dict[str, float] | None:
    """Append the trainer's ledger events to ``ledger.jsonl`` from now on. A resumed run first
    marks the events after its checkpoint as superseded. A run that starts again from scratch
    although an earlier attempt recorded work (killed with no usable checkpoint) is charged that
    work (discard reason "restart"); returns what was charged, if anything."""

    from .ledgerlog import LedgerLog, effective_events, read_events, replay

    before = effective_events(read_events(rd.ledger_log))
    if trainer.ctx.dp is not None:  # every rank read the log before rank 0 appends to it
        trainer.ctx.dp.gather(None)
    log = LedgerLog(rd.ledger_log)
    led = trainer.ledger
    if before:
        log.resume(led.seq, trainer.step_idx, restarted=restarted)
    led.sink = log
    if not (restarted and before):
        return None
    lost = replay(before)["counters"]
    if not any(lost.values()):
        return None
    sys.stderr.write(
        f"{rd.run_id}: the attempt before left no usable checkpoint: its work is charged "
        f"({lost.get('launched_tokens', 0.0):g} launched tokens discarded as 'restart', "
        f"{lost.get('device_seconds', 0.0):.1f} device-seconds)\n"
    )
    led.charge_lost(lost, lost.get("rollouts_launched", 0.0))
    return lost


def check_ledger_log(rd: RunDir, ledger) -> int:
    """The counters that ``ledger.jsonl``'s standing events add up to must be the ledger's own:
    a run whose record on disk disagrees fails, naming the counters. Returns the events standing."""

    from .ledgerlog import compare, effective_events, read_events, replay

    if ledger.sink is not None:
        ledger.sink.close()
        ledger.sink = None
    if not layout.writes(rd.ledger_log):  # rank 0 wrote the log (and checks it)
        return 0
    events = effective_events(read_events(rd.ledger_log))
    problems = compare(replay(events)["counters"], ledger.counters)
    if problems:
        from ..training.base import TrainingError

        raise TrainingError(f"{rd.ledger_log} disagrees with the ledger: {'; '.join(problems)}")
    return len(events)


def save_checkpoint(trainer, path: Path) -> None:

    # charged with its own label; its time reaches the ledger of the next checkpoint (a kill loses
    # the time since the last one anyway)
    dp = trainer.ctx.dp
    with trainer.ctx.meter.charge(f"checkpoint step {trainer.step_idx}"):
        # a data-parallel run's other ranks write nothing; under FSDP2 they take part in gathering
        if layout.writes(path) or (dp is not None and dp.backend == "fsdp2"):
            checkpoint.save(trainer.state_dict(), path, trainer.step_idx)


def rewrite_events(rd: RunDir, trainer, at: dict[str, Any] | None = None) -> None:
    """Make the events file exactly the checkpoint's history: what a killed run wrote after its last
    checkpoint is dropped and will be redone, so nothing is double counted. ``at``: the position
    (:func:`position`) of the checkpoint, where it is not the trainer's own."""

    r, at = trainer.result, at or position(trainer)
    lines, steps = [], r.steps[: at["steps"]]
    evals = sorted(r.evals[: at["evals"]], key=lambda e: e["step"])
    census = {c["step"]: c for c in r.census[: at["census"]]}
    ei = 0
    while ei < len(evals) and evals[ei]["step"] == 0 and not steps:
        lines.append({"type": "eval", **evals[ei]})
        ei += 1
    for m in steps:
        while ei < len(evals) and evals[ei]["step"] <= m["step"]:
            lines.append({"type": "eval", **evals[ei]})
            ei += 1
        lines.append({"type": "step", **m})
        if m["step"] in census:
            lines.append({"type": "census", **census[m["step"]]})
    for e in evals[ei:]:
        lines.append({"type": "eval", **e})
    write_text(rd.events, "".join(json.dumps(x, default=str) + "\n" for x in lines))
