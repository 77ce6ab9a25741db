"""The command line's application and what its commands share: the consoles, the global options'
state, the argument and option types, and the helpers that print."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ..layout import ExperimentDir

app = typer.Typer(
    name="sixblanks",
    help="Fair comparisons of LLM RL algorithms: presets of six blanks under matched budgets.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

STATE: dict[str, bool] = {"debug": False, "quiet": False}

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


def warn(message: str) -> None:
    err.print(f"[yellow]{message}[/yellow]")


def version_line() -> str:
    """``sixblanks <package version> (<release tag>)``: the installed distribution's version and
    the code release tag every run id's fingerprint starts with."""

    from importlib.metadata import PackageNotFoundError, version

    from ..version import CODE_VERSION

    try:
        package = version("sixblanks")
    except PackageNotFoundError:  # a source tree not installed
        package = "not installed"
    return f"sixblanks {package} (code release {CODE_VERSION})"


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(version_line() + "\n")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show Python tracebacks.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only errors and data.")] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,  # before a command is required
            help="Print the version (the package's and the code release tag) and exit.",
        ),
    ] = False,
) -> None:
    STATE["debug"], STATE["quiet"] = debug, quiet


def _no_flag_placeholder() -> None:
    """Typer's help shows a value placeholder for every option, ``<bool>`` for flags too
    (``--json <bool>``), which reads as though the flag took a value: a flag shows none."""

    from typer.core import TyperOption

    if getattr(TyperOption.display_type_rich, "_flags_bare", False):
        return
    typed = TyperOption.display_type_rich

    def display_type_rich(self, ctx):
        return None if self.is_flag else typed(self, ctx)

    display_type_rich._flags_bare = True
    TyperOption.display_type_rich = display_type_rich


_no_flag_placeholder()


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 arm``, ``2 arms``: the count with its noun in agreement (``many``: an irregular
    plural)."""

    return f"{n} {word if n == 1 else many or word + 's'}"


def human(x: float | None) -> str:
    """A number as a person reads it: whole numbers in full with thousands separators
    (5,242,880, never 5.24288e+06), others to 4 significant digits (0.1235, 12.35) or, from
    1,000, to the unit (1,235); ``-`` for none."""

    if x is None:
        return "-"
    x = float(x)
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    if x == int(x) and abs(x) < 1e18:
        return f"{int(x):,}"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.4g}"


def say(*args: Any, **kwargs: Any) -> None:
    if not STATE["quiet"]:
        show(*args, **kwargs)


def show(*args: Any, console: Console | None = None, **kwargs: Any) -> None:
    """``console.print`` (default: standard output), tables whole: each column folds a long value
    onto further lines rather than cutting it (a run id or counter name cut to ``launched_toke…``
    names nothing), and where the output is no terminal (a file, a pipe) a table gets the width
    it needs, however wide: no terminal's width limits it there, and a reader greps its lines."""

    console = console or out
    tables = [a for a in args if isinstance(a, Table)]
    for table in tables:
        for column in table.columns:
            column.overflow = "fold"
    if tables and not console.is_terminal:
        from rich.measure import Measurement

        wide = console.options.update_width(1_000_000)
        need = max(Measurement.get(console, wide, t).maximum for t in tables)
        if need > console.width:  # print(width=) cannot go past the console's: one as wide
            console = Console(file=console.file, width=need, highlight=False, soft_wrap=True)
    console.print(*args, **kwargs)


def dump_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def plan_table(cfg) -> Table:
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


def experiment_dir(directory: Path, hint: str = "") -> ExperimentDir:
    """``directory`` as an experiment directory; a ConfigError when it is not one."""

    exp_dir = ExperimentDir(directory)
    if not exp_dir.experiment.exists():
        from ..errors import ConfigError

        name = exp_dir.experiment.name
        raise ConfigError(
            f"{directory}: not an experiment directory (no {name}" + (f"; {hint})" if hint else ")")
        )
    return exp_dir
