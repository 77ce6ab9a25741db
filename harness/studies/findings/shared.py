"""Runs shared between claims: a run that another claim of the same output directory has already
finished, with the same resolved configuration (arm settings, budget, task, seed, evaluation,
model, warm start, code), is copied into the claim's experiment instead of trained again; the
copy carries a marker naming its source, so that its cost stays in the ledger of the claim that
trained it and the report can say which claims share which runs."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from ...layout import SHARED_JSON, SPEC_JSON, ExperimentDir, write_json
from ...orchestration.runner import spec_id
from ...runspec import RunSpec

NOT_IDENTITY = ("run_id", "experiment", "arm")
"""Spec fields that name a run without deciding it: the experiment's name (one per claim and
axis) and the arm's name (a claim's label for a configuration)."""

NOT_COPIED = ("checkpoint", "checkpoint.prev")
"""A finished run needs no checkpoint: it is never resumed."""


def run_identity(spec: RunSpec) -> str:
    """The identity of what a run computes: its run id's hash without the names."""

    return spec_id({k: v for k, v in spec.as_dict().items() if k not in NOT_IDENTITY})


def finished_runs(root: Path) -> dict[str, Path]:
    """``{identity: run directory}`` of the runs trained to the end by a claim under ``root``
    (``root/<claim>/<axis>/runs/<run id>``), the first found of each identity. A run still
    running, interrupted or failed is not one (its events and evaluations stop short), and
    neither is a copy: its source is, so that every copy names the claim that trained it."""

    found: dict[str, Path] = {}
    for spec in sorted(root.glob("*/*/runs/*/spec.json")):
        run = ExperimentDir(spec.parents[2]).run(spec.parent.name)
        if (run.path / SHARED_JSON).exists():
            continue
        if run.read_status().get("state") == "finished":
            found.setdefault(run_identity(run.read_spec()), run.path)
    return found


def adopt_shared(cfg, out: Path, root: Path, log: Callable[[str], None]) -> list[str]:
    """Copy into experiment ``out`` every run of ``cfg`` that is not finished there and that a
    finished run of another claim under ``root`` computes already; returns the copied run ids."""

    from ...orchestration.plan import build_specs
    from ...orchestration.warmstart import warm_start_key
    from ...tasks import make_task

    tasks = [make_task(t.name, t.params) for t in cfg.tasks or []]
    return adopt_specs(build_specs(cfg, warm_start_key(cfg, tasks)), out, root, log)


COPYING = ".copying"
"""In an experiment directory: where a run being copied is assembled, out of the runs folder so
that no scan of ``runs/`` (the store's, :func:`finished_runs`) sees it half-made."""


def adopt_specs(
    specs: list[RunSpec], out: Path, root: Path, log: Callable[[str], None]
) -> list[str]:
    """:func:`adopt_shared` for resolved run ``specs``. A copy is assembled apart and moved into
    ``runs/`` by one rename once whole, so a kill mid-copy leaves no run that looks finished: the
    next attempt (a resumed command) finds the run unfinished and copies it once, afresh; a run
    finished here already (trained, or copied by an earlier attempt) is never copied again."""

    shutil.rmtree(out / COPYING, ignore_errors=True)  # what a killed attempt left half-made
    pool = finished_runs(root)
    copied = []
    for spec in specs if pool else []:
        run = ExperimentDir(out).run(spec.run_id)
        src = pool.get(run_identity(spec))
        # a run of this experiment itself (two arms of one claim alike) is not another claim's
        if (
            src is None
            or src.parent == run.path.parent
            or run.read_status().get("state") == "finished"
        ):
            continue
        staged = _staged_copy(src, spec, out / COPYING / spec.run_id, root)
        if run.path.exists():  # a partial run of its own: the finished copy replaces it
            shutil.rmtree(run.path)
        run.path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged, run.path)
        copied.append(spec.run_id)
        log(
            f"{spec.arm} seed {spec.seed}: the finished run {src.relative_to(root)} is the "
            "same; copied"
        )
    shutil.rmtree(out / COPYING, ignore_errors=True)
    return copied


def _staged_copy(src: Path, spec: RunSpec, to: Path, root: Path) -> Path:
    """``src`` copied to ``to`` with its spec, status and result naming the new run (its id,
    experiment and arm, so that the store files it under this claim's arm) and a marker naming
    its source."""

    shutil.copytree(src, to, ignore=shutil.ignore_patterns(*NOT_COPIED))
    names = {k: getattr(spec, k) for k in NOT_IDENTITY}
    write_json(to / SPEC_JSON, spec.as_dict())
    for name in ("status.json", "result.json"):
        p = to / name
        if p.is_file():
            data = json.loads(p.read_text(encoding="utf-8"))
            write_json(p, {**data, **{k: v for k, v in names.items() if k in data}})
    write_json(to / SHARED_JSON, {"from": str(src.relative_to(root)), "run_id": src.name})
    return to


def shared_in(out: Path) -> dict[str, str]:
    """``{run id: where it was copied from}`` of the runs of experiment ``out`` taken over from
    another claim (``<claim>/<axis>/runs/<run id>``)."""

    runs = ExperimentDir(out).runs
    if not runs.exists():
        return {}
    return {
        p.parent.name: json.loads(p.read_text(encoding="utf-8"))["from"]
        for p in sorted(runs.glob(f"*/{SHARED_JSON}"))
    }


def taken_from(copied: dict[str, str]) -> dict[str, int]:
    """How many runs were taken from each claim and axis (``claim/axis``)."""

    out: dict[str, int] = {}
    for source in copied.values():
        key = "/".join(Path(source).parts[:2])
        out[key] = out.get(key, 0) + 1
    return out
