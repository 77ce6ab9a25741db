"""Commands that look without running anything: ``validate``, ``schema``, ``explain`` and
``recommend``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.table import Table

from ..errors import SixblanksError
from .app import (
    ConfigArg,
    JsonOpt,
    app,
    dump_json,
    human,
    out,
    plan_table,
    plural,
    say,
    show,
    warn,
)

# --------------------------------------------------------------------------- validate / schema


@app.command()
def validate(
    config: ConfigArg = Path("experiments.yaml"),
    resolved: Annotated[
        bool, typer.Option("--resolved", help="Print the fully resolved config.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Check an experiment file (or a finding file: a claim with its experiment) and print its
    plan (arms x tasks x seeds, the budget)."""

    from ..config import load_config, resolved_dict
    from ..config.checks import cautions
    from ..orchestration.data_files import check_data_files

    finding = _finding_of(config)
    cfg = finding[1] if finding else load_config(config)
    check_data_files(cfg)  # a file of pairs, read now: its problems before any run
    plan = cfg.plan()
    notes = cautions(cfg)
    if as_json:
        dump_json(
            {
                "valid": True,
                "cautions": notes,
                "config": resolved_dict(cfg) if resolved else None,
                "plan": plan,
                "budget": cfg.budget,
            }
        )
        return
    if resolved:
        sys.stdout.write(yaml.safe_dump(resolved_dict(cfg), sort_keys=False))
        return
    say(f"[green]valid[/green]: {config}")
    if finding:
        m = finding[0].finding
        seeds = (
            f"seeds {m.seeds.pilot} to {m.seeds.cap}, {m.seeds.batch} a look"
            if m.seeds.cap
            else "seeds: the design of the family it runs in"
        )
        say(
            f"claim: {_claim_words(m)} on {m.metric} (smallest effect "
            f"{_per_axis(m.smallest_effect)}, alpha {m.alpha:g}; {seeds}); budget axes: "
            + ", ".join(m.budgets or {"budget": cfg.budget})
        )
    say(plan_table(cfg))
    budget = ", ".join(f"{k} <= {human(v)}" for k, v in cfg.budget.items())
    say(f"budget per run (matched across arms): {budget}")
    say(
        f"{plural(len(plan), 'run')}: {plural(len(cfg.arms), 'arm')} x "
        f"{len(cfg.tasks or [])} task(s) x {plural(len(cfg.seeds), 'seed')}"
    )
    for line in notes:
        warn(f"caution: {line}")


EXPECT_WORDS = {
    "larger": "larger than",
    "smaller": "smaller than",
    "equal": "equal to",
    "not_smaller": "not smaller than",
    "no_difference": "not separated from",
}


def _per_axis(v) -> str:
    if isinstance(v, dict):
        return ", ".join(
            f"{k}: {x:g}" if isinstance(x, float) else f"{k}: {x}" for k, x in v.items()
        )
    return f"{v:g}" if isinstance(v, float) else str(v)


def _claim_words(m) -> str:
    """The claim in words: two arms (an expectation per axis where given), k arms, or an
    interaction between two budgets."""

    lower = m.better == "lower"
    if m.expect == "best":
        return f"{m.arm} best of {', '.join(m.arms)}" + (" (lower is better)" if lower else "")
    if m.expect == "ordering":
        return (" < " if lower else " > ").join(m.arms) + " (in this order, the best first)"
    if m.expect == "grows":
        return f"{m.arm} − {m.than} grows from {m.between[0]} to {m.between[1]}"
    if m.expect == "changes_sign":
        return f"{m.arm} − {m.than} changes sign from {m.between[0]} to {m.between[1]}"
    if isinstance(m.expect, dict):
        return (
            f"{m.arm} vs {m.than} ({_per_axis({k: EXPECT_WORDS[v] for k, v in m.expect.items()})})"
        )
    return f"{m.arm} {EXPECT_WORDS[m.expect]} {m.than}"


def _finding_of(path: Path):
    """(the finding, its experiment at the pilot's seeds) where ``path`` is a finding file (a
    ``finding:`` section beside the experiment), every budget axis checked; None otherwise."""

    from ..config.loading import parse_yaml, read_text_file

    data = parse_yaml(read_text_file(path, "an experiment YAML file"), str(path))
    if not isinstance(data, dict) or "finding" not in data:
        return None
    from ..studies.findings import checked_finding

    return checked_finding(path)


@app.command()
def schema(
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")
    ] = None,
) -> None:
    """Write the JSON Schema of experiments.yaml (for editor completion and checking)."""

    from ..config.bases import file_schema

    schema = file_schema()
    text = json.dumps(schema, indent=2) + "\n"
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)
        say(f"wrote {output}")


# --------------------------------------------------------------------------- explain


