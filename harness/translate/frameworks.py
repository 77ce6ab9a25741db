"""The frameworks the translator reads, each as what it needs (defaults, known fields, the
function that builds the blanks), and the entry points :func:`translate` and
:func:`translate_file`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sixblanks.algorithms.blanks import Blanks

from ..errors import ConfigError
from . import trl, trl_fields, verl, verl_fields
from .builder import Builder, finish
from .fields import FRAMEWORKS, Fields, read_fields, unknown_fields
from .result import Translation
from .traps import Trap


@dataclass(frozen=True)
class Framework:
    """What translating one framework's configuration needs.

    ``what``: the configuration's name in messages; ``defaults``: {field: default}; ``known`` and
    ``vocabulary``: whether a field is the framework's, and the names a misspelt one is matched
    against; ``build``: sets every blank and setting into a builder (with the number of
    processes, where the framework's batch sizes are per process) and returns the traps;
    ``ignored_why``: why a field read that is not a default has no effect; ``resolved_notes``:
    notes on the arm once resolved; ``legacy``: fields of earlier versions still read."""

    what: str
    defaults: dict[str, Any]
    known: Callable[[str], bool]
    vocabulary: tuple[str, ...]
    build: Callable[[Builder, int | None], list[Trap]]
    ignored_why: Callable[[str], str]
    resolved_notes: Callable[[Blanks], list[str]]
    legacy: tuple[str, ...] = ()


def _no_notes(resolved: Blanks) -> list[str]:
    return []


READERS = {
    "trl": Framework(
        what="GRPOConfig",
        defaults=trl_fields.TRL_DEFAULTS,
        known=set(trl_fields.VOCABULARY).__contains__,
        vocabulary=trl_fields.VOCABULARY,
        build=trl.build,
        ignored_why=trl_fields.TRL_IGNORED_WHY.__getitem__,
        resolved_notes=trl.resolved_notes,
        legacy=trl_fields.LEGACY,
    ),
    "verl": Framework(
        what="verl ppo_trainer.yaml",
        defaults=verl_fields.VERL_DEFAULTS,
        known=verl_fields.known,
        vocabulary=verl_fields.VOCABULARY,
        build=verl.build,
        ignored_why=verl_fields.why,
        resolved_notes=_no_notes,
    ),
}
"""Each framework of FRAMEWORKS, by name."""


def translate(
    framework: str,
    fields: dict[str, Any],
    *,
    arm: str | None = None,
    source: str = "<input>",
    world_size: int | None = None,
    blanks_only: bool = False,
) -> Translation:
    """``fields`` of a ``framework`` configuration (``trl``: GRPOConfig field names; ``verl``:
    dotted keys) as a :class:`Translation`. Raises ConfigError for values the framework itself
    would refuse (an unknown loss type, a malformed number), naming ``source``."""

    if framework not in READERS:
        raise ConfigError(f"unknown framework '{framework}' (valid: {', '.join(FRAMEWORKS)})")
    fw = READERS[framework]
    unknown = unknown_fields(fields, fw.known, fw.vocabulary, fw.what)
    unknown_names = {u["field"] for u in unknown}
    given = {k: v for k, v in fields.items() if k not in unknown_names}
    b = Builder(Fields(given, fw.defaults, source))
    traps = fw.build(b, world_size)
    t = finish(b, framework, source, arm, blanks_only, fw.resolved_notes)
    t.unknown = unknown
    t.ignored = {
        k: fw.ignored_why(k) for k in sorted(given) if k not in fw.defaults and k not in fw.legacy
    }
    t.traps = traps
    return t


def translate_file(
    framework: str,
    path: str | Path,
    *,
    arm: str | None = None,
    world_size: int | None = None,
    blanks_only: bool = False,
) -> Translation:
    """:func:`translate` of the configuration in ``path`` (:func:`read_fields`)."""

    fields = read_fields(path, framework)
    return translate(
        framework,
        fields,
        arm=arm,
        source=str(path),
        world_size=world_size,
        blanks_only=blanks_only,
    )
