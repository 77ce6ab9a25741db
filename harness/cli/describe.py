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
    out,
    plan_table,
    say,
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
    """Check an experiment file and print its plan (arms x tasks x seeds, the budget)."""

    from ..config import load_config, resolved_dict

    cfg = load_config(config)
    plan = cfg.plan()
    if as_json:
        dump_json(
            {
                "valid": True,
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
    say(plan_table(cfg))
    budget = ", ".join(f"{k} <= {v:g}" for k, v in cfg.budget.items())
    say(f"budget per run (matched across arms): {budget}")
    say(
        f"{len(plan)} runs: {len(cfg.arms)} arms x {len(cfg.tasks or [])} task(s) x {len(cfg.seeds)} seeds"
    )


@app.command()
def schema(
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")
    ] = None,
) -> None:
    """Write the JSON Schema of experiments.yaml (for editor completion and checking)."""

    from ..config import ExperimentConfig

    text = json.dumps(ExperimentConfig.model_json_schema(), indent=2) + "\n"
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

    from sixblanks.algorithms.blanks import BLANK_NAMES, flatten
    from sixblanks.algorithms.critic import ppo_checklist
    from sixblanks.algorithms.errors import UnknownNameError
    from sixblanks.algorithms.fields import applicable_fields
    from sixblanks.algorithms.presets import PRESETS, get_preset

    if list_ or not names:
        if as_json:
            dump_json({n: p.summary for n, p in sorted(PRESETS.items())})
            return
        table = Table(title="presets")
        table.add_column("name")
        table.add_column("summary")
        for n, p in sorted(PRESETS.items()):
            table.add_row(n, p.summary)
        out.print(table)
        return
    cfg = None
    if config is not None:
        from ..config import load_config

        cfg = load_config(config)
    columns: dict[str, dict[str, Any]] = {}
    blank_objs: dict[str, Any] = {}
    notes: dict[str, tuple[str, ...]] = {}
    problems = []
    for name in names:
        if cfg is not None and name in cfg.arms:
            blanks = cfg.resolved_blanks(name)
            label = f"{name} ({cfg.arms[name].preset})"
            notes[label] = get_preset(cfg.arms[name].preset).notes
        else:
            try:
                preset = get_preset(name)
            except UnknownNameError as exc:
                problems.append(f"{name}: {exc}")
                continue
            blanks, label = preset.blanks, name
            notes[label] = preset.notes
        columns[label] = flatten(blanks)
        blank_objs[label] = blanks
    if problems:
        raise SixblanksError(problems)
    every = list(dict.fromkeys(k for c in columns.values() for k in c))
    applies = {label: applicable_fields(b) for label, b in blank_objs.items()}
    union = {k for fields in applies.values() for k in fields}
    keys = every if all_ else [k for k in every if k in union]
    hidden = len(every) - len(keys)
    for label, c in columns.items():
        columns[label] = {k: c.get(k) for k in keys}
    differing = {
        k for k in keys if len({json.dumps(c[k], default=str) for c in columns.values()}) > 1
    }
    checklists = {label: ppo_checklist(b) for label, b in blank_objs.items() if ppo_checklist(b)}
    if as_json:
        dump_json(
            {
                "blanks": columns,
                "applies": applies,
                "differs": sorted(differing),
                "notes": notes,
                "ppo_checklist": {k: dict(v) for k, v in checklists.items()},
            }
        )
        return
    table = Table(title="six blanks" + (" (differences in yellow)" if len(columns) > 1 else ""))
    table.add_column("blank")
    table.add_column("field")
    for label in columns:
        table.add_column(label)
    last_blank = None
    for key in keys:
        blank, _, field = key.partition(".")
        if blank not in BLANK_NAMES:
            blank, field = "template", key
        style = "bold yellow" if key in differing else ""
        table.add_row(
            blank if blank != last_blank else "",
            field,
            # a field shown for another column but not read by this one: "-" (unless --all)
            *[
                str(c[key]) if all_ or key in applies[label] else "[dim]-[/dim]"
                for label, c in columns.items()
            ],
            style=style,
        )
        last_blank = blank
    out.print(table)
    if hidden:
        say(f"[dim]{hidden} fields that apply to no column are hidden (--all shows them)[/dim]")
    for label, lines in notes.items():
        for line in lines:
            say(f"[dim]{label}:[/dim] {line}")
    for label, items in checklists.items():
        table = Table(title=f"PPO checklist: {label}")
        table.add_column("item")
        table.add_column("answer")
        for item, answer in items:
            table.add_row(item, answer)
        out.print(table)


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


@app.command()
def recommend(
    demos: Annotated[str | None, _answer_opt("demos")] = None,
    signal: Annotated[str | None, _answer_opt("signal")] = None,
    sampling: Annotated[str | None, _answer_opt("sampling")] = None,
    horizon: Annotated[str | None, _answer_opt("horizon")] = None,
    intermediate: Annotated[str | None, _answer_opt("intermediate")] = None,
    asynchronous: Annotated[str | None, _answer_opt("asynchronous")] = None,
    risk: Annotated[str | None, _answer_opt("risk")] = None,
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

    import click

    from ..recommend import complete, parse_answers, write_starter
    from ..recommend import recommend as recommend_row

    given = parse_answers(
        dict(
            demos=demos,
            signal=signal,
            sampling=sampling,
            horizon=horizon,
            intermediate=intermediate,
            asynchronous=asynchronous,
            risk=risk,
        )
    )

    def ask(q) -> str:
        return click.prompt(
            q.prompt, default=q.default, type=click.Choice(q.choices), err=True, show_choices=True
        )

    answers, defaulted = complete(given, ask if _is_terminal() and not defaults else None)
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
