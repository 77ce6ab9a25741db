"""The ``sixblanks`` command line.

Errors meant for the user (bad config, unknown names, commands not built yet)
print one line per problem and exit non-zero without a traceback; ``--debug``
shows the traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from .errors import SixblanksError
from .layout import ExperimentDir, read_json
from .orchestration.outlock import OutDirLock

app = typer.Typer(
    name="sixblanks",
    help="Fair comparisons of LLM RL algorithms: presets of six blanks under matched budgets.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

_STATE: dict[str, bool] = {"debug": False, "quiet": False}

ConfigArg = Annotated[Path, typer.Argument(help="Experiment YAML file.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
ArmOpt = Annotated[
    str | None, typer.Option("--arm", help="Arm to debug (default: ladder.arm or the first).")
]
AllRungsOpt = Annotated[bool, typer.Option("--all", help="Do not stop at the first failing rung.")]
OutOpt = Annotated[
    Path | None,
    typer.Option("--out", help="Experiment output directory; default runs/<name>."),
]
AddOpt = Annotated[
    bool,
    typer.Option(
        "--add",
        help="The output directory holds a different definition of the experiment: add this one "
        "to it anyway (the store and the report then cover this definition's runs only).",
    ),
]


def _claim(out_path: Path, cfg, command: str, add: bool) -> None:
    """The output directory belongs to one experiment definition (harness/orchestration/definition.py)."""

    from .orchestration.definition import claim

    claim(out_path, cfg, command, add=add, log=lambda m: err.print(f"[yellow]{m}[/yellow]"))


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show Python tracebacks.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only errors and data.")] = False,
) -> None:
    _STATE["debug"], _STATE["quiet"] = debug, quiet


def _say(*args: Any, **kwargs: Any) -> None:
    if not _STATE["quiet"]:
        out.print(*args, **kwargs)


def _dump_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


# --------------------------------------------------------------------------- validate / schema


def _plan_table(cfg) -> Table:
    table = Table(title=f"plan: {cfg.name}", show_lines=False)
    for col in ("arm", "preset", "tasks", "seeds", "runs"):
        table.add_column(col)
    n_tasks = len(cfg.tasks or [])
    for arm, spec in cfg.arms.items():
        table.add_row(
            arm,
            spec.preset,
            ", ".join(t.name for t in cfg.tasks or []),
            ", ".join(map(str, cfg.seeds)),
            str(n_tasks * len(cfg.seeds)),
        )
    return table


@app.command()
def validate(
    config: ConfigArg = Path("experiments.yaml"),
    resolved: Annotated[
        bool, typer.Option("--resolved", help="Print the fully resolved config.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Check an experiment file and print its plan (arms x tasks x seeds, the budget)."""

    from .config import load_config, resolved_dict

    cfg = load_config(config)
    plan = cfg.plan()
    if as_json:
        _dump_json(
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
    _say(f"[green]valid[/green]: {config}")
    _say(_plan_table(cfg))
    budget = ", ".join(f"{k} <= {v:g}" for k, v in cfg.budget.items())
    _say(f"budget per run (matched across arms): {budget}")
    _say(
        f"{len(plan)} runs: {len(cfg.arms)} arms x {len(cfg.tasks or [])} task(s) x {len(cfg.seeds)} seeds"
    )


@app.command()
def schema(
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")
    ] = None,
) -> None:
    """Write the JSON Schema of experiments.yaml (for editor completion and checking)."""

    from .config import ExperimentConfig

    text = json.dumps(ExperimentConfig.model_json_schema(), indent=2) + "\n"
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)
        _say(f"wrote {output}")


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
    from sixblanks.algorithms.errors import UnknownNameError
    from sixblanks.algorithms.fields import applicable_fields
    from sixblanks.algorithms.presets import PRESETS, get_preset, ppo_checklist

    if list_ or not names:
        if as_json:
            _dump_json({n: p.summary for n, p in sorted(PRESETS.items())})
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
        from .config import load_config

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
        _dump_json(
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
        _say(f"[dim]{hidden} fields that apply to no column are hidden (--all shows them)[/dim]")
    for label, lines in notes.items():
        for line in lines:
            _say(f"[dim]{label}:[/dim] {line}")
    for label, items in checklists.items():
        table = Table(title=f"PPO checklist: {label}")
        table.add_column("item")
        table.add_column("answer")
        for item, answer in items:
            table.add_row(item, answer)
        out.print(table)


# --------------------------------------------------------------------------- recommend


def _answer_opt(name: str) -> Any:
    from .recommend import QUESTION_BY_NAME

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

    from .recommend import complete, parse_answers, write_starter
    from .recommend import recommend as recommend_row

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
        _dump_json(rec.to_dict() | {"starter": str(written) if written else None})
        return
    for line in rec.lines():
        out.print(line, markup=False)
    if written is not None:
        out.print(
            f"starter experiment: {written} (sixblanks validate {written}; "
            f"sixblanks ladder {written} --arm {rec.row.arm_name} --all)",
            markup=False,
        )


# --------------------------------------------------------------------------- rollouts


def default_out_dir(cfg) -> Path:
    return ExperimentDir.default(cfg.name).path


@app.command()
def rollouts(
    config: ConfigArg = Path("experiments.yaml"),
    task: Annotated[
        str | None, typer.Option("--task", help="Task name (default: the first task).")
    ] = None,
    n: Annotated[int, typer.Option("--n", min=1, help="Task instances to sample.")] = 4,
    group: Annotated[
        int | None,
        typer.Option("--group", min=1, help="Samples per instance (default: rollout.group_size)."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Sampling seed.")] = 0,
    warm: Annotated[
        bool,
        typer.Option(
            "--warm-start/--no-warm-start",
            help="Use the warm-start policy (built and cached if missing).",
        ),
    ] = True,
    out_dir: OutOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Sample episodes with the configured policy, show them, and run the contract checks (exit 1 if one fails)."""

    from rich.text import Text

    from .config import TaskConfig, load_config
    from .models import apply_chat_setting, load_policy
    from .orchestration.warmstart import warm_start
    from .rollout.backends import make_engine
    from .tasks import make_task
    from .tasks.registry import TaskLoadError
    from .training.contract import sample_and_check

    cfg = load_config(config)
    names = [t.name for t in cfg.tasks or []]
    chosen = task or names[0]
    if chosen not in names:  # any registered task, with its defaults (the file does not list it)
        try:
            make_task(chosen)
        except (TaskLoadError, ValueError) as exc:
            from .errors import ConfigError

            raise ConfigError(f"--task: {exc}") from None
        cfg.tasks = [*(cfg.tasks or []), TaskConfig(name=chosen)]
        names.append(chosen)
    tcfg = next(t for t in cfg.tasks or [] if t.name == chosen)
    tasks = [make_task(t.name, t.params) for t in cfg.tasks or []]
    the_task = tasks[names.index(chosen)]
    if warm:
        log = (lambda m: err.print(f"[dim]{m}[/dim]")) if not (_STATE["quiet"] or as_json) else None
        model, tok, _info = warm_start(
            cfg, tasks, ExperimentDir(out_dir or default_out_dir(cfg)).warm_start, log=log
        )
    else:
        model, tok = load_policy(cfg.model, tasks)
        apply_chat_setting(tok, cfg.rollout.chat_template)
    engine = make_engine(cfg.rollout, model, tok, seed=seed)
    r = cfg.rollout
    G = group or r.group_size
    batch, report_ = sample_and_check(
        engine,
        model,
        tok,
        the_task,
        the_task.instances(list(range(seed * 100_000, seed * 100_000 + n))),
        G,
        r,
        seed=seed,
        reward_range=tcfg.reward_range or the_task.reward_range,
    )
    if as_json:
        episodes = []
        for b in range(batch.size):
            L = int(batch.attention_mask[b].sum())
            episodes.append(
                {
                    "group": int(batch.group_ids[b]),
                    "instance_seed": int(batch.instance_seeds[b]),
                    "tokens": batch.tokens[b, :L].tolist(),
                    "text": [tok.decode([t]) for t in batch.tokens[b, :L].tolist()],
                    "action_mask": batch.action_mask[b, :L].tolist(),
                    "logprobs": batch.behavior_logprobs[b, :L].tolist(),
                    "turn_ids": batch.turn_ids[b, :L].tolist(),
                    "turn_rewards": batch.turn_rewards[b].tolist(),
                    "reward": float(batch.reward[b]),
                    "truncated": bool(batch.truncated[b]),
                    "failed": batch.failure_reasons[b],
                }
            )
        _dump_json({"task": chosen, "episodes": episodes, "contract": report_.to_dict()})
    else:
        for b in range(batch.size):
            text = Text(f"[{b}] group {int(batch.group_ids[b])} ")
            for kind, s, e in batch.segments[b]:
                piece = tok.decode(batch.tokens[b, s:e].tolist(), skip_special_tokens=True)
                text.append(
                    piece.replace("\n", "\\n"), style="bold green" if kind == "action" else "dim"
                )
            text.append(
                f"  reward {float(batch.reward[b]):g}"
                + ("  (truncated)" if batch.truncated[b] else "")
            )
            if batch.failure_reasons[b]:
                text.append(f"  FAILED: {batch.failure_reasons[b]}", style="red")
            out.print(text)
        out.print(
            "[dim]dim: prompt/observation tokens (mask 0); green: action tokens (mask 1)[/dim]"
        )
        for res in report_.results:
            mark = "[green]ok[/green]" if res.passed else "[red]FAIL[/red]"
            out.print(f"contract {res.name}: {mark} {res.detail}")
    if not report_.passed:
        raise typer.Exit(1)


@app.command()
def run(
    config: ConfigArg = Path("experiments.yaml"),
    out_dir: OutOpt = None,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="No live progress bars.")
    ] = False,
    reuse_finished: Annotated[
        bool,
        typer.Option(
            "--reuse-finished",
            help="Reuse finished runs made by other code (otherwise a code change reruns them); "
            "the audit and the report flag them.",
        ),
    ] = False,
    add: AddOpt = False,
) -> None:
    """Run every arm x task x seed of the experiment under its matched budget (skips finished runs
    of the same code, resumes unfinished ones)."""

    from .config import load_config
    from .orchestration.orchestrator import Orchestrator, RunFailed

    cfg = load_config(config)
    out_path = out_dir or default_out_dir(cfg)
    _say(f"[green]valid[/green]: {config}  ->  {out_path}")
    _say(_plan_table(cfg))
    log = (lambda m: err.print(f"[dim]{m}[/dim]")) if not _STATE["quiet"] else None
    with OutDirLock(out_path, "run", log=lambda m: err.print(f"[yellow]{m}[/yellow]")):
        _claim(out_path, cfg, "run", add)
        orch = Orchestrator(
            cfg,
            out_path,
            log=log,
            progress=not (no_progress or _STATE["quiet"]),
            reuse_finished=reuse_finished,
        )
        result = orch.run()
        _print_summary(result["summary"], cfg)
        report_path = build_report_or_fail(out_path)
        orch.track(result["fairness"], artifacts=[orch.dir.report])
    _say(f"report: {report_path}")
    flags = result["fairness"]["flags"]
    if flags:
        _say(f"[yellow]fairness audit: {len(flags)} flag(s)[/yellow] (see {orch.dir.fairness})")
        for f in flags[:10]:
            _say(f"  {f['arm']}: {f['item']}: {f['reason']}")
    if result["failures"]:
        raise RunFailed([f"run {rid} failed: {e}" for rid, e in result["failures"].items()])


def _print_summary(rows, cfg) -> None:
    table = Table(title="runs")
    for col in ("arm", "task", "seed", "state", "start", "final", *cfg.budget):
        table.add_column(col)
    for r in rows:
        counters = r.get("counters") or {}
        fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
        table.add_row(
            r["arm"],
            r["task"],
            str(r["seed"]),
            str(r["state"]),
            fmt(r.get("start_score")),
            fmt(r.get("final_score")),
            *[f"{counters.get(k, 0):g}/{v:g}" for k, v in cfg.budget.items()],
        )
    _say(table)


@app.command()
def report(
    directories: Annotated[
        list[Path],
        typer.Argument(help="Experiment output directory; two or more: compare the experiments."),
    ],
    baseline: Annotated[
        str | None, typer.Option("--baseline", help="Arm for P(improvement); default: the first.")
    ] = None,
    resamples: Annotated[
        int, typer.Option("--resamples", min=100, help="Bootstrap resamples.")
    ] = 2000,
    compare_out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="With two or more directories: where the comparison goes; default DIR1/compare.",
        ),
    ] = None,
) -> None:
    """Build the comparison report (DIR/report/index.html, report.md, scores.csv/.parquet) from
    results.duckdb; with several directories, compare the experiments side by side (the same arms on
    two backends, models or code versions): scores, differences and every audit item that differs."""

    from .errors import ConfigError

    if len(directories) == 1:
        if compare_out is not None:
            raise ConfigError("--out: only for comparing two or more experiment directories")
        _say(f"report: {build_report_or_fail(directories[0], baseline, resamples)}")
        return
    if baseline is not None:
        raise ConfigError("--baseline: only for the report of one experiment directory")
    path = build_report_or_fail(directories[0], None, resamples, directories[1:], compare_out)
    _say(f"comparison: {path}")


def build_report_or_fail(
    directory: Path,
    baseline: str | None = None,
    resamples: int = 2000,
    compare_with: list[Path] | None = None,
    out_dir: Path | None = None,
) -> Path:
    """The report of ``directory``; with ``compare_with``, the comparison of all of them (written to
    ``out_dir``, default DIRECTORY/compare). A report error exits as a config error (code 2)."""

    from sixblanks.reports.build import ReportError, build_report

    try:
        if compare_with:
            from sixblanks.reports.compare import build_comparison

            return build_comparison([directory, *compare_with], out_dir, resamples)
        return build_report(directory, baseline, resamples)
    except ReportError as exc:
        from .errors import ConfigError

        raise ConfigError(str(exc)) from None
    except Exception as exc:
        import duckdb

        if not isinstance(exc, (duckdb.IOException, duckdb.InternalException)):
            raise
        from .errors import ConfigError

        dirs = [directory, *(compare_with or [])]
        raise ConfigError(
            f"a results.duckdb of {', '.join(map(str, dirs))} is damaged ({str(exc)[:160]}): "
            f"`sixblanks ingest DIR` sets it aside and rebuilds it from the run directories"
        ) from None


@app.command()
def status(
    directory: Annotated[Path, typer.Argument(help="Experiment output directory.")],
    as_json: JsonOpt = False,
) -> None:
    """Per run: state, consumption per budgeted counter, last evaluation and ETA."""

    import time as _time

    from .orchestration.progress import budget_fraction

    exp_dir = _experiment_dir(directory, "run `sixblanks run` first")
    run_ids = exp_dir.read_experiment()["runs"]
    rows = []
    now = _time.time()
    for rid in run_ids:
        st = exp_dir.run(rid).read_status()
        frac = budget_fraction(st)
        eta = None
        if st.get("state") == "running" and frac > 0 and st.get("started"):
            eta = (st.get("updated", now) - st["started"]) * (1 - frac) / frac
        rows.append(
            {
                "run_id": rid,
                "arm": st.get("arm"),
                "task": st.get("task"),
                "seed": st.get("seed"),
                "state": st.get("state", "pending"),
                "step": st.get("step"),
                "counters": st.get("counters"),
                "limits": st.get("limits"),
                "last_eval": st.get("last_eval"),
                "time_overshoot_bound": st.get("time_overshoot_bound"),
                "eta_seconds": eta,
                "error": st.get("error"),
            }
        )
    if as_json:
        _dump_json(rows)
        return
    table = Table(title=f"status: {directory}")
    for col in ("run", "arm", "task", "seed", "state", "step", "budget", "last eval", "ETA"):
        table.add_column(col)
    for r in rows:
        lim = r["limits"] or {}
        used = ", ".join(_used(r, k, v) for k, v in lim.items()) if r["counters"] else "-"
        ev = f"{r['last_eval']['score']:.3f}" if r["last_eval"] else "-"
        eta = f"{r['eta_seconds']:.0f}s" if r["eta_seconds"] is not None else "-"
        state = r["state"] + (f" ({r['error'][:50]})" if r.get("error") else "")
        table.add_row(
            r["run_id"],
            str(r["arm"] or "-"),
            str(r["task"] or "-"),
            str(r["seed"] if r["seed"] is not None else "-"),
            state,
            str(r["step"] if r["step"] is not None else "-"),
            used,
            ev,
            eta,
        )
    out.print(table)


def _used(row: dict[str, Any], counter: str, limit: float) -> str:
    """``counter used/limit``; a time limit can be passed by at most one step and its checkpoint:
    the bound measured so far is shown beside it."""

    bound = row["time_overshoot_bound"] or {}
    extra = f" (+<={bound[counter]:.1f}s)" if counter in bound else ""
    return f"{counter} {row['counters'].get(counter, 0):g}/{limit:g}{extra}"


def _experiment_dir(directory: Path, hint: str = "") -> ExperimentDir:
    """``directory`` as an experiment directory; a ConfigError when it is not one."""

    exp_dir = ExperimentDir(directory)
    if not exp_dir.experiment.exists():
        from .errors import ConfigError

        name = exp_dir.experiment.name
        raise ConfigError(
            f"{directory}: not an experiment directory (no {name}" + (f"; {hint})" if hint else ")")
        )
    return exp_dir


@app.command()
def sync(directory: Annotated[Path, typer.Argument(help="Experiment output directory.")]) -> None:
    """Send runs that MLflow has not received yet (e.g. after the tracking server was unreachable)."""

    from .config import validate_mapping
    from .orchestration.tracking import Tracker, tracking_uri

    exp_dir = _experiment_dir(directory)
    exp = exp_dir.read_experiment()
    cfg = validate_mapping(exp["config"] | {"tasks": exp["config"]["tasks"]})
    fairness = read_json(exp_dir.fairness)
    t = cfg.tracking
    state = Tracker(
        directory, tracking_uri(t.uri, directory), t.experiment or cfg.name, enabled=True
    ).sync(exp["runs"], fairness, [exp_dir.report] if exp_dir.report.exists() else None)
    if state.get("last_error"):
        raise SixblanksError(
            f"MLflow unreachable: {state['last_error']}; {len(state['pending'])} run(s) still pending"
        )
    _say(f"synced {len(state['synced'])} run(s) to MLflow; pending: {len(state['pending'])}")


@app.command()
def ingest(
    directory: Annotated[Path, typer.Argument(help="Experiment output directory.")],
) -> None:
    """Rebuild results.duckdb from the run directories (and the audit, ladder and sweep files); a
    damaged store is set aside as results.duckdb.damaged-<time> first, never deleted."""

    from .store.database import rebuild

    if not ExperimentDir(directory).experiment.exists():
        from .errors import ConfigError

        raise ConfigError(f"{directory}: not an experiment output directory (no experiment.json)")
    with OutDirLock(directory, "ingest", log=lambda m: err.print(f"[yellow]{m}[/yellow]")):
        rebuild(directory, log=lambda m: err.print(m))


@app.command()
def ui(
    directory: Annotated[Path, typer.Argument(help="Experiment output directory.")],
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1.")] = 5000,
) -> None:
    """Start the MLflow UI on the experiment's store, bound to localhost."""

    import subprocess

    db = ExperimentDir(directory).mlflow_db
    if not db.exists():
        from .errors import ConfigError

        raise ConfigError(
            f"{db}: no MLflow store here (run `sixblanks run` first, or set tracking.uri)"
        )
    cmd = [
        sys.executable,
        "-m",
        "mlflow",
        "ui",
        "--backend-store-uri",
        f"sqlite:///{db.resolve()}",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    _say(f"MLflow UI on http://127.0.0.1:{port} (Ctrl-C to stop)")
    raise typer.Exit(subprocess.call(cmd))


@app.command()
def ladder(
    config: ConfigArg = Path("experiments.yaml"),
    arm: ArmOpt = None,
    all_: AllRungsOpt = False,
    out_dir: OutOpt = None,
    as_json: JsonOpt = False,
    add: AddOpt = False,
) -> None:
    """Walk the ablation ladder for one arm, one axis at a time; stop at the first failing rung."""

    from .config import load_config
    from .studies.ladder import VERDICT, Ladder, LadderFailed, first_failure

    cfg = load_config(config)
    out_path = out_dir or default_out_dir(cfg)
    log = (lambda m: err.print(f"[dim]{m}[/dim]")) if not (_STATE["quiet"] or as_json) else None
    with OutDirLock(out_path, "ladder", log=lambda m: err.print(f"[yellow]{m}[/yellow]")):
        _claim(out_path, cfg, "ladder", add)
        results = Ladder(cfg, out_path, arm, log=log).run(all_rungs=all_)
    if as_json:
        from dataclasses import asdict

        _dump_json([asdict(r) for r in results])
    else:
        table = Table(title=f"ablation ladder: {arm or cfg.ladder.arm or next(iter(cfg.arms))}")
        for col in ("rung", "variant", "status", "evidence"):
            table.add_column(col)
        colors = {"pass": "green", "fail": "red", "inconclusive": "yellow"}
        for r in results:  # each rung's rows, then its one verdict row (bold, closing the section)
            is_verdict = r.variant == VERDICT
            table.add_row(
                f"{r.rung} {r.rung_name}",
                r.variant,
                f"[{colors[r.status]}]{r.status}[/]",
                r.evidence,
                style="bold" if is_verdict else None,
                end_section=is_verdict,
            )
        out.print(table)
        exp_dir = ExperimentDir(out_path)
        _say(f"recorded in {exp_dir.results_db} (table ladder) and {exp_dir.ladder}")
    failed = first_failure(results)
    if failed is not None:
        raise LadderFailed(f"rung {failed.rung} ({failed.rung_name}) failed: {failed.evidence}")


@app.command()
def sweep(
    config: ConfigArg = Path("experiments.yaml"),
    out_dir: OutOpt = None,
    add: AddOpt = False,
) -> None:
    """Hyperparameter search per arm under a fixed search budget, then confirmation on fresh seeds."""

    from .config import load_config
    from .studies.sweep import Sweep

    cfg = load_config(config)
    out_path = out_dir or default_out_dir(cfg)
    log = (lambda m: err.print(f"[dim]{m}[/dim]")) if not _STATE["quiet"] else None
    with OutDirLock(out_path, "sweep", log=lambda m: err.print(f"[yellow]{m}[/yellow]")):
        _claim(out_path, cfg, "sweep", add)
        sw = Sweep(cfg, out_path, log=log)
        summary = sw.run()
    table = Table(title="search effort per arm")
    for col in (
        "arm",
        "trials",
        "complete",
        "pruned",
        "failed",
        "launched tokens",
        "device-hours",
        "best value",
        "best params",
    ):
        table.add_column(col)
    for arm, rec in summary["arms"].items():
        table.add_row(
            arm,
            str(rec["trials"]),
            str(rec["complete"]),
            str(rec["pruned"]),
            str(rec["failed"]),
            f"{rec['spent']['launched_tokens']:g}",
            f"{rec['spent']['device_seconds'] / 3600:.4f}",
            "-" if rec["best_value"] is None else f"{rec['best_value']:.3f}",
            json.dumps(rec["best_params"]),
        )
    _say(table)
    if not summary["confirm"]["runs"]:
        _say(f"no confirmation runs ({summary['confirm'].get('skipped', 'none finished')}): "
             f"no report; the trials are in {sw.out / 'results.duckdb'}")  # fmt: skip
        return
    report_path = build_report_or_fail(sw.out)
    _say(f"report (defaults vs tuned, search effort): {report_path}")


# --------------------------------------------------------------------------- entry point


def _reflowed(doc: str) -> str:
    """A docstring as help text: each paragraph on one line (the help table wraps it to the
    terminal), paragraphs apart. Rich keeps a docstring's hard line breaks, which break lines
    in the middle of the table's column."""

    import inspect

    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())


for _command in app.registered_commands:
    if _command.help is None and _command.callback is not None and _command.callback.__doc__:
        _command.help = _reflowed(_command.callback.__doc__)


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        code = app(args=args, standalone_mode=False)
        if isinstance(code, int) and code:  # outside standalone mode typer returns an exit code,
            if code == 130:  # typer.Exit's, and 130 for Ctrl-C (KeyboardInterrupt) before the
                sys.stderr.write("interrupted\n")  # executor caught it (the warm start, say)
            sys.exit(code)
    except SixblanksError as exc:
        if debug:
            raise
        for line in exc.problems:
            sys.stderr.write(f"error: {line}\n")
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except Exception as exc:  # click usage errors and the like
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        if debug:
            raise
        from .errors import disk_full, disk_full_message

        if disk_full(exc):  # the orchestrator's own files (experiment.json, the store, a report)
            sys.stderr.write(f"error: {disk_full_message(exc, 'the output directory')}\n")
            sys.exit(1)
        sys.stderr.write(
            f"error: {type(exc).__name__}: {exc} (run with --debug for the traceback)\n"
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
