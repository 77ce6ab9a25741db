"""The data files an experiment's arms read (a file of preference pairs, ``data.pairs.file``):
checked when the experiment is validated or started, before any run, and hashed into the run id
of each arm that reads one, so that an edited file runs its arms again."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..config import ExperimentConfig


def pairs_files(cfg: ExperimentConfig) -> dict[str, str]:
    """arm -> the file of preference pairs it reads (arms that read none are absent)."""

    out = {}
    for arm in cfg.arms:
        path = cfg.resolved_blanks(arm).data.pairs.file
        if path is not None:
            out[arm] = path
    return out


def check_data_files(cfg: ExperimentConfig) -> None:
    """Raise a ConfigError listing every problem of every arm's file (each naming the file, the row
    and the column); nothing when every file can be trained on."""

    from ..errors import ConfigError
    from ..training.collectors.pair_file import pairs_file_problems, read_pairs

    problems = []
    for arm, path in pairs_files(cfg).items():
        found = [f"arms.{arm}: {p}" for p in pairs_file_problems(path)]
        heldout = cfg.resolved_blanks(arm).data.pairs.heldout
        if not found and heldout >= (n := len(read_pairs(path))):
            found.append(
                f"arms.{arm}.blanks.data.pairs.heldout: {heldout} held out of the {n} pair(s) of "
                f"'{path}' leaves none to train on"
            )
        problems += found
    if problems:
        raise ConfigError("\n".join(problems))


def file_hash(path: str) -> str:
    """The sha256 of a file's bytes (a run id's record of the data it trains on)."""

    from ..errors import ConfigError

    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError as exc:
        raise ConfigError(f"data.pairs.file: '{path}' cannot be read: {exc.strerror}") from None
