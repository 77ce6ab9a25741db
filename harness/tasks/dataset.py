"""``dataset``: prompts and answers from a file: JSONL, CSV, Parquet, or a directory
saved by ``datasets`` (``save_to_disk``; a ``DatasetDict``'s splits are its splits), scored by a
standard answer verifier through the counted verifier gate.

Splits are train / validation / test: a column (``split_field``) or a ``DatasetDict`` names them,
or they are drawn deterministically from ``split_seed`` (``validation_fraction``,
``test_fraction`` of the distinct prompts). A prompt is one problem, in one split only: rows that
repeat a held-out prompt leave the other splits, and a held-out split holds each prompt once.
Training and demonstration seeds map onto the train rows; the held-out test and validation seeds
onto their split's rows, in order.
"""

from __future__ import annotations

import math
import random
import re
import string
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from ..imports import ImportObjectError, import_object
from ..seeds import EVAL_SEED_OFFSET, SPLITS, VALIDATION_SEED_OFFSET, eval_seeds
from .base import Instance, Task, TaskParams

VERIFIERS = ("exact", "numeric", "math_verify", "regex")
SPLIT_NAMES = ("train", "validation", "test")


class DatasetParams(TaskParams):
    file_fields = ("path",)

    path: str = Field(description="A .jsonl, .csv or .parquet file, or a datasets directory.")
    prompt_field: str = Field("prompt", description="The column holding the prompt.")
    answer_field: str = Field("answer", description="The column holding the reference answer.")
    prompt_suffix: str = Field("\n", description="Appended to every prompt.")
    verifier: str = Field(
        "exact",
        description="exact: the stripped response equals the answer; numeric: the last number in "
        "the response is within tolerance of the answer; math_verify: the math-verify package "
        "(LaTeX or expressions, equivalence by sympy); regex: the pattern's first group of the "
        "response equals the answer; module:function: fn(response, answer, row) -> reward.",
    )
    tolerance: float = Field(1e-6, ge=0, description="numeric: |x - y| <= tol * max(1, |y|).")
    pattern: str | None = Field(None, description="regex: one group capturing the answer.")
    split_field: str | None = Field(
        None, description="A column naming each row's split (train, validation, test)."
    )
    split_seed: int = Field(0, description="Seed of the split drawn where the data names none.")
    validation_fraction: float = Field(0.1, ge=0, lt=1)
    test_fraction: float = Field(0.2, gt=0, lt=1)

    @model_validator(mode="after")
    def _check(self) -> DatasetParams:
        v = self.verifier
        if v not in VERIFIERS and ":" not in v:
            raise ValueError(
                f"verifier: unknown verifier '{v}' (valid: {', '.join(VERIFIERS)}, or "
                "module:function)"
            )
        if v == "regex":
            if self.pattern is None:
                raise ValueError("pattern: the regex verifier needs a pattern with one group")
            try:
                if re.compile(self.pattern).groups < 1:
                    raise ValueError("pattern: needs one capturing group (the answer)")
            except re.error as exc:
                raise ValueError(f"pattern: not a regular expression: {exc}") from None
        if self.validation_fraction + self.test_fraction >= 1:
            raise ValueError("validation_fraction + test_fraction must leave rows to train on")
        return self


