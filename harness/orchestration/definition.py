"""An output directory belongs to one experiment definition.

``run``, ``sweep`` and ``ladder`` call :func:`claim` (under the directory's lock) before they write.
The first one records the definition in ``<out>/definition.json``: the fully resolved experiment,
less the sections that cannot change a result (``executor``: where the runs go; ``tracking``: where
they are copied). A later command with a different definition is refused with
:class:`DefinitionChanged` (exit code 2), naming the keys that changed, unless it asks to add to the
directory (``--add``). Then the new definition replaces the old one (kept in the file's history)
and ``results.duckdb`` is emptied, so that the store and the report cover the current definition's
runs only; the old definition's run directories stay under ``runs/`` (a run whose spec did not
change is found there and skipped as finished).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import SixblanksError
from ..layout import write_json

DEFINITION = "definition.json"
IGNORED = ("executor", "tracking")
"""Top-level sections that decide where runs go and are copied, not what they compute."""
ARM_DEFAULTS = {"seed_offset": 0, "fault": {"rewards": "none"}}
ROLLOUT_DEFAULTS = {"grad_noise_probe": False, "env_workers": 1, "group_seeds": False}
CONCURRENT_DEFAULTS = {"consume": "round", "partial": "continue", "inflight": None, "queued": None}
TASK_DEFAULTS = {"chain_arithmetic": {"tail": None, "step_seconds": 0.0}}
"""Arm, rollout, concurrent-collector and task-parameter keys left out of a definition at these
values (keys added after definitions were first recorded: a directory made before them holds the
same definition)."""


class DefinitionChanged(SixblanksError):
    """The output directory holds another experiment definition (exit code 2)."""

    exit_code = 2


def definition(cfg) -> dict[str, Any]:
    """What identifies ``cfg``'s results: its resolved form without :data:`IGNORED`."""

    from ..config import resolved_dict

    out = {k: v for k, v in resolved_dict(cfg).items() if k not in IGNORED}
    for section, defaults in [(out.get("rollout"), ROLLOUT_DEFAULTS)] + [
        (arm, ARM_DEFAULTS) for arm in (out.get("arms") or {}).values()
    ]:
        for key, default in defaults.items():
            if section is not None and key in section and section[key] == default:
                del section[key]
    sections = [
        ((arm.get("blanks") or {}).get("data") or {}).get("concurrent")
        for arm in (out.get("arms") or {}).values()
        if isinstance(arm, dict)
    ]
    tasks = [out.get("task"), *(out.get("tasks") or [])]
    for section, defaults in [(c, CONCURRENT_DEFAULTS) for c in sections] + [
        ((t or {}).get("params"), TASK_DEFAULTS.get((t or {}).get("name"), {})) for t in tasks
    ]:
        for key, default in defaults.items():
            if isinstance(section, dict) and key in section and section[key] == default:
                del section[key]
    return out


def digest(d: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _flat(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict) and obj:
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}


def _show(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return json.dumps(v)


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One line per key path whose value differs: ``path: old -> new`` (``added`` / ``removed``)."""

    a, b = _flat(old), _flat(new)
    out = []
    for k in sorted(set(a) | set(b)):
        if k not in a:
            out.append(f"{k}: added ({_show(b[k])})")
        elif k not in b:
            out.append(f"{k}: removed (was {_show(a[k])})")
        elif a[k] != b[k]:
            out.append(f"{k}: {_show(a[k])} -> {_show(b[k])}")
    return out


def _summarize(lines: list[str], at_most: int = 6) -> str:
    # an added or removed arm is one change, not one per key under it
    seen, out = set(), []
    for line in lines:
        path = line.split(":", 1)[0]
        parts = path.split(".")
        if parts[0] == "arms" and ("added" in line or "removed" in line) and len(parts) > 1:
            key = f"arms.{parts[1]}"
            if key in seen:
                continue
            seen.add(key)
            line = f"arm {parts[1]!r} {'added' if 'added' in line else 'removed'}"
        out.append(line)
    more = f"; and {len(out) - at_most} more" if len(out) > at_most else ""
    return "; ".join(out[:at_most]) + more


def claim(
    out: str | Path, cfg, command: str, add: bool = False, log: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Record ``cfg`` as the definition of ``out`` or check that it is the one recorded there.

    Raises :class:`DefinitionChanged` for a different definition unless ``add``; with ``add`` the
    new definition replaces the old one and the results store is emptied (it is rebuilt from the
    run directories of the current definition). Returns the recorded file's content."""

    out = Path(out)
    path = out / DEFINITION
    new = definition(cfg)
    h = digest(new)
    old: dict[str, Any] | None = None
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except ValueError as exc:
            raise DefinitionChanged(
                f"{path}: unreadable ({exc}); move it away if this directory is yours"
            ) from None
    now = {"digest": h, "command": command, "at": time.time()}
    if old is not None and old.get("digest") == h:
        return old
    if old is not None and not add:
        changed = differences(old.get("definition") or {}, new)
        raise DefinitionChanged(
            f"{out} holds another definition of the experiment (made by `sixblanks "
            f"{old.get('command', '?')}`): {_summarize(changed)}. Use another --out, or --add "
            "to add the changed experiment to this directory (the store and the report then "
            "cover the new definition's runs only)"
        )
    history = list((old or {}).get("history", []))
    if old is not None:
        changed = differences(old.get("definition") or {}, new)
        history.append({k: old.get(k) for k in ("digest", "command", "at")} | {"changes": changed})
        _empty_store(out)
        if log is not None:
            log(
                f"--add: {out} now holds the changed experiment ({_summarize(changed, 3)}); "
                "results.duckdb is rebuilt for its runs only, the old run directories stay"
            )
    out.mkdir(parents=True, exist_ok=True)
    rec = {**now, "definition": new, "history": history}
    write_json(path, rec)
    return rec


def _empty_store(out: Path) -> None:
    """Delete every row of ``out``'s results store (all of it is derived from files on disk)."""

    from ..layout import ExperimentDir

    if not ExperimentDir(out).results_db.exists():
        return
    from ..store.database import clear

    clear(out)
