"""Progress as a command prints it: how far a run is through its budget, and the plain lines
printed where the output is not a terminal (a log file, a cluster job): one line per evaluation and
per finished run, for `run`, the sweep's trials and confirmation runs, and the ladder's short runs.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..redact import redact
from ..runspec import RunSpec


def budget_fraction(status: dict[str, Any]) -> float:
    """How far a run is through its budget: the largest used fraction of any limited counter."""

    limits = status.get("limits") or {}
    counters = status.get("counters") or {}
    if not limits:
        return 0.0
    return max(min(1.0, counters.get(k, 0.0) / v) for k, v in limits.items())


# --------------------------------------------------------------------------- plain progress lines
# Where the output is not a terminal (a log file, a cluster job): `run`, the sweep's trials and
# confirmation runs and the ladder's short runs print one line per evaluation and per finished run.


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def plain_wanted(log: Callable[[str], None] | None) -> bool:
    """Plain lines for a command that logs (not quiet) to something other than a terminal."""

    return log is not None and not sys.stderr.isatty()


def plain_budget(at: dict[str, float], budget: dict[str, float]) -> str:
    return ", ".join(f"{k} {at.get(k, 0):g}/{v:g}" for k, v in budget.items())


def plain_eval_line(name: str, ev: dict[str, Any], budget: dict[str, float]) -> str:
    """One evaluation: its step, its score and its own place in the budget."""

    at = ev.get("position") or {}
    return (
        f"{name}: eval at step {ev.get('step')}: score {ev['score']:.3f} "
        f"({plain_budget(at, budget)})"
    )


class PlainLines:
    """The plain lines of a trainer in this process (a sweep trial, a ladder short run):
    ``evals`` (an ``on_step`` callback, and once after training) says each new evaluation, ``end``
    the remaining ones and how the run ended; silent unless ``on``."""

    def __init__(self, name: str, budget: dict[str, float], on: bool):
        self.name, self.budget, self.on, self.seen = name, budget, on, 0

    def evals(self, trainer, _metrics: Any = None) -> None:
        for ev in trainer.result.evals[self.seen :] if self.on else []:
            say(plain_eval_line(self.name, ev, self.budget))
        self.seen = len(trainer.result.evals)

    def end(self, trainer, what: str) -> None:
        if self.on:
            self.evals(trainer)
            say(f"{self.name}: {what}")


def end_key(status: dict[str, Any]) -> tuple[Any, Any]:
    """What changes when a run ends again (its state and the time of its last status)."""

    return (status.get("state"), status.get("updated"))


class EvalTail:
    """The evaluations appended to a run's events file since the last ``new()``. A resumed run
    rewrites the file (a new file): it is read again, evaluations already seen skipped (by step)."""

    def __init__(self, path: Path):
        self.path, self.ino, self.pos, self.steps = path, None, 0, set()
        self.new()  # what is there already

    def new(self) -> list[dict[str, Any]]:
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return []
        with f:
            st = os.fstat(f.fileno())
            if st.st_ino != self.ino or st.st_size < self.pos:
                self.ino, self.pos = st.st_ino, 0
            f.seek(self.pos)
            data = f.read()
        data = data[: data.rfind(b"\n") + 1]  # a line still being written: read next time
        self.pos += len(data)
        out = []
        for line in data.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("type") == "eval" and rec.get("step") not in self.steps:
                self.steps.add(rec.get("step"))
                out.append(rec)
        return out


# --------------------------------------------------------------------------- an experiment's runs


def runs_progress(progress: bool | str, run_dir: Callable[[str], Any], todo: list[RunSpec]):
    """The callback an executor calls while ``todo`` (specs) run, and once more with ``final=True``
    at the end: bars on a terminal, plain lines otherwise or where ``progress`` is ``"plain"``,
    nothing where it is false. ``run_dir``: a run id's :class:`~sixblanks.harness.layout.RunDir`."""

    if not progress:
        return lambda final=False: None
    if progress == "plain" or not sys.stderr.isatty():  # a log file, a cluster job
        return plain_progress(run_dir, todo)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    prog = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>5.1f}%"),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        transient=False,
    )
    ids = {}
    state = {"started": False}

    def update() -> None:
        if not state["started"]:
            prog.start()
            for s in todo:
                ids[s.run_id] = prog.add_task(s.label, total=1.0, info="pending")
            state["started"] = True
        for s in todo:
            st = run_dir(s.run_id).read_status()
            frac = budget_fraction(st)
            last = st.get("last_eval")
            info = st.get("state", "pending")
            if last:
                info += f" | eval {last['score']:.3f}"
            if st.get("state") == "failed":
                info = "FAILED: " + redact(str(st.get("error", "")))[:60]
            prog.update(
                ids[s.run_id],
                completed=1.0 if st.get("state") == "finished" else frac,
                info=info,
            )

    def callback(final: bool = False) -> None:
        update()
        if final and state["started"]:
            prog.stop()

    return callback


def plain_progress(run_dir: Callable[[str], Any], todo: list[RunSpec]):
    """One line on stderr per evaluation (read from the run's events file, so that none is lost
    between two calls) and per finished or failed run, as they happen."""

    runs = [(s, run_dir(s.run_id)) for s in todo]
    tails = {rd.run_id: EvalTail(rd.events) for _, rd in runs}  # an earlier attempt's: said
    ends = {rd.run_id: end_key(rd.read_status()) for _, rd in runs}

    def callback(final: bool = False) -> None:
        for s, rd in runs:
            name = s.label
            st = rd.read_status()  # before the events: a finished run's are all written
            for ev in tails[rd.run_id].new():
                say(plain_eval_line(name, ev, s.budget))
            state, key = st.get("state"), end_key(st)
            if state in ("finished", "failed") and key != ends[rd.run_id]:
                ends[rd.run_id] = key
                what = (
                    "FAILED: " + redact(str(st.get("error", "")))[:200]
                    if state == "failed"
                    else (f"finished after {st.get('step', '?')} steps")
                )
                say(f"{name}: {what}")

    return callback
