"""``sixblanks eval``: a finished run's policy, or any model directory, scored on a task's held-out
split through the evaluation every run uses (the same episodes, the same counted verifier gate),
with what the evaluation cost."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from ..errors import ConfigError
from ..runspec import RunSpec
from .app import JsonOpt, app, dump_json, out

DATA_SUFFIXES = (".jsonl", ".csv", ".parquet")


def _task(name: str | None, params: str | None, spec: RunSpec | None):
    """The task to score on: ``--task`` (a task name, or a data file for the dataset task) with
    ``--params``, else the run's own task."""

    from ..tasks import make_task

    try:
        given = yaml.safe_load(params) if params else {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"--params: not a YAML or JSON mapping: {exc}") from None
    if not isinstance(given, dict):
        raise ConfigError(f"--params: expected a mapping of the task's parameters, got {given!r}")
    if name is None:
        if spec is None:
            raise ConfigError("--task: a model directory names no task; give one (--task NAME)")
        from ..tasks.judge import attach_judge

        try:  # the run's own task, with its judge as the run scored it
            task = make_task(spec.task_name, {**spec.task_params, **given})
        except Exception as exc:  # noqa: BLE001 - a task that cannot be made is the user's input
            raise ConfigError(f"--params: {exc}") from None
        return attach_judge(task, spec.task.get("judge"))
    elif Path(name).suffix in DATA_SUFFIXES or Path(name).is_dir():
        name, given = "dataset", {"path": str(Path(name).resolve()), **given}
    try:
        return make_task(name, given)
    except Exception as exc:  # noqa: BLE001 - a task that cannot be made is the user's input
        raise ConfigError(f"--task {name}: {exc}") from None


def _offer_tools(task, spec: RunSpec | None, tools: bool | None, tokenizer):
    """``task`` with the code tool of the run's arm (its spec's ``tools``, present only where the
    arm was offered it) unless ``tools`` is False; ``tools`` True where the run had none (or a
    model directory: no run) is a ConfigError."""

    offered = spec.tools if spec is not None else None
    if tools is False or (tools is None and not offered):
        return task
    if not offered:
        where = (
            "a model directory has no run" if spec is None else "the run's arm was not offered it"
        )
        raise ConfigError(f"--tools: no code tool to offer ({where}); leave --tools out")
    from ..tasks.tooled import with_tools
    from ..tools.config import ToolsConfig

    return with_tools(task, ToolsConfig.model_validate(offered), tokenizer)


@app.command(name="eval")
def evaluate_policy(
    model: Annotated[
        Path, typer.Argument(help="A run's directory (its saved policy) or a model directory.")
    ],
    task: Annotated[
        str | None,
        typer.Option(
            "--task",
            help="A task name (built-in, reasoning_gym:NAME, module:Class) or a data file (.jsonl, "
            ".csv, .parquet: the dataset task); default: the run's own task.",
        ),
    ] = None,
    params: Annotated[
        str | None, typer.Option("--params", help="The task's parameters, a YAML/JSON mapping.")
    ] = None,
    split: Annotated[str, typer.Option("--split", help="test or validation.")] = "test",
    n: Annotated[int, typer.Option("--n", min=1, help="Held-out instances.")] = 64,
    max_new_tokens: Annotated[
        int | None,
        typer.Option("--max-new-tokens", min=1, help="Default: the run's, else 16."),
    ] = None,
    temperature: Annotated[float, typer.Option("--temperature", min=0.0)] = 0.0,
    tools: Annotated[
        bool | None,
        typer.Option(
            "--tools/--no-tools",
            help="Offer the code tool the run's arm was offered (default: as the run trained; "
            "--no-tools scores the policy without it).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Score a finished run's policy, or any model directory, on a task's held-out split (the
    evaluation every run uses, the code tool offered as the run's arm was offered it; its cost
    reported)."""

    if split not in ("test", "validation"):
        raise ConfigError(f"--split: '{split}' (valid: test, validation)")
    directory, spec = _run_of(model)
    the_task = _task(task, params, spec)
    rollout = _rollout_of(spec, max_new_tokens)
    policy, tok = _policy_of(directory, spec)
    the_task = _offer_tools(the_task, spec, tools, tok)
    ev, seconds = _score(
        policy, tok, the_task, rollout, spec, n=n, temperature=temperature, split=split
    )
    ev.update(model=str(directory), task=the_task.name, seconds=seconds)
    if as_json:
        dump_json(ev)
    else:
        _print_result(ev, split)


def _run_of(model: Path) -> tuple[Path, RunSpec | None]:
    """The model directory ``MODEL`` names (a run's saved policy, or the directory itself) and the
    run's spec (None for a model directory: no run)."""

    from ..layout import SPEC_JSON, model_dir_of

    try:
        directory = model_dir_of(model)
    except ValueError as exc:
        raise ConfigError(f"MODEL: {exc}") from None
    spec_file = model / SPEC_JSON
    spec = RunSpec.from_json(spec_file.read_text()) if spec_file.is_file() else None
    return directory, spec


def _rollout_of(spec: RunSpec | None, max_new_tokens: int | None):
    """The rollout settings to score with: the run's, else the defaults; ``--max-new-tokens`` over
    the run's (16 for a model directory that gives none)."""

    from ..config import RolloutConfig

    rollout = RolloutConfig.model_validate(spec.rollout) if spec else RolloutConfig()
    if max_new_tokens is not None or spec is None:
        rollout = rollout.model_copy(update={"max_new_tokens": max_new_tokens or 16})
    return rollout


def _policy_of(directory: Path, spec: RunSpec | None):
    """The policy and its tokenizer, loaded on the run's device and dtype (CPU, float32 for a model
    directory), the LM head in fp32 where the run kept it so."""

    from ..models import load_pretrained, set_fp32_lm_head

    m = spec.model if spec is not None else {}
    policy, tok = load_pretrained(directory, m.get("device", "cpu"), m.get("dtype", "float32"))
    set_fp32_lm_head(policy, bool(m.get("fp32_lm_head")))
    return policy, tok


def _score(
    policy, tok, task, rollout, spec: RunSpec | None, *, n: int, temperature: float, split: str
) -> tuple[dict[str, Any], float]:
    """The held-out evaluation of ``policy`` on ``task`` (its per-instance rows left out) and the
    seconds it took."""

    from ..rollout.backends import make_engine
    from ..training.evaluate import evaluate

    t0 = time.perf_counter()
    ev = evaluate(
        make_engine(rollout, policy, tok, seed=0),
        tok,
        task,
        n,
        max_new_tokens=rollout.max_new_tokens,
        temperature=temperature,
        seed=int(spec.seed) if spec else 0,
        max_context_tokens=rollout.max_prompt_tokens,
        split=split,
        env_workers=rollout.env_workers,
    )
    seconds = time.perf_counter() - t0
    return {k: v for k, v in ev.items() if k != "per_instance"}, seconds


def _print_result(ev: dict[str, Any], split: str) -> None:
    """The score and what it cost, as two lines."""

    out.print(
        f"{ev['model']}: {ev['score']:.3f} on {ev['n']} {split} instances of {ev['task']} "
        f"(success rate {ev['success_rate']:.3f})"
    )
    tools = (
        f", {ev['tool_calls']:,.0f} tool calls ({ev['tool_seconds']:.1f} s)"
        if "tool_calls" in ev
        else ""
    )
    out.print(
        f"cost: {ev['generated_tokens']:,} generated tokens, {ev['verifier_calls']:,} verifier "
        f"calls, {ev['judge_calls']:,} judge calls{tools}, {ev['seconds']:.1f} s"
    )
