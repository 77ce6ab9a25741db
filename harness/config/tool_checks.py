"""What the code tool (the ``tools:`` section) does not work with, refused before any run starts,
each with the key to change. The machine's side (whether it can isolate the programs) is checked
when the experiment starts, by building the sandbox (``harness/tools/sandbox.py``)."""

from __future__ import annotations

from .experiment_config import ExperimentConfig


def tool_problems(cfg: ExperimentConfig) -> list[str]:
    """An arm offered the tool whose data source or collector plays episodes elsewhere than the
    agent loop's environments (their calls would go uncounted or unrun), or a two-player task."""

    if cfg.tools is None:
        return []
    out: list[str] = []
    for name in cfg.arms:
        if cfg.tools_for(name) is None:
            continue
        try:
            d = cfg.resolved_blanks(name).data
        except Exception:  # noqa: BLE001 - an arm whose blanks do not resolve is reported elsewhere
            continue
        refused = [
            (
                d.concurrent is not None,
                "data.concurrent (its collector process builds the task without the tool)",
            ),
            (d.world_model is not None, "data.world_model (imagined episodes run no program)"),
            (d.self_play is not None, "data.self_play (a game's opponent makes no tool turns)"),
        ]
        out += [
            f"arms.{name}: {what} is not supported with the code tool (tools:); set "
            f"arms.{name}.tools: false or leave it out"
            for bad, what in refused
            if bad
        ]
    out += _two_player(cfg)
    return out


def _two_player(cfg: ExperimentConfig) -> list[str]:
    from ..tasks.registry import task_class

    out = []
    for t in cfg.tasks or []:
        try:
            cls = task_class(t.name)
        except Exception:  # noqa: BLE001 - an unknown task is reported by the semantic pass
            continue
        if cls is not None and getattr(cls, "two_player", False):
            out.append(
                f"task '{t.name}': a two-player game cannot be played with the code tool "
                "(tools:); remove the tools section or set tools: false on every arm"
            )
    return out
