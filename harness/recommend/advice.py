"""Matching a situation to the matrix's first row that holds (:func:`recommend`), the starter
experiment file that ``--write`` produces, and the checks of the matrix itself (every row reachable,
every preset and rung real) and its Markdown table for the guide (docs/guide/recommend.md)."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError, SixblanksError, suggest
from ..studies.ladder.registry import RUNG_NAMES  # a row names the rung to check first
from .matrix import (
    BASELINE,
    CONFLICTS,
    MATCHED_UPDATES,
    NOTES,
    QUESTION_BY_NAME,
    QUESTIONS,
    ROWS,
    STARTER_TASKS,
    WARM_START,
    Question,
    Row,
    matches,
)

# --------------------------------------------------------------------------- matching


def parse_answers(given: Mapping[str, str | None]) -> dict[str, str]:
    """The answers given (None: not given), checked; raises naming every bad one and its choices."""

    problems, answers = [], {}
    for name, value in given.items():
        if value is None:
            continue
        q = QUESTION_BY_NAME.get(name)
        if q is None:
            problems.append(f"unknown question '{name}' (questions: {', '.join(QUESTION_BY_NAME)})")
            continue
        value = value.strip().lower()
        if value not in q.choices:
            problems.append(
                f"--{name}: '{value}' is not an answer{suggest(value, q.choices)} "
                f"(valid: {', '.join(q.choices)})"
            )
            continue
        answers[name] = value
    if problems:
        raise SixblanksError(problems)
    return answers


def complete(
    given: Mapping[str, str], ask: Callable[[Question], str] | None = None
) -> tuple[dict[str, str], list[str]]:
    """(every answer, the questions answered by their default). ``ask`` (a terminal's prompt) is
    asked each missing question; without it, missing answers take their defaults."""

    answers, defaulted = {}, []
    for q in QUESTIONS:
        if q.name in given:
            answers[q.name] = given[q.name]
        elif ask is not None:
            answers[q.name] = parse_answers({q.name: ask(q)})[q.name]
        else:
            answers[q.name] = q.default
            defaulted.append(q.name)
    return answers, defaulted


def match(answers: Mapping[str, str]) -> Row:
    """The first row of :data:`ROWS` whose conditions hold (the last row holds always)."""

    return next(r for r in ROWS if matches(r.when, answers))


@dataclass(frozen=True)
class Recommendation:
    row: Row
    answers: dict[str, str]
    defaults_used: list[str]
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        r = self.row
        return {
            "row": r.id,
            "situation": r.situation,
            "answers": dict(self.answers),
            "defaults_used": list(self.defaults_used),
            "preset": r.preset,
            "arm": r.arm_name,
            "overrides": copy.deepcopy(dict(r.overrides)),
            "why": r.why,
            "warning": r.warning,
            "rung": {"number": r.rung, "name": RUNG_NAMES[r.rung], "why": r.rung_why},
            "notes": list(self.notes),
            "explain": f"sixblanks explain {r.preset}",
        }

    def lines(self) -> list[str]:
        """The recommendation as text, one item per line."""

        r = self.row
        situation = ", ".join(
            f"{k} {v}" + (" (default)" if k in self.defaults_used else "")
            for k, v in self.answers.items()
        )
        out = [
            f"situation: {situation}",
            f"row: {r.id} ({r.situation})",
            f"start with: preset {r.preset}"
            + (f", arm {r.arm_name}" if r.arm_name != r.preset else ""),
            f"overrides: {_flow(r.overrides)}" if r.overrides else "overrides: none",
            f"why: {r.why}",
            f"main warning: {r.warning}",
            f"check first: ladder rung {r.rung} ({RUNG_NAMES[r.rung]}): {r.rung_why}",
            *[f"note: {n}" for n in self.notes],
            f"the blanks: sixblanks explain {r.preset}"
            + (" (the preset before the overrides)" if r.overrides else ""),
        ]
        if self.defaults_used:
            out.append(
                "defaults used (not a terminal, nothing asked): "
                + ", ".join(f"--{k} {self.answers[k]}" for k in self.defaults_used)
            )
        return out


def recommend(answers: Mapping[str, str], defaults_used: list[str] | None = None) -> Recommendation:
    """The matrix row for a complete set of answers, with the notes that apply; raises
    :class:`SixblanksError` for a situation with nothing to learn from."""

    missing = [q.name for q in QUESTIONS if q.name not in answers]
    if missing:
        raise SixblanksError(f"missing answers: {', '.join(missing)}")
    clash = [c.text for c in CONFLICTS if matches(c.when, answers)]
    if clash:
        raise SixblanksError(clash)
    row = match(answers)
    return Recommendation(
        row,
        {q.name: answers[q.name] for q in QUESTIONS},
        list(defaults_used or []),
        [n.text for n in NOTES if matches(n.when, answers) and (not n.rows or row.id in n.rows)],
    )


# --------------------------------------------------------------------------- the starter file


def _flow(data: Any) -> str:
    return yaml.safe_dump(data, default_flow_style=True, sort_keys=False, width=10_000).strip()


def starter_mapping(rec: Recommendation) -> dict[str, Any]:
    """The starter experiment as a mapping: the row's arm and a grpo baseline on a small built-in
    task that fits the answers, under a small matched budget."""

    from sixblanks.algorithms.blanks import deep_merge
    from sixblanks.algorithms.presets import resolve

    r, a = rec.row, rec.answers
    task = next(t for t in STARTER_TASKS if matches(t.when, a))
    arms: dict[str, dict[str, Any]] = {
        r.arm_name: {"preset": r.preset, "blanks": copy.deepcopy(dict(r.overrides))},
        BASELINE: {"preset": BASELINE, "blanks": {}},
    }
    blanks = {name: resolve(arm["preset"], arm["blanks"]) for name, arm in arms.items()}
    if all(b.weight.ratio != "none" for b in blanks.values()):
        for arm in arms.values():
            arm["blanks"] = deep_merge(arm["blanks"], copy.deepcopy(MATCHED_UPDATES))
    for arm in arms.values():
        if not arm["blanks"]:
            del arm["blanks"]
    out: dict[str, Any] = {
        "name": f"recommend-{r.id}",
        "model": {
            "tiny": {"hidden_size": 128, "num_layers": 2, "num_heads": 4, "intermediate_size": 256},
            "device": "cpu",
            "seed": 0,
        },
        "task": {"name": task.name, "params": dict(task.params), "eval_size": 64},
        "rollout": dict(task.rollout),
    }
    if task.optimizer:
        out["optimizer"] = dict(task.optimizer)
    out |= {
        "warm_start": dict(WARM_START[a["demos"]]),
        "budget": dict(r.budget),
        "seeds": [0, 1],
        "arms": arms,
        "ladder": {"arm": r.arm_name, **copy.deepcopy(dict(r.ladder))},
        "tracking": {"mlflow": False},
    }
    return out


def _comment(text: str, width: int = 98) -> list[str]:
    import textwrap

    return textwrap.wrap(
        text,
        width,
        initial_indent="# ",
        subsequent_indent="#   ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def starter_yaml(rec: Recommendation, path: str | Path = "experiments.yaml") -> str:
    """The starter experiment file: a header naming the row, its warning and the rung to check
    first, then the experiment."""

    r = rec.row
    data = starter_mapping(rec)
    task = data["task"]["name"]
    budget = ", ".join(f"{k} {v:g}" for k, v in r.budget.items())
    head = [
        f"# Starter experiment written by `sixblanks recommend` (matrix row '{r.id}').",
        *_comment(
            "Situation: "
            + ", ".join(f"{k} {v}" for k, v in rec.answers.items())
            + f" ({r.situation})."
        ),
        *_comment(f"Start with: {r.arm_name} (preset {r.preset}). {r.why}"),
        *_comment(f"Main warning: {r.warning}"),
        *_comment(
            f"Check first: ladder rung {r.rung} ({RUNG_NAMES[r.rung]}). {r.rung_why} Run "
            f"`sixblanks ladder {path} --arm {r.arm_name} --all` (rungs 1-3 check the contract, "
            f"the update and evaluation drift first) and read rung {r.rung}'s verdict."
        ),
        *_comment(
            f"Baseline arm '{BASELINE}' (preset {BASELINE}): "
            + (r.baseline_note or "the standard to beat.")
            + f" Both arms share the budget ({budget})."
        ),
        *[line for n in rec.notes for line in _comment(f"Note: {n}")],
        *_comment(
            f"The task is the built-in '{task}' ({_task_why(rec)}), small enough for a laptop CPU: "
            "put your own task in its place (docs/guide/tasks.md)."
        ),
        *_comment(
            f"Compare the arms' blanks: sixblanks explain -c {path} {r.arm_name} {BASELINE}. "
            f"Then: sixblanks validate {path} && sixblanks run {path}"
        ),
    ]
    if rec.answers["demos"] == "none":
        head += _comment(
            "Your model, since it must already follow the task's format: replace model.tiny "
            "below by model: {path: ./your-model} (a local Hugging Face directory)."
        )
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
    return "\n".join(head) + "\n\n" + body


def _task_why(rec: Recommendation) -> str:
    return next(t.why for t in STARTER_TASKS if matches(t.when, rec.answers))


def write_starter(rec: Recommendation, path: Path, force: bool = False) -> Path:
    """Write the starter experiment to ``path``, validated first; refuses to overwrite an existing
    file unless ``force``."""

    from ..config import parse_yaml, validate_mapping

    if path.exists() and not force:
        raise SixblanksError(f"{path}: already exists; pass --force to overwrite it")
    if path.is_dir():
        raise SixblanksError(f"{path}: is a directory; --write takes a file path")
    text = starter_yaml(rec, path)
    validate_mapping(parse_yaml(text, str(path)), str(path), Path(path).parent)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write: {exc}") from None
    return path


# --------------------------------------------------------------------------- checks and docs


def reachable_rows() -> dict[str, dict[str, str]]:
    """{row id: the first situation (in answer order) that selects it}, over every combination of
    answers; a row missing here is shadowed by the rows above it."""

    found: dict[str, dict[str, str]] = {}
    for combo in itertools.product(*(q.choices for q in QUESTIONS)):
        answers = dict(zip((q.name for q in QUESTIONS), combo, strict=True))
        found.setdefault(match(answers).id, answers)
    return found


def check_matrix() -> list[str]:
    """Problems with the data (empty: none): unknown questions or answers in conditions, presets
    or overrides that do not resolve, unknown rungs, duplicate ids, shadowed rows."""

    from pydantic import ValidationError

    from sixblanks.algorithms.errors import UnknownNameError
    from sixblanks.algorithms.presets import resolve

    problems = []
    ids = [r.id for r in ROWS]
    problems += [f"row '{i}': duplicate id" for i in sorted({i for i in ids if ids.count(i) > 1})]
    conditions = [(f"row '{r.id}'", r.when) for r in ROWS]
    conditions += [(f"note '{n.text[:30]}...'", n.when) for n in (*NOTES, *CONFLICTS)]
    conditions += [(f"starter task '{t.name}'", t.when) for t in STARTER_TASKS]
    for where, when in conditions:
        for q, accepted in when.items():
            if q not in QUESTION_BY_NAME:
                problems.append(f"{where}: unknown question '{q}'")
            elif not set(accepted) <= set(QUESTION_BY_NAME[q].choices):
                problems.append(f"{where}: {q}: unknown answers {sorted(set(accepted))}")
    for n in (*NOTES, *CONFLICTS):
        unknown = sorted(set(n.rows) - set(ids))
        if unknown:
            problems.append(f"note '{n.text[:30]}...': unknown rows {unknown}")
    for r in ROWS:
        try:
            resolve(r.preset, dict(r.overrides))
        except (UnknownNameError, ValidationError) as exc:
            problems.append(f"row '{r.id}': preset {r.preset} with its overrides: {exc}")
        if r.rung not in RUNG_NAMES:
            problems.append(f"row '{r.id}': unknown ladder rung {r.rung}")
        if r.arm_name == BASELINE:
            problems.append(f"row '{r.id}': its arm is named like the baseline '{BASELINE}'")
    if ROWS[-1].when or STARTER_TASKS[-1].when:
        problems.append("the last row and the last starter task must match every situation")
    reached = reachable_rows()
    problems += [
        f"row '{r.id}': shadowed by the rows above it" for r in ROWS if r.id not in reached
    ]
    return problems


def markdown_table() -> str:
    """The matrix as the guide's table (docs/guide/recommend.md; a test keeps the guide equal to
    it)."""

    def when(r: Row) -> str:
        if not r.when:
            return "otherwise"
        return ", ".join(f"`--{q} {'|'.join(v)}`" for q, v in r.when.items())

    def start(r: Row) -> str:
        s = f"`{r.preset}`"
        return s + (f" + `{_flow(r.overrides)}`" if r.overrides else "")

    lines = [
        "| row | when | situation | start with | main warning | check first |",
        "|---|---|---|---|---|---|",
    ]
    for r in ROWS:
        lines.append(
            f"| `{r.id}` | {when(r)} | {r.situation} | {start(r)} | {r.warning} | "
            f"rung {r.rung} ({RUNG_NAMES[r.rung]}) |"
        )
    return "\n".join(lines)
