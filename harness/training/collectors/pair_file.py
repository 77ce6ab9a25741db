"""Preference pairs from a file (``data.pairs.file``): JSONL or Parquet, one pair a row.

    {"prompt": ..., "chosen": ..., "rejected": ...}                 complete responses
    {"prompt": ..., "prefix": ..., "chosen": ..., "rejected": ...}  segments after a shared prefix

Other columns are ignored. A row's ``prefix`` absent, null or "" makes it a complete pair. Each pair
is tokenized as the rollout path tokenizes an episode: the prompt as the first observation (the
run's chat template and the task's system prompt, :func:`encode_observation`), the prefix as context
(mask 0), each response as one action (mask 1), with the tokenizer's EOS after a complete response
where ``data.pairs.eos`` asks for it. A pair batch is the chosen rows, then the rejected rows.

The file is read and checked once per version (its modification time); every problem is reported at
once, each naming the file, the row (a JSONL file's line, a Parquet file's row, from 1) and the
column. ``data.pairs.heldout`` pairs, drawn with a fixed seed (the same for every arm and seed), are
never trained on: the distribution-shift evaluation scores them (harness/training/evaluate.py).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ...errors import ConfigError, suggest
from ...rollout.agent import Episode, encode_observation, episodes_to_batch
from ...rollout.trajectory import TrajectoryBatch
from ...tasks.base import Instance, Task

COLUMNS = ("prompt", "chosen", "rejected")
"""The columns every pair needs; ``prefix`` is optional (segments)."""
FORMATS = (".jsonl", ".parquet")
HELDOUT_SEED = 20_240_601
"""The seed of the held-out draw: a fixed one, so that every arm and seed is evaluated on the same
pairs and trains on the same others."""
MAX_PROBLEMS = 20


class PairsFileError(ConfigError):
    """A file of preference pairs that cannot be used: every problem, each naming file, row,
    column."""


@dataclass(frozen=True)
class Pair:
    row: int
    """Where it is in the file: a JSONL file's line, a Parquet file's row (from 1)."""
    prompt: str
    chosen: str
    rejected: str
    prefix: str = ""
    """Segments: the start of the response both share ("": complete responses)."""


def read_pairs(path: str) -> tuple[Pair, ...]:
    """Every pair of the file at ``path``, checked (:class:`PairsFileError` lists every problem)."""

    p = Path(path)
    if not p.is_file():
        raise PairsFileError(
            f"data.pairs.file: '{path}' is not a file (a relative path is read from the "
            "experiment file's directory)"
        )
    if p.suffix not in FORMATS:
        raise PairsFileError(
            f"data.pairs.file: '{path}': unknown format '{p.suffix}' (valid: {', '.join(FORMATS)})"
        )
    stat = p.stat()  # a new version of the file is read again
    return _read_pairs(str(p.resolve()), (stat.st_mtime_ns, stat.st_size), path)


def pairs_file_problems(path: str) -> list[str]:
    """What is wrong with the file at ``path`` ([] when it can be trained on), for validation."""

    try:
        read_pairs(path)
    except PairsFileError as exc:
        return exc.problems
    return []


@lru_cache(maxsize=4)
def _read_pairs(resolved: str, version: tuple[int, int], shown: str) -> tuple[Pair, ...]:
    rows = (
        _jsonl_rows(resolved, shown)
        if resolved.endswith(".jsonl")
        else _parquet_rows(resolved, shown)
    )
    pairs, problems = [], []
    for n, row in rows:
        pair = _pair(shown, n, row, problems)
        if pair is not None:
            pairs.append(pair)
    if not rows and not problems:
        problems.append(f"data.pairs.file: '{shown}' holds no pairs")
    if problems:
        more = len(problems) - MAX_PROBLEMS
        raise PairsFileError(
            problems[:MAX_PROBLEMS] + ([f"... and {more} more"] if more > 0 else [])
        )
    return tuple(pairs)


def _jsonl_rows(path: str, shown: str) -> list[tuple[int, object]]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise PairsFileError(f"data.pairs.file: '{shown}' cannot be read: {exc}") from None
    rows, problems = [], []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append((n, json.loads(line)))
        except ValueError as exc:
            problems.append(f"data.pairs.file: '{shown}' line {n}: not valid JSON ({exc})")
    if problems:
        raise PairsFileError(problems[:MAX_PROBLEMS])
    return rows


def _parquet_rows(path: str, shown: str) -> list[tuple[int, object]]:
    import polars as pl

    try:
        frame = pl.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - polars' message names what is wrong with the file
        raise PairsFileError(
            f"data.pairs.file: '{shown}' is not a readable Parquet file: {exc}"
        ) from None
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise PairsFileError(
            [
                f"data.pairs.file: '{shown}': no column '{c}'{suggest(c, frame.columns)} (a pair "
                "needs prompt, chosen, rejected; prefix optional)"
                for c in missing
            ]
        )
    return list(enumerate(frame.iter_rows(named=True), 1))


def _pair(shown: str, n: int, row: object, problems: list[str]) -> Pair | None:
    where = f"data.pairs.file: '{shown}' {'row' if shown.endswith('.parquet') else 'line'} {n}"
    if not isinstance(row, dict):
        problems.append(
            f"{where}: a pair is an object with prompt, chosen, rejected (got {type(row).__name__})"
        )
        return None
    found = len(problems)
    values = {}
    for col in COLUMNS:
        v = row.get(col)
        if col not in row:
            problems.append(
                f"{where}: no column '{col}'{suggest(col, [k for k in row if k not in COLUMNS])}"
            )
        elif not isinstance(v, str):
            problems.append(f"{where}: column '{col}' is {type(v).__name__}, not text")
        elif not v.strip():
            problems.append(f"{where}: column '{col}' is empty")
        values[col] = v
    prefix = row.get("prefix")
    if prefix is not None and not isinstance(prefix, str):
        problems.append(f"{where}: column 'prefix' is {type(prefix).__name__}, not text")
    if len(problems) == found and values["chosen"] == values["rejected"]:
        problems.append(
            f"{where}: columns 'chosen' and 'rejected' are the same text (no preference)"
        )
    if len(problems) > found:
        return None
    return Pair(n, values["prompt"], values["chosen"], values["rejected"], prefix or "")


def split_heldout(n: int, heldout: int) -> tuple[list[int], list[int]]:
    """(train, held out): indices of ``n`` pairs, ``heldout`` of them drawn with the fixed
    :data:`HELDOUT_SEED`, each list in file order."""

    held = set(random.Random(HELDOUT_SEED).sample(range(n), min(heldout, n)))
    return [i for i in range(n) if i not in held], sorted(held)


@dataclass(frozen=True)
class Tokenized:
    """A pair's tokens: the context (prompt, then prefix) and each response's action tokens."""

    context: list[int]
    prompt_len: int
    chosen: list[int]
    rejected: list[int]

    @property
    def tokens(self) -> int:
        """Trained tokens of the pair: both responses' (segments only, never the prefix)."""

        return len(self.chosen) + len(self.rejected)


