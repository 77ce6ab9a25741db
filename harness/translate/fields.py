"""A framework's configuration read as {field: value} (YAML, JSON or verl command-line
overrides), and those fields with the framework's defaults behind them (:class:`Fields`).

Also the frameworks read, the versions whose defaults are used, and the two ways every report
shows a value (:func:`plain`, :func:`show_value`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError, suggest

FRAMEWORKS = ("trl", "verl")

SOURCES = {
    "trl": "huggingface/trl@f2cd577 (trl/trainer/grpo_config.py, grpo_trainer.py)",
    "verl": "verl-project/verl@1dda039 (verl/trainer/config/_generated_ppo_trainer.yaml, "
    "verl/workers/config/actor.py, verl/trainer/ppo/core_algos.py)",
}
"""Where each framework's defaults are read from (shown in every translation)."""


def plain(x: Any) -> Any:
    """Tuples as lists (YAML and JSON both), recursively."""

    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [plain(v) for v in x]
    return x


def show_value(v: Any) -> str:
    """A value as a report shows it: a string quoted, anything else as JSON."""

    return json.dumps(plain(v)) if not isinstance(v, str) else repr(v)


# --------------------------------------------------------------------------- reading a file


def read_fields(path: str | Path, framework: str) -> dict[str, Any]:
    """The configuration in ``path`` as {field: value}: a YAML or JSON mapping (verl's nested
    sections are flattened to dotted keys, as on verl's command line), or verl command-line
    overrides (``key=value``, one per line or a YAML list of them). An empty file is an empty
    configuration: every field takes its default. Raises ConfigError naming the file."""

    from ..config.loading import read_text_file

    text = read_text_file(path, f"a {framework} configuration file")
    return parse_fields(text, framework, str(path))


def parse_fields(text: str, framework: str, source: str = "<input>") -> dict[str, Any]:
    """:func:`read_fields` on text."""

    if framework not in FRAMEWORKS:
        raise ConfigError(f"unknown framework '{framework}' (valid: {', '.join(FRAMEWORKS)})")
    data = _parse(text, source)
    if data is None:
        return {}
    if isinstance(data, str) and "=" in data:
        data = data.split()
    if isinstance(data, list) and data and all(isinstance(x, str) for x in data):
        return _overrides(data, source)
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: expected a mapping of {framework} configuration fields (or verl-style "
            f"key=value overrides), got {type(data).__name__}"
        )
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise ConfigError(f"{source}: field names must be strings (got {bad[0]!r})")
    if framework == "trl":
        return dict(data)
    out: dict[str, Any] = {}
    _flatten_into(out, "", data, source)
    return out


def _parse(text: str, source: str) -> Any:
    """The text as JSON (a ``.json`` source) or YAML; None when empty."""

    if not source.endswith(".json"):
        from ..config.loading import parse_yaml

        return parse_yaml(text, source)
    try:
        return json.loads(text) if text.strip() else None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{source}: JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None


def _flatten_into(out: dict[str, Any], prefix: str, data: dict[str, Any], source: str) -> None:
    for k, v in data.items():
        key = f"{prefix}.{str(k).lstrip('+')}" if prefix else str(k).lstrip("+")
        if isinstance(v, dict) and v:
            _flatten_into(out, key, v, source)
        elif key in out:
            raise ConfigError(f"{source}: field '{key}' is given twice (nested and dotted)")
        else:
            out[key] = v


def _overrides(items: list[str], source: str) -> dict[str, Any]:
    """verl/Hydra command-line overrides ``[+]key=value`` (shell line continuations dropped)."""

    out: dict[str, Any] = {}
    if not any("=" in item for item in items):
        raise ConfigError(f"{source}: no key=value override in {' '.join(items)[:80]!r}")
    for item in items:
        item = item.strip()
        if not item or item == "\\":
            continue
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            out[item] = None  # a launcher's word (python3 -m ...): reported as unknown
            continue
        try:
            parsed = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError:
            parsed = value
        out[key.strip().lstrip("+~")] = parsed
    return out


def unknown_fields(
    names: Iterable[str], known: Callable[[str], bool], vocabulary: Iterable[str], what: str
) -> list[dict[str, Any]]:
    """{field, hint} of each name ``known`` refuses, with the closest known name when one is."""

    vocab = sorted(set(vocabulary))
    return [
        {"field": n, "hint": suggest(n, vocab).lstrip("; ") or f"not a {what} field"}
        for n in names
        if not known(n)
    ]


# --------------------------------------------------------------------------- values with defaults


class Fields:
    """A configuration's fields with the framework's defaults behind them: reads record which
    fields were used; a malformed value is collected as a problem (every one at once)."""

    def __init__(self, given: dict[str, Any], defaults: dict[str, Any], source: str):
        self.given_values, self.defaults, self.source = given, defaults, source
        self.problems: list[str] = []

    def given(self, key: str) -> bool:
        return key in self.given_values

    def raw(self, key: str) -> Any:
        if key in self.given_values:
            v = self.given_values[key]
            return None if isinstance(v, str) and v.strip() in ("null", "None", "~", "") else v
        return self.defaults.get(key)

    def show(self, key: str) -> str:
        """``key=value`` as read, ``(default)`` when absent from the input."""

        return f"{key}={show_value(self.raw(key))}" + ("" if self.given(key) else " (default)")

    def _bad(self, key: str, what: str) -> None:
        self.problems.append(f"{self.source}: {key}: {self.raw(key)!r} is not {what}")

    def num(self, key: str) -> float | None:
        v = self.raw(key)
        if v is None:
            return None
        if isinstance(v, bool):
            self._bad(key, "a number")
            return None
        try:
            return float(v)
        except (TypeError, ValueError):
            self._bad(key, "a number")
            return None

    def whole(self, key: str) -> int | None:
        v = self.num(key)
        if v is None:
            return None
        if not v.is_integer():
            self._bad(key, "a whole number")
            return None
        return int(v)

    def flag(self, key: str) -> bool:
        v = self.raw(key)
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and v.strip().lower() in ("true", "false"):
            return v.strip().lower() == "true"
        if v in (0, 1):
            return bool(v)
        if v is None:
            return False
        self._bad(key, "true or false")
        return False

    def text(self, key: str, valid: Iterable[str] | None = None) -> str | None:
        v = self.raw(key)
        if v is None:
            return None
        v = str(v)
        if valid is not None and v not in valid:
            valid = sorted(valid)
            self.problems.append(
                f"{self.source}: {key}: unknown value '{v}'{suggest(v, valid)} "
                f"(valid: {', '.join(valid)})"
            )
        return v
