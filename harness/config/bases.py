"""An experiment file that builds on another (``base: ../testbed.yaml``): the base's sections with
the file's own laid over them, so that a family of claims shares one setting and states only what
it changes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .experiment_config import ExperimentConfig
from .loading import parse_yaml, read_text_file, resolve_paths, validate_mapping

NOT_INHERITED = ("name",)
"""Keys a file never takes from its ``base:``: an experiment is named by itself (or its file)."""
REPLACED_WHOLE = ("arms", "finding")
"""Mappings a file's own replaces whole rather than merges into its base's: an experiment's arms are
the ones it lists, not the base's with more beside them."""


def with_base(data: Any, path: str | Path, _chain: tuple[Path, ...] = ()) -> Any:
    """``data`` (the mapping read from file ``path``) laid over the experiment file its ``base:``
    names (relative to ``path``'s directory; a base may name a base of its own): each mapping
    merged key by key, the file's own values winning, except :data:`REPLACED_WHOLE`, lists and
    scalars, which it replaces, and :data:`NOT_INHERITED`. The base's relative file paths are
    resolved against its own directory. Without ``base:``, ``data`` as it is."""

    if not isinstance(data, dict) or "base" not in data:
        return data
    here = Path(path).resolve()
    ref = data["base"]
    if not isinstance(ref, str) or not ref.strip():
        raise ConfigError(f"{path}: base: expected the path of an experiment file, got {ref!r}")
    target = (here.parent / ref).resolve()
    chain = (*_chain, here)
    if target in chain:
        loop = " -> ".join(str(p) for p in (*chain, target))
        raise ConfigError(f"{path}: base: '{ref}' leads back to a file that names it ({loop})")
    parent = parse_yaml(read_text_file(target, "an experiment YAML file"), str(target))
    if not isinstance(parent, dict) or "finding" in parent:
        raise ConfigError(
            f"{path}: base: '{ref}' is not an experiment file (a mapping of sections, no finding)"
        )
    parent, problems = resolve_paths(with_base(parent, target, chain), target.parent)
    if problems:
        raise ConfigError(problems)
    own = {k: v for k, v in data.items() if k != "base"}
    inherited = {k: v for k, v in parent.items() if k not in NOT_INHERITED}
    return _merged(inherited, own)


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if key not in REPLACED_WHOLE and isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def file_schema() -> dict[str, Any]:
    """The JSON Schema of an experiment file: the configuration's, with ``base:`` (read before
    validation, so no field of the configuration)."""

    schema = ExperimentConfig.model_json_schema()
    schema["properties"] = {
        "base": {
            "type": "string",
            "title": "Base",
            "description": "An experiment file this one builds on (relative to this file): its "
            "sections with this file's laid over them, key by key; arms and lists replace.",
        },
        **schema["properties"],
    }
    # what a file must hold itself, unless its base holds it
    required = schema.pop("required", [])
    if required:
        schema["if"] = {"not": {"required": ["base"]}}
        schema["then"] = {"required": required}
    return schema


def load_config(path: str | Path) -> ExperimentConfig:
    """Parse and validate an experiment file; raises ConfigError listing every problem."""

    text = read_text_file(path, "an experiment YAML file")
    data = with_base(parse_yaml(text, str(path)), path)
    return validate_mapping(data, str(path), Path(path).parent)