def tokenize(pair: Pair, tokenizer, task: Task, eos: bool = True) -> Tokenized:
    """``pair`` as the rollout path tokenizes an episode (see the module docstring)."""

    prompt = encode_observation(tokenizer, pair.prompt, first=True, task=task)

    def ids(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    end = (
        [tokenizer.eos_token_id]
        if eos and not pair.prefix and tokenizer.eos_token_id is not None
        else []
    )
    context = prompt + (ids(pair.prefix) if pair.prefix else [])
    return Tokenized(context, len(prompt), ids(pair.chosen) + end, ids(pair.rejected) + end)


def pairs_batch(
    pairs: list[Pair], toks: list[Tokenized], tokenizer, task_name: str
) -> TrajectoryBatch:
    """The chosen rows of ``pairs``, then their rejected rows (pair ``i``: rows ``i`` and
    ``i + k``): prompt and prefix context (mask 0), the response (mask 1, log-probs 0: nothing
    sampled it), a turn reward of 1 for the chosen response and 0 for the rejected one; group
    ``i``, instance seed the pair's row in the file."""

    episodes = []
    for chosen in (True, False):
        for i, (pair, tok) in enumerate(zip(pairs, toks)):
            ep = Episode(Instance(pair.row, pair.prompt), i, None)
            ep.observations.append(pair.prompt)
            ep.add("obs", tok.context[: tok.prompt_len])
            if pair.prefix:
                ep.add("obs", tok.context[tok.prompt_len :])
            ids = tok.chosen if chosen else tok.rejected
            ep.add("action", ids, None, 0)
            ep.actions.append(pair.prefix + (pair.chosen if chosen else pair.rejected))
            ep.turn_rewards.append(1.0 if chosen else 0.0)
            ep.terminated = not pair.prefix
            episodes.append(ep)
    return episodes_to_batch(episodes, tokenizer, 0, task_name)


class PairFile:
    """A run's file of pairs: its training pairs, its held-out pairs, tokenized with the run's
    tokenizer and task (the chat template and system prompt)."""

    def __init__(self, spec, tokenizer, task: Task):
        self.spec, self.tokenizer, self.task = spec, tokenizer, task
        self.pairs = read_pairs(spec.file)
        self.train, self.heldout = split_heldout(len(self.pairs), spec.heldout)
        if not self.train:
            raise PairsFileError(
                f"data.pairs.heldout: {spec.heldout} held out of the {len(self.pairs)} pair(s) of "
                f"'{spec.file}' leaves none to train on"
            )
        self.toks = [tokenize(p, tokenizer, task, spec.eos) for p in self.pairs]

    def batch(self, idx: list[int]) -> TrajectoryBatch:
        """The pair batch of the file's pairs ``idx`` (indices into :attr:`pairs`)."""

        return pairs_batch(
            [self.pairs[i] for i in idx],
            [self.toks[i] for i in idx],
            self.tokenizer,
            self.task.name,
        )


def heldout_pairs(spec, tokenizer, task: Task) -> tuple[TrajectoryBatch, int] | None:
    """The pair batch of a file's held-out pairs and their count (None: none held out)."""

    pairs = read_pairs(spec.file)
    idx = split_heldout(len(pairs), spec.heldout)[1]
    if not idx:
        return None
    chosen = [pairs[i] for i in idx]
    toks = [tokenize(p, tokenizer, task, spec.eos) for p in chosen]
    return pairs_batch(chosen, toks, tokenizer, task.name), len(idx)
