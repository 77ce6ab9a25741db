"""The preset record, the registry every family adds to, and lookups by name."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..blanks import Blanks, deep_merge, flatten
from ..errors import UnknownNameError


@dataclass(frozen=True)
class Preset:
    name: str
    blanks: Blanks
    summary: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    """Which variant this preset implements, and why (one line per choice)."""


def blanks_of(**parts: dict[str, Any]) -> Blanks:
    """Blanks validated from the named parts (weight=..., advantage=...); defaults elsewhere."""

    return Blanks.model_validate(parts)


SEQ_MEAN_TOKEN_MEAN = {"mode": "seq-mean-token-mean"}
"""The normalization blank of GRPO's paper: each sequence's token mean, averaged over sequences."""

PRESETS: dict[str, Preset] = {}


def register(preset: Preset) -> Preset:
    if preset.name in PRESETS:
        raise ValueError(f"preset '{preset.name}' is already registered")
    PRESETS[preset.name] = preset
    return preset


def preset_names() -> list[str]:
    return sorted(PRESETS)


def get_preset(name: str) -> Preset:
    """The preset called ``name``; raises :class:`UnknownNameError` listing the valid names."""

    try:
        return PRESETS[name]
    except KeyError:
        raise UnknownNameError("preset", name, list(PRESETS)) from None


def resolve(preset: str, overrides: dict[str, Any] | None = None) -> Blanks:
    """Blanks of ``preset`` with ``overrides`` (nested dict of blank fields) applied, validated."""

    base = get_preset(preset).blanks.model_dump()
    return Blanks.model_validate(deep_merge(base, overrides or {}))


def diff(a: Blanks, b: Blanks) -> dict[str, tuple[Any, Any]]:
    """{dotted.path: (value in a, value in b)} for every blank field that differs."""

    fa, fb = flatten(a), flatten(b)
    return {k: (fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)}