def read_rows(path: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    """Every row of the file or directory at ``path`` as (split or "", row); read once per version
    of the file (its modification time)."""

    p = Path(path)
    if not p.exists():
        raise ValueError(f"dataset path '{path}' does not exist")
    return _read_rows(str(p.resolve()), p.stat().st_mtime_ns)


@lru_cache(maxsize=8)
def _read_rows(path: str, mtime_ns: int) -> tuple[tuple[str, dict[str, Any]], ...]:
    p = Path(path)
    if p.is_dir():
        import datasets

        try:
            ds = datasets.load_from_disk(str(p))
        except Exception as exc:  # noqa: BLE001 - the library's message names the problem
            raise ValueError(f"'{path}' is not a datasets directory: {exc}") from None
        if isinstance(ds, datasets.DatasetDict):
            bad = [s for s in ds if s not in SPLIT_NAMES]
            if bad:
                raise ValueError(f"'{path}': split(s) {bad} (valid: {', '.join(SPLIT_NAMES)})")
            return tuple((s, dict(r)) for s in ds for r in ds[s])
        return tuple(("", dict(r)) for r in ds)
    import polars as pl

    readers = {".jsonl": pl.read_ndjson, ".csv": pl.read_csv, ".parquet": pl.read_parquet}
    if p.suffix not in readers:
        raise ValueError(
            f"dataset path '{path}': unknown format '{p.suffix}' (.jsonl, .csv, .parquet, or a "
            "datasets directory)"
        )
    return tuple(("", r) for r in readers[p.suffix](p).iter_rows(named=True))


class DatasetTask(Task):
    """A task whose instances are a file's rows (see the module docstring)."""

    name = "dataset"
    Params = DatasetParams
    has_oracle = True
    params: DatasetParams

    def __init__(self, params: dict[str, Any] | TaskParams | None = None):
        super().__init__(params)
        p = self.params
        rows = read_rows(p.path)
        if not rows:
            raise ValueError(f"dataset '{p.path}' has no rows")
        for field in (p.prompt_field, p.answer_field, p.split_field):
            if field is not None and field not in rows[0][1]:
                raise ValueError(
                    f"dataset '{p.path}': no column '{field}' (columns: {', '.join(rows[0][1])})"
                )
        self.splits = self._split(rows)
        for s in SPLIT_NAMES:
            if not self.splits[s]:
                raise ValueError(f"dataset '{p.path}': its {s} split has no rows")
        self.fn = _import(p.verifier) if ":" in p.verifier else None

    def _split(self, rows) -> dict[str, list[dict[str, Any]]]:
        """The rows of each split, a problem (a prompt's text) in one split only: named splits keep
        their rows, but a prompt that is also a test one leaves validation and train, and one that
        is also a validation one leaves train (counted in ``self.dropped``); a drawn split assigns
        each distinct prompt, with all its rows, to one split. A held-out split holds each prompt
        once; the train split keeps repeats (they weigh the draw as the file does)."""

        p = self.params
        self.dropped = {"train": 0, "validation": 0}
        named = [r[p.split_field] if p.split_field else s for s, r in rows]
        if any(named):
            by: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLIT_NAMES}
            for name, (_, row) in zip(named, rows):
                name = {"val": "validation", "dev": "validation"}.get(str(name), str(name))
                if name not in by:
                    raise ValueError(
                        f"dataset '{p.path}': split '{name}' (valid: train, validation, test)"
                    )
                by[name].append(row)
            out: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLIT_NAMES}
            taken: set[str] = set()
            for split in ("test", "validation", "train"):
                held = split != "train"
                seen: set[str] = set()
                for row in by[split]:
                    key = self._key(row)
                    if key in taken:
                        self.dropped[split] += 1
                    elif not (held and key in seen):
                        out[split].append(row)
                    seen.add(key)
                taken |= seen
            return out
        groups: dict[str, list[dict[str, Any]]] = {}
        for _, row in rows:
            groups.setdefault(self._key(row), []).append(row)
        problems = list(groups.values())
        order = list(range(len(problems)))
        random.Random(p.split_seed).shuffle(order)
        n_test = max(1, round(p.test_fraction * len(problems)))
        n_val = max(1, round(p.validation_fraction * len(problems))) if p.validation_fraction else 0
        out = {s: [] for s in SPLIT_NAMES}
        for k, i in enumerate(order):
            s = "test" if k < n_test else "validation" if k < n_test + n_val else "train"
            out[s].extend(problems[i] if s == "train" else problems[i][:1])
        if not out["validation"]:  # no validation fraction: the sweep and ladder use test's
            out["validation"] = out["test"]
        return out

    def _key(self, row: dict[str, Any]) -> str:
        return str(row[self.params.prompt_field])

    def problem_key(self, instance: Instance) -> str:
        """The prompt's text (the row's prompt field)."""

        return self._key(instance.data["row"])

    def trains_on(self, seed: int) -> bool:
        """Always: a training seed maps onto the train split's rows, which hold no held-out
        prompt."""

        return True

    def distinct_available(self, split: str, n: int) -> int:
        if split not in SPLITS:
            raise ValueError(f"unknown held-out split '{split}' (valid: {', '.join(SPLITS)})")
        return min(n, len(self.splits[split]))

    def heldout_notes(self) -> list[str]:
        return [
            f"{k} row(s) of its {split} split dropped: their prompt is also a "
            f"{'test' if split == 'validation' else 'held-out'} one"
            for split, k in self.dropped.items()
            if k
        ]

    def _row(self, seed: int) -> dict[str, Any]:
        if seed >= VALIDATION_SEED_OFFSET:
            rows, i = self.splits["validation"], seed - VALIDATION_SEED_OFFSET
        elif seed >= EVAL_SEED_OFFSET:
            rows, i = self.splits["test"], seed - EVAL_SEED_OFFSET
        else:  # training and demonstration seeds
            rows, i = self.splits["train"], seed
        return rows[i % len(rows)]

    def make_instance(self, seed: int) -> Instance:
        row, p = self._row(seed), self.params
        prompt = f"{row[p.prompt_field]}{p.prompt_suffix}"
        return Instance(seed, prompt, {"answer": str(row[p.answer_field]), "row": row})

    def heldout_seeds(self, n: int, split: str = "test") -> list[int]:
        """The first ``n`` rows of the split (all of them where it has fewer): distinct prompts."""

        return eval_seeds(self.distinct_available(split, n), split)

    def verify(self, instance: Instance, response: str) -> float:
        p, answer = self.params, instance.data["answer"]
        if self.fn is not None:
            return float(self.fn(response, answer, instance.data["row"]))
        return score(p.verifier, response, answer, p.tolerance, p.pattern)

    def oracle(self, instance: Instance, observations: list[str]) -> str:
        return f"{instance.data['answer']}\n"

    def input_files(self) -> list[str]:
        return [self.params.path]

    def called_modules(self) -> list[str]:
        return [self.params.verifier.split(":", 1)[0]] if self.fn is not None else []

    def preflight(self) -> list[str]:
        """A user verifier called once as the runs call it, fn(response, answer, row), on the first
        training row with its own answer as the response: a wrong signature or a reward that is
        not a finite number is found now, not in the first training step."""

        if self.fn is None:
            return []
        p = self.params
        if p.verifier.startswith("__main__:"):
            return [
                f"params.verifier: '{p.verifier}' is defined in the script that runs the "
                "experiment, which the runs' worker processes do not import: put it in a module of "
                "its own"
            ]
        inst = self.make_instance(0)
        answer = inst.data["answer"]
        try:
            value = self.fn(answer, answer, inst.data["row"])
        except Exception as exc:  # noqa: BLE001 - any failure of the user's function is reported
            return [
                f"params.verifier: '{p.verifier}' failed when called as fn(response, answer, row) "
                f"on the first training row of '{p.path}': {type(exc).__name__}: {exc}"
            ]
        try:
            reward = float(value)
        except (TypeError, ValueError):
            reward = math.nan
        if not math.isfinite(reward):
            return [
                f"params.verifier: '{p.verifier}' returned {value!r} on the first training row of "
                f"'{p.path}'; it must return a finite number (the reward)"
            ]
        return []

    def alphabet(self) -> str:
        p = self.params
        chars = {
            c
            for rows in self.splits.values()
            for r in rows
            for f in (p.prompt_field, p.answer_field)
            for c in str(r[f])
        }
        return "".join(sorted(chars | set(string.digits) | set(p.prompt_suffix) | {"\n", " "}))


NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def score(
    verifier: str, response: str, answer: str, tolerance: float = 1e-6, pattern=None
) -> float:
    """1.0 where ``response`` matches ``answer`` by ``verifier`` (exact, numeric, math_verify,
    regex), else 0.0."""

    if verifier == "exact":
        return float(response.strip() == answer.strip())
    if verifier == "numeric":
        found = NUMBER.findall(response)
        try:
            want = float(answer)
        except ValueError:
            return 0.0
        if not found:
            return 0.0
        got = float(found[-1])
        return float(math.isfinite(got) and abs(got - want) <= tolerance * max(1.0, abs(want)))
    if verifier == "regex":
        m = re.search(pattern, response)
        return float(m is not None and m.group(1).strip() == answer.strip())
    if verifier == "math_verify":
        import logging

        from math_verify import parse, verify

        logging.getLogger("math_verify").setLevel(logging.ERROR)  # its note on disabled timeouts
        # no signal-based timeouts: the verifier gate runs verify in a worker thread, and bounds
        # its time itself
        gold = parse(answer, parsing_timeout=None)
        pred = parse(response, parsing_timeout=None)
        return float(bool(gold) and bool(pred) and verify(gold, pred, timeout_seconds=None))
    raise ValueError(f"unknown verifier '{verifier}' (valid: {', '.join(VERIFIERS)})")


def _import(path: str):
    try:
        obj = import_object(path, "callable")
    except ImportObjectError as exc:
        raise ValueError(f"verifier {exc}") from None
    if not callable(obj):
        raise ValueError(f"verifier '{path}' is not callable")
    return obj
