"""The code tool as an episode uses it: a turn's text in, the observation and a record of each call
out. One :class:`Toolbox` per run; it holds no state between turns (an episode's count of tool turns
is its environment's), so environment steps on several threads (``rollout.env_workers``) share it.

    box = Toolbox(ToolsConfig(), tokenizer)        # refuses a machine without the isolation
    turn = box.turn("<code>print(347*28)</code>")
    turn.is_call, turn.observation, turn.records   # True, '9716\\n', [('ok', 0.07)]
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from .calls import (
    PARSE_FAILURES,
    TOOL_SCHEMA,
    call_text,
    observation,
    parse_turn,
    resolve_format,
    result_text,
    template_declares,
)
from .config import ToolsConfig
from .limits import REASONS
from .process import SETUP_ALLOWANCE
from .sandbox import Sandbox

OUTCOMES = (*REASONS, *(f"parse_{r}" for r in PARSE_FAILURES))
"""How a call is recorded: a program run ends with one of the sandbox's reasons; a call that was
not run, with ``parse_`` and its parse failure."""


@dataclass
class ToolTurn:
    """A turn seen by the tool: whether it opened a call, the observation to return, and one
    ``(outcome, wall seconds)`` record per call (0 seconds for a call not run)."""

    is_call: bool
    observation: str = ""
    records: list[tuple[str, float]] = field(default_factory=list)


class Toolbox:
    """The configured code tool of a run. ``tokenizer`` decides ``format: auto``, and whether its
    chat template declares the tool (``chat_tools``: what its ``tools=`` renders, then in place of
    the announcement); ``hide``: paths the sandbox never shows (the run's directory)."""

    def __init__(
        self,
        config: ToolsConfig,
        tokenizer=None,
        hide: Iterable[str | os.PathLike[str]] = (),
    ):
        self.config = config
        self.format = resolve_format(config.format, tokenizer)
        self.announce = config.announcement(self.format)
        # a chat template trained on tool calls declares the tool itself (its tools= argument):
        # there the prompt carries that declaration instead of the default announcement
        self.chat_tools: tuple[dict, ...] = ()
        declares = self.format == "tool_call" and config.announce is None
        if declares and template_declares(tokenizer):
            self.chat_tools, self.announce = (TOOL_SCHEMA,), ""
        self.sandbox = Sandbox(config.sandbox, hide=hide)  # SandboxUnavailable: refused here

    @property
    def worst_seconds(self) -> float:
        """The longest one program's wall time can be: its timeout, and the allowance for setting
        up and tearing down the sandbox after which the call is killed."""

        return self.config.sandbox.timeout_seconds + SETUP_ALLOWANCE

    def call(self, code: str) -> str:
        """The text of a call of ``code`` in this toolbox's format (a demonstration's turn)."""

        return call_text(self.format, code)

    def turn(self, text: str) -> ToolTurn:
        """Parse ``text``; where it opens calls, run each that parses (in order) and write the
        observation. A turn that opens none is not a tool turn (``is_call`` False)."""

        parsed = parse_turn(text, self.format, self.config.calls_per_turn)
        if not parsed.is_call:
            return ToolTurn(False)
        out = ToolTurn(True)
        texts = []
        for kind, i in parsed.order:
            if kind == "run":
                result = self.sandbox.run(parsed.programs[i])
                out.records.append((result.reason, result.wall_seconds))
                texts.append(result_text(result))
            else:
                reason, message = parsed.failures[i]
                out.records.append((f"parse_{reason}", 0.0))
                texts.append(f"parse error: {message}")
        out.observation = observation(texts, self.config.observation_chars)
        return out


def tally(records: Iterable[Iterable[tuple[str, float]]]) -> dict[str, float]:
    """Counts of episodes' call records: ``calls`` (programs run), ``seconds`` (their wall time),
    and one count per outcome (:data:`OUTCOMES`), zeros included."""

    out = {"calls": 0.0, "seconds": 0.0, **{k: 0.0 for k in OUTCOMES}}
    for episode in records:
        for outcome, seconds in episode:
            out[outcome] += 1.0
            if not outcome.startswith("parse_"):
                out["calls"] += 1.0
                out["seconds"] += float(seconds)
    return out
