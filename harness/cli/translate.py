"""``sixblanks translate``: another framework's configuration (a TRL ``GRPOConfig``, a verl
actor/algorithm configuration) as a sixblanks arm, with the fields it cannot represent and the
framework's known traps (the translation itself is :mod:`sixblanks.harness.translate`)."""

from __future__ import annotations

import re
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from .app import STATE, JsonOpt, app, dump_json, warn


class Framework(str, Enum):
    trl = "trl"
    verl = "verl"


@app.command()
def translate(
    framework: Annotated[Framework, typer.Argument(help="The framework the file configures.")],
    config: Annotated[
        Path,
        typer.Argument(
            help="TRL: GRPOConfig fields as YAML or JSON. verl: its configuration as YAML, nested "
            "or with dotted keys, or command-line overrides (key=value)."
        ),
    ],
    arm: Annotated[
        str | None, typer.Option("--arm", help="The arm's name (default: FRAMEWORK_PRESET).")
    ] = None,
    world_size: Annotated[
        int | None,
        typer.Option(
            "--world-size",
            min=1,
            help="TRL: the number of training processes (its batch sizes are per device; "
            "default 1, said in the output).",
        ),
    ] = None,
    blanks_only: Annotated[
        bool,
        typer.Option(
            "--blanks-only",
            help="Leave the rollout and optimizer settings to the experiment (they are listed, "
            "not put in the arm).",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Read a TRL or verl configuration as a sixblanks arm: the closest preset with the blank,
    rollout and optimizer overrides it implies (fields absent from the file take the framework's
    documented defaults), then, as YAML comments, where each setting comes from, every field
    sixblanks cannot represent, unknown fields, and the framework's known traps with whether this
    configuration triggers them."""

    from ..errors import ConfigError
    from ..translate import translate_file

    if arm is not None and not re.fullmatch(r"[A-Za-z0-9_.\-]+", arm):
        raise ConfigError(f"--arm: '{arm}': arm names may use letters, digits, '_', '-' and '.'")
    t = translate_file(
        framework.value, config, arm=arm, world_size=world_size, blanks_only=blanks_only
    )
    if as_json:
        dump_json(t.to_dict())
        return
    sys.stdout.write(t.to_yaml())
    if not STATE["quiet"]:
        if t.unknown:
            names = ", ".join(u["field"] for u in t.unknown)
            warn(f"{len(t.unknown)} unknown field(s), not read: {names}")
        fired = [tr.id for tr in t.fired]
        if fired:
            warn(f"traps triggered: {', '.join(fired)}")
