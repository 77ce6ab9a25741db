"""An experiment's preparation: the checks made before the warm start, the warm start (trained, or
found cached), one run spec per arm x task x seed (finished runs of other code reused where asked)
and experiment.json, returned as a :class:`Plan` that the orchestrator, the ladder and the sweep
read.

    plan = prepare_experiment(cfg, "runs/demo", log=print)
    plan.specs[0].run_id, plan.warm_dir  # a run's id, the directory its policy is loaded from
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ..config import ExperimentConfig
from ..errors import SixblanksError
from ..layout import TOKENIZER_IDENTITY_JSON, ExperimentDir, write_json
from ..runspec import RunSpec
from ..version import code_fingerprint
from .data_files import arm_inputs, task_inputs
from .runner import identity_of, spec_id

if TYPE_CHECKING:
    from ..tasks.base import Task


class Draft(NamedTuple):
    """What the configuration alone decides, known before the warm start is trained or loaded (its
    key is a hash): the tasks, the warm start's key, one spec per arm x task x seed."""

    tasks: tuple[Task, ...]
    warm_key: str
    specs: tuple[RunSpec, ...]


@dataclass(frozen=True)
class Plan:
    """What an experiment's preparation made. ``tasks``: the configuration's tasks, made (left out
    of ``==``: the key holds their names and parameters); ``warm_key``: the warm start's content
    hash; ``warm_dir``: the directory of its policy, which the runs load;
    ``warm_info``: its info (key, policy hash, SFT steps and losses, ``cached``) with its
    tokenizer's identity under ``"tokenizer"``; ``specs``: one spec per run, in the order of
    experiment.json's ``runs`` (a finished run of other code in place of a new one where reused)."""

    tasks: tuple[Task, ...] = field(compare=False, repr=False)
    warm_key: str
    warm_dir: Path
    warm_info: dict[str, Any]
    specs: tuple[RunSpec, ...]


def build_specs(cfg: ExperimentConfig, warm_key: str, code: str | None = None) -> list[RunSpec]:
    """One fully resolved spec per arm x task x seed; ``code``: the code fingerprint (default: of
    the code running now), part of every run id."""

    code = code or code_fingerprint()
    # what decides a run beyond its configuration and the project's code: its data files' content
    # and its user modules' source (transitively), so that an edit runs it again
    task_ins = [task_inputs(t) for t in cfg.tasks or []]
    specs = []
    for arm in cfg.arms:
        blanks = cfg.resolved_blanks(arm).model_dump(mode="json")
        arm_ins = arm_inputs(cfg, arm)
        for task, task_in in zip(cfg.tasks or [], task_ins):
            for seed in cfg.seeds:
                fields = {
                    "experiment": cfg.name,
                    "arm": arm,
                    "preset": cfg.arms[arm].preset,
                    "seed": seed,
                    "task": task.model_dump(mode="json"),
                    "blanks": blanks,
                    "optimizer": cfg.optimizer_for(arm).model_dump(mode="json"),
                    "rollout": cfg.rollout_for(arm).model_dump(mode="json"),
                    "budget": dict(cfg.budget),
                    "eval": cfg.eval.model_dump(mode="json"),
                    "model": cfg.model.model_dump(mode="json"),
                    "warm_start_key": warm_key,
                    "code_version": code,
                }
                fields.update(cfg.arms[arm].run_fields())  # seed_offset, fault: only where set
                if (tools := cfg.tools_for(arm)) is not None:  # the code tool: where offered
                    fields["tools"] = tools.model_dump(mode="json")
                # only where there are some: a built-in task's run id is as it was
                fields.update({"task_inputs": task_in} if task_in else {})
                fields.update({"arm_inputs": arm_ins} if arm_ins else {})
                specs.append(RunSpec.from_dict({**fields, "run_id": spec_id(fields)}))
    return specs


def draft(cfg: ExperimentConfig) -> Draft:
    """The tasks, warm-start key and specs of ``cfg`` (nothing is trained, loaded or written)."""

    from ..tasks import make_task
    from .warm_key import warm_start_key

    tasks = tuple(make_task(t.name, t.params) for t in cfg.tasks or [])
    key = warm_start_key(cfg, list(tasks))
    return Draft(tasks, key, tuple(build_specs(cfg, key)))


