"""Safe, verified run checkpoints.

A checkpoint is a directory ``checkpoint/`` of three files:

- ``tensors.safetensors``: every tensor of the trainer's state (weights, optimizer moments, RNG
  generator states), flat, in safetensors (no code runs when it is read);
- ``state.pt``: the rest of the state (numbers, strings, lists, dicts, tuples) with each tensor
  replaced by its key, written by ``torch.save`` and read with ``weights_only=True``: a pickle
  that names any other class or function is refused before anything of it runs;
- ``manifest.json``: the format, the step and the SHA-256 of both files.

It is written into ``checkpoint.tmp/`` and renamed into place; the one before it is kept as
``checkpoint.prev/``. :func:`load` checks the manifest and checksums before it reads anything: a
truncated, corrupted or planted checkpoint raises :class:`CheckpointError` naming the file, and
:func:`load_latest` then falls back to the previous one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .imports import import_object

FORMAT = 1
TENSORS, STATE, MANIFEST = "tensors.safetensors", "state.pt", "manifest.json"
_KEY = "__sixblanks_tensor__"
_DATA = "__sixblanks_dataclass__"
SAFE_CLASSES = ("sixblanks.harness.rollout.trajectory.TrajectoryBatch",)
"""The state's own data classes, rebuilt from their fields on load (none other is: a checkpoint
naming another class is refused)."""


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be trusted: missing file, wrong checksum, refused content."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _split(obj: Any, tensors: dict[str, Any] | None, seen: set[int]) -> Any:
    """``obj`` with every tensor moved into ``tensors`` (CPU, contiguous, unshared storage); with
    ``tensors`` None, tensors stay in place (a weights-only pickle reads them) and only data classes
    and numpy values are replaced."""

    import numpy as np
    import torch

    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        if tensors is None:
            return t
        ptr = t.untyped_storage().data_ptr() if t.numel() else None
        if ptr is not None and ptr in seen:  # shared storage (tied weights): saved separately
            t = t.clone()
        elif ptr is not None:
            seen.add(ptr)
        key = f"t{len(tensors)}"
        tensors[key] = t
        return {_KEY: key}
    if isinstance(obj, dict):
        return {k: _split(v, tensors, seen) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_split(v, tensors, seen) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_split(v, tensors, seen) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        name = f"{type(obj).__module__}.{type(obj).__qualname__}"
        if name not in SAFE_CLASSES:
            raise CheckpointError(f"cannot checkpoint a {name}: not in checkpoint.SAFE_CLASSES")
        fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}
        return {_DATA: name, "fields": _split(fields, tensors, seen)}
    if isinstance(obj, np.generic):  # numpy scalars: plain Python numbers
        return obj.item()
    if isinstance(obj, np.ndarray):
        return _split(torch.from_numpy(obj.copy()), tensors, seen)
    return obj


def _join(obj: Any, tensors: dict[str, Any] | None) -> Any:
    if isinstance(obj, dict):
        if len(obj) == 1 and _KEY in obj and tensors is not None:
            return tensors[obj[_KEY]]
        if len(obj) == 2 and _DATA in obj:
            return _rebuild(obj[_DATA], _join(obj["fields"], tensors))
        return {k: _join(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_join(v, tensors) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_join(v, tensors) for v in obj)
    return obj


def _rebuild(name: str, fields: dict[str, Any]) -> Any:
    """An instance of the allowed data class ``name`` from its fields."""

    if name not in SAFE_CLASSES:
        raise CheckpointError(f"the checkpoint names the class {name}, which is not allowed")
    return import_object(name, "class")(**fields)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(state: dict[str, Any], path: Path, step: int) -> None:
    """Write ``state`` as the checkpoint directory ``path`` (atomically; the old one becomes
    ``path.prev``)."""

    import torch
    from safetensors.torch import save_file

    from . import layout

    if not layout.writes(path):  # a data-parallel run's other ranks: rank 0 writes it
        return
    path = Path(path)
    tmp, prev = path.with_name(path.name + ".tmp"), path.with_name(path.name + ".prev")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tensors: dict[str, Any] = {}
    skeleton = _split(state, tensors, set())
    for name, write in (
        (TENSORS, lambda f: save_file(tensors, str(f))),
        (STATE, lambda f: torch.save(skeleton, f)),
    ):
        try:
            write(tmp / name)
        except Exception as exc:
            from .errors import DiskFull, disk_full, disk_full_message

            if disk_full(exc):  # the previous checkpoint is untouched
                raise DiskFull(disk_full_message(exc, str(tmp / name))) from None
            raise
    manifest = {
        "format": FORMAT,
        "step": step,
        "sha256": {name: _sha256(tmp / name) for name in (TENSORS, STATE)},
    }
    (tmp / MANIFEST).write_text(json.dumps(manifest))
    for name in (TENSORS, STATE, MANIFEST):
        with open(tmp / name, "rb") as f:
            os.fsync(f.fileno())
    if path.exists():
        shutil.rmtree(prev, ignore_errors=True)
        os.replace(path, prev)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def load(path: Path) -> dict[str, Any]:
    """The state saved in the checkpoint directory ``path``, after checking its manifest and
    checksums; raises :class:`CheckpointError` naming what is wrong."""

    import pickle

    import torch
    from safetensors.torch import load_file

    path = Path(path)
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path / MANIFEST}: unreadable ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path / MANIFEST}: not a format-{FORMAT} checkpoint manifest")
    for name in (TENSORS, STATE):
        want = (manifest.get("sha256") or {}).get(name)
        try:
            got = _sha256(path / name)
        except OSError as exc:
            raise CheckpointError(f"{path / name}: unreadable ({exc})") from None
        if got != want:
            raise CheckpointError(
                f"{path / name}: checksum {got[:12]}... does not match the manifest's "
                f"{str(want)[:12]}... (truncated or altered)"
            )
    try:
        skeleton = torch.load(path / STATE, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as exc:
        raise CheckpointError(f"{path / STATE}: {_refusal(exc)}") from None
    try:
        tensors = load_file(str(path / TENSORS))
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types
        raise CheckpointError(f"{path / TENSORS}: unreadable ({exc})") from None
    return _join(skeleton, tensors)


def save_record(obj: Any, path: Path) -> None:
    """One record (a concurrent collector's spooled round) as a single file that
    :func:`load_record` reads with the weights-only loader: tensors inline, the allowed data classes
    by their fields. Written atomically (temporary file, then rename)."""

    import torch

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(_split(obj, None, set()), tmp)
    os.replace(tmp, path)


def load_record(path: Path) -> Any:
    """What :func:`save_record` wrote; a file naming any other class or function is refused
    (:class:`CheckpointError`) before anything of it runs."""

    import pickle

    import torch

    try:
        plain = torch.load(path, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as exc:
        raise CheckpointError(f"{path}: {_refusal(exc)}") from None
    return _join(plain, None)


def _refusal(exc: BaseException) -> str:
    """The weights-only loader's reason, by what the pickle would have run where it names it."""

    text = [x.strip() for x in str(exc).splitlines() if x.strip()]
    named = [x for x in text if "GLOBAL" in x or "Unsupported" in x]
    return f"refused by the weights-only loader ({(named or text or [type(exc).__name__])[0]})"


def candidates(path: Path) -> list[Path]:
    """The checkpoints to try, newest first: ``path``, then ``path.prev`` (a kill during the
    rename leaves only ``path.prev`` and ``path.tmp``)."""

    path = Path(path)
    return [p for p in (path, path.with_name(path.name + ".prev")) if p.exists()]


def load_latest(path: Path, warn: Callable[[str], None]) -> tuple[dict[str, Any] | None, list[str]]:
    """(state of the newest checkpoint that verifies, or None; what was refused and why).
    ``warn`` gets one line per refused checkpoint."""

    refused = []
    for p in candidates(path):
        try:
            return load(p), refused
        except CheckpointError as exc:
            refused.append(str(exc))
            warn(f"checkpoint refused: {exc}")
    return None, refused