@app.command()
def explain(
    names: Annotated[
        list[str] | None, typer.Argument(help="Preset names, or arm names of --config.")
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="Resolve arm names from this file.")
    ] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the presets.")] = False,
    all_: Annotated[
        bool,
        typer.Option("--all", help="Show every field, not only those that apply to a column."),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """The six blanks of presets or arms side by side, differences highlighted.

    Only the fields that apply to at least one column are shown (a GRPO arm has no critic fields,
    no SAPO temperatures, ...); --all shows every field.
    """

    from sixblanks.algorithms.critic import ppo_checklist
    from sixblanks.algorithms.fields import side_by_side

    if list_ or not names:
        _list_presets(as_json)
        return
    from sixblanks.algorithms.notes import EQUIVALENCES, example_weights, value_notes

    blanks, notes = _named_blanks(names, config)
    view = side_by_side(blanks, all_fields=all_)
    checklists = {label: ppo_checklist(b) for label, b in blanks.items() if ppo_checklist(b)}
    derived = {label: value_notes(b) for label, b in blanks.items()}
    modes = {label: b.normalization.mode for label, b in blanks.items()}
    if as_json:
        dump_json(
            {
                "blanks": view.columns,
                "applies": view.applies,
                "differs": sorted(view.differing),
                "notes": notes,
                "value_notes": derived,
                "normalization_weights": example_weights(),
                "normalization_equivalences": list(EQUIVALENCES),
                "ppo_checklist": {k: dict(v) for k, v in checklists.items()},
            }
        )
        return
    _print_explained(view, all_, notes, derived, modes, checklists)


def _print_explained(view, all_: bool, notes, derived, modes, checklists) -> None:
    """``explain``'s human output: the side-by-side table (how many fields it hides), each column's
    notes and derived values, the normalization weights and equivalences, then a PPO checklist per
    column that has one."""

    from sixblanks.algorithms.notes import EQUIVALENCES

    show(_blanks_table(view, all_))
    if view.hidden:
        say(
            f"[dim]{view.hidden} fields that apply to no column are hidden (--all shows them)[/dim]"
        )
    for label, lines in notes.items():
        for line in [*lines, *derived[label]]:
            say(f"[dim]{label}:[/dim] {line}")
    show(_weights_table(modes))
    for line in EQUIVALENCES:
        say(f"[dim]- {line}[/dim]")
    for label, items in checklists.items():
        table = Table(title=f"PPO checklist: {label}")
        table.add_column("item")
        table.add_column("answer")
        for item, answer in items:
            table.add_row(item, answer)
        show(table)


def _weights_table(modes: dict[str, str]) -> Table:
    """The weight one token of each example sequence gets under every normalization mode (rows),
    with the sum of the weights (the gradient's scale), the columns' modes marked."""

    from sixblanks.algorithms.notes import EXAMPLE_LENGTHS, example_weights

    table = Table(
        title="Z: one token's weight under each mode (prompts of 3+1 and 2+1 tokens, L_max 4)"
    )
    table.add_column("mode", no_wrap=True)
    heads = [
        f"p{g + 1} s{i + 1} ({n})"
        for g, grp in enumerate(EXAMPLE_LENGTHS)
        for i, n in enumerate(grp)
    ]
    for h in heads:
        table.add_column(h, justify="right")
    table.add_column("sum", justify="right")
    table.add_column("used by")
    lengths = [n for grp in EXAMPLE_LENGTHS for n in grp]
    for mode, ws in example_weights().items():
        users = [label for label, m in modes.items() if m == mode]
        table.add_row(
            mode,
            *[f"{w:.4g}" for w in ws],
            f"{sum(w * n for w, n in zip(ws, lengths)):.4g}",
            ", ".join(users),
            style="bold" if users else "",
        )
    return table


def _list_presets(as_json: bool) -> None:
    from sixblanks.algorithms.presets import PRESETS

    if as_json:
        dump_json({n: p.summary for n, p in sorted(PRESETS.items())})
        return
    table = Table(title="presets")
    table.add_column("name")
    table.add_column("summary")
    for n, p in sorted(PRESETS.items()):
        table.add_row(n, p.summary)
    show(table)


def _named_blanks(names: list[str], config: Path | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each name's blanks (an arm of ``config``, else a preset) under its column label, and each
    column's preset notes; every unknown name at once."""

    from sixblanks.algorithms.errors import UnknownNameError
    from sixblanks.algorithms.presets import get_preset

    cfg = None
    if config is not None:
        from ..config import load_config

        cfg = load_config(config)
    blanks: dict[str, Any] = {}
    notes: dict[str, tuple[str, ...]] = {}
    problems = []
    for name in names:
        if cfg is not None and name in cfg.arms:
            label = f"{name} ({cfg.arms[name].preset})"
            blanks[label] = cfg.resolved_blanks(name)
            notes[label] = get_preset(cfg.arms[name].preset).notes
            continue
        try:
            preset = get_preset(name)
        except UnknownNameError as exc:
            problems.append(f"{name}: {exc}")
            continue
        blanks[name], notes[name] = preset.blanks, preset.notes
    if problems:
        raise SixblanksError(problems)
    return blanks, notes


DIFFERS = "≠"


def _blanks_table(view, all_: bool) -> Table:
    """The blanks side by side, one row per field; a field another column reads but this one
    does not shows "-" (unless --all). A row whose columns differ is marked ≠ in a last column,
    a mark that stays where colour does not (a pipe, a log file, a screen reader), and is yellow
    on a terminal."""

    from sixblanks.algorithms.blanks import BLANK_NAMES

    columns = view.columns
    compared = len(columns) > 1
    title = f"six blanks (fields that differ marked {DIFFERS}, yellow on a terminal)"
    table = Table(title=title if compared else "six blanks")
    table.add_column("blank")
    table.add_column("field")
    for label in columns:
        table.add_column(label)
    if compared:  # last: the value columns keep their places whether compared or not
        table.add_column("differs", justify="center")
    last_blank = None
    for key in view.keys:
        blank, _, field = key.partition(".")
        if blank not in BLANK_NAMES:
            blank, field = "template", key
        differs = key in view.differing
        table.add_row(
            blank if blank != last_blank else "",
            field,
            *[
                str(c[key]) if all_ or key in view.applies[label] else "[dim]-[/dim]"
                for label, c in columns.items()
            ],
            *([DIFFERS if differs else ""] if compared else []),
            style="bold yellow" if differs else "",
        )
        last_blank = blank
    return table


# --------------------------------------------------------------------------- recommend


def _answer_opt(name: str) -> Any:
    from ..recommend import QUESTION_BY_NAME

    q = QUESTION_BY_NAME[name]
    return typer.Option(
        f"--{name}",
        metavar="|".join(q.choices),
        help=f"{q.help} Default: {q.default}.",
        show_default=False,
    )


def _is_terminal() -> bool:
    return sys.stdin.isatty()


def _answers(options: dict[str, str | None], defaults: bool) -> tuple[dict[str, str], list[str]]:
    """The answers given as options, parsed, the missing ones asked on a terminal (unless
    ``--defaults``) or else defaulted: (every answer, the names of those defaulted)."""

    import click

    from ..recommend import complete, parse_answers

    given = parse_answers(options)

    def ask(q) -> str:
        return click.prompt(
            q.prompt, default=q.default, type=click.Choice(q.choices), err=True, show_choices=True
        )

    return complete(given, ask if _is_terminal() and not defaults else None)


@app.command()
def recommend(
    demos: Annotated[str | None, _answer_opt("demos")] = None,
    signal: Annotated[str | None, _answer_opt("signal")] = None,
    state: Annotated[str | None, _answer_opt("state")] = None,
    sampling: Annotated[str | None, _answer_opt("sampling")] = None,
    horizon: Annotated[str | None, _answer_opt("horizon")] = None,
    intermediate: Annotated[str | None, _answer_opt("intermediate")] = None,
    asynchronous: Annotated[str | None, _answer_opt("asynchronous")] = None,
    risk: Annotated[str | None, _answer_opt("risk")] = None,
    model: Annotated[str | None, _answer_opt("model")] = None,
    concern: Annotated[str | None, _answer_opt("concern")] = None,
    defaults: Annotated[
        bool,
        typer.Option("--defaults", help="Do not ask: take the default of every answer missing."),
    ] = False,
    write: Annotated[
        Path | None,
        typer.Option("--write", help="Write a starter experiment file for the row to this path."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Let --write overwrite a file.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Where to start: the selection matrix's row for your situation (a starting preset, why, the
    main warning, the ladder rung to check first). Answers not given are asked on a terminal, or
    take their defaults (said in the output)."""

    from ..recommend import recommend as recommend_row
    from ..recommend import write_starter

    answers, defaulted = _answers(
        dict(
            demos=demos,
            signal=signal,
            state=state,
            sampling=sampling,
            horizon=horizon,
            intermediate=intermediate,
            asynchronous=asynchronous,
            risk=risk,
            model=model,
            concern=concern,
        ),
        defaults,
    )
    rec = recommend_row(answers, defaulted)
    written = write_starter(rec, write, force) if write is not None else None
    if as_json:
        dump_json(rec.to_dict() | {"starter": str(written) if written else None})
        return
    for line in rec.lines():
        out.print(line, markup=False)
    if written is not None:
        out.print(
            f"starter experiment: {written} (sixblanks validate {written}; "
            f"sixblanks ladder {written} --arm {rec.row.arm_name} --all)",
            markup=False,
        )