def prepare_experiment(
    config: ExperimentConfig,
    out: str | Path,
    log: Callable[[str], None] | None = None,
    reuse_finished: bool = False,
    drafted: Draft | None = None,
) -> Plan:
    """The warm start (cached) and the run specs of ``config`` in output directory ``out``, with
    experiment.json written. Refused before the warm start where the rollout backend or the code
    tool cannot work here. ``reuse_finished``: a finished run of other code stands for a new spec
    that is otherwise the same; ``log`` hears the warm start, each reuse and each run trained
    afresh because an input changed; ``drafted``: :func:`draft` of ``config``, where made
    already."""

    from .start_evals import prepare_start_evaluations
    from .warm_key import cached_warm_start

    log = log or (lambda _m: None)
    check_backend(config)
    check_tools(config)
    d = ExperimentDir(out)
    d.path.mkdir(parents=True, exist_ok=True)
    tasks, key, specs = drafted or draft(config)
    warm_dir = d.warm_policy(key)
    cached = cached_warm_start(warm_dir)
    if cached is not None:  # nothing to load: the runs load the policy themselves
        info, identity = cached
    else:
        from ..fairness.identity import tokenizer_identity
        from .warmstart import warm_start

        _, tok, info = warm_start(config, list(tasks), d.warm_start, log=log, key=key)
        identity = tokenizer_identity(tok)
        # beside the policy: a later command checks the cached warm start from its files
        write_json(warm_dir / TOKENIZER_IDENTITY_JSON, identity)
    prepare_start_evaluations(warm_dir, key, config.executor.share_start_evaluations)
    if reuse_finished:
        specs = reuse(d, specs, log)
    for line in changed_input_lines(d, specs):
        log(line)
    from ..config import resolved_dict

    write_json(
        d.experiment,
        {
            "config": resolved_dict(config),
            "code_version": code_fingerprint(),
            "warm_start": info,
            "runs": [s.run_id for s in specs],
        },
    )
    return Plan(tasks, key, warm_dir, {**info, "tokenizer": identity}, tuple(specs))


def check_backend(cfg: ExperimentConfig) -> None:
    """Fail before the warm start, not in every run, where the rollout backend cannot work."""

    if cfg.rollout.backend != "vllm" or cfg.executor.kind != "local":
        return  # Ray: vLLM must be on the workers, which the runs check themselves
    from ..rollout.vllm_engine import INSTALL_HINT, vllm_available

    if not vllm_available():
        raise SixblanksError(
            f"rollout.backend is 'vllm' but vLLM is not installed in {sys.executable}: "
            f"{INSTALL_HINT}"
        )


def check_tools(cfg: ExperimentConfig) -> None:
    """Refuse, before the warm start, an experiment whose code tool this machine cannot isolate as
    configured (SandboxUnavailable says what is missing)."""

    if any(cfg.tools_for(arm) is not None for arm in cfg.arms):
        from ..tools import Sandbox

        Sandbox(cfg.tools.sandbox)


def reuse(
    d: ExperimentDir, specs: tuple[RunSpec, ...], log: Callable[[str], None]
) -> tuple[RunSpec, ...]:
    """``specs`` with each replaced by a finished run of other code in ``d`` whose spec is
    otherwise the same (the audit then flags it as run by other code), saying so in ``log``."""

    def same(spec: RunSpec) -> str:
        form = spec.as_dict(run_id=False)
        del form["code_version"]
        return spec_id(form)

    finished = {}
    if d.runs.exists():
        for path in sorted(d.runs.iterdir()):
            run = d.run(path.name)
            if run.read_status().get("state") == "finished" and run.spec.exists():
                found = run.read_spec()
                finished.setdefault(same(found), found)
    out = []
    for spec in specs:
        old = finished.get(same(spec))
        if (
            old is not None
            and old.run_id != spec.run_id
            and (d.run(spec.run_id).read_status().get("state") != "finished")
        ):
            log(f"reusing {old.run_id} ({old.code_version}) for {spec.run_id}")
            spec = old
        out.append(spec)
    return tuple(out)


def changed_input_lines(d: ExperimentDir, specs: tuple[RunSpec, ...]) -> list[str]:
    """A line for each run of ``specs`` trained afresh because a data file or user module changed
    since a finished run of the same configuration in ``d``, naming what changed (such a run is
    never reused: its id holds its inputs)."""

    from .data_files import changed_inputs

    def rest(spec: RunSpec) -> str:  # the run's identity but what an input's edit changes
        volatile = ("run_id", "task_inputs", "arm_inputs", "warm_start_key")
        view = identity_of(spec.as_dict())
        return spec_id({k: v for k, v in view.items() if k not in volatile})

    def inputs(spec: RunSpec) -> dict[str, dict[str, str]]:
        t, a = spec.task_inputs or {}, spec.arm_inputs or {}
        return {k: {**t.get(k, {}), **a.get(k, {})} for k in ("files", "modules")}

    todo = {rest(s): s for s in specs if not d.run(s.run_id).spec.exists()}
    if not todo or not d.runs.exists():
        return []
    lines = []
    planned = [r for r in (d.run(p.name) for p in d.runs.iterdir()) if r.spec.exists()]
    # the latest first: what the last command ran
    for run in sorted(planned, key=lambda r: r.spec.stat().st_mtime_ns, reverse=True):
        old = run.read_spec()
        new = todo.pop(rest(old), None)
        if new is None:
            continue
        what = changed_inputs(inputs(old), inputs(new)) or ["the warm start"]
        lines.append(
            f"{new.arm} seed {new.seed}: {', '.join(what)} changed since run "
            f"{old.run_id}; run {new.run_id} trains afresh"
        )
    return lines
