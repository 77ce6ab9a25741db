"""Where the runs of an experiment share their start evaluations
(``executor.share_start_evaluations``; :mod:`sixblanks.harness.training.start_eval` says when two
runs' start evaluations are the same).

A run shares them where its warm-start directory holds a ``start_evaluations`` folder: the
orchestrator makes it a link to the machine's warm-start cache (so the claims of a findings family,
each an experiment of its own, share them too), or a folder of the experiment's own where the cache
is off, and removes it where the experiment does not share.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..layout import START_EVALUATIONS
from .warm_key import machine_cache


def prepare_start_evaluations(warm_dir: Path, key: str, share: bool) -> Path | None:
    """Make (``share``) or remove the start-evaluation store of the warm start ``key`` cached in
    ``warm_dir``; returns the folder the runs write to (None: not shared)."""

    link = Path(warm_dir) / START_EVALUATIONS
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.is_dir() and not share:
        shutil.rmtree(link)
    if not share:
        return None
    cache = machine_cache()
    if cache is None:
        link.mkdir(parents=True, exist_ok=True)
        return link
    target = cache / key / START_EVALUATIONS
    target.mkdir(parents=True, exist_ok=True)
    if link.is_dir():  # the experiment's own, from a command run with the cache off
        shutil.rmtree(link)
    link.symlink_to(target, target_is_directory=True)
    return target
